"""Prefect flows of crl: thin orchestration over crl.pipeline, no math."""
