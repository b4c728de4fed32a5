"""The code's shape, guarded: no product module over 1,000 lines, and module docstrings that say
what and why in a paragraph or two (the reference lives in ``docs/``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = sorted([*(ROOT / "operator").rglob("*.py"), *(ROOT / "runtime").rglob("*.py")])
MAX_LINES = 1000
#: A module docstring longer than this is an essay: its reference belongs in docs/.
MAX_DOCSTRING_LINES = 30


def test_the_product_has_modules_to_check() -> None:
    assert len(PRODUCT) > 50


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_product_module_is_over_a_thousand_lines(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it by concern"


@pytest.mark.parametrize("path", PRODUCT, ids=lambda p: str(p.relative_to(ROOT)))
def test_module_docstrings_are_short(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    lines = docstring.count("\n") + 1 if docstring else 0
    assert lines <= MAX_DOCSTRING_LINES, (
        f"{path.relative_to(ROOT)}'s docstring has {lines} lines: keep what and why, move the rest to docs/")
