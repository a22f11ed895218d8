"""The provenance columns every output table carries, in this order (values: crl.orchestration.
runtime.provenance)."""

from __future__ import annotations

PROVENANCE_COLUMNS = ("run_id", "config_hash", "crl_version", "git_commit")
