"""crl.kernels.encoders: frozen random backbones, deterministic from a seed."""

from __future__ import annotations

import pytest
import torch

from crl.kernels.encoders import MLP, RandomFeatures, SmallCNN, build_encoder, square_side


@pytest.mark.parametrize(("in_dim", "side"), [(1, 1), (4, 2), (16, 4), (64, 8), (784, 28)])
def test_square_side(in_dim: int, side: int) -> None:
    assert square_side(in_dim) == side


@pytest.mark.parametrize("in_dim", [2, 3, 30, 63, 65, 783])
def test_square_side_refuses_non_squares(in_dim: int) -> None:
    with pytest.raises(ValueError, match=f"length {in_dim} are not square"):
        square_side(in_dim)


def _x(rows: int, width: int) -> torch.Tensor:
    return torch.rand(rows, width, generator=torch.Generator().manual_seed(0))


def test_random_features_shape_and_formula() -> None:
    enc = RandomFeatures(7, 5, seed=3)
    x = _x(4, 7)
    out = enc(x)
    assert out.shape == (4, 5)
    expected = torch.relu(x @ enc.weight.T + enc.bias) / 5**0.5
    assert torch.allclose(out, expected)
    assert (out >= 0).all()
    assert enc.weight.shape == (5, 7) and enc.bias.shape == (5,)


def test_random_features_are_deterministic_from_the_seed() -> None:
    a, b, c = RandomFeatures(7, 5, 3), RandomFeatures(7, 5, 3), RandomFeatures(7, 5, 4)
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    assert not torch.equal(a.weight, c.weight)
    torch.manual_seed(123)  # the global RNG plays no part
    d = RandomFeatures(7, 5, 3)
    assert torch.equal(a.weight, d.weight)


def test_random_features_are_frozen() -> None:
    enc = RandomFeatures(7, 5, 0)
    assert list(enc.parameters()) == []  # buffers only: nothing to train
    assert {name for name, _ in enc.named_buffers()} == {"weight", "bias"}
    x = _x(3, 7).requires_grad_(False)
    assert not enc(x).requires_grad


def test_small_cnn_shapes() -> None:
    for in_dim, out_dim in ((64, 10), (16, 3), (1, 2)):
        enc = SmallCNN(in_dim, out_dim, seed=0)
        assert enc.side == square_side(in_dim)
        assert enc(_x(5, in_dim)).shape == (5, out_dim)
    with pytest.raises(ValueError, match="not square"):
        SmallCNN(30, 4, seed=0)


def test_small_cnn_is_deterministic_from_the_seed() -> None:
    a, b, c = SmallCNN(64, 6, 1), SmallCNN(64, 6, 1), SmallCNN(64, 6, 2)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.conv1.weight, c.conv1.weight)
    x = _x(3, 64)
    assert torch.equal(a(x), b(x))
    assert not torch.allclose(a(x), c(x))
    torch.manual_seed(99)
    assert torch.equal(SmallCNN(64, 6, 1).head.weight, a.head.weight)


def test_small_cnn_is_frozen() -> None:
    enc = SmallCNN(16, 4, 0)
    params = list(enc.parameters())
    assert params and not any(p.requires_grad for p in params)
    assert not enc(_x(2, 16)).requires_grad


def test_small_cnn_rows_are_independent() -> None:
    enc = SmallCNN(16, 4, 0)
    x = _x(6, 16)
    whole = enc(x)
    assert torch.allclose(torch.cat([enc(x[:2]), enc(x[2:])]), whole, atol=1e-6)


def test_mlp_is_the_two_layer_formula_deterministic_and_frozen() -> None:
    enc = MLP(7, 5, seed=3)
    x = _x(4, 7)
    hidden = torch.relu(x @ enc.hidden.weight.T + enc.hidden.bias)
    assert torch.allclose(enc(x), hidden @ enc.out.weight.T + enc.out.bias)
    assert enc.hidden.weight.shape == (5, 7) and enc.out.weight.shape == (5, 5)
    assert not any(p.requires_grad for p in enc.parameters())
    torch.manual_seed(5)  # the global RNG plays no part
    same, other = MLP(7, 5, seed=3), MLP(7, 5, seed=4)
    assert torch.equal(enc(x), same(x))
    assert not torch.allclose(enc(x), other(x))
    # N(0, 1/fan in) entries: the sample variance of 7 * 5 first-layer weights times fan in
    big = MLP(400, 300, seed=0)
    assert abs(float(big.hidden.weight.var()) * 400 - 1.0) < 0.02


@pytest.mark.parametrize(
    ("kind", "cls"),
    [("random_features", RandomFeatures), ("small_cnn", SmallCNN), ("mlp", MLP)],
)
def test_build_encoder_names_each_kind(kind: str, cls: type) -> None:
    enc = build_encoder(kind, 16, 4, seed=1)
    assert isinstance(enc, cls)
    assert enc(_x(3, 16)).shape == (3, 4)
    assert torch.equal(build_encoder("identity", 16, 4, 1)(_x(3, 16)), _x(3, 16))
    with pytest.raises(ValueError, match="encoder kind: unknown 'vit'"):
        build_encoder("vit", 16, 4, 1)
