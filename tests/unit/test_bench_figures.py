"""The measured tables in bench/README.md are what each bench's ``--reread`` prints for the report
saved beside it in bench/results/: a figure edited by hand, or a new report without its table,
fails here. Other pages that quote a figure quote one of these reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchload import load_bench

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
#: Saved report -> the bench that wrote it.
REPORTS = {path.name: path.name.split("-", 1)[0] for path in sorted(RESULTS.glob("*.json"))}


def report(name: str) -> dict:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(REPORTS))
def test_the_readme_holds_every_line_that_reread_prints_for_the_saved_report(name: str) -> None:
    text = load_bench(REPORTS[name]).format_report(report(name))
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    assert [line for line in text.splitlines() if line.strip() and line not in readme] == []
    assert f"bench/results/{name}" in readme  # and it names the report
