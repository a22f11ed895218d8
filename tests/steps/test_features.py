"""crl.steps.features: normalised features of both splits, the views a sample indexes, tau."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from crl.steps import data
from crl.steps.features import Normalizer, SplitArrays, load_features, tau_of
from tests.steps.helpers import config, materialise


def _write(
    root: Path,
    split: str,
    ids: list[int],
    x: np.ndarray,
    labels: list[int],
    views: tuple[np.ndarray, np.ndarray] | None = None,
    part: int = 0,
) -> None:
    columns = {
        "id": pa.array(ids, pa.int64()),
        "label": pa.array(labels, pa.int32()),
        "x": data.list_column(x),
    }
    if views is not None:
        columns["view_a"] = data.list_column(views[0])
        columns["view_b"] = data.list_column(views[1])
    path = root / f"split={split}" / f"part-{part:05d}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def _check_affine(raw: np.ndarray, normed: np.ndarray, mean: np.ndarray, scale: float) -> None:
    np.testing.assert_allclose(normed, (raw - mean) / scale, rtol=1e-5, atol=1e-6)


def test_normalizer_in_place_is_array_bit_for_bit() -> None:
    gen = np.random.default_rng(0)
    x = (gen.normal(size=(11, 4)) * 3).astype(np.float32)
    norm = Normalizer(x.mean(axis=0), 2.5)
    want = norm.array(x)
    got = norm.in_place(x.copy(), rows=4)
    np.testing.assert_array_equal(got, want)


def test_load_features_normalises_both_splits(tmp_path: Path) -> None:
    cfg = config()
    root = materialise(cfg, tmp_path)
    raw_train, raw_test = data.read_split(root, "train"), data.read_split(root, "test")
    features = load_features(root)
    mean = raw_train.x.astype(np.float64).mean(axis=0)
    scale = max(
        np.linalg.norm(raw_train.x - mean, axis=1).max(),
        np.linalg.norm(raw_test.x - mean, axis=1).max(),
    )
    _check_affine(raw_train.x, features.train.x, mean, scale)
    _check_affine(raw_test.x, features.test.x, mean, scale)
    norms = np.concatenate(
        [np.linalg.norm(features.train.x, axis=1), np.linalg.norm(features.test.x, axis=1)]
    )
    assert norms.max() <= 1.0
    assert norms.max() > 1.0 - 1e-4  # the largest row sits on the unit sphere
    np.testing.assert_allclose(features.train.x.mean(axis=0), 0.0, atol=1e-6)
    assert np.abs(features.test.x.mean(axis=0)).max() > 1e-3  # centred on the train mean only
    np.testing.assert_array_equal(features.train.labels, raw_train.labels)
    np.testing.assert_array_equal(features.test.labels, raw_test.labels)
    assert features.train.x.dtype == np.float32
    assert features.train.view_a is None and features.test.view_b is None


def test_load_features_scales_by_the_largest_row_of_any_table(tmp_path: Path) -> None:
    """A far-out augmented view in the test split sets the scale of everything."""
    x_train = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]], dtype=np.float32)
    x_test = np.array([[0.5, 0.5], [1.0, 1.0]], dtype=np.float32)
    far = np.array([[0.0, 0.0], [30.0, 40.0]], dtype=np.float32)  # norm 50
    _write(tmp_path, "train", [0, 1, 2, 3], x_train, [0, 0, 1, 1], (x_train, x_train + 1))
    _write(tmp_path, "test", [0, 1], x_test, [0, 1], (x_test, far))
    features = load_features(tmp_path)
    for raw, normed in (
        (x_train, features.train.x),
        (x_train, features.train.view_a),
        (x_train + 1, features.train.view_b),
        (x_test, features.test.x),
        (far, features.test.view_b),
    ):
        _check_affine(raw, normed, np.zeros(2), 50.0)  # the train mean is 0
    every = [
        features.train.x,
        features.train.view_a,
        features.train.view_b,
        features.test.x,
        features.test.view_a,
        features.test.view_b,
    ]
    assert max(np.linalg.norm(t, axis=1).max() for t in every) <= 1.0


def test_load_features_all_rows_equal(tmp_path: Path) -> None:
    """No spread at all: scale 1, every row zero after centring (no division by zero)."""
    x = np.full((3, 2), 4.0, dtype=np.float32)
    _write(tmp_path, "train", [0, 1, 2], x, [0, 1, 0])
    _write(tmp_path, "test", [0, 1], x[:2], [0, 1])
    features = load_features(tmp_path)
    assert np.all(features.train.x == 0) and np.all(features.test.x == 0)


def test_views_of_same_class_data() -> None:
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    views = SplitArrays(x, np.array([2, 0, 2], dtype=np.int32)).views()
    assert views.anchor is views.positive is views.negative
    assert not views.augmented
    np.testing.assert_array_equal(views.anchor.numpy(), x)
    assert views.labels.dtype == torch.int64 and views.labels.tolist() == [2, 0, 2]


def test_views_of_augmented_data() -> None:
    x = np.zeros((3, 2), dtype=np.float32)
    a, b = x + 1, x + 2
    views = SplitArrays(x, np.array([0, 1, 1]), a, b).views()
    assert views.augmented
    np.testing.assert_array_equal(views.anchor.numpy(), a)
    np.testing.assert_array_equal(views.positive.numpy(), b)
    assert views.positive is views.negative  # negatives are view b of other images
    assert views.anchor is not views.positive


def test_inputs_share_memory_with_read_only_arrays() -> None:
    x = np.arange(4, dtype=np.float32).reshape(2, 2)
    x.setflags(write=False)  # arrays from Ray's object store are read-only
    split = SplitArrays(x, np.array([0, 1]))
    tensor = split.inputs()
    assert tensor.data_ptr() == x.ctypes.data
    np.testing.assert_array_equal(tensor.numpy(), x)


def test_tau_of_synthetic_is_the_model_collision_probability() -> None:
    uniform = config(dataset={"classes": 4})
    assert tau_of(uniform, np.array([0, 0, 0])) == 0.25  # labels are ignored
    zipf = config(dataset={"classes": 5, "prior": "zipf", "zipf_exponent": 1.5})
    weights = np.arange(1, 6, dtype=np.float64) ** -1.5
    rho = weights / weights.sum()
    assert abs(tau_of(zipf, np.array([0, 1])) - float((rho**2).sum())) < 1e-12
    assert tau_of(zipf, np.array([0])) == data.synthetic_model(zipf.dataset, zipf.seed).tau


def test_tau_of_other_datasets_uses_label_frequencies() -> None:
    digits = config(dataset={"kind": "digits"})
    assert tau_of(digits, np.array([0, 0, 1, 2])) == 0.5**2 + 0.25**2 + 0.25**2
    assert tau_of(digits, np.array([3, 3, 3])) == 1.0
    assert abs(tau_of(digits, np.arange(10)) - 0.1) < 1e-12
