"""User Parquet sources read into arrays, each defect a one-line ConfigError naming the field
and the file: feature or image rows with labels (`user_arrays`), pairs of two modalities
(`user_pairs`), and their train/test split (the user's split column or a seeded one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from crl.core.config import PairedParquetData, ParquetData
from crl.core.errors import ConfigError
from crl.kernels.seeding import derive_seed

SPLITS = ("train", "test")


def _required_columns(ds: ParquetData | PairedParquetData) -> list[tuple[str, str]]:
    """(config field, column name) of every column a user source needs."""
    if isinstance(ds, PairedParquetData):
        return [("x_column", ds.x_column), ("y_column", ds.y_column)]
    column = ds.feature_column or ds.image_column
    return [("label_column", ds.label_column), ("feature_column", column)]


def _user_table(ds: ParquetData | PairedParquetData) -> pa.Table:
    path = Path(ds.path)
    if not path.exists():
        raise ConfigError(f"dataset.path {path}: does not exist")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as err:
        raise ConfigError(f"dataset.path {path}: not a readable Parquet file ({err})") from None
    for field, name in _required_columns(ds):
        if name not in table.column_names:
            raise ConfigError(
                f"dataset.{field} {name!r}: no such column in {path} (has {table.column_names})"
            )
    if ds.split_column and ds.split_column not in table.column_names:
        raise ConfigError(f"dataset.split_column {ds.split_column!r}: no such column in {path}")
    if table.num_rows < 2:
        raise ConfigError(f"dataset.path {path}: needs at least 2 rows, has {table.num_rows}")
    return table


def _is_list(kind: pa.DataType) -> bool:
    """A list column of any Arrow flavour: list, large_list (Polars) or fixed_size_list."""
    return (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    )


def _numeric_rows(table: pa.Table, name: str, path: str) -> np.ndarray:
    """A column of equal-length numeric lists (nested lists flattened) as (N, p) float32."""
    column = table.column(name).combine_chunks()
    while _is_list(column.type):
        lengths = np.asarray(column.value_lengths().fill_null(-1))
        if lengths.size and (lengths.min() != lengths.max() or lengths.min() < 0):
            raise ConfigError(
                f"dataset column {name!r} in {path}: rows have mixed lengths "
                f"({int(lengths.min())}..{int(lengths.max())}); expected one length"
            )
        inner = column.flatten()
        if _is_list(inner.type):
            column = inner  # nested image rows: flatten one level per pass
            continue
        try:
            values = np.asarray(inner.to_numpy(zero_copy_only=False), dtype=np.float32)
        except (ValueError, TypeError):
            raise ConfigError(f"dataset column {name!r} in {path}: not numeric") from None
        if values.size == 0:
            raise ConfigError(f"dataset column {name!r} in {path}: every row is an empty list")
        x = values.reshape(table.num_rows, -1)
        if not np.isfinite(x).all():
            raise ConfigError(f"dataset column {name!r} in {path}: contains NaN or inf")
        return x
    raise ConfigError(
        f"dataset column {name!r} in {path}: expected a list of numbers per row, got {column.type}"
    )


def _test_mask(table: pa.Table, ds: ParquetData | PairedParquetData) -> np.ndarray:
    """The user's split column (values train/test), or a fixed random split."""
    if ds.split_column:
        split = table.column(ds.split_column).to_pylist()
        bad = sorted({s for s in split if s not in SPLITS}, key=repr)
        if bad:
            raise ConfigError(
                f"dataset.split_column {ds.split_column!r}: values {bad[:3]} not in {SPLITS}"
            )
        return np.array([s == "test" for s in split])
    return _random_test_mask(table.num_rows, ds.test_fraction, derive_seed("user-split"))


def user_arrays(ds: ParquetData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x (N, p) float32, labels (N,) int32 codes, is_test (N,) bool) from a user Parquet."""
    table = _user_table(ds)
    x = _numeric_rows(table, ds.feature_column or ds.image_column, ds.path)
    raw_labels = table.column(ds.label_column).to_pylist()
    if any(v is None for v in raw_labels):
        raise ConfigError(f"dataset.label_column {ds.label_column!r} in {ds.path}: has nulls")
    classes = sorted(set(raw_labels), key=repr)
    code = {c: i for i, c in enumerate(classes)}
    labels = np.array([code[v] for v in raw_labels], dtype=np.int32)
    is_test = _test_mask(table, ds)
    return x, labels, is_test


def _random_test_mask(rows: int, fraction: float, seed: int) -> np.ndarray:
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(rows, generator=gen).numpy()
    mask = np.zeros(rows, dtype=bool)
    mask[order[: max(1, round(fraction * rows))]] = True
    return mask


def user_pairs(ds: PairedParquetData) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x (N, px), y (N, py) float32, is_test (N,) bool) from a user Parquet of pairs."""
    table = _user_table(ds)
    x = _numeric_rows(table, ds.x_column, ds.path)
    y = _numeric_rows(table, ds.y_column, ds.path)
    return x, y, _test_mask(table, ds)


def pair_widths(ds: PairedParquetData) -> tuple[int, int]:
    """The values per row of x and of y."""
    x, y, _ = user_pairs(ds)
    return x.shape[1], y.shape[1]
