"""The docs stand alone: every relative link resolves inside the repository, nothing names notes outside it."""

from __future__ import annotations

import re

import pytest

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves_inside_the_repository(page):
    text = page.read_text()
    for target in re.findall(r"\]\(([^)\s#]+)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path = (page.parent / target).resolve()
        assert path.is_relative_to(ROOT.resolve()), f"{page.name}: {target} points outside the repository"
        assert path.exists(), f"{page.name}: {target} does not exist"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_sends_the_reader_to_notes_outside_the_repository(page):
    text = page.read_text()
    for outside in ("../shared", "shared/research", "shared/DESIGN", "local-stack.md"):
        assert outside not in text, f"{page.name} mentions {outside}"
