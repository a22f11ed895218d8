"""Theorem checks: every statement of docs/theory/statements.md on generated instances where both
sides are known.

The kernel side of `crl check`. A check is a pure function `(seed, instance, constants) -> rows`
registered in `STATEMENTS` by `@statement(name, instances=...)`; the flow fans `run_instance`
out over (statement, instance) and writes the rows. No I/O, no global RNG: each instance draws
from a torch.Generator seeded by `crl.kernels.seeding.derive_seed(seed, "check", statement,
instance)`, so rows depend only on (seed, statement, instance, constants), never on how
instances were spread over workers. Losses, bounds and estimators are the library's kernels
(crl.kernels), so a wrong constant fails through the code path that users run.

Row (one dict, the same keys `ROW_KEYS` for every statement):
    statement  id in STATEMENTS, e.g. "S3_lemma43"
    instance   instance index (int)
    method     "exact" (both sides computed exactly, up to float rounding) or "monte_carlo"
    quantity   which comparison of the instance, e.g. "hinge", "logistic/upper", "eps=0.1"
    params     JSON string (sorted keys) of the instance parameters, instance_seed included
    lhs, rhs   the two sides; the statement claims lhs <= rhs (lhs = rhs for equalities)
    slack      rhs - lhs for inequalities; -|lhs - rhs| for equalities (0 is perfect)
    holds      inequality: lhs - rhs <= ci + tol; equality: |lhs - rhs| <= ci + tol;
               strict inequality (0 < B_{l,R}): rhs - lhs > tol
    ci         Monte Carlo half-width of the compared difference at `Constants.confidence`
               (normal approximation; the Wilson bound for the S7 coverage), 0 for exact rows
    note       free text: derived quantities, e.g. S2's ratio to Maurer's sqrt(2)
with tol = 1e-9 * max(1, |lhs|, |rhs|, scale) for float rounding, scale the magnitude of the
values a side was computed from (the loss values inside S1's Jensen gaps and grid differences).
A Monte Carlo row therefore fails only when it fails beyond its confidence interval. At the
default confidence 0.9999 the ~200 Monte Carlo rows whose true difference is ~0 (S4
equalities, tight S3/DENSE instances) give a fresh seed about a 1-2% chance of one spurious
failure; seeds 0-3 gave none.

Cost: the default instances (`DEFAULT_INSTANCES`, 3110 rows) take ~35 s serially with one
torch thread. Run workers with torch.set_num_threads(1): the tensors are small, and two threads
on two shared cores were ~1.7x slower in wall time and ~3x in CPU time.

Statements (docs/theory/statements.md numbering), their modules and instances:
    S1_*            loss_facts: loss facts for hinge and logistic on a random R in [0.05, 10]
                    (log-uniform) and t in [-2R^2 - 1, 2R^2 + 1]: convex (Jensen on random
                    (x, y, lambda)), monotone and L0-Lipschitz (differences on a 20001-point
                    grid), l(0) = 1, 0 < B_{l,R} <= 4 L0 R^2 (rows "positive" and "upper").
    S2_contraction  contraction: random finite V (K, m, d), m d <= 12, and L-Lipschitz h_i;
                    exact sides.
    S3/S4/S5        latent_class: even instances exact on a random discrete latent-class
                    model; odd: Monte Carlo on a random Gaussian model; f(x) = R tanh(W x) /
                    sqrt(d), ||f|| <= R.
    S6_lemma51      lemma51: exact on bounded sub-Gaussian class laws.
    S7_coverage     coverage: coverage of Gamma_M over many samples for a finite class of
                    linear maps.
    LI_*            li: Li et al. on `TwoModalityGaussian`, common random numbers.
    DENSE_mi_bound  dense_mi: InfoNCE bound log N - L <= I with the optimal critic on Gaussian
                    pairs.
    CERT_*          certificates: the certificate ladder's kl inversion and Gaussian KL (exact),
                    the Monte Carlo terms' and Maurer's bound's coverage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from crl.checks._instances import ROW_KEYS, Row
from crl.checks._registry import DEFAULT_INSTANCES, STATEMENTS, statement
from crl.kernels import _validate, bounds, stats

# The statement modules register their checks on import; this order is the order of STATEMENTS.
# isort: off
from crl.checks import loss_facts  # noqa: F401
from crl.checks import contraction  # noqa: F401
from crl.checks import latent_class  # noqa: F401
from crl.checks import lemma51  # noqa: F401
from crl.checks import coverage  # noqa: F401
from crl.checks import li  # noqa: F401
from crl.checks import dense_mi  # noqa: F401
from crl.checks import certified_bounds  # noqa: F401
from crl.checks import certificates  # noqa: F401
# isort: on

__all__ = [
    "DEFAULT_INSTANCES",
    "ROW_KEYS",
    "STATEMENTS",
    "Constants",
    "Row",
    "run_instance",
    "statement",
]


@dataclass(frozen=True)
class Constants:
    """Constants of the statements; the defaults are the true ones. Tests pass wrong ones.

    contraction        constant of the vector contraction lemma (seed: sqrt(3))
    calibration_factor the 2 in E* - E(s) <= sqrt((2/T)(L(s) - L*)) (Li et al. Thm 3.4)
    collision_c0       c0 in L_un^= <= 1 + c0 s(f) (sqrt(2) L0)
    gamma_scale        multiplies Gamma_M(S, delta) in the S7 coverage check
    confidence         two-sided level of Monte Carlo intervals (0.9999: z = 3.89), so a run of
                       a few hundred Monte Carlo rows rarely fails by chance
    """

    contraction: float = math.sqrt(3.0)
    calibration_factor: float = 2.0
    collision_c0: float = bounds.c0
    gamma_scale: float = 1.0
    confidence: float = 0.9999

    def __post_init__(self) -> None:
        for name in ("contraction", "calibration_factor", "collision_c0", "gamma_scale"):
            _validate.nonnegative(name, getattr(self, name))
        _validate.open_unit("confidence", self.confidence)

    @property
    def z(self) -> float:
        """Normal quantile of the two-sided `confidence` level."""
        return stats.z_value(self.confidence)


def run_instance(
    statement: str, seed: int, instance: int, constants: Constants | None = None
) -> list[Row]:
    """Rows of one (statement, instance); a pure function of its arguments."""
    if statement not in STATEMENTS:
        raise ValueError(f"statement={statement!r}: expected one of {tuple(STATEMENTS)}")
    _validate.at_least("seed", seed, 0)
    _validate.at_least("instance", instance, 0)
    if constants is None:
        constants = Constants()
    elif not isinstance(constants, Constants):
        raise ValueError(f"constants is {type(constants).__name__}: expected crl.checks.Constants")
    return STATEMENTS[statement](seed, instance, constants)
