"""The math layer: tensors in, tensors and floats out; torch, numpy and scipy only.

No file I/O, no config schema, no ray, prefect, polars or pyarrow (a contract in the test suite
enforces it). Users reach these as crl.losses, crl.bounds, ... (the alias modules of crl/).
"""
