"""The layers of crl as a contract (pyproject's [tool.importlinter]), and proof that it bites."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

LINT = [
    sys.executable,
    "-c",
    "import sys; from importlinter.cli import lint_imports_command; "
    "sys.exit(lint_imports_command())",
]


def _lint(root: Path) -> subprocess.CompletedProcess:
    """lint-imports over the crl package found first on PYTHONPATH=root, with root's contracts."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [*LINT, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_contract_is_kept() -> None:
    out = _lint(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "8 kept, 0 broken" in out.stdout


LAZY = "def _lazy():\n    "  # an import inside a function
CIRCLE = "no import circle"


@pytest.fixture
def copy_of_crl(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "crl", tmp_path / "crl", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize(
    ("module", "statement", "contract"),
    [
        # an import inside a function counts: the lazy style of the orchestration layer
        ("kernels/losses.py", "def _leak():\n    import ray\n", "reaches ray and prefect"),
        ("kernels/rademacher/exact.py", "import polars\n", "know nothing of configs"),
        ("kernels/metrics.py", "def _leak():\n    import pyarrow\n", "know nothing of configs"),
        ("kernels/latent/model.py", "from prefect import task\n", "reaches ray and prefect"),
        ("steps/tables.py", "from prefect import flow\n", "reaches ray and prefect"),
        ("checks/li.py", "from crl.core import config\n", "know nothing of configs"),
        ("core/config.py", "import crl.kernels.losses\n", "stays at the bottom"),
        ("steps/unimodal/cell.py", "from crl.orchestration import runtime\n", "layers"),
        ("steps/unimodal/cell.py", "from crl.losses import hinge\n", "public aliases"),
        # one family reaching into another, lazily or not
        ("steps/dense/certify.py", "from crl.steps.unimodal.certify import within\n", "families"),
        ("steps/paired/split_cell.py", LAZY + "import crl.steps.dense.cell\n", "families"),
        # a circle: the dispatch imports every family; a family importing the dispatch back
        ("steps/unimodal/cell.py", LAZY + "from crl.steps import cells\n", CIRCLE),
        ("steps/figures.py", "from crl.steps import report\n", CIRCLE),
        ("kernels/_validate.py", LAZY + "from crl.kernels import stats\n", CIRCLE),
    ],
)
def test_a_wrong_import_breaks_its_contract(
    copy_of_crl: Path, module: str, statement: str, contract: str
) -> None:
    path = copy_of_crl / "crl" / module
    path.write_text(path.read_text() + "\n\n" + statement)
    out = _lint(copy_of_crl)
    assert out.returncode == 1, out.stdout
    broken = [line for line in out.stdout.splitlines() if line.rstrip().endswith("BROKEN")]
    assert any(contract in line for line in broken), out.stdout


# what a module that picks a family by hand looks like; only the families themselves (their
# `active`) and the config schema's cross-field checks may ask which family a config has
FAMILY_TESTS = (
    "config.dense is None",
    "config.dense is not None",
    "is_paired(",
    "isinstance(key",
    "isinstance(job",
)
MAY_ASK = {
    "crl/steps/unimodal/family.py",
    "crl/steps/paired/family.py",
    "crl/steps/dense/family.py",
}


def test_only_the_families_ask_which_family_a_config_has() -> None:
    found = [
        f"{path.relative_to(REPO)}: {test}"
        for path in sorted((REPO / "crl").rglob("*.py"))
        if str(path.relative_to(REPO)) not in MAY_ASK
        and not str(path.relative_to(REPO)).startswith("crl/core/")
        for test in FAMILY_TESTS
        if test in path.read_text()
    ]
    assert found == [], found
