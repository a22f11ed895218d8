"""Progress of a fan-out on stderr: a live bar in a terminal, a line per 10% elsewhere."""

from __future__ import annotations

import sys
import time


class Progress:
    """Counts finished units of one stage and prints where they stand."""

    WIDTH = 30

    def __init__(self, label: str, total: int, enabled: bool = True) -> None:
        self.label, self.total, self.enabled = label, total, enabled
        self.done = 0
        self.started = time.perf_counter()
        self.tty = sys.stderr.isatty()

    def advance(self) -> None:
        """One more unit finished."""
        self.done += 1
        if self.enabled and self._due():
            self._print()

    def _due(self) -> bool:
        finished = self.done == self.total
        on_a_tenth = self.done % max(1, self.total // 10) == 0
        return self.tty or finished or on_a_tenth

    def _print(self) -> None:
        elapsed = time.perf_counter() - self.started
        eta = elapsed / self.done * (self.total - self.done)
        filled = int(self.WIDTH * self.done / self.total)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        end = "\r" if self.tty and self.done < self.total else "\n"
        print(
            f"{self.label} [{bar}] {self.done}/{self.total}  {elapsed:5.1f}s elapsed  "
            f"eta {eta:5.1f}s",
            end=end,
            file=sys.stderr,
            flush=True,
        )
