"""The pretraining split and step: disjoint from every split the cells draw from, resumable to
the same weights, checkpoints that load without unpickling anything."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from crl.core.dense_config import DenseConfig
from crl.kernels.pretrain import learning_rate
from crl.kernels.seeding import generator
from crl.steps import pretrain
from crl.steps.data import list_to_numpy
from crl.steps.dense import image_data
from crl.steps.dense.pretrain_task import DenseTask, backbone, load_checkpoint
from tests.steps.helpers import Dies

SHAPES = {
    "images": {
        "kind": "shapes",
        "size": 16,
        "classes": 3,
        "train_size": 24,
        "test_size": 8,
        "pool_size": 16,
        "shards": 2,
    },
    "views": {"size": 12},
    "backbone": {"kind": "random_conv", "channels": 6, "layers": 2, "downsample": 1, "grid": 2},
    "grid": {"m": [2], "n": [4]},
}
PRETRAIN = {
    "epochs": 3,
    "images": 32,
    "batch": 8,
    "queue": 16,
    "projection": 8,
    "checkpoints": [0, 1, 3],
}


def _dense(tree: dict, **pretrain_section: object) -> DenseConfig:
    section = {**PRETRAIN, **pretrain_section}
    if tree["images"]["kind"] != "shapes" and "images" not in pretrain_section:
        section.pop("images")
    return DenseConfig.model_validate({**tree, "pretrain": section})


def _materialize(dense: DenseConfig, root: Path, seed: int = 0) -> pretrain.PretrainJob:
    job = image_data.ImageShardJob(dense, seed, root / "pretrain" / "data", root / "staging")
    for spec in image_data.pretrain_plan(dense):
        image_data.write_pretrain_shard(spec, job)
    task = DenseTask(dense, image_data.channels(dense))
    return pretrain.PretrainJob(dense.pretrain, task, root / "pretrain", root / "st")


def _digests(pixels: torch.Tensor) -> set[str]:
    return {hashlib.sha256(row.numpy().tobytes()).hexdigest() for row in pixels}


def test_generated_pretraining_images_are_none_of_the_cells_images(tmp_path: Path) -> None:
    dense = _dense(SHAPES)
    _materialize(dense, tmp_path)
    table = pq.read_table(sorted((tmp_path / "pretrain" / "data").glob("*.parquet"))[0])
    assert set(table.column("source_row").to_pylist()) == {-1}
    pretraining = set()
    for spec in image_data.pretrain_plan(dense):
        pretraining |= _digests((image_data.source_images(dense, 0, spec)[0] * 255).round())
    assert len(pretraining) == dense.pretrain.images
    sizes = image_data.split_sizes(dense)
    for spec in image_data.shard_plan(dense, sizes):
        cells = _digests((image_data.source_images(dense, 0, spec)[0] * 255).round())
        assert not pretraining & cells, spec


def test_finite_sources_give_disjoint_rows_and_record_them(tmp_path: Path) -> None:
    tree = {**SHAPES, "images": {"kind": "digits", "size": 8, "shards": 2}}
    dense = _dense(tree, fraction=0.25)
    plain = DenseConfig.model_validate(tree)
    rows = image_data.split_rows(1797, dense, 0)
    assert sum(len(r) for r in rows.values()) == 1797
    seen = np.concatenate(list(rows.values()))
    assert np.unique(seen).size == 1797  # every row in exactly one split
    assert len(rows["pretrain"]) == round(0.25 * 1797)
    before = image_data.split_rows(1797, plain, 0)
    # test and pool are those of the run without pretraining; train gives up the rows
    for split in ("test", "pool"):
        assert np.array_equal(rows[split], before[split])
    assert set(rows["train"]) | set(rows["pretrain"]) == set(before["train"])
    assert image_data.split_sizes(dense)["train"] == len(rows["train"])
    _materialize(dense, tmp_path)
    recorded = np.concatenate(
        [
            pq.read_table(f).column("source_row").to_numpy()
            for f in sorted((tmp_path / "pretrain" / "data").glob("*.parquet"))
        ]
    )
    assert np.array_equal(recorded, rows["pretrain"])


def test_the_pretrain_section_validates_its_fields() -> None:
    with pytest.raises(ValueError, match="checkpoints: epoch 5 is after"):
        _dense(SHAPES, checkpoints=[0, 5])
    with pytest.raises(ValueError, match="pretrain.fraction: shapes are generated"):
        _dense(SHAPES, fraction=0.2)
    digits = {**SHAPES, "images": {"kind": "digits"}}
    with pytest.raises(ValueError, match="pretrain.images: digits images are a finite source"):
        _dense(digits, images=100)
    with pytest.raises(ValueError, match="has repeated entries"):
        _dense(SHAPES, checkpoints=[1, 1])
    assert _dense(SHAPES, checkpoints=None).pretrain.embedded == [0, 3]


@pytest.mark.parametrize("objective", ["densecl", "nt_xent"])
def test_a_resumed_pretraining_ends_with_the_uninterrupted_weights(
    tmp_path: Path, objective: str
) -> None:
    dense = _dense(SHAPES, objective=objective)
    whole = _materialize(dense, tmp_path / "whole")
    pretrain.train(whole, pretrain.SingleProcess())
    assert pretrain.is_done(whole)

    cut = _materialize(dense, tmp_path / "cut")
    with pytest.raises(KeyboardInterrupt):
        pretrain.train(cut, Dies(2))
    assert pretrain.finished_epochs(cut) == 1 and not pretrain.is_done(cut)
    first = cut.epoch_row(1).read_bytes()
    pretrain.train(cut, pretrain.SingleProcess())
    assert pretrain.is_done(cut)
    for epoch in dense.pretrain.embedded:
        a = torch.load(whole.checkpoint(epoch), weights_only=True)
        b = torch.load(cut.checkpoint(epoch), weights_only=True)
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), epoch
    assert cut.epoch_row(1).read_bytes() == first  # the finished epoch was not trained again
    losses = [pq.read_table(j.epoch_row(3)).column("loss")[0].as_py() for j in (whole, cut)]
    assert losses[0] == losses[1] and np.isfinite(losses[0])


def test_checkpoints_are_plain_weights_of_the_backbone(tmp_path: Path) -> None:
    dense = _dense(SHAPES, epochs=1, checkpoints=[0, 1])
    job = _materialize(dense, tmp_path)
    pretrain.train(job, pretrain.SingleProcess())
    start = load_checkpoint(job.checkpoint(0), dense, 3)
    initial = backbone(dense, 3)
    for name, value in initial.state_dict().items():
        assert torch.equal(start.state_dict()[name], value)  # epoch 0: the random encoder
    trained = load_checkpoint(job.checkpoint(1), dense, 3)
    assert not torch.equal(trained.convs[0].weight, initial.convs[0].weight)
    rows = pretrain.epoch_rows(job.root).to_pylist()
    assert [r["epoch"] for r in rows] == [1]
    assert rows[0]["images"] == 32 and rows[0]["steps"] == 4 and rows[0]["workers"] == 1
    pixels = list_to_numpy(
        pq.read_table(sorted(job.data.glob("*.parquet"))[0]).column("image"), np.uint8
    )
    assert pixels.shape[1] == 3 * 16 * 16


def test_a_batch_larger_than_the_pretraining_split_is_refused_before_work() -> None:
    from crl.core.errors import ConfigError
    from crl.steps.dense.checks import check_dense

    with pytest.raises(
        ConfigError,
        match=r"dense.pretrain.batch: 64 is larger than the "
        r"pretraining split \(32 images; dense.pretrain.images\)",
    ):
        check_dense(_dense(SHAPES, batch=64))
    check_dense(_dense(SHAPES))
    module = {"kind": "module", "module": "tests.steps.dense.backbones:PoolNet", "grid": 2}
    with pytest.raises(
        ConfigError,
        match=r"dense.pretrain: only a backbone of kind random_conv "
        r"is pretrained \(dense.backbone.kind is module\)",
    ):
        check_dense(_dense({**SHAPES, "backbone": module}))


def test_each_epoch_records_the_queues_staleness_and_the_objectives_retrieval(
    tmp_path: Path,
) -> None:
    """A queue as large as the pretraining split (32 images, batches of 8), filled before the
    first step with the keys of a seeded order of all 32 images: every batch finds its own
    images' keys in it; the share equals a replay of the fill and the epochs' orders with the
    queue as a list. The row's lr is the schedule's at the epoch's last step."""
    dense = _dense(SHAPES, epochs=2, checkpoints=[0, 2], queue=32, schedule="cosine", warmup=0.1)
    job = _materialize(dense, tmp_path)
    pretrain.train(job, pretrain.SingleProcess())
    rows = pretrain.epoch_rows(job.root).to_pylist()
    queue = torch.randperm(32, generator=generator(0, "pretrain-queue-fill")).tolist()
    for row in rows:
        order = torch.randperm(32, generator=generator(0, "pretrain", row["epoch"])).tolist()
        shares = []
        for step in range(4):
            batch = order[step * 8 : (step + 1) * 8]
            shares.append(sum(i in batch for i in queue) / 32)
            queue = queue[8:] + batch  # the oldest 8 keys make way for the batch's
        assert row["queue_staleness"] == pytest.approx(sum(shares) / 4, abs=1e-12)
        assert 0.0 <= row["positive_top1"] <= 1.0 and row["positive_chance"] == 1 / 32
        p = dense.pretrain
        expected_lr = learning_rate(p.lr, 4 * row["epoch"] - 1, 8, p.warmup, p.schedule)
        assert row["lr"] == expected_lr
    assert rows[0]["queue_staleness"] > 0.0  # the fill's keys include the batches' images
    assert rows[1]["lr"] < rows[0]["lr"] < dense.pretrain.lr  # cosine, after the warm-up


def test_random_initial_queues_hold_no_key_of_a_batch_in_the_first_epoch(tmp_path: Path) -> None:
    """queue_init: random keeps MoCo's random unit vectors until the first epoch replaces them:
    no key of a batch's own images before the second epoch; the weights differ from those of a
    queue filled with keys."""
    filled = _materialize(_dense(SHAPES, epochs=1, checkpoints=[1], queue=32), tmp_path / "keys")
    pretrain.train(filled, pretrain.SingleProcess())
    dense = _dense(SHAPES, epochs=1, checkpoints=[1], queue=32, queue_init="random")
    job = _materialize(dense, tmp_path / "random")
    pretrain.train(job, pretrain.SingleProcess())
    assert pretrain.epoch_rows(job.root).to_pylist()[0]["queue_staleness"] == 0.0
    a = torch.load(job.checkpoint(1), weights_only=True)
    b = torch.load(filled.checkpoint(1), weights_only=True)
    assert any(not torch.equal(a[name], b[name]) for name in a)


def test_a_row_lost_between_the_state_and_the_row_is_written_back(tmp_path: Path) -> None:
    """The state is saved before the epoch's row; a kill between the two leaves the state of
    the last epoch without its row, which is written back from the state, byte for byte."""
    dense = _dense(SHAPES, epochs=2, checkpoints=[0, 2])
    job = _materialize(dense, tmp_path)
    pretrain.train(job, pretrain.SingleProcess())
    kept = job.epoch_row(2).read_bytes()
    assert not pretrain.write_missing_row(job)  # nothing is missing
    job.epoch_row(2).unlink()
    assert pretrain.is_done(job)  # the stage would not train again: the row must come back
    assert pretrain.write_missing_row(job)
    assert job.epoch_row(2).read_bytes() == kept
