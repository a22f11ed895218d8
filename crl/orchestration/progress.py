"""Progress of a fan-out wherever the job runs: a live bar (rich) in a terminal, a plain line per
10% of the units on stderr elsewhere (a CI log, `crl submit --wait`), and the same lines through
Prefect's run logger, so they appear in the Prefect UI.

Lines go to sys.stderr.write, not print: flows run with log_prints=True, which turns print()
into log records that the console never shows at crl's log level.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any


def _run_logger() -> logging.Logger | logging.LoggerAdapter | None:
    """Prefect's logger of the flow or task run in progress, or None outside a run."""
    try:
        from prefect.context import FlowRunContext, TaskRunContext
        from prefect.logging import get_run_logger

        if FlowRunContext.get() or TaskRunContext.get():
            return get_run_logger()
    except Exception:  # no Prefect context, or Prefect not configured: no UI lines
        return None
    return None


class Progress:
    """Counts finished units of one stage and reports where they stand."""

    def __init__(self, label: str, total: int, enabled: bool = True) -> None:
        self.label, self.total, self.enabled = label, total, enabled and total > 0
        self.done = 0
        self.started = time.perf_counter()
        self.logger = _run_logger() if self.enabled else None
        self.bar: Any = None
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                f"[bold]{label}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
            )
            self.task = self.bar.add_task(label, total=total)
            self.bar.start()

    def line(self) -> str:
        """`crl: cells 18/180 (10%)  2.1/s  eta 77 s` for the units done so far."""
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed > 0 else float("nan")
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        percent = 100 * self.done // self.total
        return (
            f"crl: {self.label} {self.done}/{self.total} ({percent}%)  {rate:.2f}/s  "
            f"eta {eta:.0f} s"
        )

    def _on_a_tenth(self) -> bool:
        step = max(1, self.total // 10)
        return self.done % step == 0 or self.done == self.total

    def advance(self, detail: str = "") -> None:
        """One more unit finished (`detail`, if given, ends its line: an epoch's loss)."""
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=self.done)
            if self.done == self.total:
                self.bar.stop()
        if not self._on_a_tenth():
            return
        line = self.line() + (f"  {detail}" if detail else "")
        if self.bar is None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        if self.logger is not None:
            self.logger.info(line.removeprefix("crl: "))
