"""Figure layout and saving shared by the report's sections."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from crl.steps.atomic import write_bytes_atomic  # noqa: E402

# how a section saves a figure: `save(fig, path)` writes it atomically (the staging is bound)
Save = Callable[[plt.Figure, Path], None]


def save_png(fig: plt.Figure, path: Path, staging: Path) -> None:
    """The figure as a PNG at `path`, written atomically; the figure is closed."""
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    write_bytes_atomic(png.getvalue(), path, staging)


def panels(count: int) -> tuple[plt.Figure, list]:
    """A figure of `count` panels, at most 4 a row; the axes flattened, spare ones hidden."""
    cols = min(4, count)
    rows = (count + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[count:]:
        ax.set_visible(False)
    return fig, flat
