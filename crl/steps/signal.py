"""The signal columns of a cell: what its head learned, against predicting nothing.

`trivial_loss` is the loss of f = 0 on the cell's own held-out tuples, `learning_gain` =
trivial_loss - test_loss with `learning_gain_ci`, the normal half-width of the mean of the
per-tuple differences (paired: both losses on the same tuples), `learning_gain_rel` = gain / the
loss's range (the width of the interval the bounds are stated on), `learned` = the gain's interval
lies above 0, and `gap_snr` = |gap| / test_loss_ci (a gap at or below 1 lies inside its own noise).

`learning_certified_<rung>`: whether a rung's certificate, an upper bound at level delta on the
population loss of the head (of its Gibbs head for the PAC-Bayes rungs), lies below the loss of
f = 0, which is a constant (every score 0): learning that a certificate proves, not only measures.
None where the rung gives no certificate; False where its certificate is not finite.
"""

from __future__ import annotations

import math

import torch

from crl.kernels import stats

SIGNAL_COLUMNS = (
    "trivial_loss",
    "learning_gain",
    "learning_gain_ci",
    "learning_gain_rel",
    "learned",
    "gap_snr",
)
RUNGS = ("rademacher", "test_set", "pb_free", "pb_data", "pb_ref")


def exact_signal_columns(trivial_loss: float, test_loss: float, loss_range: float | None) -> dict:
    """The signal columns where both losses are population values in closed form (paired
    Gaussian cells): the gain is exact, its interval 0, and no gap lies inside noise."""
    gain = trivial_loss - test_loss
    usable_range = loss_range is not None and math.isfinite(loss_range) and loss_range > 0
    return {
        "trivial_loss": trivial_loss,
        "learning_gain": gain,
        "learning_gain_ci": 0.0,
        "learning_gain_rel": gain / loss_range if usable_range else None,
        "learned": bool(gain > 0) if math.isfinite(gain) else False,
        "gap_snr": None,
    }


def signal_columns(
    trivial_terms: torch.Tensor,
    test_terms: torch.Tensor,
    gap: float,
    test_loss_ci: float,
    loss_range: float | None,
) -> dict:
    """The signal columns from the per-tuple losses of f = 0 and of the head on the same held-out
    tuples. Shape: trivial_terms, test_terms (n,)."""
    gain, ci = stats.paired_difference(trivial_terms, test_terms)
    usable_range = loss_range is not None and math.isfinite(loss_range) and loss_range > 0
    return {
        "trivial_loss": float(trivial_terms.double().mean()),
        "learning_gain": gain,
        "learning_gain_ci": ci,
        "learning_gain_rel": gain / loss_range if usable_range else None,
        "learned": bool(gain - ci > 0) if math.isfinite(ci) else None,
        "gap_snr": abs(gap) / test_loss_ci if test_loss_ci > 0 else None,
    }


def certified_learning_columns(trivial_loss: float, certificates: dict[str, float | None]) -> dict:
    """`learning_certified_<rung>` for each rung's certificate of the population loss (None: the
    rung does not apply)."""
    return {
        f"learning_certified_{rung}": (
            None if value is None else bool(math.isfinite(value) and value < trivial_loss)
        )
        for rung, value in certificates.items()
    }
