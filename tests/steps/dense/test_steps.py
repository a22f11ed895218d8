"""The dense steps without Ray: image shards, the backbone, features read back, draws, one cell."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from crl.core.config import Config, validate
from crl.core.errors import ConfigError
from crl.kernels.dense import crops
from crl.kernels.encoders import RandomConv
from crl.steps.dense import image_data
from crl.steps.dense.cell import DenseKey, dense_keys, draw_train, run_dense_cell
from crl.steps.dense.checks import check_dense
from crl.steps.dense.embed import DenseEmbedder, cell_labels
from crl.steps.dense.features import (
    argmax_match,
    draw_negatives,
    load_dense_features,
    pool_disjoint,
    pool_draw,
)
from crl.steps.keys import draws_id
from tests.conftest import TIMING
from tests.steps.helpers import naive_dense_loss

DENSE = {
    "images": {
        "kind": "shapes",
        "size": 24,
        "classes": 3,
        "train_size": 40,
        "test_size": 12,
        "pool_size": 60,
        "shards": 2,
    },
    "views": {"size": 16},
    "backbone": {"channels": 8, "layers": 2, "downsample": 1, "grid": 3},
    "head": {"d": 4, "R": 1.0, "tol": 1e-5, "max_iter": 200},
    "grid": {
        "regimes": ["scrl", "sscrl"],
        "negatives": ["own", "ext"],
        "correspondence": ["geometric", "argmax"],
        "lambdas": [1.0, 0.5],
        "m": [3],
        "n": [8],
    },
    "eval": {"temperature": 1.0, "test_images": 12, "mi_images": 12},
}


def dense_config(**dense: dict) -> Config:
    tree = {k: dict(v) if isinstance(v, dict) else v for k, v in DENSE.items()}
    for key, value in dense.items():  # a new images kind replaces the section
        fresh = ("kind" in value and key == "images") or key not in tree
        tree[key] = value if fresh else {**tree[key], **value}
    return validate({"name": "dense-tiny", "seed": 5, "dense": tree})


def build(cfg: Config, root: Path) -> Path:
    """Materialise and embed every image shard of cfg under root (the stages, without Ray)."""
    dense = cfg.dense
    job = image_data.ImageShardJob(dense, cfg.seed, root / "data", root / ".staging")
    for spec in image_data.shard_plan(dense, image_data.split_sizes(dense)):
        image_data.write_image_shard(spec, job)
    embedder = DenseEmbedder(
        dense, image_data.channels(dense), root / "data", root / "features", root / ".staging"
    )
    for shard in sorted((root / "data").glob("split=*/part-*.parquet")):
        embedder(shard)
    return root / "features"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    cfg = dense_config()
    root = tmp_path_factory.mktemp("dense")
    features_dir = build(cfg, root)
    return cfg, root, load_dense_features(features_dir, cfg.dense.backbone.grid**2)


def _table(root: Path, kind: str, split: str) -> pa.Table:
    files = sorted((root / kind / f"split={split}").glob("part-*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).sort_by("id")


def _rows(table: pa.Table, column: str) -> np.ndarray:
    return np.array(table.column(column).to_pylist())


# --- image shards -------------------------------------------------------------------------------


def test_image_shards_are_pure_and_hold_both_views(run) -> None:
    cfg, root, _ = run
    sizes = image_data.split_sizes(cfg.dense)
    assert sizes == {"train": 40, "test": 12, "pool": 60}
    spec = image_data.shard_plan(cfg.dense, sizes)[1]
    again = image_data.make_image_shard(cfg.dense, cfg.seed, spec)
    assert again.equals(pq.read_table(image_data.shard_path(root / "data", spec)))
    other = image_data.make_image_shard(cfg.dense, cfg.seed + 1, spec)
    assert not other.column("view1").equals(again.column("view1"))
    for split, rows in sizes.items():
        table = _table(root, "data", split)
        assert _rows(table, "id").tolist() == list(range(rows))
        s = cfg.dense.views.size
        assert _rows(table, "view1").shape == (rows, 3 * s * s)
        labels = _rows(table, "labels1")
        assert labels.shape == (rows, s * s)
        assert labels.min() >= 0 and labels.max() <= cfg.dense.images.classes
        boxes = _rows(table, "box1")
        assert (boxes[:, :2] >= 0).all() and (boxes[:, 2:] <= cfg.dense.images.size).all()
        assert (boxes[:, 2:] > boxes[:, :2]).all()


def test_digits_pixels_are_labelled_with_their_digit() -> None:
    from sklearn.datasets import load_digits

    cfg = validate(
        {
            "name": "digits",
            "seed": 1,
            "dense": {**DENSE, "images": {"kind": "digits", "size": 16, "shards": 3}},
        }
    )
    sizes = image_data.split_sizes(cfg.dense)
    assert sum(sizes.values()) == 1797
    spec = image_data.shard_plan(cfg.dense, sizes)[0]
    pixels, labels = image_data.source_images(cfg.dense, cfg.seed, spec)
    assert pixels.shape == (spec.rows, 1, 16, 16)
    order = image_data.split_rows(1797, cfg.dense, cfg.seed)[spec.split][: spec.rows]
    digit = load_digits().target[order]
    for i in range(spec.rows):
        values = set(labels[i].unique().tolist())
        assert values == {0, int(digit[i]) + 1}
        ink = pixels[i, 0] > 0.5 * pixels[i, 0].max()
        assert torch.equal(labels[i] > 0, ink)


def test_user_parquet_images_are_validated_naming_the_field(tmp_path: Path) -> None:
    good = tmp_path / "good.parquet"
    gen = np.random.default_rng(0)
    images = gen.uniform(size=(30, 3 * 12 * 12)).astype(np.float32)
    labels = gen.integers(0, 3, size=(30, 144))
    pq.write_table(pa.table({"pixels": list(images), "seg": list(labels)}), good)
    images_cfg = {"kind": "parquet", "path": str(good), "image_column": "pixels"}
    cfg = dense_config(images={**images_cfg, "label_column": "seg"}, grid={"n": [4]})
    assert image_data.split_sizes(cfg.dense) == {"train": 15, "test": 6, "pool": 9}
    assert image_data.channels(cfg.dense) == 3
    spec = image_data.shard_plan(cfg.dense, image_data.split_sizes(cfg.dense))[0]
    x, y = image_data.source_images(cfg.dense, cfg.seed, spec)
    assert x.shape == (spec.rows, 3, 12, 12) and y.shape == (spec.rows, 12, 12)

    bad_values = tmp_path / "bad_values.parquet"
    pq.write_table(pa.table({"pixels": list(images * 2)}), bad_values)
    short = tmp_path / "short.parquet"
    pq.write_table(pa.table({"pixels": [np.zeros(50, np.float32)] * 30}), short)
    not_parquet = tmp_path / "notes.parquet"
    not_parquet.write_text("not parquet")
    cases = [
        ({"path": str(tmp_path / "missing.parquet")}, "dense.images.path"),
        ({"path": str(not_parquet)}, "dense.images.path"),
        ({"image_column": "image"}, "dense.images.image_column"),
        ({"label_column": "nope"}, "dense.images.label_column"),
        ({"path": str(bad_values)}, "outside [0, 1]"),
        ({"path": str(short)}, "side^2"),
    ]
    for change, message in cases:
        cfg = dense_config(images={**images_cfg, **change}, grid={"n": [4]})
        with pytest.raises(ConfigError, match=re.escape(message)):
            check_dense(cfg.dense)


def test_ragged_null_and_non_integer_rows_are_one_line_errors(tmp_path: Path) -> None:
    """The probe: ragged or null image rows gave `isqrt() argument must be nonnegative`, a NaN
    label a raw traceback; float labels were truncated, 2^40 wrapped to int16, strings parsed."""
    gen = np.random.default_rng(1)
    images = [r for r in gen.uniform(size=(30, 144)).astype(np.float32)]
    labels = [r for r in gen.integers(0, 3, size=(30, 144)).astype(np.float64)]

    def write(name: str, pixels: list, seg: list | None = None, **types: pa.DataType) -> str:
        columns = {"pixels": pa.array(pixels, types.get("pixels"))}
        if seg is not None:
            columns["seg"] = pa.array(seg, types.get("seg"))
        pq.write_table(pa.table(columns), tmp_path / name)
        return str(tmp_path / name)

    def one(index: int, value: float) -> list:
        out = [r.copy() for r in labels]
        out[index][7] = value
        return out

    cases = [
        (write("ragged.parquet", [*images[:29], images[29][:100]]), None, "got lengths [100, 144]"),
        (write("null.parquet", [*images[:29], None]), None, "row 29 is null (1 null rows)"),
        (write("bools.parquet", [[True] * 144] * 30), None, "expected lists of numbers"),
        (write("nan.parquet", images, one(3, np.nan)), "seg", "row 3 holds nan"),
        (write("half.parquet", images, one(4, 1.5)), "seg", "row 4 holds 1.5"),
        (write("huge.parquet", images, one(5, 2.0**40)), "seg", "row 5 holds 1099511627776.0"),
        (write("low.parquet", images, one(6, -2)), "seg", "row 6 holds -2.0"),
        (write("null_seg.parquet", images, [*labels[:29], None]), "seg", "row 29 is null"),
        (write("text.parquet", images, [["a"] * 144] * 30), "seg", "expected lists of numbers"),
    ]
    for path, label_column, message in cases:
        images_cfg = {"kind": "parquet", "path": path, "image_column": "pixels"}
        cfg = dense_config(images={**images_cfg, "label_column": label_column}, grid={"n": [4]})
        with pytest.raises(ConfigError, match=re.escape(message)) as raised:
            check_dense(cfg.dense)
        assert len(str(raised.value).splitlines()) == 1
    path = write("fine.parquet", images, one(2, -1))  # -1 is "unlabelled"
    images_cfg = {"kind": "parquet", "path": path, "image_column": "pixels", "label_column": "seg"}
    check_dense(dense_config(images=images_cfg, grid={"n": [4]}).dense)


def test_dense_report_without_pixel_labels(tmp_path: Path) -> None:
    """The probe: images without labels (documented as optional) crashed the report after the
    cells and tables were written ("Data cannot be log-scaled")."""
    from crl.steps.dense import report as report_dense

    rows = [
        {
            "regime": "scrl",
            "negatives": "own",
            "correspondence": "geometric",
            "lam": 1.0,
            "m": m,
            "n": 8,
            "dense_probe_accuracy_mean": None,
            "dense_probe_majority_mean": None,
            "correspondence_top1_mean": 0.1 * m,
        }
        for m in (2, 4)
    ]
    summary = pl.DataFrame(
        rows,
        schema_overrides={
            "dense_probe_accuracy_mean": pl.Float64,
            "dense_probe_majority_mean": pl.Float64,
        },
    )
    saved = []

    def save(fig, path: Path) -> None:
        fig.savefig(path)
        saved.append(path)

    report_dense.plot_downstream(summary, tmp_path / "downstream.png", save)
    assert saved == [tmp_path / "downstream.png"] and saved[0].stat().st_size > 1000


def test_config_errors_name_the_dense_field() -> None:
    with pytest.raises(ConfigError, match=r"dense\.grid\.n"):
        check_dense(dense_config(grid={"n": [41]}).dense)
    with pytest.raises(ConfigError, match=r"dense\.backbone\.grid"):
        check_dense(dense_config(backbone={"grid": 9}).dense)  # 8 x 8 feature map
    with pytest.raises(ConfigError, match=r"dense\.backbone"):
        check_dense(dense_config(backbone={"kind": "module", "module": "no_such_pkg:net"}).dense)
    with pytest.raises(ConfigError, match=r"dense\.images\.shards"):
        check_dense(dense_config(images={"shards": 13}).dense)
    for bad, field in [
        ({"grid": {"m": []}}, "dense.grid.m"),
        ({"grid": {"lambdas": [1.5]}}, "dense.grid.lambdas"),
        ({"views": {"scale": [0.5, 0.2]}}, "dense.views.scale"),
        ({"images": {"colour": 1}}, "dense.images.colour"),
        ({"backbone": {"kind": "module"}}, "dense.backbone"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(field)):
            dense_config(**bad)
    with pytest.raises(ConfigError, match="grid"):
        validate({"name": "x", "seed": 0})


BACKBONES = "tests.steps.dense.backbones"


def _module(spec: str, **kwargs) -> Config:
    return dense_config(backbone={"kind": "module", "module": spec, "module_kwargs": kwargs})


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("os:system", "builtin_function_or_method, not a subclass of torch.nn.Module"),
        ("sys:exit", "not a subclass of torch.nn.Module"),
        (f"{BACKBONES}:make_pool_net", "a function, not a subclass of torch.nn.Module"),
        ("collections:OrderedDict", "class OrderedDict, not a subclass of torch.nn.Module"),
        ("no_such_pkg:Net", "cannot be imported"),
        (f"{BACKBONES}:Absent", "cannot be imported"),
    ],
)
def test_a_module_backbone_must_name_a_network_class_nothing_else_is_called(
    spec: str, words: str, tmp_path: Path
) -> None:
    """The probe: `module: os:system` ran a shell command during validation. Only a subclass of
    torch.nn.Module is accepted, checked before anything is called."""
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match=re.escape(words)) as raised:
        check_dense(_module(spec, command=f"touch {marker}").dense)
    assert str(raised.value).startswith("config field dense.backbone: backbone.module")
    assert not marker.exists()


def test_a_module_backbone_that_exits_or_outputs_nan_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"ExitNet\(\*\*module_kwargs\) raised SystemExit"):
        check_dense(_module(f"{BACKBONES}:ExitNet").dense)
    with pytest.raises(ConfigError, match=r"NanNet gives non-finite features"):
        check_dense(_module(f"{BACKBONES}:NanNet").dense)
    with pytest.raises(ConfigError, match=r"unexpected keyword argument 'depth'"):
        check_dense(_module(f"{BACKBONES}:PoolNet", depth=3).dense)
    check_dense(_module(f"{BACKBONES}:PoolNet", width=5).dense)  # a network class is accepted


def test_a_feature_map_smaller_than_the_grid_or_a_cell_beyond_memory_is_refused() -> None:
    """The probe: a module with a 2 x 2 map and grid 8 was accepted (random_conv's is refused);
    m = 1e9 was not refused up front."""
    small = dense_config(
        backbone={"kind": "module", "module": f"{BACKBONES}:SmallMapNet", "grid": 8}
    )
    with pytest.raises(ConfigError, match=r"8 x 8 cells from the 2 x 2 feature map"):
        check_dense(small.dense)
    with pytest.raises(ConfigError, match=r"dense\.grid\.m: a cell with n=\d+, m=1000000000"):
        check_dense(dense_config(grid={"m": [1_000_000_000]}).dense)


def test_the_embed_step_refuses_non_finite_features_naming_the_backbone(tmp_path: Path) -> None:
    cfg = _module(f"{BACKBONES}:NanNet")
    dense = cfg.dense
    job = image_data.ImageShardJob(dense, cfg.seed, tmp_path / "data", tmp_path / ".staging")
    spec = image_data.shard_plan(dense, image_data.split_sizes(dense))[0]
    image_data.write_image_shard(spec, job)
    embedder = DenseEmbedder(
        dense, image_data.channels(dense), tmp_path / "data", tmp_path / "f", tmp_path / ".staging"
    )
    shard = next((tmp_path / "data").glob("split=*/part-*.parquet"))
    with pytest.raises(ValueError, match=f"{BACKBONES}:NanNet.*non-finite features"):
        embedder(shard)


def test_dense_keys_cover_the_grid_once() -> None:
    cfg = dense_config()
    keys = dense_keys(cfg)
    assert len(keys) == 2 * 2 * 2 * 2 * 1 * 1 * 1
    ids = {k.cell_id(cfg.hash()) for k in keys}
    assert len(ids) == len(keys)
    assert {k.loss for k in keys} == {"dense_info_nce", "densecl_lambda_0.5"}
    # without R and temperature axes the ids are those of the keys without them
    assert all(k.R is None and k.temperature is None for k in keys)
    axes = dense_config(grid={"R": [0.5, 2.0], "temperature": [0.2, 1.0]})
    wide = dense_keys(axes)
    assert len(wide) == 4 * len(keys)
    assert {(k.R, k.temperature) for k in wide} == {(r, t) for r in (0.5, 2.0) for t in (0.2, 1.0)}
    assert len({k.cell_id(axes.hash()) for k in wide}) == len(wide)
    assert axes.hash() != cfg.hash()


def test_a_dense_cell_runs_at_its_keys_r_and_temperature(run) -> None:
    cfg, _, features = run
    key = DenseKey("scrl", "ext", "geometric", 1.0, 3, 8, 0, R=2.0, temperature=0.25)
    row = run_dense_cell(cfg, key, key.cell_id(cfg.hash()), features)
    assert (row["R"], row["temperature"]) == (2.0, 0.25)
    d, p = cfg.dense.head.d, features.p
    W = torch.tensor(row["head"], dtype=torch.float64).reshape(d, p)
    assert float(W.norm()) <= 2.0 + 1e-9
    batch, _, _ = draw_train(cfg, key, features)
    dense = naive_dense_loss(W, batch.phi1, batch.phi2, batch.match, batch.neg, "ext", 0.25)
    assert math.isclose(row["train_loss"], dense, rel_tol=1e-10)


# --- the backbone and its features --------------------------------------------------------------


def _brute_labels(labels: np.ndarray, grid: int) -> np.ndarray:
    """Majority label per adaptive-pooling window, smallest class on ties, -1 if none."""
    n, s, _ = labels.shape
    edges = [(math.floor(i * s / grid), math.ceil((i + 1) * s / grid)) for i in range(grid)]
    out = np.full((n, grid * grid), -1)
    for b in range(n):
        for r, (r0, r1) in enumerate(edges):
            for c, (c0, c1) in enumerate(edges):
                window = labels[b, r0:r1, c0:c1].reshape(-1)
                window = window[window >= 0]
                if window.size:
                    counts = np.bincount(window)
                    out[b, r * grid + c] = int(np.argmax(counts))
    return out


@pytest.mark.parametrize("side,grid", [(12, 3), (10, 4), (7, 7)])
def test_cell_labels_against_brute_force(side: int, grid: int) -> None:
    gen = torch.Generator().manual_seed(side)
    labels = torch.randint(-1, 3, (5, side, side), generator=gen)
    labels[0] = -1  # an unlabelled image
    got = cell_labels(labels, grid).numpy()
    assert np.array_equal(got, _brute_labels(labels.numpy(), grid))
    assert (got[0] == -1).all()


def test_embedder_writes_backbone_features_matches_and_labels(run) -> None:
    cfg, root, _ = run
    dense = cfg.dense
    data, feats = _table(root, "data", "test"), _table(root, "features", "test")
    s, g, c = dense.views.size, dense.backbone.grid, dense.backbone.channels
    net = RandomConv(3, c, dense.backbone.layers, dense.backbone.downsample, g, dense.backbone.seed)
    pixels = torch.tensor(_rows(data, "view2"), dtype=torch.float32).reshape(-1, 3, s, s) / 255.0
    expect = net(pixels).reshape(len(data), -1).numpy()
    assert np.allclose(_rows(feats, "f2"), expect, atol=1e-5)

    def views(k: int) -> crops.Views:
        boxes = torch.tensor(_rows(data, f"box{k}"))
        flips = torch.tensor(_rows(data, f"flip{k}"))
        return crops.Views(torch.empty(0), torch.empty(0), boxes, flips)

    assert np.array_equal(
        _rows(feats, "match"), crops.grid_correspondence(views(1), views(2), (g, g)).numpy()
    )
    labels1 = _rows(data, "labels1").reshape(-1, s, s)
    assert np.array_equal(_rows(feats, "labels1"), _brute_labels(labels1, g))


def test_features_are_centred_on_train_and_in_the_unit_ball(run) -> None:
    _, _, features = run
    train = np.concatenate([features.train.f1, features.train.f2]).reshape(-1, features.p)
    assert np.abs(train.mean(axis=0)).max() < 1e-5
    norms = [
        np.linalg.norm(x, axis=2).max()
        for split in (features.train, features.test, features.pool)
        for x in (split.f1, split.f2)
    ]
    assert max(norms) <= 1.0 and max(norms) > 0.999


def test_unit_normalisation_puts_every_feature_on_the_sphere(run) -> None:
    cfg, root, scaled = run
    unit = load_dense_features(root / "features", cfg.dense.backbone.grid**2, "unit")
    for split in ("train", "test", "pool"):
        for view in ("f1", "f2"):
            norms = np.linalg.norm(getattr(getattr(unit, split), view), axis=2)
            assert np.allclose(norms, 1.0, atol=1e-5) and norms.max() <= 1.0
            a, b = getattr(getattr(unit, split), view), getattr(getattr(scaled, split), view)
            cos = (a * b).sum(axis=2) / np.linalg.norm(b, axis=2)
            assert np.allclose(cos, 1.0, atol=1e-5)  # same directions as "scale"
    assert np.array_equal(unit.test.geometric, scaled.test.geometric)


def test_argmax_match_against_a_loop(run) -> None:
    _, _, features = run
    f1, f2 = features.test.f1.astype(np.float64), features.test.f2.astype(np.float64)
    got = argmax_match(features.test.f1, features.test.f2)
    for i in range(f1.shape[0]):
        for a in range(f1.shape[1]):
            cos = [
                f1[i, a] @ f2[i, b] / (np.linalg.norm(f1[i, a]) * np.linalg.norm(f2[i, b]))
                for b in range(f2.shape[1])
            ]
            assert math.isclose(cos[got[i, a]], max(cos), rel_tol=0, abs_tol=1e-6)


# --- draws --------------------------------------------------------------------------------------


def test_negatives_are_matched_keys_of_pool_images(run) -> None:
    _, _, features = run
    pool = features.pool
    images = torch.tensor([[0, 5, 5], [7, 1, 2]])
    neg = draw_negatives(pool, "geometric", images, torch.Generator().manual_seed(0))
    assert neg.dense.shape == (2, 3, features.p) and torch.equal(neg.images, images)
    for idx in np.ndindex(2, 3):
        j = int(images[idx])
        keys = [pool.f2[j, b] for b in pool.geometric[j] if b >= 0]
        assert any(np.array_equal(neg.dense[idx].numpy(), key) for key in keys)
        assert np.allclose(neg.pooled[idx].numpy(), pool.f2[j].mean(axis=0), atol=1e-6)


def test_pool_draws_use_kept_images_and_disjoint_blocks(run) -> None:
    _, _, features = run
    gen = torch.Generator().manual_seed(1)
    kept = set(features.pool.kept("argmax").tolist())
    drawn = pool_draw(features.pool, "argmax", (4, 6), gen)
    assert drawn.images.shape == (4, 6) and set(drawn.images.flatten().tolist()) <= kept
    blocks = pool_disjoint(features.pool, "argmax", 5, 4, gen)
    used = blocks.images.flatten().tolist()
    assert len(used) == 20 and len(set(used)) == 20 and set(used) <= kept
    assert pool_disjoint(features.pool, "argmax", len(kept), 2, gen) is None


# --- one cell -----------------------------------------------------------------------------------


KEYS = [
    DenseKey("scrl", "own", "geometric", 1.0, 3, 8, 0),
    DenseKey("sscrl", "ext", "argmax", 0.5, 3, 8, 0),
]


@pytest.mark.parametrize("key", KEYS, ids=lambda k: f"{k.regime}-{k.negatives}-{k.lam}")
def test_dense_cell_row_recomputes_and_holds(run, key: DenseKey) -> None:
    cfg, _, features = run
    cell_id = key.cell_id(cfg.hash())
    row = run_dense_cell(cfg, key, cell_id, features)
    d, p = cfg.dense.head.d, features.p
    W = torch.tensor(row["head"], dtype=torch.float64).reshape(d, p)
    assert float(W.norm()) <= cfg.dense.head.R + 1e-9
    batch, _, _ = draw_train(cfg, key, features)
    T = cfg.dense.eval.temperature
    dense = naive_dense_loss(W, batch.phi1, batch.phi2, batch.match, batch.neg, key.negatives, T)
    assert math.isclose(row["train_dense_loss"], dense, rel_tol=1e-10)
    expect = dense
    if key.lam < 1:
        zero = torch.zeros(key.n, 1, dtype=torch.int64)
        glob = naive_dense_loss(W, batch.pooled1, batch.pooled2, zero, batch.pooled_neg, "ext", T)
        expect = key.lam * dense + (1 - key.lam) * glob
    assert math.isclose(row["train_loss"], expect, rel_tol=1e-10)
    assert math.isclose(row["gap"], row["test_loss"] - row["train_loss"], abs_tol=1e-12)
    assert row["family"] == "dense" and row["loss"] == key.loss and row["solver_converged"]
    holds = {k: v for k, v in row.items() if k.endswith("_holds")}
    assert holds and all(v is not False for v in holds.values()), holds
    assert row["mi_estimate"] <= math.log(1 + key.m) + 1e-12
    assert row["mi_within_log1p_m"] is True
    test = features.test
    hits, total = 0, 0
    for i in test.kept("geometric")[: cfg.dense.eval.test_images]:
        for a, b in enumerate(test.geometric[i]):
            if b >= 0:
                q = W @ torch.tensor(test.f1[i, a], dtype=torch.float64)
                scores = [float(q @ (W @ torch.tensor(k, dtype=torch.float64))) for k in test.f2[i]]
                hits += int(np.argmax(scores) == b)
                total += 1
    assert row["correspondence_top1"] == pytest.approx(hits / total, abs=1e-12)
    assert row["correspondence_chance"] == 1 / features.positions
    if key.regime == "sscrl":
        parts = row["gap_outer"] + row["gap_inner"]
        assert math.isclose(parts, row["gap"], abs_tol=1e-12)
        assert row["queue_total"] >= row["queue_outer_S"]
        # one statement at delta: each outer form at half its column's level
        outer = min(row["queue_outer_S"], row["queue_outer_E"])
        assert row["queue_total"] > outer + row["queue_inner"]
        assert row["best_dense_bound"] == row["queue_total"]
    else:
        assert row["gap_outer"] is None and row["gamma_dense_S"] > 0
        assert row["best_dense_bound"] > min(row["gamma_dense_S"], row["gamma_dense_E"])
    again = run_dense_cell(cfg, key, cell_id, features)
    assert again["head"] == row["head"] and again["test_loss"] == row["test_loss"]
    # the signal: at W = 0 every score is 0, so an image's loss is the log of its candidates'
    # count whatever its features: the naive loss at W = 0 on the train batch is f = 0's loss
    zero_W = torch.zeros_like(W)
    trivial = naive_dense_loss(
        zero_W, batch.phi1, batch.phi2, batch.match, batch.neg, key.negatives, T
    )
    if key.lam < 1:
        zero = torch.zeros(key.n, 1, dtype=torch.int64)
        glob = naive_dense_loss(
            zero_W, batch.pooled1, batch.pooled2, zero, batch.pooled_neg, "ext", T
        )
        trivial = key.lam * trivial + (1 - key.lam) * glob
    assert row["trivial_loss"] == pytest.approx(trivial, rel=1e-9)
    assert row["learning_gain"] == pytest.approx(row["trivial_loss"] - row["test_loss"], abs=1e-12)
    assert row["loss_range"] == row["loss_range_hi"] - row["loss_range_lo"]
    assert row["learning_gain_rel"] == pytest.approx(row["learning_gain"] / row["loss_range"])
    assert row["learned"] == (row["learning_gain"] - row["learning_gain_ci"] > 0)


def test_every_checkpoint_and_recipe_draws_what_the_frozen_encoders_cell_draws(run) -> None:
    """Common random numbers: a cell's draws are keyed without its encoder epoch and without
    the pretraining section, so the epoch-0 cell of a pretraining run is the cell of the same
    config without pretraining, column for column but its id, and a later epoch's cell trains
    on the same images and negatives."""
    cfg, _, features = run
    pretrain = {"epochs": 3, "images": 16, "batch": 8, "queue": 8, "projection": 4}
    pretrained = dense_config(pretrain=pretrain)
    other_recipe = dense_config(pretrain={**pretrain, "lr": 0.01, "schedule": "cosine"})
    key = KEYS[0]
    at0, at3 = replace(key, encoder_epoch=0), replace(key, encoder_epoch=3)
    assert draws_id(cfg, key) == key.cell_id(cfg.hash())  # no pretraining: the cell's id
    ids = {draws_id(pretrained, at0), draws_id(pretrained, at3), draws_id(other_recipe, at3)}
    assert ids == {key.cell_id(cfg.hash())}
    assert len({at0.cell_id(pretrained.hash()), at3.cell_id(pretrained.hash())}) == 2
    frozen = run_dense_cell(cfg, key, key.cell_id(cfg.hash()), features)
    epoch0 = run_dense_cell(pretrained, at0, at0.cell_id(pretrained.hash()), features)
    differ = [c for c in frozen if c not in ("cell_id", "encoder_epoch", *TIMING)
              and frozen[c] != epoch0[c]
              and not (frozen[c] != frozen[c] and epoch0[c] != epoch0[c])]  # fmt: skip
    assert differ == []
    a, _, _ = draw_train(pretrained, at0, features)
    b, _, _ = draw_train(pretrained, at3, features)
    assert torch.equal(a.phi1, b.phi1) and torch.equal(a.neg, b.neg)
