"""Tests for crl.metrics: naive float64 loops, closed forms, bad inputs."""

from __future__ import annotations

import math

import pytest
import torch

from crl.metrics import (
    calibration_gap,
    linear_probe_accuracy,
    mean_ci,
    mean_ci_rows,
    mean_classifier,
    retrieval_auc,
)

LOSSES = {
    "hinge": lambda t: max(1.0 + t, 0.0),
    "logistic": lambda t: math.log2(1.0 + math.exp(t)),
}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _naive_mean_classifier(train_f, train_y, test_f, test_y, loss):
    ell = LOSSES[loss]
    train_f, test_f = train_f.tolist(), test_f.tolist()
    train_y, test_y = train_y.tolist(), test_y.tolist()
    classes = sorted(set(train_y))
    d = len(train_f[0])
    means = {}
    for c in classes:
        rows = [x for x, y in zip(train_f, train_y, strict=True) if y == c]
        means[c] = [sum(r[t] for r in rows) / len(rows) for t in range(d)]
    freq = {c: train_y.count(c) / len(train_y) for c in classes}
    tested = [c for c in classes if c in test_y]
    total = risk = acc = 0.0
    for p in tested:
        for q in tested:
            if p == q:
                continue
            w = [means[p][t] - means[q][t] for t in range(d)]
            halves = []
            for cls, sign in ((p, 1.0), (q, -1.0)):
                rows = [x for x, y in zip(test_f, test_y, strict=True) if y == cls]
                margins = [sign * sum(w[t] * x[t] for t in range(d)) for x in rows]
                halves.append(
                    (
                        sum(ell(-g) for g in margins) / len(rows),
                        sum(1.0 if g > 0 else 0.5 if g == 0 else 0.0 for g in margins) / len(rows),
                    )
                )
            weight = freq[p] * freq[q]
            total += weight
            risk += weight * (halves[0][0] + halves[1][0]) / 2
            acc += weight * (halves[0][1] + halves[1][1]) / 2
    correct = 0
    for x, y in zip(test_f, test_y, strict=True):
        scores = [sum(means[c][t] * x[t] for t in range(d)) for c in classes]
        correct += classes[scores.index(max(scores))] == y
    return risk / total, acc / total, correct / len(test_y)


@pytest.mark.parametrize("loss", ["hinge", "logistic"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mean_classifier_matches_naive_loop(loss: str, seed: int) -> None:
    g = _gen(seed)
    train_y = torch.randint(0, 4, (40,), generator=g) * 3 + 1  # labels 1, 4, 7, 10
    test_y = torch.randint(0, 4, (30,), generator=g) * 3 + 1
    train_f = torch.randn(40, 3, dtype=torch.float64, generator=g) + train_y[:, None] / 5
    test_f = torch.randn(30, 3, dtype=torch.float64, generator=g) + test_y[:, None] / 5
    out = mean_classifier(train_f, train_y, test_f, test_y, loss=loss)
    risk, acc, top1 = _naive_mean_classifier(train_f, train_y, test_f, test_y, loss)
    assert out.risk == pytest.approx(risk, rel=1e-12)
    assert out.accuracy == pytest.approx(acc, rel=1e-12)
    assert out.top1 == pytest.approx(top1, rel=1e-12)


def test_mean_classifier_class_missing_from_test() -> None:
    g = _gen(3)
    train_y = torch.tensor([0, 0, 1, 1, 2, 2])
    test_y = torch.tensor([0, 1, 1])
    train_f = torch.randn(6, 2, dtype=torch.float64, generator=g)
    test_f = torch.randn(3, 2, dtype=torch.float64, generator=g)
    out = mean_classifier(train_f, train_y, test_f, test_y, loss="logistic")
    risk, acc, top1 = _naive_mean_classifier(train_f, train_y, test_f, test_y, "logistic")
    assert (out.risk, out.accuracy, out.top1) == pytest.approx((risk, acc, top1), rel=1e-12)


def test_mean_classifier_separated_and_tied() -> None:
    feats = torch.tensor([[5.0, 0.0], [5.0, 0.1], [0.0, 5.0], [0.1, 5.0], [-5.0, -5.0]] * 2)
    labels = torch.tensor([0, 0, 1, 1, 2] * 2)
    out = mean_classifier(feats, labels, feats, labels)
    assert (out.accuracy, out.top1) == (1.0, 1.0)
    zeros = torch.zeros(6, 3)
    tied = mean_classifier(zeros, torch.tensor([0, 1, 2] * 2), zeros, torch.tensor([0, 1, 2] * 2))
    assert tied.accuracy == 0.5
    assert tied.risk == 1.0  # l(0) = 1 for both losses


def test_mean_classifier_bad_inputs() -> None:
    f, y = torch.zeros(4, 2), torch.tensor([0, 1, 0, 1])
    with pytest.raises(ValueError, match="train_y"):
        mean_classifier(f, y[:3], f, y)
    with pytest.raises(ValueError, match="test_f"):
        mean_classifier(f, y, torch.zeros(4, 3), y)
    with pytest.raises(ValueError, match="test_y contains label 5"):
        mean_classifier(f, y, f, torch.tensor([0, 1, 5, 1]))
    with pytest.raises(ValueError, match="train_y has dtype"):
        mean_classifier(f, y.float(), f, y)
    with pytest.raises(ValueError, match="loss='l2'"):
        mean_classifier(f, y, f, y, loss="l2")
    with pytest.raises(ValueError, match="at least 2"):
        mean_classifier(f, torch.zeros(4, dtype=torch.int64), f, torch.zeros(4, dtype=torch.int64))


def test_linear_probe_separable_gaussians() -> None:
    g = _gen(4)
    centers = 4.0 * torch.eye(5, dtype=torch.float64)[:4]  # 4 classes in R^5
    train_y = torch.randint(0, 4, (400,), generator=g)
    test_y = torch.randint(0, 4, (400,), generator=g)
    train_f = centers[train_y] + 0.5 * torch.randn(400, 5, dtype=torch.float64, generator=g)
    test_f = centers[test_y] + 0.5 * torch.randn(400, 5, dtype=torch.float64, generator=g)
    acc = linear_probe_accuracy(train_f, train_y, test_f, test_y)
    assert acc >= 0.99
    assert acc == linear_probe_accuracy(train_f, train_y, test_f, test_y)  # deterministic


def test_linear_probe_bad_inputs() -> None:
    f, y = torch.zeros(4, 2), torch.tensor([0, 1, 0, 1])
    with pytest.raises(ValueError, match="test_y"):
        linear_probe_accuracy(f, y, f, y[:2])
    with pytest.raises(ValueError, match="l2=0"):
        linear_probe_accuracy(f, y, f, y, l2=0)
    with pytest.raises(ValueError, match="steps=0"):
        linear_probe_accuracy(f, y, f, y, steps=0)


def test_retrieval_auc_matches_loop_and_closed_forms() -> None:
    g = _gen(5)
    pos = torch.randint(0, 4, (7,), generator=g).double()
    neg = torch.randint(0, 4, (7, 5), generator=g).double()  # integers: many ties
    naive = (
        sum(
            1.0 if p > q else 0.5 if p == q else 0.0
            for p, row in zip(pos.tolist(), neg.tolist(), strict=True)
            for q in row
        )
        / neg.numel()
    )
    assert retrieval_auc(pos, neg) == pytest.approx(naive, rel=1e-15)
    assert retrieval_auc(torch.ones(3), torch.zeros(3, 4)) == 1.0
    assert retrieval_auc(torch.ones(3), torch.ones(3, 4)) == 0.5
    with pytest.raises(ValueError, match="neg has shape"):
        retrieval_auc(pos, neg[:3])


def test_calibration_gap() -> None:
    gap = calibration_gap(auc_opt=0.9, auc=0.8, loss=1.5, loss_opt=1.0, temperature=0.5)
    assert gap.lhs == pytest.approx(0.1)
    assert gap.rhs == pytest.approx(math.sqrt(2.0 / 0.5 * 0.5))
    assert gap.slack == pytest.approx(gap.rhs - gap.lhs)
    assert calibration_gap(0.9, 0.9, 0.99, 1.0, 1.0).rhs == 0.0
    with pytest.raises(ValueError, match="temperature=0"):
        calibration_gap(0.9, 0.8, 1.5, 1.0, 0)


def test_mean_ci() -> None:
    values = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mean, half = mean_ci(values)
    std = math.sqrt(sum((v - 2.5) ** 2 for v in values.tolist()) / 3)
    assert mean == 2.5
    assert half == pytest.approx(1.959963984540054 * std / 2, rel=1e-12)
    rows_mean, rows_half = mean_ci_rows(torch.stack([values, 2 * values], dim=1))
    assert rows_mean.tolist() == [2.5, 5.0]
    assert rows_half.tolist() == pytest.approx([half, 2 * half], rel=1e-12)
    with pytest.raises(ValueError, match="values has shape"):
        mean_ci(torch.ones(1))
    with pytest.raises(ValueError, match="confidence=1.5"):
        mean_ci(values, confidence=1.5)


def test_paired_difference_is_the_mean_difference_with_its_coverage() -> None:
    """The paired interval of the learning gain: the mean of a - b and a normal half-width that
    covers the true mean difference in about 95% of 2000 simulated samples of 400 pairs whose
    shared part is large (an unpaired interval would be far wider)."""
    from crl.kernels.stats import paired_difference

    a = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    b = torch.tensor([0.5, 1.0, 1.5], dtype=torch.float64)
    mean, half = paired_difference(a, b)
    diff = [0.5, 1.0, 2.5]
    mu = sum(diff) / 3
    sd = math.sqrt(sum((d - mu) ** 2 for d in diff) / 2)
    assert mean == pytest.approx(mu, abs=1e-15)
    assert half == pytest.approx(1.959963984540054 * sd / math.sqrt(3), rel=1e-12)
    gen = torch.Generator().manual_seed(0)
    shared = torch.randn(2000, 400, generator=gen, dtype=torch.float64) * 5
    first = shared + 0.1 + torch.randn(2000, 400, generator=gen, dtype=torch.float64)
    second = shared + torch.randn(2000, 400, generator=gen, dtype=torch.float64)
    covered = 0
    for i in range(2000):
        m, h = paired_difference(first[i], second[i])
        covered += abs(m - 0.1) <= h
    assert abs(covered / 2000 - 0.95) < 3 * math.sqrt(0.95 * 0.05 / 2000)
    assert math.isnan(paired_difference(a[:1], b[:1])[1])
    with pytest.raises(ValueError, match="expected two"):
        paired_difference(a, b[:2])
