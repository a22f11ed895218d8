"""Theorem checks: every statement of THEORY.md on generated instances where both sides are known.

The kernel side of `crl check`. A check is a pure function `(seed, instance, constants) -> rows`
registered in `STATEMENTS`; the flow fans `run_instance` out over (statement, instance) and
writes the rows. No I/O, no global RNG: each instance draws from a torch.Generator seeded by
`crl.seeding.derive_seed(seed, "check", statement, instance)`, so rows depend only on
(seed, statement, instance, constants), never on how instances were spread over workers.

Row (one dict, the same keys for every statement):
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
values a side was computed from (the loss values inside S1's Jensen gaps and grid differences;
crl.losses.logistic = softplus / ln 2 has torch's softplus threshold 20, an absolute error up
to e^-20 / ln 2 = 3e-9 near t = 20). A Monte Carlo row therefore fails only when it fails
beyond its confidence interval. At the default confidence 0.9999 the ~200 Monte Carlo rows
whose true difference is ~0 (S4 equalities, tight S3/DENSE instances) give a fresh seed about
a 1-2% chance of one spurious failure; seeds 0-3 gave none.

Cost: the default instances (`default_instances`, 3110 rows) take ~35 s serially with one
torch thread. Run workers with torch.set_num_threads(1): the tensors are small, and two threads
on two shared cores were ~1.7x slower in wall time and ~3x in CPU time.

Statements (THEORY.md numbering) and their instances:
    S1_*            loss facts for hinge and logistic on a random R in [0.05, 10] (log-uniform)
                    and t in [-2R^2 - 1, 2R^2 + 1]: convex (Jensen on random (x, y, lambda)),
                    monotone and L0-Lipschitz (differences on a 20001-point grid), l(0) = 1,
                    0 < B_{l,R} <= 4 L0 R^2 (two rows: "positive" and "upper").
    S2_contraction  random finite V (K, m, d), m d <= 12, and L-Lipschitz h_i; exact sides.
    S3/S4/S5        even instances: exact on a random discrete latent-class model; odd: Monte
                    Carlo on a random Gaussian model; f(x) = R tanh(W x) / sqrt(d), ||f|| <= R.
    S6_lemma51      exact on bounded sub-Gaussian class laws (see `_s6_lemma51`).
    S7_coverage     coverage of Gamma_M over many samples for a finite class of linear maps.
    LI_*            Li et al. on `TwoModalityGaussian`, common random numbers.
    DENSE_mi_bound  InfoNCE bound log N - L <= I with the optimal critic on Gaussian pairs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import torch

from crl import _validate, bounds, latent, losses, rademacher
from crl.dense import dense_info_nce
from crl.metrics import mean_ci
from crl.seeding import derive_seed

_F64 = torch.float64
_REL_TOL = 1e-9
_Z95 = NormalDist().inv_cdf(0.975)  # population_mc reports 95% half-widths
_LOSSES = ("hinge", "logistic")
Row = dict[str, object]


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
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}={value!r}: expected a finite number >= 0")
        _validate.open_unit("confidence", self.confidence)

    @property
    def z(self) -> float:
        """Normal quantile of the two-sided `confidence` level."""
        return NormalDist().inv_cdf((1.0 + self.confidence) / 2.0)


# ---------------------------------------------------------------- rows and random parameters


def _row(
    statement: str,
    instance: int,
    method: str,
    quantity: str,
    params: dict[str, object],
    lhs: float,
    rhs: float,
    ci: float = 0.0,
    note: str = "",
    kind: str = "le",
    scale: float = 0.0,
) -> Row:
    """One result row; `kind` is "le" (lhs <= rhs), "eq" (lhs = rhs) or "lt" (lhs < rhs).

    `scale` is the magnitude of the values that lhs and rhs were computed from (e.g. the loss
    values inside a Jensen gap), so that the rounding tolerance is relative to them.
    """
    lhs, rhs, ci = float(lhs), float(rhs), float(ci)
    tol = _REL_TOL * max(1.0, abs(lhs), abs(rhs), scale)
    if kind == "eq":
        slack = -abs(lhs - rhs)
        holds = abs(lhs - rhs) <= ci + tol
    elif kind == "lt":
        slack = rhs - lhs
        holds = slack > tol
    else:
        slack = rhs - lhs
        holds = lhs - rhs <= ci + tol
    return {
        "statement": statement, "instance": instance, "method": method, "quantity": quantity,
        "params": json.dumps(params, sort_keys=True), "lhs": lhs, "rhs": rhs, "slack": slack,
        "holds": bool(holds) and math.isfinite(slack), "ci": ci, "note": note,
    }


def _instance_generator(seed: int, statement: str, instance: int) -> tuple[torch.Generator, int]:
    instance_seed = derive_seed(seed, "check", statement, instance)
    return torch.Generator().manual_seed(instance_seed), instance_seed


def _uniform(gen: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * torch.rand((), dtype=_F64, generator=gen).item()


def _log_uniform(gen: torch.Generator, low: float, high: float) -> float:
    return math.exp(_uniform(gen, math.log(low), math.log(high)))


def _randint(gen: torch.Generator, low: int, high: int) -> int:
    """Uniform integer in [low, high] (both ends included)."""
    return int(torch.randint(low, high + 1, (), generator=gen))


def _dirichlet(gen: torch.Generator, *shape: int) -> torch.Tensor:
    """Rows uniform on the simplex (Dirichlet(1) as normalised exponentials).  Shape: shape."""
    e = -torch.log1p(-torch.rand(*shape, dtype=_F64, generator=gen))
    return e / e.sum(-1, keepdim=True)


def _bounded_tanh(W: torch.Tensor, R: float) -> latent.Representation:
    """f(x) = R tanh(W x) / sqrt(d): every coordinate is below R / sqrt(d), so ||f(x)|| < R.

    Shape: W (d, D); f maps (..., D) -> (..., d).
    """
    scale = R / math.sqrt(W.shape[0])
    return lambda x: scale * torch.tanh(x @ W.T)


def _loss(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    return losses.hinge if name == "hinge" else losses.logistic


# ---------------------------------------------------------------- S1: loss facts


def _s1_instance(
    seed: int, statement: str, instance: int
) -> tuple[dict[str, object], torch.Tensor, float, torch.Generator]:
    """R log-uniform in [0.05, 10]; grid t (20001,) on [-2R^2 - 1, 2R^2 + 1] (the scores
    |q| <= 2R^2 and a margin); the generator for further draws."""
    gen, instance_seed = _instance_generator(seed, statement, instance)
    R = _log_uniform(gen, 0.05, 10.0)
    reach = 2.0 * R * R + 1.0
    params = {"R": R, "t_range": [-reach, reach], "instance_seed": instance_seed}
    return params, torch.linspace(-reach, reach, 20001, dtype=_F64), R, gen


def _s1_convex(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Jensen: max over 20000 random (x, y, lam), x, y uniform on the t range, of
    l(lam x + (1 - lam) y) - lam l(x) - (1 - lam) l(y) <= 0."""
    statement = "S1_convex"
    params, t, _, gen = _s1_instance(seed, statement, instance)
    reach = t[-1].item()
    x, y = ((2 * torch.rand(20000, dtype=_F64, generator=gen) - 1) * reach for _ in range(2))
    lam = torch.rand(20000, dtype=_F64, generator=gen)
    params |= {"triples": 20000}
    rows = []
    for name in _LOSSES:
        ell = _loss(name)
        lx, ly = ell(x), ell(y)                                             # 20000 each
        gap = ell(lam * x + (1 - lam) * y) - (lam * lx + (1 - lam) * ly)    # 20000
        rows.append(_row(statement, instance, "exact", name, params | {"loss": name},
                         gap.max().item(), 0.0, note="lhs = max Jensen gap over the triples",
                         scale=max(lx.abs().max().item(), ly.abs().max().item())))
    return rows


def _s1_monotone(seed: int, instance: int, constants: Constants) -> list[Row]:
    """max_k l(t_k) - l(t_{k+1}) <= 0 on the grid."""
    statement = "S1_monotone"
    params, t, _, _ = _s1_instance(seed, statement, instance)
    rows = []
    for name in _LOSSES:
        values = _loss(name)(t)
        drop = (values[:-1] - values[1:]).max().item()
        rows.append(_row(statement, instance, "exact", name, params | {"loss": name}, drop, 0.0,
                         note="lhs = largest decrease between neighbouring grid points",
                         scale=values.abs().max().item()))
    return rows


def _s1_lipschitz(seed: int, instance: int, constants: Constants) -> list[Row]:
    """max_k |l(t_{k+1}) - l(t_k)| / (t_{k+1} - t_k) <= L0 on the grid."""
    statement = "S1_lipschitz"
    params, t, _, _ = _s1_instance(seed, statement, instance)
    rows = []
    for name in _LOSSES:
        values = _loss(name)(t)
        slope = ((values[1:] - values[:-1]).abs() / (t[1:] - t[:-1])).max().item()
        rows.append(_row(statement, instance, "exact", name, params | {"loss": name}, slope,
                         bounds.L0, note="lhs = largest grid slope; rhs = L0 = 1 + 1/ln 2"))
    return rows


def _s1_value_at_zero(seed: int, instance: int, constants: Constants) -> list[Row]:
    """l(0) = 1 (the instance carries no randomness)."""
    statement = "S1_value_at_zero"
    zero = torch.zeros(1, dtype=_F64)
    return [
        _row(statement, instance, "exact", name, {"loss": name}, _loss(name)(zero).item(), 1.0,
             kind="eq")
        for name in _LOSSES
    ]


def _s1_oscillation(seed: int, instance: int, constants: Constants) -> list[Row]:
    """0 < B_{l,R} = l(2R^2) - l(-2R^2) <= 4 L0 R^2, B from the loss kernels."""
    statement = "S1_oscillation"
    params, _, R, _ = _s1_instance(seed, statement, instance)
    a = torch.tensor([2.0 * R * R, -2.0 * R * R], dtype=_F64)
    rows = []
    for name in _LOSSES:
        ends = _loss(name)(a)
        B = (ends[0] - ends[1]).item()
        note = f"bounds.oscillation={bounds.oscillation(name, R)!r}"
        p = params | {"loss": name}
        rows.append(_row(statement, instance, "exact", f"{name}/positive", p, 0.0, B, note=note,
                         kind="lt"))
        rows.append(_row(statement, instance, "exact", f"{name}/upper", p, B,
                         4.0 * bounds.L0 * R * R, note=note))
    return rows


# ---------------------------------------------------------------- S2: vector contraction


def _s2_contraction(seed: int, instance: int, constants: Constants) -> list[Row]:
    """E sup_v sum_i eps_i h_i(v_i) <= contraction * L * E sup_v sum_it eta_it v_it, exactly.

    V: K in [2, 12] points of (R^d)^m with m in [1, 4], m d <= 12, entries N(0, scale^2),
    scale log-uniform in [0.3, 3]; L uniform in [0.5, 2]. Even instances: h_i(v) =
    L tanh(a_i^T v + b_i) with ||a_i|| = 1; odd: h_i(v) = L ||v - c_i||. Both L-Lipschitz,
    neither zero at 0. Both sides by `rademacher.vector_contraction` (exhaustive signs).
    """
    statement = "S2_contraction"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    K, m = _randint(gen, 2, 12), _randint(gen, 1, 4)
    d = _randint(gen, 1, 12 // m)
    scale, L = _log_uniform(gen, 0.3, 3.0), _uniform(gen, 0.5, 2.0)
    V = scale * torch.randn(K, m, d, dtype=_F64, generator=gen)           # K x m x d
    family = "tanh" if instance % 2 == 0 else "distance"
    if family == "tanh":
        a = torch.randn(m, d, dtype=_F64, generator=gen)
        a = a / a.norm(dim=1, keepdim=True)                                 # m x d, unit rows
        b = torch.randn(m, dtype=_F64, generator=gen)                       # m

        def h(v: torch.Tensor) -> torch.Tensor:
            return L * torch.tanh(torch.einsum("kmd,md->km", v, a) + b)
    else:
        c = scale * torch.randn(m, d, dtype=_F64, generator=gen)            # m x d

        def h(v: torch.Tensor) -> torch.Tensor:
            return L * (v - c).norm(dim=-1)

    sides = rademacher.vector_contraction(V, h, L)
    sup = sides.rhs_sqrt3 / math.sqrt(3.0)                                  # L E sup <eta, v>
    params = {"K": K, "m": m, "d": d, "scale": scale, "L": L, "h": family,
              "instance_seed": instance_seed}
    note = (f"ratio={sides.ratio:.6g} (lhs / (L E sup)); lhs/maurer_rhs="
            f"{sides.lhs / sides.rhs_maurer if sides.rhs_maurer > 0 else 0.0:.6g}; "
            f"maurer_rhs={sides.rhs_maurer:.6g}")
    return [_row(statement, instance, "exact", family, params, sides.lhs,
                 constants.contraction * sup, note=note)]


# ---------------------------------------------------------------- S3-S5: latent-class identities


@dataclass(frozen=True)
class _LatentInstance:
    """A model and a bounded f with either exact or Monte Carlo population quantities per loss."""

    method: str
    params: dict[str, object]
    tau: float
    exact: dict[str, latent.Population]
    mc: dict[str, latent.PopulationMC]


def _latent_instance(seed: int, statement: str, instance: int) -> _LatentInstance:
    """Even instance: discrete model, C in [2, 5], S in [1, 3], D in [1, 4] (support N(centre,
    spread^2), centres N(0, sep^2)), Dirichlet(1) prior and point laws. Odd instance: Gaussian
    `LatentClassModel.synthetic`, C in [2, 5], D in [1, 4], uniform or Zipf prior, 50000 Monte
    Carlo samples per quantity. Both: f(x) = R tanh(W x) / sqrt(d), d in [1, 4], R log-uniform
    in [0.3, 3], W standard normal (d, D).
    """
    gen, instance_seed = _instance_generator(seed, statement, instance)
    classes, dim, d = _randint(gen, 2, 5), _randint(gen, 1, 4), _randint(gen, 1, 4)
    R, sep = _log_uniform(gen, 0.3, 3.0), _log_uniform(gen, 0.3, 3.0)
    W = torch.randn(d, dim, dtype=_F64, generator=gen)                      # d x D
    f = _bounded_tanh(W, R)
    params: dict[str, object] = {"classes": classes, "D": dim, "d": d, "R": R, "separation": sep,
                                 "instance_seed": instance_seed}
    if instance % 2 == 0:
        points = _randint(gen, 1, 3)
        spread = _log_uniform(gen, 0.1, 2.0)
        centres = sep * torch.randn(classes, 1, dim, dtype=_F64, generator=gen)
        support = centres + spread * torch.randn(classes, points, dim, dtype=_F64, generator=gen)
        model = latent.LatentClassModel.discrete(
            _dirichlet(gen, classes), support, _dirichlet(gen, classes, points)
        )
        params |= {"model": "discrete", "S": points, "spread": spread}
        exact = {name: latent.population(model, f, name) for name in _LOSSES}
        return _LatentInstance("exact", params, model.tau, exact, {})
    prior = "uniform" if _randint(gen, 0, 1) == 0 else "zipf"
    noise = _log_uniform(gen, 0.2, 2.0)
    model = latent.LatentClassModel.synthetic(classes, dim, sep, noise, gen, prior=prior)
    samples = 50000
    params |= {"model": "gaussian", "prior": prior, "noise": noise, "samples": samples}
    mc = {name: latent.population_mc(model, f, name, samples, gen) for name in _LOSSES}
    return _LatentInstance("monte_carlo", params, model.tau, {}, mc)


def _s3_lemma43(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Lemma 4.3: L_sup^mu(f) <= L_un^!=(f) (tau < 1 by construction: C >= 2, rho > 0)."""
    statement = "S3_lemma43"
    inst = _latent_instance(seed, statement, instance)
    rows = []
    for name in _LOSSES:
        p = inst.params | {"loss": name}
        if inst.method == "exact":
            pop = inst.exact[name]
            rows.append(_row(statement, instance, "exact", name, p, pop.L_sup_mu, pop.L_un_neq))
        else:
            mc = inst.mc[name]
            ci = constants.z / _Z95 * math.hypot(mc.L_sup_mu_ci, mc.L_un_neq_ci)
            rows.append(_row(statement, instance, "monte_carlo", name, p, mc.L_sup_mu,
                             mc.L_un_neq, ci, note="L_sup^mu is a batch plug-in estimate"))
    return rows


def _s4_decomposition(seed: int, instance: int, constants: Constants) -> list[Row]:
    """L_un = tau L_un^= + (1 - tau) L_un^!= (equality; tau exact from the prior).

    Exact rows recombine the conditional risks of `population`, which divides class-restricted
    sums by tau and 1 - tau: a check of that arithmetic. Monte Carlo rows estimate the three
    risks from independent samples: a genuine test of the identity.
    """
    statement = "S4_decomposition"
    inst = _latent_instance(seed, statement, instance)
    tau = inst.tau
    rows = []
    for name in _LOSSES:
        p = inst.params | {"loss": name, "tau": tau}
        if inst.method == "exact":
            pop = inst.exact[name]
            rhs = tau * pop.L_un_eq + (1 - tau) * pop.L_un_neq
            rows.append(_row(statement, instance, "exact", name, p, pop.L_un, rhs, kind="eq"))
        else:
            mc = inst.mc[name]
            rhs = tau * mc.L_un_eq + (1 - tau) * mc.L_un_neq
            ci = constants.z / _Z95 * math.sqrt(
                mc.L_un_ci**2 + (tau * mc.L_un_eq_ci) ** 2 + ((1 - tau) * mc.L_un_neq_ci) ** 2
            )
            rows.append(_row(statement, instance, "monte_carlo", name, p, mc.L_un, rhs, ci,
                             kind="eq"))
    return rows


def _s5_collision(seed: int, instance: int, constants: Constants) -> list[Row]:
    """1 <= L_un^= <= 1 + c0 s(f): rows "<loss>/lower" and "<loss>/upper" (tau > 0 always)."""
    statement = "S5_collision"
    inst = _latent_instance(seed, statement, instance)
    c0 = constants.collision_c0
    rows = []
    for name in _LOSSES:
        p = inst.params | {"loss": name, "c0": c0}
        if inst.method == "exact":
            pop = inst.exact[name]
            note = f"s_f={pop.s_f!r}"
            rows.append(_row(statement, instance, "exact", f"{name}/lower", p, 1.0, pop.L_un_eq,
                             note=note))
            rows.append(_row(statement, instance, "exact", f"{name}/upper", p, pop.L_un_eq,
                             1.0 + c0 * pop.s_f, note=note))
        else:
            mc = inst.mc[name]
            scale = constants.z / _Z95
            note = f"s_f={mc.s_f!r} (batch plug-in estimate)"
            rows.append(_row(statement, instance, "monte_carlo", f"{name}/lower", p, 1.0,
                             mc.L_un_eq, scale * mc.L_un_eq_ci, note=note))
            rows.append(_row(statement, instance, "monte_carlo", f"{name}/upper", p, mc.L_un_eq,
                             1.0 + c0 * mc.s_f, scale * math.hypot(mc.L_un_eq_ci, c0 * mc.s_f_ci),
                             note=note))
    return rows


# ---------------------------------------------------------------- S6: Lemma 5.1

_S6_RADII = (0.3, 0.6, 0.9, 1.5, 3.0)
_S6_EPS = (1.0, 0.1, 0.01)


def _s6_lemma51(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Lemma 5.1 (hinge): L_un^!=(f) <= gamma L_{gamma,sup}^mu(f) + eps, exactly.

    Construction (bounded, so sup ||f|| <= R holds honestly): class c has law
    X = m_c + a_c * xi with xi uniform on {-1, +1}^D (independent Rademacher coordinates,
    half-widths a_c > 0): a discrete law on 2^D points, D in [1, 3]. f(x) = W x, W (d, D).
    For a unit u, u^T (f(X) - mu_c) = sum_j xi_j a_cj (W^T u)_j is sub-Gaussian with proxy
    sum_j a_cj^2 (W^T u)_j^2 (a Rademacher sign is 1-sub-Gaussian: cosh(l) <= exp(l^2 / 2),
    Hoeffding's (b - a)^2 / 4 on [-1, 1]), so sigma = max_c ||W diag(a_c)||_op. W is scaled so
    that R = max over the support of ||f(x)|| equals a target from (0.3, 0.6, 0.9, 1.5, 3)
    (by instance, times a jitter in [0.8, 1.25]), on both sides of R = 1. One row per eps in
    (1, 0.1, 0.01); gamma from `bounds.lemma51_gamma`.
    """
    statement = "S6_lemma51"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    classes, dim, d = _randint(gen, 2, 4), _randint(gen, 1, 3), _randint(gen, 1, 3)
    sep = _log_uniform(gen, 0.3, 3.0)
    centres = sep * torch.randn(classes, dim, dtype=_F64, generator=gen)   # C x D
    half = 0.2 + 1.3 * torch.rand(classes, dim, dtype=_F64, generator=gen)  # C x D
    codes = torch.arange(1 << dim)[:, None] >> torch.arange(dim)            # 2^D x D bits
    xi = (1 - 2 * (codes & 1)).to(_F64)                                     # 2^D x D signs
    support = centres[:, None, :] + half[:, None, :] * xi                   # C x 2^D x D
    probs = torch.full((classes, 1 << dim), 1.0 / (1 << dim), dtype=_F64)
    model = latent.LatentClassModel.discrete(_dirichlet(gen, classes), support, probs)
    W = torch.randn(d, dim, dtype=_F64, generator=gen)                      # d x D
    target = _S6_RADII[instance % len(_S6_RADII)] * _log_uniform(gen, 0.8, 1.25)
    W = W * (target / (support @ W.T).norm(dim=-1).max().item())
    R = (support @ W.T).norm(dim=-1).max().item()
    sigma = torch.linalg.matrix_norm(W[None] * half[:, None, :], ord=2).max().item()

    def f(x: torch.Tensor) -> torch.Tensor:
        return x @ W.T

    params = {"classes": classes, "D": dim, "d": d, "R": R, "sigma": sigma, "separation": sep,
              "loss": "hinge", "instance_seed": instance_seed}
    rows = []
    for eps in _S6_EPS:
        gamma = bounds.lemma51_gamma(R, sigma, eps)
        pop = latent.population(model, f, "hinge", gamma=gamma)
        rows.append(_row(statement, instance, "exact", f"eps={eps:g}",
                         params | {"eps": eps, "gamma": gamma}, pop.L_un_neq,
                         gamma * pop.L_gamma_sup_mu + eps,
                         note=f"L_gamma_sup_mu={pop.L_gamma_sup_mu!r}"))
    return rows


# ---------------------------------------------------------------- S7: Gamma_M coverage

_S7_RADII = (0.5, 1.0, 2.0)
_S7_DELTAS = (0.05, 0.1, 0.5)


def _wilson_upper(successes: int, trials: int, z: float) -> float:
    """Upper end of the Wilson score interval for a binomial proportion."""
    p = successes / trials
    centre = p + z * z / (2 * trials)
    spread = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials))
    return min(1.0, (centre + spread) / (1 + z * z / trials))


def _s7_coverage(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Coverage of Gamma_M: P_S[sup_f |L_un(f) - Lhat_un(f)| <= gamma_scale Gamma_M(S, delta)].

    F = K = 8 linear maps f_k(x) = W_k x on a random discrete model (C in [2, 4], S in [2, 3],
    D in [2, 3], d = 2), jointly scaled so that R = max_k max_x ||W_k x|| is a target from
    (0.5, 1, 2). L_un(f_k) exact from `population`; 200 independent samples S of M = 40
    triplets; per sample, sup_k |L_un - Lhat_un| exactly over the class and
    R_S(F) = E_eps max_k sum eps f_k(outputs) by `rademacher.finite` (256 sign draws; its Monte
    Carlo error, ~1% of R_S, is ignored). Row per loss, method "monte_carlo" (the coverage is a
    frequency over samples): lhs = 1 - delta, rhs = coverage, ci = Wilson upper bound minus
    coverage, so it fails when coverage < 1 - delta beyond the interval.
    """
    statement = "S7_coverage"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    classes, points, dim = _randint(gen, 2, 4), _randint(gen, 2, 3), _randint(gen, 2, 3)
    maps, d, M, samples, draws = 8, 2, 40, 200, 256
    R_target = _S7_RADII[instance % len(_S7_RADII)]
    delta = _S7_DELTAS[(instance // len(_S7_RADII)) % len(_S7_DELTAS)]
    support = torch.randn(classes, points, dim, dtype=_F64, generator=gen)  # C x S x D
    model = latent.LatentClassModel.discrete(
        _dirichlet(gen, classes), support, _dirichlet(gen, classes, points)
    )
    W = torch.randn(maps, d, dim, dtype=_F64, generator=gen)                # K x d x D
    W = W * (R_target / torch.einsum("kej,caj->kcae", W, support).norm(dim=-1).max().item())
    R = torch.einsum("kej,caj->kcae", W, support).norm(dim=-1).max().item()
    trip = model.sample_triplets(samples * M, gen)
    x = torch.stack([trip.x, trip.x_pos, trip.x_neg]).reshape(3, samples, M, dim)
    feats = torch.einsum("kej,rsmj->krsme", W, x)                            # K x 3 x N x M x d
    q = (feats[:, 0] * (feats[:, 2] - feats[:, 1])).sum(-1)                  # K x N x M
    values = feats.permute(2, 0, 1, 3, 4).reshape(samples, maps, 3 * M, d)  # N x K x 3M x d
    rs = [rademacher.finite(values[s], draws, derive_seed(instance_seed, "signs", s)).value
          for s in range(samples)]
    params = {"classes": classes, "S": points, "D": dim, "d": d, "maps": maps, "M": M,
              "samples": samples, "R": R, "delta": delta, "gamma_scale": constants.gamma_scale,
              "sign_draws": draws, "instance_seed": instance_seed}
    rows = []
    for name in _LOSSES:
        exact = torch.tensor(
            [latent.population(model, lambda z, w=w: z @ w.T, name).L_un for w in W], dtype=_F64
        )                                                                   # K
        empirical = _loss(name)(q).mean(-1)                                 # K x N
        deviation = (empirical - exact[:, None]).abs().amax(0)              # N
        gamma = torch.tensor(
            [bounds.saunshi_gamma(r, M, R, delta, name).value for r in rs], dtype=_F64
        ) * constants.gamma_scale                                           # N
        covered = int((deviation <= gamma).sum())
        coverage = covered / samples
        ci = _wilson_upper(covered, samples, constants.z) - coverage
        note = (f"covered={covered}/{samples}; median sup-deviation="
                f"{deviation.median().item():.4g}; median Gamma={gamma.median().item():.4g}")
        rows.append(_row(statement, instance, "monte_carlo", name, params | {"loss": name},
                         1.0 - delta, coverage, ci, note=note))
    return rows


# ---------------------------------------------------------------- Li et al.: two-modality Gaussian


def _two_modality(gen: torch.Generator) -> tuple[latent.TwoModalityGaussian, dict[str, object]]:
    """Dx, Dy in [1, 3]; A = a G / sqrt(Dx) with G standard normal, a in [0.5, 1.5];
    noise s in [0.5, 1.5]; T in {0.5, 1, 2}."""
    dx, dy = _randint(gen, 1, 3), _randint(gen, 1, 3)
    amplitude, noise = _uniform(gen, 0.5, 1.5), _uniform(gen, 0.5, 1.5)
    A = amplitude * torch.randn(dy, dx, dtype=_F64, generator=gen) / math.sqrt(dx)
    model = latent.TwoModalityGaussian(A, noise)
    T = (0.5, 1.0, 2.0)[_randint(gen, 0, 2)]
    params = {"Dx": dx, "Dy": dy, "amplitude": amplitude, "noise": noise, "temperature": T,
              "mutual_information": model.mutual_information}
    return model, params


def _paired(
    model: latent.TwoModalityGaussian, n: int, m: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Common random numbers: anchors x (n, Dx), positives y (n, Dy), negatives (n, m, Dy)."""
    x, y = model.sample_pairs(n, gen)
    return x, y, model.sample_negatives(n, m, gen)


def _auc_per_anchor(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """mean_j 1[pos_i > neg_ij] + 1/2 1[pos_i = neg_ij].  Shape: pos (n,), neg (n, m) -> (n,)."""
    pos = pos[:, None]
    return ((pos > neg).to(_F64) + 0.5 * (pos == neg).to(_F64)).mean(1)


def _li_fisher_consistency(seed: int, instance: int, constants: Constants) -> list[Row]:
    """s* = T log(p+_x / p-) beats s* + eps g in AUC (higher) and LSE risk (lower).

    Directions g (y-dependent, so not of the invariant form g(x)): "bilinear" y^T B x with
    ||B||_F = 1, "linear" a^T y with ||a|| = 1, "quadratic" +-||y||^2 / Dy; eps in
    (0.5 T, T). n = 4000 anchors, m = 256 negatives each, the same draws for every score; a
    row compares one perturbed score with s* and its ci is the half-width of the paired
    per-anchor difference. The LSE estimate (log of an m-average) is biased low by O(1/m) for
    both scores; the bias difference is far below the excess risk at these eps.
    """
    statement = "LI_fisher_consistency"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    model, params = _two_modality(gen)
    T = params["temperature"]
    dx, dy = model.transform.shape[1], model.transform.shape[0]
    n, m = 4000, 256
    B = torch.randn(dy, dx, dtype=_F64, generator=gen)
    B = B / B.norm()
    a = torch.randn(dy, dtype=_F64, generator=gen)
    a = a / a.norm()
    sign = 1.0 if _randint(gen, 0, 1) == 0 else -1.0
    directions: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "bilinear": lambda u, v: torch.einsum("...i,ij,...j->...", v, B, u),
        "linear": lambda u, v: v @ a,
        "quadratic": lambda u, v: sign * v.square().sum(-1) / dy,
    }
    x, y, y_neg = _paired(model, n, m, gen)
    x_neg = x[:, None, :].expand(n, m, dx)
    pos_star, neg_star = model.optimal_score(x, y, T), model.optimal_score(x_neg, y_neg, T)
    auc_star = _auc_per_anchor(pos_star, neg_star)                          # n
    lse_star = losses.lse_risk(pos_star, neg_star, T, reduction="none")    # n
    params |= {"n": n, "m": m, "instance_seed": instance_seed}
    rows = []
    for direction, g in directions.items():
        g_pos, g_neg = g(x, y), g(x_neg, y_neg)                             # n, n x m
        for eps in (0.5 * T, T):
            pos, neg = pos_star + eps * g_pos, neg_star + eps * g_neg
            p = params | {"direction": direction, "eps": eps}
            auc_diff, auc_ci = mean_ci(auc_star - _auc_per_anchor(pos, neg), constants.confidence)
            rows.append(_row(statement, instance, "monte_carlo", f"auc/{direction}/eps={eps:g}",
                             p, auc_star.mean().item() - auc_diff, auc_star.mean().item(), auc_ci,
                             note="lhs = E(s* + eps g), rhs = E(s*)"))
            lse = losses.lse_risk(pos, neg, T, reduction="none")
            lse_diff, lse_ci = mean_ci(lse - lse_star, constants.confidence)
            rows.append(_row(statement, instance, "monte_carlo", f"lse/{direction}/eps={eps:g}",
                             p, lse_star.mean().item(), lse_star.mean().item() + lse_diff, lse_ci,
                             note="lhs = L(s*), rhs = L(s* + eps g); m-negative estimates"))
    return rows


_CALIBRATION_STEPS = (2.0, 1.0, 0.5, 0.25, 0.125)


def _li_calibration(seed: int, instance: int, constants: Constants) -> list[Row]:
    """Li et al. Thm 3.4: E* - E(s_t) <= sqrt((factor / T)(L(s_t) - L*)), s_t = s* + t g.

    g(x, y) = y^T B x with ||B||_F = 1 and t = c T for c in (2, 1, 0.5, 0.25, 0.125) (t -> 0).
    For this g the excess risk has a closed form: exp(s*(x, y') / T) = p+_x(y') / p-(y'), so
    E_{y'~p-} exp(s_t(x, y') / T) = E_{Y'~N(Ax, s^2 I)} exp(t Y'^T B x / T)
        = exp(t x^T B^T A x / T + t^2 s^2 ||B x||^2 / (2 T^2)),
    E_{p+} s_t = T I + t tr(B^T A), hence L(s_t) = -T I + t^2 s^2 ||B||_F^2 / (2 T) and
    L(s_t) - L* = t^2 s^2 / (2 T) with L* = -T I (`optimal_lse`). The rhs is therefore exact;
    E* - E(s_t) is a paired Monte Carlo difference (n = 4000 anchors, m = 64 negatives each,
    the same draws for s* and s_t).
    """
    statement = "LI_calibration"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    model, params = _two_modality(gen)
    T = params["temperature"]
    dx, dy = model.transform.shape[1], model.transform.shape[0]
    n, m = 4000, 64
    B = torch.randn(dy, dx, dtype=_F64, generator=gen)
    B = B / B.norm()
    x, y, y_neg = _paired(model, n, m, gen)
    x_neg = x[:, None, :].expand(n, m, dx)
    pos_star, neg_star = model.optimal_score(x, y, T), model.optimal_score(x_neg, y_neg, T)
    auc_star = _auc_per_anchor(pos_star, neg_star)                          # n
    g_pos = torch.einsum("ni,ij,nj->n", y, B, x)                            # n
    g_neg = torch.einsum("nmi,ij,nmj->nm", y_neg, B, x_neg)                 # n x m
    L_star = model.optimal_lse(T)
    params |= {"n": n, "m": m, "direction": "bilinear", "L_star": L_star,
               "calibration_factor": constants.calibration_factor, "instance_seed": instance_seed}
    rows = []
    for c in _CALIBRATION_STEPS:
        t = c * T
        excess = t * t * model.noise**2 / (2.0 * T)
        gap, ci = mean_ci(
            auc_star - _auc_per_anchor(pos_star + t * g_pos, neg_star + t * g_neg),
            constants.confidence,
        )
        rhs = math.sqrt(constants.calibration_factor / T * excess)
        rows.append(_row(statement, instance, "monte_carlo", f"t={t:g}",
                         params | {"t": t, "excess_risk": excess}, gap, rhs, ci,
                         note=f"E*={auc_star.mean().item():.6g}; L(s_t)-L*={excess:.6g} exact"))
    return rows


# ---------------------------------------------------------------- Dense: InfoNCE MI bound


def _dense_mi_bound(seed: int, instance: int, constants: Constants) -> list[Row]:
    """log N - L_dense <= I(V1; V2) with the optimal critic, N the contrast-set size.

    V1, V2 in R^k (k in [1, 4]) standard Gaussian with corr(V1_t, V2_t) = rho in [0.2, 0.9],
    coordinates independent: I = -(k/2) log(1 - rho^2). The optimal critic log p(v2|v1)/p(v2)
    equals, up to terms of the anchor alone (which cancel in InfoNCE),
    rho v1^T v2 / (1 - rho^2) - rho^2 ||v2||^2 / (2 (1 - rho^2)) = <[rho v1 / (1 - rho^2), 1],
    [v2, -rho^2 ||v2||^2 / (2 (1 - rho^2))]>, fed to `dense_info_nce` at T = 1 as lifted
    features (not unit-normalised). A batch: B = 8 images x K positions (K in {2, 8, 32}),
    every position an iid pair, positive pairs (b, k, k), negatives the other B K - 1 view-2
    positions, N = B K. 64 independent batches; ci over batch means.
    """
    statement = "DENSE_mi_bound"
    gen, instance_seed = _instance_generator(seed, statement, instance)
    k, rho = _randint(gen, 1, 4), _uniform(gen, 0.2, 0.9)
    images, positions, batches = 8, (2, 8, 32)[instance % 3], 64
    info = -0.5 * k * math.log1p(-rho * rho)
    shape = (batches, images, positions, k)
    v1 = torch.randn(*shape, dtype=_F64, generator=gen)
    v2 = rho * v1 + math.sqrt(1 - rho * rho) * torch.randn(*shape, dtype=_F64, generator=gen)
    lift1 = torch.cat([rho / (1 - rho * rho) * v1, torch.ones(*shape[:-1], 1, dtype=_F64)], -1)
    quad = -rho * rho * v2.square().sum(-1, keepdim=True) / (2 * (1 - rho * rho))
    lift2 = torch.cat([v2, quad], -1)                                       # batches x B x K x k+1
    b, pos = torch.meshgrid(torch.arange(images), torch.arange(positions), indexing="ij")
    pairs = torch.stack([b.flatten(), pos.flatten(), pos.flatten()], 1)     # B K x 3
    with torch.no_grad():
        per_batch = torch.stack([
            dense_info_nce(lift1[i], lift2[i], pairs, 1.0).to(_F64) for i in range(batches)
        ])                                                                  # batches
    contrast = images * positions
    loss, ci = mean_ci(per_batch, constants.confidence)
    params = {"k": k, "rho": rho, "images": images, "positions": positions, "N": contrast,
              "batches": batches, "mutual_information": info, "instance_seed": instance_seed}
    return [_row(statement, instance, "monte_carlo", f"N={contrast}", params,
                 math.log(contrast) - loss, info, ci, note=f"L_dense={loss:.6g}")]


# ---------------------------------------------------------------- registry

STATEMENTS: dict[str, Callable[[int, int, Constants], list[Row]]] = {
    "S1_convex": _s1_convex,
    "S1_monotone": _s1_monotone,
    "S1_lipschitz": _s1_lipschitz,
    "S1_value_at_zero": _s1_value_at_zero,
    "S1_oscillation": _s1_oscillation,
    "S2_contraction": _s2_contraction,
    "S3_lemma43": _s3_lemma43,
    "S4_decomposition": _s4_decomposition,
    "S5_collision": _s5_collision,
    "S6_lemma51": _s6_lemma51,
    "S7_coverage": _s7_coverage,
    "LI_fisher_consistency": _li_fisher_consistency,
    "LI_calibration": _li_calibration,
    "DENSE_mi_bound": _dense_mi_bound,
}

default_instances: dict[str, int] = {
    "S1_convex": 64,
    "S1_monotone": 64,
    "S1_lipschitz": 64,
    "S1_value_at_zero": 1,
    "S1_oscillation": 64,
    "S2_contraction": 400,
    "S3_lemma43": 80,
    "S4_decomposition": 80,
    "S5_collision": 80,
    "S6_lemma51": 200,
    "S7_coverage": 54,
    "LI_fisher_consistency": 30,
    "LI_calibration": 60,
    "DENSE_mi_bound": 60,
}

ROW_KEYS = ("statement", "instance", "method", "quantity", "params", "lhs", "rhs", "slack",
            "holds", "ci", "note")


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
