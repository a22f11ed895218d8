"""encoder.pretrain beyond digits: the glyphs source (a finite image source rendered from the
run seed, split like digits), the mlp encoder on vector rows (synthetic draws of their own,
SCARF views), the view laws each source takes, and run ids that did not move."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from crl.core.config import Config, load
from crl.core.errors import ConfigError
from crl.kernels.encoders import MLP
from crl.kernels.glyphs import render_glyphs
from crl.steps import data, pretrain
from crl.steps.embed import Embedder, EmbedItem
from crl.steps.grid_source import pretrain_fraction
from crl.steps.runfolder import prepare
from crl.steps.unimodal.family import encoder_pretrain_job
from crl.steps.unimodal.pretrain_task import EncoderTask, load_encoder

ROOT = Path(__file__).resolve().parents[3]
GLYPHS = {"kind": "glyphs", "side": 8, "classes": 4, "train_size": 120, "test_size": 40}
SYNTHETIC = {"kind": "synthetic", "classes": 3, "dim": 6, "train_size": 80, "test_size": 30}
GRID = {"regimes": ["scrl"], "losses": ["info_nce"], "m": [2], "n": [16]}


def _config(dataset: dict, kind: str, **pretrain_section: object) -> Config:
    section = {"objective": "nt_xent", "epochs": 1, "batch": 16, "projection": 4}
    return Config.model_validate(
        {
            "name": "sources",
            "dataset": {**dataset, "shards": 2},
            "encoder": {"kind": kind, "out_dim": 8, "pretrain": {**section, **pretrain_section}},
            "grid": GRID,
        }
    )


def test_glyph_rows_are_split_like_a_finite_source() -> None:
    config = _config(GLYPHS, "small_cnn", fraction=0.25)
    ds = config.dataset
    x, labels = render_glyphs(160, 8, 4, ds.clutter, ds.noise, seed=0)
    rows = data.source_rows(ds, 0, 0.25)
    assert np.array_equal(rows["test"], np.arange(40))  # the first test_size rows
    every = np.concatenate([rows["test"], rows["train"], rows["pretrain"]])
    assert sorted(every.tolist()) == list(range(160))
    assert len(rows["pretrain"]) == 30
    assert data.split_sizes(ds, 0.25) == {"train": 90, "test": 40}
    assert data.input_width(ds) == 64
    plan = data.shard_plan(ds, {"train": 90, "test": 40})
    train = [data.make_shard(ds, 0, s, 0.25) for s in plan if s.split == "train"]
    got = np.concatenate([data.list_to_numpy(t.column("x")) for t in train])
    assert np.array_equal(got, x[rows["train"]])
    got_labels = np.concatenate([t.column("label").to_numpy() for t in train])
    assert np.array_equal(got_labels, labels[rows["train"]])
    table = data.make_pretrain_rows(ds, 0, config.encoder.pretrain)
    assert table.column_names == ["id", "source_row", "x"]
    assert np.array_equal(data.list_to_numpy(table.column("x")), x[rows["pretrain"]])


def test_synthetic_pretraining_draws_rows_no_shard_holds() -> None:
    config = _config(SYNTHETIC, "mlp", images=64)
    ds, p = config.dataset, config.encoder.pretrain
    assert pretrain_fraction(config) is None  # the shards keep every row
    assert data.split_sizes(ds, pretrain_fraction(config)) == {"train": 80, "test": 30}
    assert data.pretrain_count(ds, p) == 64
    table = data.make_pretrain_rows(ds, config.seed, p)
    assert table.column("source_row").to_pylist() == list(range(64))
    x = data.list_to_numpy(table.column("x"))
    assert x.shape == (64, 6)
    again = data.list_to_numpy(data.make_pretrain_rows(ds, config.seed, p).column("x"))
    assert np.array_equal(x, again)
    shards = [data.make_shard(ds, 0, s) for s in data.shard_plan(ds, data.split_sizes(ds))]
    held = {row.tobytes() for t in shards for row in data.list_to_numpy(t.column("x"))}
    assert not held & {row.tobytes() for row in x}


@pytest.mark.parametrize(
    ("dataset", "kind", "section", "views"),
    [
        (GLYPHS, "small_cnn", {"fraction": 0.25}, "affine"),
        (GLYPHS, "mlp", {"fraction": 0.25}, "affine"),
        ({"kind": "digits"}, "small_cnn", {"fraction": 0.25}, "shift"),
        ({"kind": "digits"}, "mlp", {"fraction": 0.25}, "mask"),
        (SYNTHETIC, "mlp", {"images": 64}, "mask"),
        (GLYPHS, "small_cnn", {"fraction": 0.25, "augment": "shift"}, "shift"),
    ],
)
def test_each_source_takes_its_views(dataset: dict, kind: str, section: dict, views: str) -> None:
    assert _config(dataset, kind, **section).pretrain_augment() == views


@pytest.mark.parametrize("augment", ["shift", "affine", "mask"])
def test_every_view_law_gives_two_different_views_from_the_generator(augment: str) -> None:
    config = _config(GLYPHS, "small_cnn", fraction=0.25, augment=augment)
    task = EncoderTask(config.encoder, augment, 64, 0.0, 1.0)
    rows = torch.rand(10, 64, generator=torch.Generator().manual_seed(0))
    a, b, match = task.views(rows, torch.Generator().manual_seed(1), False)
    c, d, _ = task.views(rows, torch.Generator().manual_seed(1), False)
    assert match is None and a.shape == b.shape == (10, 64)
    assert torch.equal(a, c) and torch.equal(b, d) and not torch.equal(a, b)
    with pytest.raises(ValueError, match="no position features"):
        task.views(rows, torch.Generator(), True)


def test_the_mlp_pretrains_and_embeds_each_checkpoint(tmp_path: Path) -> None:
    config = _config(SYNTHETIC, "mlp", images=64, epochs=2, checkpoints=[0, 2], lr=0.01)
    paths_root = tmp_path / "pretrain"
    table = data.make_pretrain_rows(config.dataset, config.seed, config.encoder.pretrain)
    (paths_root / "data").mkdir(parents=True)
    pq.write_table(table, paths_root / "data" / "part-00000.parquet")
    task = EncoderTask(config.encoder, "mask", 6, -10.0, 10.0)
    job = pretrain.PretrainJob(config.encoder.pretrain, task, paths_root, tmp_path / "staging")
    pretrain.train(job, pretrain.SingleProcess())
    initial = MLP(6, 8, config.encoder.seed)
    start, trained = load_encoder(job.checkpoint(0), task), load_encoder(job.checkpoint(2), task)
    assert all(torch.equal(start.state_dict()[k], v) for k, v in initial.state_dict().items())
    assert not torch.equal(trained.hidden.weight, initial.hidden.weight)
    rows = pretrain.epoch_rows(paths_root).to_pylist()
    assert [r["epoch"] for r in rows] == [1, 2] and all(np.isfinite(r["loss"]) for r in rows)

    data_dir = tmp_path / "data"
    shard_job = data.ShardJob(config.dataset, 0, data_dir, tmp_path / "staging")
    spec = data.shard_plan(config.dataset, {"train": 80, "test": 30})[0]
    shard = Path(data.write_shard(spec, shard_job))
    checkpoints = {0: job.checkpoint(0), 2: job.checkpoint(2)}
    embedder = Embedder(config.encoder, data_dir, tmp_path / "f", tmp_path / "staging", checkpoints)
    frozen = Embedder(config.encoder, data_dir, tmp_path / "g", tmp_path / "staging")
    epoch0 = pq.read_table(embedder(EmbedItem(0, shard)))
    assert epoch0.equals(pq.read_table(frozen(shard)))
    assert not epoch0.column("x").equals(pq.read_table(embedder(EmbedItem(2, shard))).column("x"))


def test_the_pretraining_job_knows_its_views_and_range(tmp_path: Path) -> None:
    from crl.steps.run_paths import RunPaths

    config = _config(GLYPHS, "small_cnn", fraction=0.25)
    job = encoder_pretrain_job(config, RunPaths(tmp_path / "run"))
    assert (job.task.augment, job.task.in_dim) == ("affine", 64)
    assert 0.0 <= job.task.low < job.task.high <= 1.0


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        (
            {"dense": {"pretrain": {"augment": "affine"}}},
            "pretrain.augment: the dense views are crops; set dense.views",
        ),
    ],
)
def test_a_dense_pretraining_refuses_unimodal_views(tree: dict, message: str) -> None:
    dense = load(ROOT / "conf" / "dense.yaml").model_dump(exclude_unset=True)
    dense["dense"]["pretrain"].update(tree["dense"]["pretrain"])
    with pytest.raises(ValueError, match=message):
        Config.model_validate(dense)


def test_image_views_on_rows_that_are_not_square_exit_before_any_work(tmp_path: Path) -> None:
    config = _config(SYNTHETIC, "mlp", images=64, augment="affine")
    with pytest.raises(ConfigError, match=r"encoder.pretrain.augment: affine views need square"):
        prepare(config, tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("name", "run_id"),
    [
        ("digits", "digits-a611f2ba59d8"),
        # its ladders' pilot_iterations and test_heads are new (the run's draws with them)
        ("quickstart", "quickstart-95d2730073d7"),
        ("frontier_digits", "frontier_digits-a826db05ed7e"),
        ("dense", "dense-579af55ccf40"),  # without dense.eval.ladder: left out of the hash
    ],
)
def test_the_shipped_configs_keep_their_run_ids(name: str, run_id: str) -> None:
    # the ids before encoder.pretrain.augment, glyphs and mlp existed: unset, they are left out
    # of the hash
    assert load(ROOT / "conf" / f"{name}.yaml").run_id() == run_id
