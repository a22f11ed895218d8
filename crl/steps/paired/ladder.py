"""The certificate ladder's columns of a paired cell: which rungs apply to Li et al.'s score model
x^T M y - y^T B y with the LSE loss, each rung that does not with its reason, and which rungs
certify that the head learned (crl.steps.signal).

- Gaussian cells (`paired_gaussian` without `clip`): L(s) is exact (`test_loss_exact`), so
  learning is measured, not estimated (`learned`, `learning_gain` exact); no rung certifies
  anything (the features are unbounded: the loss has no finite range, A1 fails).
- Clipped-Gaussian and user-pair cells: the Rademacher rung is `train_loss + best_bound` in
  scrl cells whose sampling is certified (gamma_lin plus the LSE inner bound bounds
  L(s) - Lhat(s) at level delta, crl.steps.paired.split_cell); in sscrl cells `best_bound`
  bounds the outer gap L_Y - Lhat only, not L(s). The held-out LSE terms are against one pool
  of negatives (dependent; Li et al.'s L has the expectation inside the log), so no test-set
  certificate. The PAC-Bayes rungs are not built for the score model.
"""

from __future__ import annotations

from crl.steps.signal import certified_learning_columns

EXACT = "the population loss L(s) is exact here (test_loss_exact): nothing to certify"
UNBOUNDED = "Gaussian features are unbounded: the loss has no finite range (A1 fails)"
POOL = (
    "lse: the held-out loss is against one shared pool of negatives (its terms are dependent, "
    "and Li et al.'s L has the expectation inside the log)"
)
NOT_BUILT = "not built for the paired score model (the unimodal and dense families have it)"
PB = ("cert_pb_free", "cert_pb_data")


def ladder_columns(row: dict) -> dict:
    """The ladder's columns of a paired row: `cert_test_set` (`_n`, `_reason`), the PAC-Bayes
    rungs' values and reasons, and `learning_certified_<rung>` (module docstring). `row` has
    the cell's `regime`, `test_loss_exact`, `certified`, `train_loss`, `trivial_loss` and, for
    bounded cells, `best_bound`."""
    exact = row["test_loss_exact"]
    out: dict = {"cert_test_set": None, "cert_test_set_n": None}
    out["cert_test_set_reason"] = EXACT if exact else POOL
    for name in PB:
        out[name] = None
        out[f"{name}_reason"] = UNBOUNDED if exact else NOT_BUILT
    bound = row.get("best_bound")
    scrl = row["regime"] != "sscrl"
    certified = not exact and scrl and row["certified"] and bound is not None
    rademacher = row["train_loss"] + bound if certified else None
    rungs = {"rademacher": rademacher, "test_set": None, "pb_free": None, "pb_data": None}
    return out | certified_learning_columns(row["trivial_loss"], rungs)
