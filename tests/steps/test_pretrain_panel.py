"""The report's by-epoch panels: one line per objective and per head setting the grid varies,
so two heads of one objective are never joined into one line."""

from __future__ import annotations

import polars as pl

from crl.steps import pretrain_panel


def _summary(**settings: list) -> pl.DataFrame:
    rows = []
    for R in settings.get("R", [1.0]):
        for epoch in (0, 10):
            rows.append(
                {"regime": "scrl", "negatives": "ext", "correspondence": "geometric", "lam": 1.0,
                 "R": R, "temperature": 1.0, "m": 16, "n": 256, "encoder_epoch": epoch,
                 "mi_estimate_mean": R * (1 + epoch / 10)}
            )  # fmt: skip
    return pl.from_dicts(rows)


def test_a_varying_head_setting_splits_the_lines_and_a_constant_one_does_not() -> None:
    two = _summary(R=[1.0, 4.0])
    keys = pretrain_panel.curve_keys(two, pretrain_panel.DENSE)
    assert keys == ["regime", "negatives", "correspondence", "lam", "R"]
    lines = pretrain_panel.at_largest(two, pretrain_panel.DENSE).group_by(keys, maintain_order=True)
    assert [line["mi_estimate_mean"].to_list() for _, line in lines] == [[1.0, 2.0], [4.0, 8.0]]
    one = _summary()
    assert "R" not in pretrain_panel.curve_keys(one, pretrain_panel.DENSE)
    assert pretrain_panel._label(keys, ("scrl", "ext", "geometric", 1.0, 4.0)) == (
        "scrl ext geometric 1.0 R=4"
    )
