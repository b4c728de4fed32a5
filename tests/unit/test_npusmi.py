"""The npu-smi parser against every real sample in shared/reference/fixtures/npu-smi.

Each ``*.txt`` is compared as a whole with its ``.expected.json`` (parametrised over the folder,
so samples added later are tested too), then layout variations the samples imply (wider
columns, missing closing bars, CRLF), the documented ``-t proc-mem`` format, and input that is
not npu-smi output.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ascend_runtime.memory.npusmi import NpuSmiParseError, parse_npu_smi

# The real samples of ../shared/reference/fixtures, copied into the repository (CI has no network).
FIXTURES = Path(__file__).resolve().parents[1] / "data" / "reference-fixtures" / "npu-smi"
SAMPLES = sorted(FIXTURES.glob("*.txt"))


def expected_for(sample: Path) -> dict:
    data = json.loads(sample.with_name(sample.stem + ".expected.json").read_text(encoding="utf-8"))
    data.pop("notes", None)  # free-text notes are for people, not part of the output
    return data


def test_fixture_folder_is_present() -> None:
    assert SAMPLES, f"no npu-smi samples found in {FIXTURES}"


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.stem for s in SAMPLES])
def test_sample_parses_to_expected_json(sample: Path) -> None:
    report = parse_npu_smi(sample.read_text(encoding="utf-8"))
    assert report.to_json() == expected_for(sample)


INFO_SAMPLES = [s for s in SAMPLES if s.name.startswith("info-")]


@pytest.mark.parametrize("sample", INFO_SAMPLES, ids=[s.stem for s in INFO_SAMPLES])
def test_crlf_and_missing_closing_bars_do_not_change_the_result(sample: Path) -> None:
    text = sample.read_text(encoding="utf-8")
    mangled = "\r\n".join(line.rstrip().removesuffix("|") for line in text.splitlines())
    assert parse_npu_smi(mangled).to_json() == expected_for(sample)


@pytest.mark.parametrize("sample", INFO_SAMPLES, ids=[s.stem for s in INFO_SAMPLES])
def test_wider_columns_do_not_change_the_result(sample: Path) -> None:
    # Another npu-smi build pads cells differently: parse by cells, not offsets.
    text = sample.read_text(encoding="utf-8")
    widened = "\n".join(line.replace("|", " |  ").replace("+", "+---") for line in text.splitlines())
    assert parse_npu_smi(widened).to_json() == expected_for(sample)


def test_version_is_read_from_the_banner() -> None:
    report = parse_npu_smi((FIXTURES / "info-910b3-8chip-issue6299.txt").read_text(encoding="utf-8"))
    assert report.version == "25.0.rc1.b010"
    assert report.kind == "info"


def test_hbm_value_that_is_not_a_pair_is_refused_not_replaced_by_ddr() -> None:
    text = """\
| npu-smi 24.1.0                   Version: 24.1.0                                               |
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
| 3     910B3               | OK            | 98.3        43                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          NA / 65536           |
"""
    with pytest.raises(NpuSmiParseError, match=r"line 5: expected `used / total` MB under HBM-Usage"):
        parse_npu_smi(text)


PROC_MEM = """\
\tNPU ID                         : 2
\tChip ID                        : 0
Process id:207795  Process name:VLLMEngineCor  Process memory(MB):55436
Process id:207801  Process name:  Process memory(MB):141
"""


def test_proc_mem_lines_follow_the_documented_format() -> None:
    # No real capture of `-t proc-mem` exists in the fixtures; this is the documented line shape.
    assert parse_npu_smi(PROC_MEM).to_json() == {
        "processes": [
            {"npu": 2, "chip": 0, "pid": 207795, "name": "VLLMEngineCor", "memory_mb": 55436},
            {"npu": 2, "chip": 0, "pid": 207801, "name": "", "memory_mb": 141},
        ]
    }


def test_proc_mem_with_no_process() -> None:
    assert parse_npu_smi("No process in device.\n").to_json() == {"processes": []}


def test_usages_block_with_chip_id_first_names_the_following_block() -> None:
    text = (
        "NPU ID : 4\nChip Count : 2\n\nChip ID : 0\nHBM Capacity(MB) : 65536\nHBM Usage Rate(%) : 91\n"
        "\nChip ID : 1\nHBM Capacity(MB) : 65536\nHBM Usage Rate(%) : 3\n"
    )
    assert parse_npu_smi(text).to_json() == {
        "chips": [
            {"npu": 4, "chip": 0, "hbm_total_mb": 65536, "hbm_usage_rate_pct": 91},
            {"npu": 4, "chip": 1, "hbm_total_mb": 65536, "hbm_usage_rate_pct": 3},
        ]
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "the input is empty"),
        ("Traceback (most recent call last):\n  File x\n", "expected the output of `npu-smi info`"),
        ("dcmi module initialize failed. ret is -8005\n", "found none of them"),
    ],
)
def test_text_that_is_not_npu_smi_output_is_refused(text: str, message: str) -> None:
    with pytest.raises(NpuSmiParseError, match=message):
        parse_npu_smi(text)


def test_header_without_chip_rows_is_refused() -> None:
    text = (
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n"
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n"
    )
    with pytest.raises(NpuSmiParseError, match="no chip rows"):
        parse_npu_smi(text)


def test_truncated_chip_pair_names_the_line() -> None:
    text = (FIXTURES / "info-910b4-4chip-noproc-issue1401.txt").read_text(encoding="utf-8")
    lines = text.splitlines()
    second_row = next(i for i, line in enumerate(lines) if "0000:" in line)
    del lines[second_row]
    with pytest.raises(NpuSmiParseError, match=r"line \d+: expected the chip's second row"):
        parse_npu_smi("\n".join(lines))
