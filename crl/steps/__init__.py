"""The steps layer: one unit of work and its file each (data shards, embeddings, a cell, a check
unit, tables, the report), as plain module-level functions and classes that an executor in
crl.orchestration runs in-process or on Ray. Never imports ray or prefect.
"""
