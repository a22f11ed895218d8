"""Pretraining the grid's small_cnn encoder (encoder.pretrain): a pretraining split disjoint
from the cells' splits, the same step as the dense backbone's (resumable to the same weights,
plain-weight checkpoints), and one features folder per embedded checkpoint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from crl.core.config import Config
from crl.core.errors import ConfigError
from crl.core.pretrain_config import PretrainConfig
from crl.kernels.encoders import SmallCNN
from crl.steps import data, grid_source, pretrain
from crl.steps.embed import Embedder, EmbedItem, features_dir_of
from crl.steps.runfolder import prepare
from crl.steps.unimodal.pretrain_task import EncoderTask, load_encoder
from tests.steps import helpers
from tests.steps.helpers import Dies

PRETRAIN = {"objective": "nt_xent", "epochs": 3, "fraction": 0.2, "batch": 16}


def _config(**pretrain_section: object) -> Config:
    return Config.model_validate(
        {
            "name": "digits-pretrain",
            "dataset": {"kind": "digits", "positives": "augmented", "shards": 2},
            "encoder": {
                "kind": "small_cnn",
                "out_dim": 8,
                "pretrain": {**PRETRAIN, **pretrain_section},
            },
            "grid": {"regimes": ["scrl"], "losses": ["info_nce"], "m": [2], "n": [16]},
        }
    )


def _job(config: Config, root: Path) -> pretrain.PretrainJob:
    p = config.encoder.pretrain
    table = data.make_pretrain_rows(config.dataset, config.seed, p)
    pq.write_table(table, (root / "data").mkdir(parents=True) or root / "data" / "part-0.parquet")
    task = EncoderTask(config.encoder, "shift", 64, 0.0, 1.0)
    return pretrain.PretrainJob(p, task, root, root / "staging")


def test_the_pretraining_rows_are_disjoint_from_the_cells_splits() -> None:
    ds = _config().dataset
    plain = data.source_rows(ds, 0)
    rows = data.source_rows(ds, 0, 0.2)
    every = np.concatenate([rows["test"], rows["train"], rows["pretrain"]])
    assert sorted(every.tolist()) == list(range(data.DIGITS_ROWS))  # a partition of the source
    assert np.array_equal(rows["test"], plain["test"])  # test is untouched
    kept = np.isin(plain["train"], rows["pretrain"], invert=True)
    assert np.array_equal(rows["train"], plain["train"][kept])  # train keeps its order
    assert len(rows["pretrain"]) == round(0.2 * len(plain["train"]))
    sizes = data.split_sizes(ds, 0.2)
    assert sizes == {"train": len(rows["train"]), "test": len(rows["test"])}

    table = data.make_pretrain_rows(ds, 0, PretrainConfig(epochs=1, fraction=0.2))
    x, _ = data.source_arrays(ds, 0)
    assert table.column_names == ["id", "source_row", "x"]  # no label reaches pretraining
    assert np.array_equal(table.column("source_row").to_numpy(), rows["pretrain"])
    assert np.array_equal(data.list_to_numpy(table.column("x")), x[rows["pretrain"]])
    shards = [
        data.make_shard(ds, 0, spec, 0.2) for spec in data.shard_plan(ds, data.split_sizes(ds, 0.2))
    ]
    cells_rows = {row.tobytes() for t in shards for row in data.list_to_numpy(t.column("x"))}
    assert not cells_rows & {row.tobytes() for row in x[rows["pretrain"]]}


def test_user_parquet_rows_split_the_same_way(tmp_path: Path) -> None:
    path = tmp_path / "images.parquet"
    x = np.random.default_rng(0).random((50, 16), dtype=np.float32)
    pq.write_table(pa.table({"x": data.list_column(x), "label": np.arange(50) % 3}), path)
    ds = Config.model_validate(
        {
            "name": "user",
            "dataset": {"kind": "parquet", "path": str(path), "test_fraction": 0.2},
            "encoder": {"kind": "small_cnn", "pretrain": {**PRETRAIN, "batch": 4}},
            "grid": {"regimes": ["scrl"], "losses": ["info_nce"], "m": [2], "n": [8]},
        }
    ).dataset
    rows = data.source_rows(ds, 0, 0.25)
    assert sorted(np.concatenate(list(rows.values())).tolist()) == list(range(50))
    assert len(rows["pretrain"]) == 10 and len(rows["test"]) == 10


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"encoder": {"kind": "random_features", "pretrain": PRETRAIN}},
            "only the small_cnn and mlp",
        ),
        (
            {"encoder": {"kind": "small_cnn", "pretrain": {**PRETRAIN, "objective": "densecl"}}},
            "encoder.pretrain.objective: densecl needs position features",
        ),
        (
            {"encoder": {"kind": "small_cnn", "pretrain": {**PRETRAIN, "images": 100}}},
            "encoder.pretrain.images: the pretraining rows come from the dataset",
        ),
        (
            {"dataset": {"kind": "synthetic"}},
            "on dataset.kind digits or glyphs or parquet, not synthetic",
        ),
        (
            {
                "dataset": {"kind": "synthetic"},
                "encoder": {"kind": "mlp", "pretrain": PRETRAIN},
            },
            "encoder.pretrain.fraction: synthetic rows are drawn; give encoder.pretrain.images",
        ),
    ],
)
def test_what_cannot_be_pretrained_is_refused_in_one_line(change: dict, message: str) -> None:
    tree = _config().model_dump(exclude_unset=True)
    tree.update(change)
    with pytest.raises(ValueError, match=message):
        Config.model_validate(tree)


def test_sizes_are_checked_before_any_work(tmp_path: Path) -> None:
    big_n = _config().model_dump(exclude_unset=True)
    big_n["grid"]["n"] = [1200]  # 1258 train rows, 20% of them pretrain
    with pytest.raises(ConfigError, match=r"grid.n: n=1200 .*1006 rows after encoder.pretrain"):
        prepare(Config.model_validate(big_n), tmp_path)
    with pytest.raises(ConfigError, match=r"encoder.pretrain.batch: 300 is larger than the "):
        prepare(_config(batch=300), tmp_path)
    assert not any(tmp_path.iterdir())  # refused before the run folder exists


def test_a_resumed_pretraining_ends_with_the_uninterrupted_weights(tmp_path: Path) -> None:
    config = _config(checkpoints=[0, 1, 3])
    whole = _job(config, tmp_path / "whole")
    pretrain.train(whole, pretrain.SingleProcess())
    cut = _job(config, tmp_path / "cut")
    with pytest.raises(KeyboardInterrupt):
        pretrain.train(cut, Dies(2))
    assert pretrain.finished_epochs(cut) == 1
    pretrain.train(cut, pretrain.SingleProcess())
    for epoch in (0, 1, 3):
        a = torch.load(whole.checkpoint(epoch), weights_only=True)
        b = torch.load(cut.checkpoint(epoch), weights_only=True)
        assert all(torch.equal(a[k], b[k]) for k in a), epoch
    rows = pretrain.epoch_rows(whole.root).to_pylist()
    assert [(r["encoder"], r["epoch"]) for r in rows] == [("unimodal", e) for e in (1, 2, 3)]
    assert rows[0]["images"] == 16 * (len(whole.task.inputs(whole.data)) // 16)


def test_each_checkpoint_is_embedded_into_its_own_folder(tmp_path: Path) -> None:
    config = _config(epochs=1, checkpoints=[0, 1])
    job = _job(config, tmp_path / "pretrain")
    pretrain.train(job, pretrain.SingleProcess())
    initial = SmallCNN(64, 8, config.encoder.seed)
    start = load_encoder(job.checkpoint(0), job.task)
    assert all(torch.equal(start.state_dict()[k], v) for k, v in initial.state_dict().items())
    trained = load_encoder(job.checkpoint(1), job.task)
    assert not torch.equal(trained.conv1.weight, initial.conv1.weight)

    data_dir, features = tmp_path / "data", tmp_path / "features"
    shard_job = data.ShardJob(config.dataset, 0, data_dir, tmp_path / "staging", 0.2)
    spec = data.shard_plan(config.dataset, data.split_sizes(config.dataset, 0.2))[0]
    shard = Path(data.write_shard(spec, shard_job))
    embedder = Embedder(
        config.encoder,
        data_dir,
        features,
        tmp_path / "staging",
        {0: job.checkpoint(0), 1: job.checkpoint(1)},
    )
    frozen = Embedder(config.encoder, data_dir, tmp_path / "frozen", tmp_path / "staging")
    written = {e: Path(embedder(EmbedItem(e, shard))) for e in (0, 1)}
    assert written[0].is_relative_to(features_dir_of(features, 0))
    assert written[1].is_relative_to(features_dir_of(features, 1))
    epoch0 = pq.read_table(written[0])
    assert epoch0.equals(pq.read_table(frozen(shard)))  # epoch 0: the frozen random encoder
    assert not epoch0.column("x").equals(pq.read_table(written[1]).column("x"))
    assert epoch0.column_names == ["id", "label", "x", "view_a", "view_b"]


def test_synthetic_cells_draw_fresh_points_so_n_may_exceed_the_train_split() -> None:
    """The splits of synthetic data serve the normalisation and the probes; a cell's anchors
    are fresh draws of the law, so n above the train split is no error (split data: above)."""
    tree = helpers.tree(grid={"n": [500]})  # train_size 60
    grid_source.check_sizes(Config.model_validate(tree))
    digits = _config().model_dump(exclude_unset=True)
    digits["grid"]["n"] = [5000]
    with pytest.raises(ConfigError, match=r"grid.n: n=5000 is larger than the train split"):
        grid_source.check_sizes(Config.model_validate(digits))
