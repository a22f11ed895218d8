"""The orchestration layer, the only importer of ray and prefect (lazily, inside functions):
runtime (Ray and Prefect start-up, provenance), executors (where steps run), stages (what is
still to do, handed to an executor), the Prefect flows' bodies, deployment and job submission.
"""
