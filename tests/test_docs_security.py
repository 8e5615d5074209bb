"""docs/security.md states what hpcdl promises; every promise names the test that shows it, and
every test it names exists (a renamed or deleted test would leave the page promising on nothing)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "security.md"
NAMED = re.compile(r"`(test_[a-z0-9_]+\.py)::(test_[A-Za-z0-9_]+)`")


def _bullets(text: str) -> list[str]:
    """The page's list items, each with its indented continuation lines."""
    items: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.startswith("- "):
            items.append(line)
            inside = True
        elif inside and line.startswith("  ") and line.strip():
            items[-1] += " " + line.strip()
        else:
            inside = False
    return items


def test_every_promise_on_the_security_page_names_its_test():
    bullets = _bullets(PAGE.read_text())
    assert len(bullets) >= 20
    bare = [item[:100] for item in bullets if not NAMED.search(item)]
    assert not bare, f"promises in docs/security.md that name no test: {bare}"


def test_every_test_the_security_page_names_exists():
    named = NAMED.findall(PAGE.read_text())
    assert len(named) >= 30
    missing = [f"{file}::{test}" for file, test in named
               if not (ROOT / "tests" / file).is_file()
               or not re.search(rf"^def {test}\(", (ROOT / "tests" / file).read_text(), re.M)]
    assert not missing, f"docs/security.md names tests that do not exist: {missing}"
