"""Downstream metrics: mean classifier, linear probe, retrieval AUC, calibration gap.

Mean classifier and average binary task: Saunshi et al. 2019 (docs/theory/statements.md section
A). Retrieval AUC and the calibration inequality: Li et al. 2026 (docs/theory/statements.md
section B).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from crl.kernels import _validate, bounds, losses

__all__ = [
    "CalibrationGap",
    "MeanClassifier",
    "calibration_gap",
    "linear_probe_accuracy",
    "mean_classifier",
    "retrieval_auc",
]


def _check_labelled(name: str, feats: torch.Tensor, labels: torch.Tensor) -> None:
    _validate.tensor(f"{name}_f", feats)
    _validate.tensor(f"{name}_y", labels)
    _validate.shape(f"{name}_f", feats, "(n, d) with n >= 1", feats.ndim == 2 and len(feats) > 0)
    _validate.shape(
        f"{name}_y",
        labels,
        f"({len(feats)},) matching {name}_f",
        labels.shape == (len(feats),),
    )
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{name}_y has dtype {labels.dtype}: expected an integer dtype")


def _check_pair(
    train_f: torch.Tensor, train_y: torch.Tensor, test_f: torch.Tensor, test_y: torch.Tensor
) -> None:
    _check_labelled("train", train_f, train_y)
    _check_labelled("test", test_f, test_y)
    _validate.shape(
        "test_f",
        test_f,
        f"(m, {train_f.shape[1]}) matching train_f",
        test_f.shape[1] == train_f.shape[1],
    )


@dataclass(frozen=True)
class MeanClassifier:
    """Mean-classifier results. `classes` (K,) sorted train labels, `means` (K, d) mu_c."""

    risk: float
    accuracy: float
    top1: float
    classes: torch.Tensor
    means: torch.Tensor


_ROWS = 65536  # train rows summed at a time into the class means


def mean_classifier(
    train_f: torch.Tensor,
    train_y: torch.Tensor,
    test_f: torch.Tensor,
    test_y: torch.Tensor,
    loss: str = "hinge",
) -> MeanClassifier:
    """Average binary task risk and accuracy of the mean classifier (Saunshi et al., Sec. 2).

    mu_c = mean of train features of class c. Task (c+, c-), c+ != c-, weight
    p(c+) p(c-) / sum_{a != b} p(a) p(b) with p the train label frequencies; tasks range over
    ordered pairs of classes present in both train and test. With w = mu_{c+} - mu_{c-} and Y
    uniform on {+1, -1}:
        risk(c+, c-) = 1/2 E_{X~c+} l(-w^T f(X)) + 1/2 E_{X~c-} l(w^T f(X)),
    test expectations being class-wise test means. `accuracy` averages
    1[Y w^T f(X) > 0] + 1/2 1[Y w^T f(X) = 0] the same way. `top1` is the test accuracy of
    argmax_c mu_c^T f(x) over all train classes (ties: lowest label).

    Shape:
        train_f: (n, d), train_y: (n,) integer labels; test_f: (m, d), test_y: (m,) with labels
        drawn from train_y.
    """
    _check_pair(train_f, train_y, test_f, test_y)
    ell = losses.binary(loss)
    classes, train_idx, counts = torch.unique(train_y, return_inverse=True, return_counts=True)
    test_y = test_y.to(classes.dtype)
    test_idx = torch.searchsorted(classes, test_y).clamp(max=len(classes) - 1)
    unseen = classes[test_idx] != test_y
    if unseen.any():
        raise ValueError(
            f"test_y contains label {test_y[unseen][0].item()}: expected labels present in train_y"
        )
    sums = train_f.new_zeros(len(classes), train_f.shape[1], dtype=torch.float64)  # sums: K x d
    for start in range(0, len(train_y), _ROWS):  # in float64, _ROWS rows at a time
        rows = slice(start, start + _ROWS)
        sums.index_add_(0, train_idx[rows], train_f[rows].to(torch.float64))
    means = sums / counts[:, None]  # means: K x d
    test_f = test_f.to(torch.float64)
    scores = test_f @ means.T  # scores: m x K
    # margin[i, k] = (mu_{y_i} - mu_k)^T f(x_i): the margin of test point i in task (y_i, k).
    margin = scores.gather(1, test_idx[:, None]) - scores  # margin: m x K
    onehot_test = torch.nn.functional.one_hot(test_idx, len(classes)).to(torch.float64)
    test_counts = onehot_test.sum(0)  # test_counts: K
    present = test_counts > 0
    # X_by_class[c, k] = mean over test points of class c of their value in task (c, k).
    denom = test_counts.clamp(min=1)[:, None]
    loss_by_class = onehot_test.T @ ell(-margin) / denom  # K x K
    hit = (margin > 0).double() + 0.5 * (margin == 0).double()
    hit_by_class = onehot_test.T @ hit / denom  # K x K
    freq = counts.to(torch.float64) / len(train_y)
    pair = torch.outer(freq * present, freq * present)
    pair.fill_diagonal_(0.0)  # tasks: K x K
    if pair.sum() <= 0:
        raise ValueError(
            f"train_y/test_y share {int(present.sum())} class(es): expected at least 2"
        )
    pair = pair / pair.sum()
    # Task (p, q) is symmetric in its two halves: risk = (A[p, q] + A[q, p]) / 2.
    risk = (pair * (loss_by_class + loss_by_class.T)).sum() / 2
    accuracy = (pair * (hit_by_class + hit_by_class.T)).sum() / 2
    top1 = (classes[scores.argmax(1)] == test_y).double().mean()
    return MeanClassifier(
        risk=risk.item(),
        accuracy=accuracy.item(),
        top1=top1.item(),
        classes=classes,
        means=means,
    )


def linear_probe_accuracy(
    train_f: torch.Tensor,
    train_y: torch.Tensor,
    test_f: torch.Tensor,
    test_y: torch.Tensor,
    l2: float = 1e-3,
    steps: int = 100,
) -> float:
    """Test top-1 accuracy of an L2-regularised multinomial logistic regression probe.

    Features are standardised with train mean/std (zero-variance features are left unscaled).
    Minimises (1/n) sum_i CE(W^T z_i + b, y_i) + (l2/2) ||W||_F^2 by full-batch LBFGS
    (strong Wolfe line search, `steps` iterations, float64, zero init), so the result is
    deterministic. Test labels absent from train_y count as errors.

    Shape:
        train_f: (n, d), train_y: (n,); test_f: (m, d), test_y: (m,).
    """
    _check_pair(train_f, train_y, test_f, test_y)
    _validate.positive("l2", l2)
    _validate.at_least("steps", steps, 1)
    classes, train_idx = torch.unique(train_y, return_inverse=True)
    train_f = train_f.detach().to(torch.float64)
    test_f = test_f.detach().to(torch.float64)
    center = train_f.mean(0)
    scale = train_f.std(0, correction=0)
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    z_train = (train_f - center) / scale  # n x d
    z_test = (test_f - center) / scale  # m x d
    weight = torch.zeros(train_f.shape[1], len(classes), dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(len(classes), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS(
        [weight, bias],
        lr=1.0,
        max_iter=steps,
        line_search_fn="strong_wolfe",
        tolerance_grad=1e-10,
        tolerance_change=1e-14,
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = z_train @ weight + bias  # n x K
        objective = torch.nn.functional.cross_entropy(logits, train_idx)
        objective = objective + 0.5 * l2 * weight.square().sum()
        objective.backward()
        return objective

    with torch.enable_grad():
        opt.step(closure)
    with torch.no_grad():
        pred = classes[(z_test @ weight + bias).argmax(1)]  # m
    return (pred == test_y).double().mean().item()


def retrieval_auc(
    pos: torch.Tensor, neg: torch.Tensor, reduction: str = "mean"
) -> float | torch.Tensor:
    """Empirical retrieval criterion E(s) of Li et al.:
        mean_{i, j} ( 1[pos_i > neg_ij] + 1/2 1[pos_i = neg_ij] ).

    `reduction="none"` returns the per-anchor means over j, shape (n,) float64, for a CI.

    Shape:
        pos: (n,) positive scores s(x_i, y_i); neg: (n, m) negative scores s(x_i, y'_ij).
    """
    _validate.choice("reduction", reduction, losses.REDUCTIONS)
    _validate.tensor("pos", pos)
    _validate.tensor("neg", neg)
    _validate.shape("pos", pos, "(n,) with n >= 1", pos.ndim == 1 and len(pos) > 0)
    _validate.shape(
        "neg",
        neg,
        f"({len(pos)}, m) with m >= 1",
        neg.ndim == 2 and neg.shape[0] == len(pos) and neg.shape[1] > 0,
    )
    pos = pos.to(torch.float64)[:, None]
    neg = neg.to(torch.float64)
    hits = (pos > neg).double() + 0.5 * (pos == neg).double()  # (n, m)
    return hits.mean(1) if reduction == "none" else hits.mean().item()


@dataclass(frozen=True)
class CalibrationGap:
    """Both sides of Li et al. Thm 3.4: lhs = E* - E(s) <= rhs = sqrt((2/T)(L(s) - L*))."""

    lhs: float
    rhs: float

    @property
    def slack(self) -> float:
        """rhs - lhs; negative means the inequality fails on these numbers."""
        return self.rhs - self.lhs


def calibration_gap(
    auc_opt: float, auc: float, loss: float, loss_opt: float, temperature: float
) -> CalibrationGap:
    """Calibration inequality of Li et al. (Thm 3.4): E* - E(s) <= sqrt((2/T)(L(s) - L*)).

    An excess risk L(s) - L* below 0 (possible when both are estimates) gives rhs = 0.
    """
    rhs = bounds.calibration_rhs(float(loss), float(loss_opt), temperature, clip=True)
    return CalibrationGap(lhs=float(auc_opt) - float(auc), rhs=rhs)
