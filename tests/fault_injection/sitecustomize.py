"""Loaded by every Python process of a fault test (PYTHONPATH): injects one fault into crl cells.

CRL_FAULT=exit:<m>:<n>   the first worker to run a cell with that (m, n) dies with os._exit
CRL_FAULT=raise:<m>:<n>  every cell with that (m, n) raises (an application error)
CRL_FAULT_DIR            where the marker that makes `exit` happen once is written
"""

import os
from pathlib import Path

_FAULT = os.environ.get("CRL_FAULT")
if _FAULT:
    import crl.steps.unimodal.cell

    _mode, _m, _n = _FAULT.split(":")
    _original = crl.steps.unimodal.cell.run_cell

    def run_cell(config, key, features, tau):  # noqa: ANN001, ANN201
        if (key.m, key.n) == (int(_m), int(_n)):
            if _mode == "raise":
                raise RuntimeError(f"injected failure in cell m={key.m} n={key.n}")
            marker = Path(os.environ["CRL_FAULT_DIR"]) / f"died-{key.regime}-{key.loss}-{key.seed}"
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                os._exit(1)
        return _original(config, key, features, tau)

    crl.steps.unimodal.cell.run_cell = run_cell
