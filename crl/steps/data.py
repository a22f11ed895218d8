"""Dataset sources materialised into hive-partitioned Parquet shards, and read back as arrays.

Layout: <run>/data/split=train|test/part-00000.parquet with columns
  id (int64), label (int32, latent: used by the sampler and downstream metrics only),
  x (list<float32>, the input), and for augmented positives view_a, view_b (two augmented views);
user pairs (paired_parquet) have id, x and y (two modalities) and no label.
Each shard is a pure function of (dataset config, run seed, split, shard index).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from crl.core.config import DigitsData, GlyphsData, PairedParquetData, ParquetData, SyntheticData
from crl.core.pretrain_config import PretrainConfig
from crl.kernels import latent
from crl.kernels.glyphs import render_glyphs
from crl.kernels.seeding import generator
from crl.steps.atomic import write_parquet_atomic
from crl.steps.user_data import SPLITS, user_arrays, user_pairs

Source = SyntheticData | DigitsData | GlyphsData | ParquetData | PairedParquetData
Finite = DigitsData | GlyphsData | ParquetData  # sources of a fixed set of rows
DIGITS_ROWS = 1797  # sklearn.datasets.load_digits


@dataclass(frozen=True)
class ShardSpec:
    split: str
    index: int
    start: int  # first row of the split in this shard
    rows: int


@dataclass(frozen=True)
class Split:
    """One split read back into memory.

    Shape: ids (N,), labels (N,), x (N, p); view_a, view_b (N, p) or None.
    """

    ids: np.ndarray
    labels: np.ndarray
    x: np.ndarray
    view_a: np.ndarray | None
    view_b: np.ndarray | None


def synthetic_model(ds: SyntheticData, seed: int) -> latent.LatentClassModel:
    return latent.LatentClassModel.synthetic(
        classes=ds.classes,
        dim=ds.dim,
        separation=ds.separation,
        noise=ds.noise,
        prior=ds.prior,
        zipf_exponent=ds.zipf_exponent,
        generator=generator(seed, "synthetic-model"),
    )


def split_sizes(ds: Source, pretrain: float | None = None) -> dict[str, int]:
    """Rows per split, known before any work (user Parquet: read from the file). `pretrain`:
    the share of the train rows that the pretraining split takes (encoder.pretrain.fraction)."""
    if isinstance(ds, PairedParquetData):
        is_test = user_pairs(ds)[2]
        return {"train": int((~is_test).sum()), "test": int(is_test.sum())}
    if isinstance(ds, SyntheticData):
        return {"train": ds.train_size, "test": ds.test_size}
    if isinstance(ds, DigitsData):
        test = max(1, round(ds.test_fraction * DIGITS_ROWS))
        train = DIGITS_ROWS - test
    elif isinstance(ds, GlyphsData):
        test, train = ds.test_size, ds.train_size
    else:
        _, _, is_test = user_arrays(ds)
        test, train = int(is_test.sum()), int((~is_test).sum())
    return {"train": train - pretrain_rows(train, pretrain), "test": test}


def pretrain_rows(train: int, fraction: float | None) -> int:
    """Rows the pretraining split takes from a train split of `train` rows (0 without one);
    at least one, and one is always left to train."""
    if fraction is None:
        return 0
    return min(max(1, round(fraction * train)), train - 1)


def shard_plan(ds: Source, sizes: dict[str, int]) -> list[ShardSpec]:
    """Every shard of both splits: `ds.shards` per split, none empty."""
    plan = []
    for split in SPLITS:
        per = math.ceil(sizes[split] / ds.shards)
        for index in range(ds.shards):
            start = index * per
            rows = min(per, sizes[split] - start)
            if rows > 0:
                plan.append(ShardSpec(split, index, start, rows))
    return plan


def shard_path(data_dir: Path, spec: ShardSpec) -> Path:
    """data/split=<split>/part-<index>.parquet."""
    return data_dir / f"split={spec.split}" / f"part-{spec.index:05d}.parquet"


def input_width(ds: SyntheticData | Finite) -> int:
    """Values per input row, known before any shard is written."""
    if isinstance(ds, SyntheticData):
        return ds.dim
    if isinstance(ds, DigitsData):
        return 64
    if isinstance(ds, GlyphsData):
        return ds.side * ds.side
    return int(user_arrays(ds)[0].shape[1])


def source_rows(ds: Finite, seed: int, pretrain: float | None = None) -> dict[str, np.ndarray]:
    """The rows of a finite source (digits: scikit-learn's order; glyphs: the test rows first,
    then train, in rendering order; user Parquet: the file's) that
    each split holds, in shard order: test, train and, with `pretrain` (the share of the train
    rows it takes, drawn by a seeded shuffle), the pretraining split. The splits are disjoint,
    and test and the order of train are those of a run without pretraining."""
    return _split_rows(ds, seed, pretrain, _test_mask(ds))


def _test_mask(ds: Finite) -> np.ndarray | None:
    """Which of a finite source's rows are test rows (None for digits: a seeded draw)."""
    if isinstance(ds, DigitsData):
        return None
    if isinstance(ds, GlyphsData):
        return np.arange(ds.test_size + ds.train_size) < ds.test_size
    return user_arrays(ds)[2]


def _split_rows(
    ds: Finite, seed: int, pretrain: float | None, is_test: np.ndarray | None
) -> dict[str, np.ndarray]:
    """`source_rows`, given a user file's test mask (None for digits)."""
    if is_test is None:
        order = torch.randperm(DIGITS_ROWS, generator=generator(seed, "digits-split")).numpy()
        test = split_sizes(ds)["test"]
        rows = {"test": order[:test], "train": order[test:]}
    else:
        rows = {"test": np.flatnonzero(is_test), "train": np.flatnonzero(~is_test)}
    taken = pretrain_rows(len(rows["train"]), pretrain)
    if taken:
        shuffle = torch.randperm(len(rows["train"]), generator=generator(seed, "pretrain-rows"))
        chosen = np.zeros(len(rows["train"]), dtype=bool)
        chosen[shuffle[:taken].numpy()] = True
        rows["pretrain"] = rows["train"][chosen]
        rows["train"] = rows["train"][~chosen]
    return rows


def _finite_source(
    ds: Finite, seed: int, pretrain: float | None
) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Every row of a finite source (x, labels) and the rows of each split, the file read
    once."""
    if isinstance(ds, ParquetData):
        x, labels, is_test = user_arrays(ds)
        return x, labels, _split_rows(ds, seed, pretrain, is_test)
    x, labels = source_arrays(ds, seed)
    return x, labels, _split_rows(ds, seed, pretrain, _test_mask(ds))


def source_arrays(ds: Finite, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every row of a finite source: x (N, p) float32 (digits and glyphs: pixel intensities in
    [0, 1]) and labels (N,) int32 codes. Glyphs are rendered from the run `seed`."""
    if isinstance(ds, DigitsData):
        from sklearn.datasets import load_digits

        bunch = load_digits()
        return bunch.data.astype(np.float32) / 16.0, bunch.target.astype(np.int32)
    if isinstance(ds, GlyphsData):
        rows = ds.test_size + ds.train_size
        return _glyphs(rows, ds.side, ds.classes, ds.clutter, ds.noise, seed)
    x, labels, _ = user_arrays(ds)
    return x, labels


@functools.lru_cache(maxsize=2)
def _glyphs(
    rows: int, side: int, classes: int, clutter: int, noise: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """render_glyphs, kept for the process's next shard of the same source (read-only)."""
    x, labels = render_glyphs(rows, side, classes, clutter, noise, seed)
    x.setflags(write=False)
    labels.setflags(write=False)
    return x, labels


def augment_digits(images: np.ndarray, gen: torch.Generator) -> np.ndarray:
    """A random view of 8x8 digits (pixel intensities in [0, 1]): `augment_square` on [0, 1].

    Shape: images (N, 64) -> (N, 64).
    """
    return augment_square(images, gen, 0.0, 1.0)


def augment_square(images: np.ndarray, gen: torch.Generator, low: float, high: float) -> np.ndarray:
    """A random view of square images whose pixels lie in [low, high]: shift by up to one pixel
    each way (filled with `low`) plus noise of 0.05 (high - low), clamped to [low, high].

    Shape: images (N, side * side) -> (N, side * side) float32.
    """
    n, width = images.shape
    side = math.isqrt(width)
    grid = torch.from_numpy(np.ascontiguousarray(images, dtype=np.float32)).reshape(n, side, side)
    padded = torch.nn.functional.pad(grid, (1, 1, 1, 1), value=low)
    shifts = torch.randint(0, 3, (n, 2), generator=gen)
    rows = (shifts[:, 0, None] + torch.arange(side)).reshape(n, side, 1)
    cols = (shifts[:, 1, None] + torch.arange(side)).reshape(n, 1, side)
    view = padded[torch.arange(n)[:, None, None], rows, cols]
    view = view + 0.05 * (high - low) * torch.randn(view.shape, generator=gen)
    return view.clamp(low, high).reshape(n, width).numpy().astype(np.float32)


def make_shard(ds: Source, seed: int, spec: ShardSpec, pretrain: float | None = None) -> pa.Table:
    """The rows of one shard as an Arrow table; a pure function of its arguments (`pretrain`:
    the share of the train rows the pretraining split takes, see `source_rows`)."""
    gen = generator(seed, "shard", spec.split, spec.index)
    ids = np.arange(spec.start, spec.start + spec.rows, dtype=np.int64)
    if isinstance(ds, PairedParquetData):  # pairs: id, x, y and no label
        x_all, y_all, is_test = user_pairs(ds)
        rows = slice(spec.start, spec.start + spec.rows)
        mask = is_test if spec.split == "test" else ~is_test
        return pa.table(
            {"id": ids, "x": list_column(x_all[mask][rows]), "y": list_column(y_all[mask][rows])}
        )
    views = None
    if isinstance(ds, SyntheticData):
        model = synthetic_model(ds, seed)
        classes = model.sample_classes(spec.rows, gen)
        x = model.sample_inputs(classes, gen).to(torch.float32).numpy()
        labels = classes.numpy().astype(np.int32)
    else:
        x_all, y_all, splits = _finite_source(ds, seed, pretrain)
        rows = splits[spec.split][spec.start : spec.start + spec.rows]
        x, labels = x_all[rows], y_all[rows]
        if isinstance(ds, DigitsData) and ds.positives == "augmented":
            views = (augment_digits(x, gen), augment_digits(x, gen))
    columns = {"id": ids, "label": labels.astype(np.int32), "x": list_column(x)}
    if views is not None:
        columns["view_a"] = list_column(views[0])
        columns["view_b"] = list_column(views[1])
    return pa.table(columns)


@dataclass(frozen=True)
class ShardJob:
    """What every shard of a run shares: the dataset, the run seed, where shards go, and the
    share of the train rows the pretraining split takes (encoder.pretrain.fraction)."""

    dataset: Source
    seed: int
    data_dir: Path
    staging: Path
    pretrain: float | None = None


def write_shard(spec: ShardSpec, job: ShardJob) -> str:
    """The step of the materialize stage: make one shard and write it atomically."""
    path = shard_path(job.data_dir, spec)
    shard = make_shard(job.dataset, job.seed, spec, job.pretrain)
    write_parquet_atomic(shard, path, job.staging)
    return str(path)


def pretrain_count(ds: SyntheticData | Finite, p: PretrainConfig) -> int:
    """Rows of the pretraining split: `p.images` draws of the synthetic source, or `p.fraction`
    of a finite source's train rows."""
    if isinstance(ds, SyntheticData):
        return p.images
    return pretrain_rows(split_sizes(ds)["train"], p.fraction)


def pretrain_inputs(
    ds: SyntheticData | Finite, seed: int, p: PretrainConfig
) -> tuple[np.ndarray, np.ndarray]:
    """The pretraining split: its rows in the source (n,) and their inputs (n, p) float32. A
    finite source gives `p.fraction` of its train rows (`source_rows`); the synthetic source
    draws `p.images` rows from a stream of their own, which no shard draws from (row i: the
    i-th draw)."""
    if isinstance(ds, SyntheticData):
        gen = generator(seed, "pretrain-draws")
        model = synthetic_model(ds, seed)
        x = model.sample_inputs(model.sample_classes(p.images, gen), gen)
        return np.arange(p.images), x.to(torch.float32).numpy()
    x_all, _, splits = _finite_source(ds, seed, p.fraction)
    return splits["pretrain"], x_all[splits["pretrain"]]


def make_pretrain_rows(ds: SyntheticData | Finite, seed: int, p: PretrainConfig) -> pa.Table:
    """The pretraining split as a table: id, source_row (its row in the source; synthetic: its
    draw) and x (no label: pretraining never sees one)."""
    rows, x = pretrain_inputs(ds, seed, p)
    return pa.table(
        {
            "id": np.arange(len(rows), dtype=np.int64),
            "source_row": rows.astype(np.int64),
            "x": list_column(x),
        }
    )


def list_column(x: np.ndarray, dtype: type = np.float32) -> pa.Array:
    """An (N, p) array (N rows, any trailing shape flattened) as a fixed-size-list column of N
    rows of `dtype`."""
    x = np.ascontiguousarray(x, dtype=dtype)
    x = x.reshape(len(x), -1) if x.ndim > 2 else x
    return pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])


def list_to_numpy(
    column: pa.ChunkedArray | pa.Array, dtype: type | None = np.float32
) -> np.ndarray:
    """A fixed-size-list column (N rows of p values) as an (N, p) array of `dtype` (None: the
    column's own)."""
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    width = array.type.list_size
    return np.asarray(array.flatten().to_numpy(zero_copy_only=False), dtype=dtype).reshape(
        -1, width
    )


READ_BATCH_ROWS = 65536  # rows of one record batch while a split is read
READ_BUFFER_BYTES = 1 << 22  # bytes of a shard read at a time


def _shards(root: Path, split: str) -> list[Path]:
    files = sorted((root / f"split={split}").glob("part-*.parquet"))
    if not files:
        raise FileNotFoundError(f"{root / f'split={split}'}: no shards")
    return files


def _read_lists(
    files: list[Path], names: list[str]
) -> tuple[np.ndarray, np.ndarray | None, dict[str, np.ndarray]]:
    """Ids and labels (None without a label column) in id order, and each fixed-size-list
    column of `names` as an (N, p) float32 array in id order, read record batch by record batch
    into arrays allocated once: the peak memory is the arrays plus one batch."""
    schema = pq.read_schema(files[0])
    key_names = ["id", *(["label"] if "label" in schema.names else [])]
    keys = pa.concat_tables([pq.read_table(f, columns=key_names) for f in files])
    ids = keys.column("id").to_numpy()
    order = np.argsort(ids, kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(len(order))  # row r of the shards goes to position[r]
    arrays = {
        name: np.empty((len(ids), schema.field(name).type.list_size), dtype=np.float32)
        for name in names
    }
    offset = 0
    for f in files:
        shard = pq.ParquetFile(f, buffer_size=READ_BUFFER_BYTES)  # column chunks read in pieces
        for batch in shard.iter_batches(batch_size=READ_BATCH_ROWS, columns=names):
            rows = position[offset : offset + batch.num_rows]
            for name in names:
                arrays[name][rows] = list_to_numpy(batch.column(name))
            offset += batch.num_rows
    pa.default_memory_pool().release_unused()  # Arrow's allocator keeps freed batches otherwise
    labels = keys.column("label").to_numpy()[order] if "label" in key_names else None
    return ids[order], labels, arrays


def read_pairs(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The (x, y) pairs of `split` under data/, ordered by id. Shape: (N, px), (N, py)."""
    _, _, arrays = _read_lists(_shards(root, split), ["x", "y"])
    return arrays["x"], arrays["y"]


def read_split(root: Path, split: str, column: str = "x") -> Split:
    """Read every shard of `split` under `root` (data/ or features/), ordered by id."""
    files = _shards(root, split)
    views = ["view_a", "view_b"] if "view_a" in pq.read_schema(files[0]).names else []
    ids, labels, arrays = _read_lists(files, list(dict.fromkeys([column, *views])))
    if labels is None:
        raise ValueError(f"{files[0]}: no label column")
    return Split(
        ids=ids,
        labels=labels,
        x=arrays[column],
        view_a=arrays.get("view_a"),
        view_b=arrays.get("view_b"),
    )
