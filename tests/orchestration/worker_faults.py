"""Worker classes for RayExecutor.map_workers that fail the way lost workers do (imported by
Ray's workers: module-level, on the runtime environment's PYTHONPATH)."""

from __future__ import annotations

import os
from pathlib import Path


class DiesOnce:
    """Returns 10 * item; the first worker to see item 1 ends its process (as a lost node's
    worker would), leaving a marker in `folder` so that its replacement does not."""

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)

    def __call__(self, item: int) -> int:
        marker = self.folder / "died"
        if item == 1 and not marker.exists():
            marker.write_text(str(os.getpid()))
            os._exit(1)
        return 10 * item


class CannotStart:
    """A worker whose constructor raises: an error of the worker, not a lost one."""

    def __init__(self, folder: str) -> None:
        (Path(folder) / f"built-{os.getpid()}").write_text("")
        raise ValueError("this worker cannot start")

    def __call__(self, item: int) -> int:
        return item
