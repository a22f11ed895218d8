"""The docs cannot rot: docs/tables.md's column reference is what crl/steps/columns.json
generates, every column and every config key is on its page, every relative link of the
Markdown pages resolves (file and heading), and nothing in the repository names a file outside
it."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import get_args
from urllib.parse import unquote

import pytest
from pydantic import BaseModel

from crl.core.config import CheckConfig, Config
from crl.steps import schema
from tests.conftest import REPO

TABLES_PAGE = REPO / "docs" / "tables.md"
CONFIGS_PAGE = REPO / "docs" / "configs.md"
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:id|name)=\"([^\"]+)\"", re.IGNORECASE)
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)
OUTSIDE = re.compile(r"\.\./shared|THEORY\.md|BOUNDS(-DENSE)?\.md|MSTAR-DESIGN\.md")


def _repository_files() -> list[Path]:
    """Tracked files and untracked ones git does not ignore, that exist in the working tree."""
    try:
        listed = [
            subprocess.run(
                ["git", "-C", str(REPO), "ls-files", "-z", *extra],
                capture_output=True,
                check=True,
                text=True,
            ).stdout
            for extra in ([], ["--others", "--exclude-standard"])
        ]
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    names = sorted({n for out in listed for n in out.split("\0") if n})
    return [REPO / n for n in names if (REPO / n).is_file()]


def _markdown_pages() -> list[Path]:
    return [p for p in _repository_files() if p.suffix == ".md"]


def _outside_code(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of `text` outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text, lower case, punctuation other than '-' and '_'
    dropped, spaces to '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (repeats numbered as GitHub does) and HTML anchors."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    for _, line in _outside_code(page.read_text(encoding="utf-8")):
        anchors |= set(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading:
            slug = _slug(heading.group(2))
            anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _links(page: Path) -> Iterator[tuple[int, str]]:
    """(line number, target) of every inline and reference link of a page, outside code."""
    for number, line in _outside_code(page.read_text(encoding="utf-8")):
        bare = CODE_SPAN.sub("", line)
        for target in LINK.findall(bare):
            yield number, target
        reference = REFERENCE.match(bare)
        if reference:
            yield number, reference.group(1)


def _target(page: Path, path: str) -> Path:
    """The file a link's path names: relative to its page, or to the repository with a '/'."""
    if path.startswith("/"):
        return (REPO / path.lstrip("/")).resolve()
    return (page.parent / path).resolve() if path else page.resolve()


def test_the_column_reference_is_generated_from_columns_json() -> None:
    page = TABLES_PAGE.read_text(encoding="utf-8")
    if schema.generated_part(page) != schema.markdown().strip("\n"):
        pytest.fail(
            "docs/tables.md is stale against crl/steps/columns.json: run `make docs` "
            "(crl docs tables) and commit the page"
        )


def test_every_column_is_on_the_tables_page() -> None:
    page = TABLES_PAGE.read_text(encoding="utf-8")
    missing = [
        f"{table}.{column}"
        for table, columns in schema.tables().items()
        for column in columns
        if f"`{column}`" not in page
    ]
    if missing:
        pytest.fail(f"columns not in docs/tables.md: {missing}")


def _models_in(annotation: object) -> list[type[BaseModel]]:
    """The config sections an annotation holds (through Optional, Annotated, unions, lists)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def config_keys(
    model: type[BaseModel], path: str, heading: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], str, str]]:
    """(what the heading of its section names, leaf, dotted key) of every key of `model`,
    recursively: a section's keys under the heading that names its path, each kind of a
    section chosen by `kind` (dataset, dense.images) under the heading that names path and
    kind."""
    for name, field in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        yield heading, name, dotted
        sections = _models_in(field.annotation)
        for section in sections:
            if len(sections) > 1:
                kind = get_args(section.model_fields["kind"].annotation)[0]
                yield from config_keys(section, dotted, (dotted, kind))
            else:
                yield from config_keys(section, dotted, (dotted,))


def _sections(text: str) -> list[tuple[set[str], set[str]]]:
    """Per heading: the code spans of the heading, and those of the heading and its text up to
    the next heading."""
    sections: list[tuple[set[str], set[str]]] = []
    for _, line in _outside_code(text):
        spans = {span.strip() for _, span in CODE_SPAN.findall(line)}
        if HEADING.match(line):
            sections.append((spans, set(spans)))
        elif sections:
            sections[-1][1].update(spans)
    return sections


def test_the_key_walk_reaches_every_kind_of_section() -> None:
    keys = {dotted for _, _, dotted in config_keys(Config, "", ("crl run",))}
    assert {
        "dataset.clip",
        "dataset.x_column",
        "dense.images.pool_size",
        "eval.ladder.noise",
    } <= keys
    assert {"encoder.pretrain.fraction", "dense.pretrain.use_gpu", "dense.backbone.module"} <= keys
    checks = {dotted for _, _, dotted in config_keys(CheckConfig, "", ("crl check",))}
    assert {"chunk", "constants.confidence"} <= checks


def test_every_config_key_is_on_the_configs_page() -> None:
    """Each key is named in code (`leaf` or `dotted.key`) in a section whose heading names, in
    code, its section's path (`eval.ladder`; `dataset` and its kind `synthetic`; `crl run` or
    `crl check` for the top level)."""
    sections = _sections(CONFIGS_PAGE.read_text(encoding="utf-8"))
    keys = [
        *config_keys(Config, "", ("crl run",)),
        *config_keys(CheckConfig, "", ("crl check",)),
    ]
    missing = [
        f"{dotted} (under a heading naming {' and '.join(heading)})"
        for heading, leaf, dotted in keys
        if not any(set(heading) <= named and {leaf, dotted} & spans for named, spans in sections)
    ]
    if missing:
        pytest.fail("config keys not in docs/configs.md: " + ", ".join(missing))


def test_every_relative_link_resolves() -> None:
    root = REPO.resolve()
    broken = []
    for page in _markdown_pages():
        name = page.relative_to(REPO)
        if name != Path("README.md") and name.parts[0] != "docs":
            continue
        for number, target in _links(page):
            if not target or SCHEME.match(target):
                continue
            path, _, anchor = unquote(target).partition("#")
            where = f"{name}:{number}: {target}"
            file = _target(page, path)
            if not file.is_relative_to(root):
                broken.append(f"{where} (outside the repository)")
            elif not file.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
                broken.append(f"{where} (no such heading)")
    if broken:
        pytest.fail("broken links:\n" + "\n".join(broken))


def test_no_markdown_link_leaves_the_repository() -> None:
    root = REPO.resolve()
    leaving = [
        f"{page.relative_to(REPO)}:{number}: {target}"
        for page in _markdown_pages()
        for number, target in _links(page)
        if target
        and not SCHEME.match(target)
        and not _target(page, unquote(target).partition("#")[0]).is_relative_to(root)
    ]
    if leaving:
        pytest.fail("links to files outside the repository:\n" + "\n".join(leaving))


def test_nothing_names_a_file_outside_the_repository() -> None:
    """The theory, bounds and design notes live in docs/ now; no file may cite the old names or
    the shared folder beside the checkout."""
    hits = []
    for file in _repository_files():
        if file.resolve() == Path(__file__).resolve():
            continue
        data = file.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            found = OUTSIDE.search(line)
            if found:
                hits.append(f"{file.relative_to(REPO)}:{number}: {found.group(0)}")
    shown = "\n".join(hits[:40]) + (f"\n... and {len(hits) - 40} more" if len(hits) > 40 else "")
    if hits:
        pytest.fail(f"{len(hits)} references to files outside the repository:\n{shown}")
