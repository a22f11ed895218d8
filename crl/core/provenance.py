"""The provenance columns every output table carries, in this order (values: crl.orchestration.
runtime.provenance). `inputs` is the JSON of the run's input fingerprints
(crl.core.fingerprints; "{}" when it reads no external file)."""

from __future__ import annotations

PROVENANCE_COLUMNS = ("run_id", "config_hash", "crl_version", "git_commit", "inputs")
