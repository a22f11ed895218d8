"""crl.steps.data: shard plans, pure shards, split sizes, user Parquet, round trips, views."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from crl.core.errors import ConfigError
from crl.steps import data
from tests.steps.helpers import config


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


def _user_parquet(tmp_path: Path, rows: int = 10, **columns: list) -> str:
    rng = np.random.default_rng(1)
    base = {
        "x": [rng.normal(size=3).round(3).tolist() for _ in range(rows)],
        "label": [["cat", "dog", "emu"][i % 3] for i in range(rows)],
    }
    base.update(columns)
    path = tmp_path / "user.parquet"
    pq.write_table(pa.table(base), path)
    return str(path)


def _parquet_dataset(path: str, **keys: object):
    return config(dataset={"kind": "parquet", "path": path, "shards": 3, **keys}).dataset


# --- shard_plan ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shards", [1, 2, 3, 4, 7])
@pytest.mark.parametrize(("train", "test"), [(60, 40), (9, 2), (10, 7), (2, 3), (5, 5)])
def test_shard_plan_covers_every_row_once_without_empty_shards(
    shards: int, train: int, test: int
) -> None:
    ds = config(dataset={"shards": shards}).dataset
    plan = data.shard_plan(ds, {"train": train, "test": test})
    for split, size in (("train", train), ("test", test)):
        specs = [s for s in plan if s.split == split]
        assert all(s.rows > 0 for s in specs)
        assert len(specs) <= shards
        covered = [row for s in specs for row in range(s.start, s.start + s.rows)]
        assert covered == list(range(size))  # each row once, in order
        assert [s.index for s in specs] == list(range(len(specs)))
    assert [s.split for s in plan] == sorted([s.split for s in plan], key=data.SPLITS.index)


def test_shard_plan_exact_layout() -> None:
    ds = config(dataset={"shards": 4}).dataset
    plan = data.shard_plan(ds, {"train": 10, "test": 9})
    assert plan == [
        data.ShardSpec("train", 0, 0, 3),
        data.ShardSpec("train", 1, 3, 3),
        data.ShardSpec("train", 2, 6, 3),
        data.ShardSpec("train", 3, 9, 1),
        data.ShardSpec("test", 0, 0, 3),
        data.ShardSpec("test", 1, 3, 3),
        data.ShardSpec("test", 2, 6, 3),  # 9 rows in shards of 3: the fourth would be empty
    ]


def test_shard_path() -> None:
    spec = data.ShardSpec("test", 12, 0, 5)
    assert data.shard_path(Path("d"), spec) == Path("d/split=test/part-00012.parquet")


# --- make_shard ---------------------------------------------------------------------------------


def test_synthetic_shard_is_a_pure_function_of_its_arguments() -> None:
    cfg = config()
    spec = data.ShardSpec("train", 1, 30, 30)
    first = data.make_shard(cfg.dataset, cfg.seed, spec)
    second = data.make_shard(config().dataset, cfg.seed, spec)
    assert _parquet_bytes(first) == _parquet_bytes(second)
    assert first.column_names == ["id", "label", "x"]
    assert first.schema.field("id").type == pa.int64()
    assert first.schema.field("label").type == pa.int32()
    assert first.schema.field("x").type == pa.list_(pa.float32(), 6)
    assert first.column("id").to_pylist() == list(range(30, 60))
    labels = first.column("label").to_numpy()
    assert labels.min() >= 0 and labels.max() < 3


def test_synthetic_shards_differ_across_shards_splits_and_seeds() -> None:
    ds = config().dataset
    base = data.make_shard(ds, 0, data.ShardSpec("train", 0, 0, 20))
    x = data.list_to_numpy(base.column("x"))
    for seed, spec in (
        (0, data.ShardSpec("train", 1, 0, 20)),
        (0, data.ShardSpec("test", 0, 0, 20)),
        (1, data.ShardSpec("train", 0, 0, 20)),
    ):
        other = data.list_to_numpy(data.make_shard(ds, seed, spec).column("x"))
        assert other.shape == x.shape and not np.allclose(other, x)


def test_synthetic_shard_samples_the_model_of_the_run_seed() -> None:
    """Inputs cluster around the class means of `synthetic_model(ds, seed)`."""
    ds = config(dataset={"noise": 0.01}).dataset
    table = data.make_shard(ds, 3, data.ShardSpec("train", 0, 0, 50))
    means = data.synthetic_model(ds, 3).means.numpy()
    x = data.list_to_numpy(table.column("x"))
    labels = table.column("label").to_numpy()
    np.testing.assert_allclose(x, means[labels], atol=0.06)


def test_digits_shards_partition_the_digits() -> None:
    from sklearn.datasets import load_digits

    ds = config(dataset={"kind": "digits", "shards": 2}).dataset
    sizes = data.split_sizes(ds)
    rows, labels = [], []
    for spec in data.shard_plan(ds, sizes):
        table = data.make_shard(ds, 0, spec)
        assert table.column_names == ["id", "label", "x"]
        assert table.num_rows == spec.rows
        x = data.list_to_numpy(table.column("x"))
        assert x.shape[1] == 64 and x.min() >= 0 and x.max() <= 1
        rows.append(x)
        labels.append(table.column("label").to_numpy())
    everything = np.concatenate(rows)
    bunch = load_digits()
    expected = bunch.data.astype(np.float32) / 16.0
    order = np.lexsort(everything.T[::-1])
    order_expected = np.lexsort(expected.T[::-1])
    np.testing.assert_array_equal(everything[order], expected[order_expected])
    assert np.bincount(np.concatenate(labels)).tolist() == np.bincount(bunch.target).tolist()


def test_augmented_digits_shards_carry_two_views() -> None:
    ds = config(dataset={"kind": "digits", "positives": "augmented", "shards": 4}).dataset
    spec = data.ShardSpec("test", 1, 10, 8)
    table = data.make_shard(ds, 0, spec)
    assert table.column_names == ["id", "label", "x", "view_a", "view_b"]
    a, b = data.list_to_numpy(table.column("view_a")), data.list_to_numpy(table.column("view_b"))
    assert a.shape == b.shape == (8, 64)
    assert not np.allclose(a, b)
    assert _parquet_bytes(table) == _parquet_bytes(data.make_shard(ds, 0, spec))
    same_class = config(dataset={"kind": "digits", "shards": 4}).dataset
    plain = data.make_shard(same_class, 0, spec)
    np.testing.assert_array_equal(
        data.list_to_numpy(plain.column("x")), data.list_to_numpy(table.column("x"))
    )


# --- split_sizes and input_width ----------------------------------------------------------------


def test_split_sizes_and_input_width_synthetic_and_digits() -> None:
    ds = config(dataset={"dim": 11, "train_size": 123, "test_size": 45}).dataset
    assert data.split_sizes(ds) == {"train": 123, "test": 45}
    assert data.input_width(ds) == 11
    digits = config(dataset={"kind": "digits", "test_fraction": 0.3}).dataset
    assert data.split_sizes(digits) == {"train": 1797 - 539, "test": 539}
    assert data.input_width(digits) == 64
    small = config(dataset={"kind": "digits", "test_fraction": 0.0001}).dataset
    assert data.split_sizes(small) == {"train": 1796, "test": 1}


def test_split_sizes_and_input_width_user_parquet(tmp_path: Path) -> None:
    path = _user_parquet(tmp_path, rows=10)
    ds = _parquet_dataset(path, test_fraction=0.3)
    assert data.split_sizes(ds) == {"train": 7, "test": 3}
    assert data.input_width(ds) == 3
    split = ["test", "train", "train", "test", "train", "train", "train", "train", "train", "test"]
    path = _user_parquet(tmp_path, rows=10, split=split)
    ds = _parquet_dataset(path, split_column="split")
    assert data.split_sizes(ds) == {"train": 7, "test": 3}


def test_user_parquet_shards_follow_the_split_column_in_file_order(tmp_path: Path) -> None:
    split = ["test", "train", "train", "test", "train", "train", "train", "train", "train", "test"]
    path = _user_parquet(tmp_path, rows=10, split=split)
    ds = _parquet_dataset(path, split_column="split")
    table = pq.read_table(path)
    x_all = np.array(table.column("x").to_pylist(), dtype=np.float32)
    codes = {"cat": 0, "dog": 1, "emu": 2}  # labels coded in sorted order
    y_all = np.array([codes[v] for v in table.column("label").to_pylist()], dtype=np.int32)
    is_test = np.array([s == "test" for s in split])
    plan = data.shard_plan(ds, data.split_sizes(ds))
    for split_name, mask in (("train", ~is_test), ("test", is_test)):
        tables = [data.make_shard(ds, 0, s) for s in plan if s.split == split_name]
        x = np.concatenate([data.list_to_numpy(t.column("x")) for t in tables])
        y = np.concatenate([t.column("label").to_numpy() for t in tables])
        np.testing.assert_array_equal(x, x_all[mask])
        np.testing.assert_array_equal(y, y_all[mask])


def test_user_parquet_nested_images_are_flattened(tmp_path: Path) -> None:
    images = [[[float(i), 1.0], [2.0, 3.0]] for i in range(5)]
    path = _user_parquet(tmp_path, rows=5, img=images)
    ds = _parquet_dataset(path, image_column="img", feature_column=None)
    assert data.input_width(ds) == 4
    assert data.split_sizes(ds) == {"train": 3, "test": 2}


def test_user_parquet_written_by_polars(tmp_path: Path) -> None:
    """Polars writes list columns as large_list: flat features and nested images both read."""
    import polars as pl

    flat = tmp_path / "flat.parquet"
    pl.DataFrame(
        {"x": [[float(i), 1.0, 2.0] for i in range(5)], "label": [0, 1] * 2 + [0]}
    ).write_parquet(flat)
    assert pq.read_schema(flat).field("x").type == pa.large_list(pa.float64())
    assert data.input_width(_parquet_dataset(str(flat))) == 3
    nested = tmp_path / "nested.parquet"
    images = [[[float(i), 1.0], [2.0, 3.0]] for i in range(5)]
    pl.DataFrame({"img": images, "label": [0, 1] * 2 + [0]}).write_parquet(nested)
    assert pq.read_schema(nested).field("img").type == pa.large_list(pa.large_list(pa.float64()))
    ds = _parquet_dataset(str(nested), image_column="img", feature_column=None)
    assert data.input_width(ds) == 4  # 2x2 images, as with pyarrow's list<list<double>>
    spec = data.shard_plan(ds, data.split_sizes(ds))[0]
    x = data.list_to_numpy(data.make_shard(ds, 0, spec).column("x"))
    assert x.shape == (spec.rows, 4) and set(x[:, 1:].ravel().tolist()) == {1.0, 2.0, 3.0}


def test_user_parquet_random_split_is_fixed(tmp_path: Path) -> None:
    path = _user_parquet(tmp_path, rows=20)
    ds = _parquet_dataset(path)
    first = [data.make_shard(ds, 0, s) for s in data.shard_plan(ds, data.split_sizes(ds))]
    second = [data.make_shard(ds, 5, s) for s in data.shard_plan(ds, data.split_sizes(ds))]
    # the user split does not depend on the run seed
    assert [_parquet_bytes(t) for t in first] == [_parquet_bytes(t) for t in second]


def test_user_parquet_missing_file(tmp_path: Path) -> None:
    ds = _parquet_dataset(str(tmp_path / "absent.parquet"))
    with pytest.raises(ConfigError, match=r"^dataset\.path .*absent\.parquet: does not exist"):
        data.split_sizes(ds)
    with pytest.raises(ConfigError, match=r"^dataset\.path"):
        data.input_width(ds)


def test_user_parquet_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.parquet"
    path.write_bytes(b"this is not parquet")
    with pytest.raises(ConfigError, match=r"^dataset\.path .*not a readable Parquet file"):
        data.split_sizes(_parquet_dataset(str(path)))


def test_user_parquet_missing_label_column(tmp_path: Path) -> None:
    ds = _parquet_dataset(_user_parquet(tmp_path), label_column="target")
    with pytest.raises(ConfigError, match=r"^dataset\.label_column 'target': no such column"):
        data.split_sizes(ds)


def test_user_parquet_missing_feature_and_split_columns(tmp_path: Path) -> None:
    path = _user_parquet(tmp_path)
    with pytest.raises(ConfigError, match=r"^dataset\.feature_column 'features': no such column"):
        data.input_width(_parquet_dataset(path, feature_column="features"))
    with pytest.raises(ConfigError, match=r"^dataset\.split_column 'fold': no such column"):
        data.split_sizes(_parquet_dataset(path, split_column="fold"))


def test_user_parquet_mixed_lengths(tmp_path: Path) -> None:
    rows = [[1.0, 2.0, 3.0]] * 4 + [[1.0, 2.0]]
    path = _user_parquet(tmp_path, rows=5, x=rows)
    with pytest.raises(ConfigError, match=r"column 'x' .*mixed lengths \(2\.\.3\)") as err:
        data.split_sizes(_parquet_dataset(path))
    assert path in str(err.value)
    images = [[[1.0, 2.0], [3.0, 4.0]]] * 4 + [[[1.0, 2.0], [3.0]]]
    path = _user_parquet(tmp_path, rows=5, img=images)
    with pytest.raises(ConfigError, match=r"column 'img' .*mixed lengths"):
        data.input_width(_parquet_dataset(path, image_column="img", feature_column=None))


def test_user_parquet_bad_values(tmp_path: Path) -> None:
    path = _user_parquet(tmp_path, rows=4, x=[[1.0, float("nan")]] * 4)
    with pytest.raises(ConfigError, match=r"column 'x' .*NaN"):
        data.split_sizes(_parquet_dataset(path))
    path = _user_parquet(tmp_path, rows=4, x=[1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ConfigError, match=r"column 'x' .*expected a list of numbers"):
        data.split_sizes(_parquet_dataset(path))
    path = _user_parquet(tmp_path, rows=4, label=["a", None, "b", "a"])
    with pytest.raises(ConfigError, match=r"^dataset\.label_column 'label' .*nulls"):
        data.split_sizes(_parquet_dataset(path))
    path = _user_parquet(tmp_path, rows=4, split=["train", "test", "valid", "train"])
    with pytest.raises(ConfigError, match=r"^dataset\.split_column 'split': values \['valid'\]"):
        data.split_sizes(_parquet_dataset(path, split_column="split"))
    path = _user_parquet(tmp_path, rows=1)
    with pytest.raises(ConfigError, match=r"^dataset\.path .*at least 2 rows"):
        data.split_sizes(_parquet_dataset(path))


# --- write_shard / read_split -------------------------------------------------------------------


def test_write_shard_and_read_split_round_trip_ordered_by_id(tmp_path: Path) -> None:
    cfg = config(dataset={"shards": 3, "train_size": 20, "test_size": 10})
    job = data.ShardJob(cfg.dataset, cfg.seed, tmp_path / "data", tmp_path / ".staging")
    plan = data.shard_plan(cfg.dataset, data.split_sizes(cfg.dataset))
    written = [data.write_shard(spec, job) for spec in reversed(plan)]  # any order
    assert written == [str(data.shard_path(tmp_path / "data", s)) for s in reversed(plan)]
    assert list((tmp_path / ".staging").iterdir()) == []
    for split, size in (("train", 20), ("test", 10)):
        specs = [s for s in plan if s.split == split]
        tables = [data.make_shard(cfg.dataset, cfg.seed, s) for s in specs]
        back = data.read_split(tmp_path / "data", split)
        assert back.ids.tolist() == list(range(size))
        np.testing.assert_array_equal(
            back.x, np.concatenate([data.list_to_numpy(t.column("x")) for t in tables])
        )
        np.testing.assert_array_equal(
            back.labels, np.concatenate([t.column("label").to_numpy() for t in tables])
        )
        assert back.x.dtype == np.float32 and back.x.shape == (size, 6)
        assert back.view_a is None and back.view_b is None


def test_read_split_reads_views_and_other_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "features" / "split=train"
    folder.mkdir(parents=True)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for k, rows in enumerate(([2, 3], [0, 1])):  # part-00000 holds the later ids
        pq.write_table(
            pa.table(
                {
                    "id": pa.array(rows, pa.int64()),
                    "label": pa.array([r % 2 for r in rows], pa.int32()),
                    "x": data.list_column(x[rows]),
                    "view_a": data.list_column(x[rows] + 100),
                    "view_b": data.list_column(x[rows] + 200),
                }
            ),
            folder / f"part-{k:05d}.parquet",
        )
    back = data.read_split(tmp_path / "features", "train")
    assert back.ids.tolist() == [0, 1, 2, 3]
    monkeypatch.setattr(data, "READ_BATCH_ROWS", 1)  # one row per record batch: same result
    one_by_one = data.read_split(tmp_path / "features", "train")
    for name in ("ids", "labels", "x", "view_a", "view_b"):
        np.testing.assert_array_equal(getattr(one_by_one, name), getattr(back, name))
    assert back.labels.tolist() == [0, 1, 0, 1]
    np.testing.assert_array_equal(back.x, x)
    np.testing.assert_array_equal(back.view_a, x + 100)
    np.testing.assert_array_equal(back.view_b, x + 200)
    view_a = data.read_split(tmp_path / "features", "train", "view_a")
    np.testing.assert_array_equal(view_a.x, x + 100)
    with pytest.raises(FileNotFoundError, match="no shards"):
        data.read_split(tmp_path / "features", "test")


def test_read_pairs_reads_x_and_y_ordered_by_id(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "split=train"
    folder.mkdir(parents=True)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    y = np.arange(8, dtype=np.float32).reshape(4, 2) + 50
    for k, rows in enumerate(([3, 1], [0, 2])):  # ids out of order, no label column
        pq.write_table(
            pa.table(
                {
                    "id": pa.array(rows, pa.int64()),
                    "x": data.list_column(x[rows]),
                    "y": data.list_column(y[rows]),
                }
            ),
            folder / f"part-{k:05d}.parquet",
        )
    back_x, back_y = data.read_pairs(tmp_path / "data", "train")
    np.testing.assert_array_equal(back_x, x)
    np.testing.assert_array_equal(back_y, y)
    with pytest.raises(ValueError, match="no label column"):
        data.read_split(tmp_path / "data", "train")


def test_list_column_round_trip() -> None:
    x = np.arange(10, dtype=np.float64).reshape(5, 2)
    column = data.list_column(x)
    assert column.type == pa.list_(pa.float32(), 2) and len(column) == 5
    back = data.list_to_numpy(pa.chunked_array([column.slice(0, 2), column.slice(2)]))
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, x.astype(np.float32))


# --- augment_digits -----------------------------------------------------------------------------


def test_augment_digits_keeps_shape_and_range() -> None:
    rng = np.random.default_rng(0)
    images = rng.random((25, 64)).astype(np.float32)
    images[:5] = 0.0
    images[5:10] = 1.0
    view = data.augment_digits(images, torch.Generator().manual_seed(0))
    assert view.shape == (25, 64) and view.dtype == np.float32
    assert view.min() >= 0.0 and view.max() <= 1.0
    again = data.augment_digits(images, torch.Generator().manual_seed(0))
    np.testing.assert_array_equal(view, again)
    other = data.augment_digits(images, torch.Generator().manual_seed(1))
    assert not np.array_equal(view, other)


def test_augment_digits_shifts_by_at_most_one_pixel() -> None:
    """A single lit pixel at the centre lands within one pixel of where it was (noise 0.05)."""
    images = np.zeros((40, 64), dtype=np.float32)
    images[:, 3 * 8 + 4] = 1.0
    view = data.augment_digits(images, torch.Generator().manual_seed(3)).reshape(40, 8, 8)
    brightest = view.reshape(40, -1).argmax(axis=1)
    rows, cols = np.divmod(brightest, 8)
    assert np.all(np.abs(rows - 3) <= 1) and np.all(np.abs(cols - 4) <= 1)
    assert len(set(zip(rows.tolist(), cols.tolist(), strict=True))) > 1  # shifts do vary
