"""`ascend-llm doctor npu-smi FILE`: JSON equal to each sample's .expected.json, stdin, errors."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from ascend_runtime.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

# The real samples of ../shared/reference/fixtures, copied into the repository (CI has no network).
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "reference-fixtures" / "npu-smi"
SAMPLES = sorted(FIXTURES.glob("*.txt"))


def expected_for(sample: Path) -> dict:
    data = json.loads(sample.with_name(sample.stem + ".expected.json").read_text(encoding="utf-8"))
    data.pop("notes", None)
    return data


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_file_argument_prints_expected_json(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "npu-smi", str(sample)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == expected_for(sample)


def test_dash_reads_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sample = FIXTURES / "info-a3-4chip-namedproc-nputop.txt"
    monkeypatch.setattr("sys.stdin", io.StringIO(sample.read_text(encoding="utf-8")))
    assert main(["doctor", "npu-smi", "-"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == expected_for(sample)


def test_unreadable_file_exits_non_zero_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.txt"
    assert main(["doctor", "npu-smi", str(missing)]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"cannot read {missing}" in captured.err


def test_text_that_is_not_npu_smi_says_what_was_expected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO 01-01 12:00:00 api_server.py:1] vLLM API server version 0.11.0\n", encoding="utf-8")
    assert main(["doctor", "npu-smi", str(log)]) == EXIT_FAILED
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "expected the output of `npu-smi info`" in captured.err
    assert str(log) in captured.err
