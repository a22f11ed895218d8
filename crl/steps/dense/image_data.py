"""Image sources for dense cells, materialised with two augmented views per image and their
geometry into Parquet shards.

Layout: <run>/dense/data/split=train|test|pool/part-00000.parquet, one row per image:
  id (int64), view1, view2 (list<uint8>, c * s * s channel-first pixels, value / 255 in [0, 1]),
  labels1, labels2 (list<int16>, s * s per-pixel class of each view, 0 = background, -1 = none),
  box1, box2 (list<float64> of 4: the crop (x0, y0, x1, y1) in image coordinates),
  flip1, flip2 (bool: horizontal flip after the crop).
"pool" holds the images that supply external negatives; it is disjoint from train and test.
Each shard is a pure function of (images config, views config, run seed, split, shard index).

With `dense.pretrain`, <run>/dense/pretrain/data/part-00000.parquet holds the pretraining images,
disjoint from every split above: id (int64), source_row (int64: the row of a finite source,
digits or user Parquet; -1 for generated shapes, whose own stream "pretrain" no split shares),
image (list<uint8>, c * S * S channel-first pixels at the source's size). Pretraining draws its
views afresh every epoch, so no view is stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F

from crl.core.dense_config import DenseConfig, DigitsImages, ParquetImages, ShapesImages
from crl.core.errors import ConfigError
from crl.kernels.dense import crops, images
from crl.kernels.seeding import generator
from crl.steps.atomic import write_parquet_atomic
from crl.steps.data import DIGITS_ROWS, list_column

SPLITS = ("train", "test", "pool")
GENERATE_CHUNK = 256  # procedural images drawn at once (bounds a shard's memory)


@dataclass(frozen=True)
class ImageShard:
    split: str
    index: int
    start: int  # first image of the split in this shard
    rows: int


def _fraction_sizes(rows: int, test: float, pool: float) -> dict[str, int]:
    n_test, n_pool = max(2, round(test * rows)), max(2, round(pool * rows))
    return {"train": rows - n_test - n_pool, "test": n_test, "pool": n_pool}


LABEL_MAX = 32767  # per-pixel labels are stored as int16


def _numeric_rows(
    table: pa.Table, path: Path, field: str, name: str, dtype: type
) -> list[np.ndarray]:
    """The rows of a list column of numbers; a null row or a column of other values (strings,
    booleans) is a one-line error naming the field."""
    column = table.column(name)
    kind = column.type
    if not (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    ) or not (pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type)):
        raise ConfigError(
            f"config field dense.images.{field}: {path}:{name} is {kind}, expected lists of numbers"
        )
    values = column.to_pylist()
    nulls = [i for i, row in enumerate(values) if row is None]
    if nulls:
        raise ConfigError(
            f"config field dense.images.{field}: {path}:{name} row {nulls[0]} is null "
            f"({len(nulls)} null rows)"
        )
    return [np.asarray(row, dtype=dtype) for row in values]


def _user_images(ds: ParquetImages) -> tuple[np.ndarray, np.ndarray | None, int, int]:
    """The user's images (N, c, s, s) float32 in [0, 1], per-pixel labels (N, s, s) or None."""
    path = Path(ds.path)
    if not path.exists():
        raise ConfigError(f"config field dense.images.path: {path} does not exist")
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise ConfigError(
            f"config field dense.images.path: {path} is not Parquet ({err})"
        ) from None
    for field, name in (("image_column", ds.image_column), ("label_column", ds.label_column)):
        if name is not None and name not in table.column_names:
            raise ConfigError(
                f"config field dense.images.{field}: {path} has no column {name!r} "
                f"(columns: {table.column_names})"
            )
    rows = _numeric_rows(table, path, "image_column", ds.image_column, np.float32)
    widths = sorted({r.size for r in rows})
    width = widths[0] if len(widths) == 1 else -1
    side, channels = (math.isqrt(width // 3), 3) if width > 0 else (0, 1)
    if width <= 0 or side * side * 3 != width:
        side, channels = math.isqrt(max(width, 0)), 1
    if width <= 0 or side * side * channels != width or side < 8:
        raise ConfigError(
            f"config field dense.images.image_column: rows of {path}:{ds.image_column} must all "
            f"hold side^2 or 3 side^2 numbers with side >= 8 (got lengths {widths[:5]})"
        )
    x = np.stack(rows).reshape(-1, channels, side, side)
    if not (np.isfinite(x).all() and x.min() >= 0.0 and x.max() <= 1.0):
        raise ConfigError(
            f"config field dense.images.image_column: {path}:{ds.image_column} has values "
            "outside [0, 1] or not finite"
        )
    labels = None
    if ds.label_column is not None:
        raw = _numeric_rows(table, path, "label_column", ds.label_column, np.float64)
        if any(r.size != side * side for r in raw):
            raise ConfigError(
                f"config field dense.images.label_column: every row must hold {side * side} "
                "per-pixel labels"
            )
        values = np.stack(raw)
        bad = ~np.isfinite(values) | (values != np.round(values)) | (values < -1)
        bad |= values > LABEL_MAX
        if bad.any():
            row = int(np.argwhere(bad)[0][0])
            raise ConfigError(
                f"config field dense.images.label_column: {path}:{ds.label_column} row {row} "
                f"holds {float(values[bad][0])}; labels are integers in [-1, {LABEL_MAX}] "
                "(-1 = unlabelled)"
            )
        labels = values.astype(np.int64).reshape(-1, side, side)
    return x, labels, side, channels


def split_sizes(dense: DenseConfig) -> dict[str, int]:
    """Images per split of the cells, known before any work (user Parquet: read from the
    file); pretraining's rows of a finite source are taken from train (`pretrain_size`)."""
    ds = dense.images
    if isinstance(ds, ShapesImages):
        return {"train": ds.train_size, "test": ds.test_size, "pool": ds.pool_size}
    rows = DIGITS_ROWS if isinstance(ds, DigitsImages) else _user_images(ds)[0].shape[0]
    sizes = _fraction_sizes(rows, ds.test_fraction, ds.pool_fraction)
    sizes["train"] -= _pretrain_rows(dense, rows)
    return sizes


def _pretrain_rows(dense: DenseConfig, rows: int) -> int:
    """Rows of a finite source that pretraining takes (0 without a pretrain section)."""
    return 0 if dense.pretrain is None else round(dense.pretrain.fraction * rows)


def pretrain_size(dense: DenseConfig) -> int:
    """Images of the pretraining split (0 without a pretrain section)."""
    ds = dense.images
    if dense.pretrain is None:
        return 0
    if isinstance(ds, ShapesImages):
        return dense.pretrain.images
    rows = DIGITS_ROWS if isinstance(ds, DigitsImages) else _user_images(ds)[0].shape[0]
    return _pretrain_rows(dense, rows)


def channels(dense: DenseConfig) -> int:
    ds = dense.images
    if isinstance(ds, ShapesImages):
        return 3
    if isinstance(ds, DigitsImages):
        return 1
    return _user_images(ds)[3]


def shard_plan(dense: DenseConfig, sizes: dict[str, int]) -> list[ImageShard]:
    """`images.shards` shards per split, none empty."""
    plan = []
    for split in SPLITS:
        per = math.ceil(sizes[split] / dense.images.shards)
        for index in range(dense.images.shards):
            start = index * per
            if (rows := min(per, sizes[split] - start)) > 0:
                plan.append(ImageShard(split, index, start, rows))
    return plan


def shard_path(data_dir: Path, spec: ImageShard) -> Path:
    return data_dir / f"split={spec.split}" / f"part-{spec.index:05d}.parquet"


def split_rows(rows: int, dense: DenseConfig, seed: int) -> dict[str, np.ndarray]:
    """Row indices of each split of a finite source (digits, user images): one seeded shuffle
    cut into test, pool, pretrain (empty without a pretrain section) and train, so the splits
    are disjoint and those of a run without pretraining are unchanged but for train."""
    sizes = split_sizes(dense)
    order = torch.randperm(rows, generator=generator(seed, "dense-split")).numpy()
    cuts = np.cumsum([sizes["test"], sizes["pool"], _pretrain_rows(dense, rows)])
    return {
        "test": order[: cuts[0]],
        "pool": order[cuts[0] : cuts[1]],
        "pretrain": order[cuts[1] : cuts[2]],
        "train": order[cuts[2] :],
    }


def _source_rows(dense: DenseConfig, seed: int, spec: ImageShard) -> np.ndarray:
    """The rows of a finite source that one shard holds."""
    ds = dense.images
    rows = DIGITS_ROWS if isinstance(ds, DigitsImages) else _user_images(ds)[0].shape[0]
    return split_rows(rows, dense, seed)[spec.split][spec.start : spec.start + spec.rows]


def _digits(dense: DenseConfig, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Digits upscaled to size x size (bilinear); label digit + 1 where ink > half its max."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.from_numpy(bunch.data[rows].astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    size = dense.images.size
    up = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False).clamp(0, 1)
    peak = up.amax(dim=(1, 2, 3), keepdim=True).clamp_min(1e-6)
    digit = torch.from_numpy(bunch.target[rows].astype(np.int64))[:, None, None]
    labels = torch.where(up[:, 0] > 0.5 * peak[:, 0], digit + 1, torch.zeros_like(digit))
    return up, labels


def source_images(
    dense: DenseConfig, seed: int, spec: ImageShard
) -> tuple[torch.Tensor, torch.Tensor]:
    """The images of one shard and their per-pixel labels. Shape: (rows, c, S, S), (rows, S, S)."""
    ds = dense.images
    if isinstance(ds, ShapesImages):
        parts = []
        for start in range(0, spec.rows, GENERATE_CHUNK):
            gen = generator(seed, "shapes", spec.split, spec.index, start)
            count = min(GENERATE_CHUNK, spec.rows - start)
            parts.append(images.generate(count, ds.size, ds.classes, gen, tuple(ds.objects)))
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
    if isinstance(ds, DigitsImages):
        return _digits(dense, _source_rows(dense, seed, spec))
    x, labels, side, _ = _user_images(ds)
    rows = _source_rows(dense, seed, spec)
    lab = (
        torch.from_numpy(labels[rows])
        if labels is not None
        else torch.full((len(rows), side, side), -1, dtype=torch.int64)
    )
    return torch.from_numpy(x[rows]), lab


def _bytes(x: torch.Tensor) -> pa.Array:
    """(N, ...) values in [0, 1] -> N rows of uint8 (round(255 x))."""
    return list_column((x * 255.0).round().clamp(0, 255).numpy(), np.uint8)


def make_image_shard(dense: DenseConfig, seed: int, spec: ImageShard) -> pa.Table:
    """The rows of one image shard: both views of every image with their geometry."""
    pixels, labels = source_images(dense, seed, spec)
    v = dense.views
    gen = generator(seed, "views", spec.split, spec.index)
    first, second = crops.two_views(
        pixels, labels, v.size, gen, tuple(v.scale), tuple(v.ratio), v.flip
    )
    return pa.table(
        {
            "id": np.arange(spec.start, spec.start + spec.rows, dtype=np.int64),
            "view1": _bytes(first.images),
            "view2": _bytes(second.images),
            "labels1": list_column(first.labels.numpy(), np.int16),
            "labels2": list_column(second.labels.numpy(), np.int16),
            "box1": list_column(first.boxes.numpy(), np.float64),
            "box2": list_column(second.boxes.numpy(), np.float64),
            "flip1": pa.array(first.flips.numpy()),
            "flip2": pa.array(second.flips.numpy()),
        }
    )


@dataclass(frozen=True)
class ImageShardJob:
    dense: DenseConfig
    seed: int
    data_dir: Path
    staging: Path


def pretrain_plan(dense: DenseConfig) -> list[ImageShard]:
    """The pretraining split's shards (`images.shards` of them, none empty)."""
    size = pretrain_size(dense)
    per = math.ceil(size / dense.images.shards) if size else 0
    return [
        ImageShard("pretrain", i, i * per, min(per, size - i * per))
        for i in range(dense.images.shards)
        if per and size - i * per > 0
    ]


def pretrain_shard_path(pretrain_dir: Path, spec: ImageShard) -> Path:
    return pretrain_dir / f"part-{spec.index:05d}.parquet"


def make_pretrain_shard(dense: DenseConfig, seed: int, spec: ImageShard) -> pa.Table:
    """The rows of one pretraining shard: the source images and where they came from."""
    pixels, _ = source_images(dense, seed, spec)
    generated = isinstance(dense.images, ShapesImages)
    rows = np.full(spec.rows, -1) if generated else _source_rows(dense, seed, spec)
    return pa.table(
        {
            "id": np.arange(spec.start, spec.start + spec.rows, dtype=np.int64),
            "source_row": np.asarray(rows, dtype=np.int64),
            "image": _bytes(pixels.flatten(1)),
        }
    )


def write_pretrain_shard(spec: ImageShard, job: ImageShardJob) -> str:
    """The step of the pretraining split: one shard of source images, written atomically."""
    path = pretrain_shard_path(job.data_dir, spec)
    write_parquet_atomic(make_pretrain_shard(job.dense, job.seed, spec), path, job.staging)
    return str(path)


def write_image_shard(spec: ImageShard, job: ImageShardJob) -> str:
    """The step of the dense materialize stage: one image shard, written atomically."""
    path = shard_path(job.data_dir, spec)
    write_parquet_atomic(make_image_shard(job.dense, job.seed, spec), path, job.staging)
    return str(path)
