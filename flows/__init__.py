"""Entrypoints of crl's Prefect flows for deployments (`flows/<name>.py:<name>`); the bodies live
in crl.orchestration.flows.
"""
