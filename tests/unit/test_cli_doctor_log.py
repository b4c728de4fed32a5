"""`ascend-llm doctor log`: the JSON it prints for every real log, standard input, -v, bad paths."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ascend_runtime import cli

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "reference-fixtures" / "vllm-logs"
EXPECTED = sorted(FIXTURES.glob("*.expected.json"))


def _log_of(expected: Path) -> Path:
    return expected.with_name(expected.name.replace(".expected.json", ".log"))


def test_fixtures_are_found() -> None:
    assert len(EXPECTED) >= 8


@pytest.mark.parametrize("expected", EXPECTED, ids=[p.name for p in EXPECTED])
def test_prints_the_outcome_of_each_fixture(expected: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["doctor", "log", str(_log_of(expected))]) == cli.EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert printed == {"outcome": json.loads(expected.read_text())["outcome"]}


@pytest.mark.parametrize("expected", EXPECTED, ids=[p.name for p in EXPECTED])
def test_reads_standard_input(
    expected: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(_log_of(expected).read_text(encoding="utf-8")))
    assert cli.main(["doctor", "log", "-"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["outcome"] == json.loads(expected.read_text())["outcome"]


def test_verbose_adds_the_evidence(capsys: pytest.CaptureFixture[str]) -> None:
    log = FIXTURES / "replay-507000-executeasync-piecewise-issue1999.log"
    assert cli.main(["doctor", "log", "-v", str(log)]) == cli.EXIT_OK
    printed = json.loads(capsys.readouterr().out)
    assert printed["outcome"] == "graph_replay_failure"
    assert printed["deciding"]["line"] == 45
    assert "AclmdlRIExecuteAsync" in printed["deciding"]["text"]
    assert printed["lines"] == 45


def test_missing_file_exits_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.log"
    assert cli.main(["doctor", "log", str(missing)]) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"cannot read {missing}" in captured.err and "No such file" in captured.err
