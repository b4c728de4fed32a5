"""bench/heap_probe.py's window: the differences between the probe's lines nearest a window's ends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchload import load_bench

probe = load_bench("heap_probe")
ROOT = Path(__file__).resolve().parents[2]


def line(t: float, full: int, inside: float, main_ticks: int, passes: int, frozen: int = 0) -> dict:
    return {"t": t, "gc": {"0": [10 * full, 0.1], "1": [full, 0.2], "2": [full, inside]}, "frozen": frozen,
            "counts": {"full passes": passes, "event Pod ADDED": 3}, "ticks_per_s": 100,
            "threads": {"1": ["MainThread", main_ticks], "2": ["probe", 5]}}


def test_the_window_is_the_difference_between_the_lines_nearest_its_ends() -> None:
    lines = [line(100, 1, 0.5, 1000, 7), line(110, 2, 0.9, 1500, 9, 40), line(120, 4, 1.5, 2500, 20, 50)]
    report = probe.window(lines, start=108, end=125, label="idle")
    assert report["window_s"] == 10
    assert report["gc"]["2"] == {"collections": 2, "seconds": 0.6, "cores": 0.06}
    assert report["frozen"] == [40, 50]
    assert report["threads"][0] == {"name": "MainThread", "cores": 1.0}  # 1,000 ticks of 100 in 10 s
    assert report["all_threads_cores"] == 1.0
    assert report["counts"] == {"full passes": 11}  # unchanged counts are left out
    text = probe.format_report({**report, "commit": "abc"})
    assert "| generation 2 | 2 | 0.60 | 0.0600 |" in text and "- full passes: 11" in text


def test_a_window_without_two_lines_is_refused() -> None:
    with pytest.raises(ValueError, match="pick a later --end"):
        probe.window([line(100, 1, 0.5, 1000, 7)], start=100, end=200, label="idle")
    with pytest.raises(ValueError, match="no lines"):
        probe.window([], start=0, end=1, label="idle")


def test_the_probe_records_only_in_an_operator_process(tmp_path: Path) -> None:
    """bench/probe_site's sitecustomize: other processes import it and do nothing."""
    out = tmp_path / "probe.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "bench" / "probe_site"), "PROBE_OUT": str(out)}
    code = "import sys, threading; print(sorted(t.name for t in threading.enumerate()))"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(result.stdout.replace("'", '"')) == ["MainThread"]
    result = subprocess.run([sys.executable, "-c", code, "operator", "run"], env=env, capture_output=True,
                            text=True, check=True)
    assert "probe" in result.stdout


@pytest.mark.parametrize(("args", "named"), [
    (["--start", "half past two", "--end", "14:35:36"], "--start 'half past two'"),
    (["--start", "14:30:00", "--end", "later"], "--end 'later'"),
])
def test_a_time_that_is_neither_a_clock_nor_epoch_seconds_is_refused_naming_its_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str) -> None:
    source = tmp_path / "probe.jsonl"
    source.write_text(json.dumps(line(100, 1, 0.5, 1000, 7)) + "\n")
    with pytest.raises(SystemExit) as exit_:
        probe.main(["--from", str(source), *args])
    assert exit_.value.code == 2
    assert named in capsys.readouterr().err


def test_a_missing_or_foreign_probe_file_is_refused_naming_from(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for source, said in ((tmp_path / "none.jsonl", "No such file"), (ROOT / "README.md", "not the probe's file")):
        with pytest.raises(SystemExit):
            probe.main(["--from", str(source), "--start", "1", "--end", "2"])
        err = capsys.readouterr().err
        assert f"--from {source}" in err and said in err
