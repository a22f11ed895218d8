"""The dense embed step: a frozen backbone over one image shard, position features to Parquet.

Layout: <run>/dense/features/split=<split>/part-<k>.parquet (with dense.pretrain, one folder per
embedded checkpoint: <run>/dense/features/epoch=<e>/split=<split>/...), one row per image:
  id (int64), f1, f2 (list<float32>, K * C: the K = grid^2 position features of each view,
  row-major, raw backbone outputs), match (list<int16>, K: the geometric correspondent in view 2
  of each view-1 position, -1 for none), labels1, labels2 (list<int16>, K: the majority pixel
  class of each grid cell, -1 where no pixel is labelled).
The cells stage reads every split once (crl.steps.dense.features) and shares it with all cells
through the object store: 4 K C bytes per view and image (5 GB for 1e5 images at K = 49,
C = 128). `DenseEmbedder` is one per worker and runs on the worker's device (CUDA when it has one).
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from torch import nn

from crl.core.dense_config import BackboneConfig, DenseConfig
from crl.kernels.dense.crops import box_correspondence
from crl.kernels.encoders import RandomConv
from crl.steps import store
from crl.steps.atomic import write_parquet_atomic
from crl.steps.data import list_column, list_to_numpy
from crl.steps.dense.pretrain_task import load_checkpoint
from crl.steps.embed import EmbedItem, features_dir_of


class _FeatureMap(nn.Module):
    """A user module whose output (N, C, H, W) is average-pooled to (N, grid^2, C)."""

    def __init__(self, module: nn.Module, grid: int, name: str) -> None:
        super().__init__()
        self.module, self.pool, self.name = module, nn.AdaptiveAvgPool2d(grid), name

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        out = self.module(images)
        if not (isinstance(out, torch.Tensor) and out.ndim == 4):
            shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"backbone.module {self.name}: returned {shape}, expected a feature map "
                "(N, C, H, W)"
            )
        return self.pool(out).flatten(2).transpose(1, 2)


def module_class(spec: str) -> type[nn.Module]:
    """The class that `backbone.module` ("package.module:Class") names, checked before anything
    of it is called: it must be a subclass of torch.nn.Module. A function, a builtin or any other
    callable is refused, so a config can name a network, never a command (`os:system`).

    Importing the module runs its top-level code, as any import does: the config's author is
    trusted with the modules on the path (docs/cluster.md, the trust model); deployment
    parameters are not (crl.orchestration.deploy.check_code_overrides).
    """
    module_name, _, attribute = spec.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"backbone.module {spec!r}: cannot be imported ({err})") from None
    except (Exception, SystemExit) as err:  # the module's own code failed while importing
        raise ValueError(
            f"backbone.module {spec!r}: importing {module_name} raised {type(err).__name__}"
        ) from None
    if not (inspect.isclass(target) and issubclass(target, nn.Module)):
        what = f"class {target.__name__}" if inspect.isclass(target) else type(target).__name__
        raise ValueError(
            f"backbone.module {spec!r}: a {what}, not a subclass of torch.nn.Module; name a "
            "network class (nothing was called)"
        )
    return target


def build_backbone(config: BackboneConfig, in_channels: int) -> nn.Module:
    """The frozen backbone: (N, c, S, S) images -> (N, grid^2, C) position features."""
    if config.kind == "random_conv":
        return RandomConv(
            in_channels, config.channels, config.layers, config.downsample, config.grid, config.seed
        )
    network = module_class(config.module)
    with torch.random.fork_rng(devices=[]):  # user classes draw from the global generator:
        torch.manual_seed(config.seed)  # seed it inside a fork, leaving the caller's untouched
        try:
            module = network(**config.module_kwargs)
        except (Exception, SystemExit) as err:  # SystemExit too: never a silent exit 0
            detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
            raise ValueError(
                f"backbone.module {config.module!r}: {network.__name__}(**module_kwargs) raised "
                + type(err).__name__
                + (f": {detail}" if detail else "")
            ) from None
    module.requires_grad_(False)
    return _FeatureMap(module, config.grid, config.module)


def cell_labels(labels: torch.Tensor, grid: int) -> torch.Tensor:
    """The majority class of each grid cell (-1 where no pixel is labelled).

    Shape: labels (N, S, S) int with -1 = unlabelled -> (N, grid^2) int64, row-major.
    """
    classes = int(labels.max()) + 1
    if classes <= 0:
        return torch.full((labels.shape[0], grid * grid), -1, dtype=torch.int64)
    one_hot = F.one_hot(labels.clamp(min=0).long(), classes).permute(0, 3, 1, 2).float()
    one_hot = one_hot * (labels >= 0)[:, None].float()  # (N, classes, S, S)
    share = F.adaptive_avg_pool2d(one_hot, grid).flatten(2)  # (N, classes, grid^2)
    best, cls = share.max(dim=1)
    return torch.where(best > 0, cls, torch.full_like(cls, -1))


class DenseEmbedder:
    """Embeds image shards: `embedder(item)` writes the position features of the item's shard
    under the item's encoder (`checkpoints`: {epoch: weights file} of the pretrained one)."""

    def __init__(
        self,
        dense: DenseConfig,
        channels: int,
        data_dir: Path,
        features_dir: Path,
        staging: Path,
        checkpoints: dict[int, Path] | None = None,
    ) -> None:
        self.dense, self.channels = dense, channels
        self.data_dir, self.features_dir, self.staging = data_dir, features_dir, staging
        self.checkpoints = checkpoints or {}
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.epoch: int | None = None
        self.backbone = build_backbone(dense.backbone, channels).to(self.device).eval()

    def _use(self, epoch: int | None) -> None:
        """Hold the encoder of `epoch` (one at a time: items come ordered by epoch)."""
        if epoch == self.epoch:
            return
        net = (
            build_backbone(self.dense.backbone, self.channels)
            if epoch is None
            else load_checkpoint(store.fetch(self.checkpoints[epoch]), self.dense, self.channels)
        )
        self.backbone, self.epoch = net.to(self.device).eval(), epoch

    @torch.no_grad()
    def _features(self, pixels: np.ndarray) -> np.ndarray:
        """Shape: pixels (N, c s s) uint8 -> (N, grid^2 * C) float32."""
        s = self.dense.views.size
        out = []
        for start in range(0, pixels.shape[0], self.dense.backbone.batch_rows):
            batch = torch.tensor(pixels[start : start + self.dense.backbone.batch_rows])
            x = batch.to(self.device).float().div_(255.0).reshape(-1, self.channels, s, s)
            features = self.backbone(x).float().cpu().flatten(1)
            if not torch.isfinite(features).all():
                raise ValueError(
                    f"dense.backbone ({self.dense.backbone.module or self.dense.backbone.kind}): "
                    "non-finite features (NaN or inf) on images of this shard"
                )
            out.append(features)
        return torch.cat(out).numpy()

    def __call__(self, item: EmbedItem | Path) -> str:
        item = item if isinstance(item, EmbedItem) else EmbedItem(None, item)
        self._use(item.epoch)
        shard = item.shard
        table = pq.read_table(store.fetch(shard))  # a worker of another node: from the store
        grid, s = self.dense.backbone.grid, self.dense.views.size
        labels = [
            cell_labels(
                torch.from_numpy(list_to_numpy(table.column(c), np.int64)).view(-1, s, s), grid
            )
            for c in ("labels1", "labels2")
        ]
        box1, box2 = (
            torch.tensor(list_to_numpy(table.column(c), np.float64)) for c in ("box1", "box2")
        )
        flip1, flip2 = (torch.tensor(table.column(c).to_numpy()) for c in ("flip1", "flip2"))
        match = box_correspondence(box1, box2, flip1, flip2, (grid, grid), (grid, grid)).numpy()
        columns = {
            "id": table.column("id"),
            "f1": list_column(self._features(list_to_numpy(table.column("view1"), None))),
            "f2": list_column(self._features(list_to_numpy(table.column("view2"), None))),
            "match": list_column(match, np.int16),
            "labels1": list_column(labels[0].numpy(), np.int16),
            "labels2": list_column(labels[1].numpy(), np.int16),
        }
        target = features_dir_of(self.features_dir, item.epoch) / shard.relative_to(self.data_dir)
        write_parquet_atomic(pa.table(columns), target, self.staging)
        return str(target)
