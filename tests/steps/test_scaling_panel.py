"""The report's scaling section: each quantity's exponent in n with its interval, drawn from the
summary rows of a group with at least three values of n."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from crl.steps import figures, ladder_panel, scaling_panel
from crl.steps.pages import html_table


def _summary(sizes: tuple[int, ...]) -> pl.DataFrame:
    rows = []
    for n in sizes:
        rows.append(
            {
                "regime": "scrl",
                "loss": "info_nce",
                "m": 16,
                "n": n,
                "gap_mean": -2.0 / n**0.5,  # the |gap| is drawn
                "best_bound_mean": 40.0 / n**0.5,
                "best_dense_bound_mean": None,
                "test_loss_m_mean": 2.0,
                "cert_test_set_mean": 2.0 + 3.0 / n,
                "gibbs_test_loss_mean": 2.1,
                "cert_pb_data_mean": 2.1 + 5.0 / n**0.25,
                "cert_pb_free_mean": None,
                "cert_pb_free_gibbs_test_mean": None,
            }
        )
    return pl.DataFrame(rows)


def test_each_line_carries_its_exponent(tmp_path: Path) -> None:
    drawn = {line["quantity"]: line for line in scaling_panel.lines(_summary((256, 1024, 4096)))}
    assert set(drawn) == {
        "gap_mean",
        "best_bound_mean",
        "cert_test_set_mean - test_loss_m_mean",
        "cert_pb_data_mean - gibbs_test_loss_mean",
    }
    assert drawn["gap_mean"]["slope_n"] == pytest.approx(-0.5)
    assert drawn["best_bound_mean"]["slope_n"] == pytest.approx(-0.5)
    assert drawn["cert_test_set_mean - test_loss_m_mean"]["slope_n"] == pytest.approx(-1.0)
    assert drawn["cert_pb_data_mean - gibbs_test_loss_mean"]["slope_n"] == pytest.approx(-0.25)
    assert drawn["gap_mean"]["slope_n_ci"] == pytest.approx(0.0, abs=1e-6)

    staging = tmp_path / ".staging"
    html = scaling_panel.section(
        _summary((256, 1024, 4096)),
        tmp_path,
        lambda fig, path: figures.save_png(fig, path, staging),
        html_table,
        ladder_panel.UNIMODAL_KEYS,
        "scaling.png",
    )
    assert 'src="scaling.png"' in html and "slope_n_ci" in html
    assert (tmp_path / "scaling.png").stat().st_size > 10_000
    # two sizes of n: no exponent with an interval, no section
    two = scaling_panel.section(
        _summary((256, 1024)), tmp_path, lambda f, p: None, html_table, ("regime",), "x.png"
    )
    assert two == ""
