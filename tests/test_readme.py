"""The README stays a newcomer's page (issue 48): short, its links and the
links of ``docs/`` lead somewhere, and every ``simcoll`` command it shows is
one the command line has."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`([^`]+)`")
COMMAND = re.compile(r"(?<!from )\bsimcoll ([a-z][a-z-]*)(?:[ \t]+([a-z][a-z-]*))?")
#: Files the README's commands name in the repository (scripts, studies, benchmarks, notebooks).
REPO_PATH = re.compile(r"\b((?:scripts|experiments|benchmarks|notebooks)/[\w./-]*\w)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


def _code(text: str) -> list[str]:
    """Fenced blocks (but Python's) and inline code spans: where commands are shown."""
    fences = [block for block in FENCE.findall(text) if not block.startswith(("```python", "```pycon"))]
    return fences + INLINE_CODE.findall(_prose(text))


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    lines = _prose(path.read_text()).splitlines()
    return {_anchor(line.lstrip("#")) for line in lines if re.match(r"#{1,6} ", line)}


def _verbs() -> dict[str, set[str]]:
    """Every top-level ``simcoll`` verb, with the sub-verbs of those that have them."""
    from simcoll.cli import build_parser

    def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        found: dict[str, argparse.ArgumentParser] = {}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found.update(action.choices)
        return found

    return {verb: set(subcommands(sub)) for verb, sub in subcommands(build_parser()).items()}


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


def test_the_docs_pages_exist():
    names = {path.name for path in DOCS}
    assert {"accuracy.md", "scale.md", "simulator.md", "studies.md", "gpu.md", "synthesis.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    links = LINK.findall(_prose(page.read_text()))
    for target in links:
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.is_file(), f"{page.name}: link {target!r} leads to no file"
        if anchor and resolved.suffix == ".md":
            assert anchor in _anchors(resolved), f"{page.name}: link {target!r} names no heading of {resolved.name}"


def test_the_readme_links_every_docs_page():
    links = {target.partition("#")[0] for target in LINK.findall(_prose(README.read_text()))}
    for page in DOCS:
        assert f"docs/{page.name}" in links, f"README does not link docs/{page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_simcoll_command_shown_is_one_the_cli_has(page):
    verbs = _verbs()
    for code in _code(page.read_text()):
        for verb, sub in COMMAND.findall(code):
            assert verb in verbs, f"{page.name}: 'simcoll {verb}' is no command"
            if verbs[verb] and sub:
                assert sub in verbs[verb], f"{page.name}: 'simcoll {verb} {sub}' is no command"


def test_the_readme_tour_shows_each_step_and_the_two_commands():
    text = README.read_text()
    shown = {verb for code in _code(text) for verb, _ in COMMAND.findall(code)}
    assert {"topo", "algo", "synth", "verify", "simulate", "compare", "sweep", "calibrate"} <= shown
    assert "bash scripts/compare.sh" in text and "bash scripts/test.sh" in text


def test_every_repository_file_the_readme_names_exists():
    named = {path for code in _code(README.read_text()) for path in REPO_PATH.findall(code)}
    assert "scripts/compare.sh" in named
    for path in named:
        assert (ROOT / path).exists(), f"README names {path}, which is not in the repository"
