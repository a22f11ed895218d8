"""crl.steps.embed: encoders by config, batched embedding, and the Embedder step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch import nn

from crl.core.config import EncoderConfig
from crl.kernels.encoders import RandomFeatures, SmallCNN
from crl.steps import data, embed
from tests.steps.helpers import config, materialise


def _x(rows: int, width: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((rows, width), dtype=np.float32)


def test_build_identity() -> None:
    module = embed.build(EncoderConfig(kind="identity", out_dim=3), 7)
    assert isinstance(module, nn.Identity)
    x = _x(4, 7)
    np.testing.assert_array_equal(embed.embed(module, x, batch_rows=3), x)


@pytest.mark.parametrize(
    ("kind", "in_dim", "cls"),
    [
        ("random_features", 7, RandomFeatures),
        ("small_cnn", 16, SmallCNN),
        ("small_cnn", 64, SmallCNN),
    ],
)
def test_build_output_width(kind: str, in_dim: int, cls: type) -> None:
    module = embed.build(EncoderConfig(kind=kind, out_dim=5, seed=2), in_dim)
    assert isinstance(module, cls)
    out = embed.embed(module, _x(6, in_dim), batch_rows=4)
    assert out.shape == (6, 5) and out.dtype == np.float32
    rebuilt = embed.build(EncoderConfig(kind=kind, out_dim=5, seed=2), in_dim)
    # deterministic from the seed, at the same batch size (another batch size may take another
    # float32 kernel: test_batches_equal_one_batch compares those within a tolerance)
    again = embed.embed(rebuilt, _x(6, in_dim), batch_rows=4)
    np.testing.assert_array_equal(out, again)


def test_build_small_cnn_needs_square_inputs() -> None:
    with pytest.raises(ValueError, match="not square"):
        embed.build(EncoderConfig(kind="small_cnn", out_dim=5), 30)


@pytest.mark.parametrize("kind", ["random_features", "small_cnn"])
def test_batches_equal_one_batch(kind: str) -> None:
    module = embed.build(EncoderConfig(kind=kind, out_dim=8, seed=1), 16)
    x = _x(23, 16, seed=4)
    whole = embed.embed(module, x, batch_rows=100)
    for batch in (1, 5, 22, 23):
        np.testing.assert_allclose(embed.embed(module, x, batch_rows=batch), whole, atol=1e-6)
    expected = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(whole, expected, atol=1e-6)


def test_features_path() -> None:
    shard = Path("/r/data/split=test/part-00003.parquet")
    assert embed.features_path(Path("/r/data"), Path("/r/features"), shard) == Path(
        "/r/features/split=test/part-00003.parquet"
    )


def test_embedder_writes_features_with_the_same_ids_and_labels(tmp_path: Path) -> None:
    cfg = config(encoder={"kind": "random_features", "out_dim": 9, "batch_rows": 7})
    data_dir = materialise(cfg, tmp_path)
    embedder = embed.Embedder(cfg.encoder, data_dir, tmp_path / "features", tmp_path / ".staging")
    shards = sorted(data_dir.glob("split=*/part-*.parquet"))
    assert len(shards) == 4
    written = [embedder(shard) for shard in shards]
    assert written == [str(tmp_path / "features" / s.parent.name / s.name) for s in shards]
    assert list(embedder.modules) == [(None, 6)]  # one encoder per input width, reused
    module = embed.build(cfg.encoder, 6)
    for shard, target in zip(shards, written, strict=True):
        source, features = pq.read_table(shard), pq.read_table(target)
        assert features.column_names == ["id", "label", "x"]
        assert features.column("id").equals(source.column("id"))
        assert features.column("label").equals(source.column("label"))
        phi = data.list_to_numpy(features.column("x"))
        assert phi.shape == (source.num_rows, 9)
        expected = embed.embed(module, data.list_to_numpy(source.column("x")), 1000)
        np.testing.assert_allclose(phi, expected, atol=1e-6)
    assert list((tmp_path / ".staging").iterdir()) == []
    back = data.read_split(tmp_path / "features", "train")
    assert back.ids.tolist() == list(range(60)) and back.x.shape == (60, 9)


def test_embedder_embeds_both_views(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    shard = data_dir / "split=train" / "part-00000.parquet"
    shard.parent.mkdir(parents=True)
    x = _x(5, 16)
    pq.write_table(
        pa.table(
            {
                "id": pa.array(range(5), pa.int64()),
                "label": pa.array([0, 1, 0, 1, 2], pa.int32()),
                "x": data.list_column(x),
                "view_a": data.list_column(x * 0.5),
                "view_b": data.list_column(x * 0.25),
            }
        ),
        shard,
    )
    encoder = EncoderConfig(kind="small_cnn", out_dim=3, seed=0, batch_rows=2)
    embedder = embed.Embedder(encoder, data_dir, tmp_path / "features", tmp_path / ".staging")
    features = pq.read_table(embedder(shard))
    assert features.column_names == ["id", "label", "x", "view_a", "view_b"]
    module = embed.build(encoder, 16)
    for name, scale in (("x", 1.0), ("view_a", 0.5), ("view_b", 0.25)):
        np.testing.assert_allclose(
            data.list_to_numpy(features.column(name)),
            embed.embed(module, x * np.float32(scale), 100),
            atol=1e-6,
        )


def test_embedder_identity_copies_inputs(tmp_path: Path) -> None:
    cfg = config()
    data_dir = materialise(cfg, tmp_path)
    embedder = embed.Embedder(cfg.encoder, data_dir, tmp_path / "features", tmp_path / ".staging")
    assert embedder.device in ("cpu", "cuda")
    for shard in sorted(data_dir.glob("split=*/part-*.parquet")):
        embedder(shard)
    for split in ("train", "test"):
        np.testing.assert_array_equal(
            data.read_split(tmp_path / "features", split).x, data.read_split(data_dir, split).x
        )
