"""The pure parts of bench/cpu_threads.py: the per-cell statistics and the table."""

from __future__ import annotations

import json

from benchload import load_bench

ct = load_bench("cpu_threads")


def test_cell_stats_takes_the_median_per_gap_and_the_worst_gap_over_no_gap() -> None:
    stats = ct.cell_stats({0.0: [0.040, 0.030, 0.050], 0.5: [0.120, 0.090, 0.100], 2.0: [0.045, 0.041, 0.043]})
    assert stats["medianS"] == {"0.0": 0.040, "0.5": 0.100, "2.0": 0.043}
    assert abs(stats["worstOverNoGap"] - 2.5) < 1e-9


def test_cell_stats_without_a_no_gap_wave_has_no_ratio() -> None:
    assert ct.cell_stats({0.5: [0.1], 0.0: []}) == {"medianS": {"0.5": 0.1}, "worstOverNoGap": None}


def test_format_report_puts_each_setting_and_cell_on_a_row(tmp_path, capsys) -> None:
    report = {"gapsS": [0.0, 0.5], "repeats": 5, "variants": [
        {"name": "default", "what": "the runtime's default", "env": {}, "healthS": 50.0,
         "cells": [{"promptTokens": 24, "batch": 1, **ct.cell_stats({0.0: [0.035], 0.5: [0.032]})}]},
        {"name": "bound-all-cores", "what": "every core", "env": {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}, "healthS": 54.0,
         "cells": [{"promptTokens": 24, "batch": 1, **ct.cell_stats({0.0: [0.041], 0.5: [0.087]})}]}]}
    text = ct.format_report(json.loads(json.dumps(report)))
    assert text.splitlines()[2:6] == ["| setting | cell | 0.0 | 0.5 | worst/0 |", "|---|---|---|---|---|",
                                      "| default | 24x1 | 35 | 32 | 0.91x |",
                                      "| bound-all-cores | 24x1 | 41 | 87 | 2.12x |"]
    assert text.endswith("Settings:\n- default: the runtime's default\n- bound-all-cores: every core")
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert ct.main(["--reread", str(tmp_path / "r.json")]) == 0
    assert capsys.readouterr().out == text + "\n"


def test_every_setting_is_a_valid_engine_env_and_the_default_sets_nothing() -> None:
    assert ct.VARIANTS["default"][1] == {}
    assert all(set(env) <= {"VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS"} for _, env in ct.VARIANTS.values())


def test_reread_of_a_file_that_is_not_a_report_exits_2_naming_the_option(tmp_path, capsys) -> None:
    (tmp_path / "x.json").write_text("[1, 2]")
    assert ct.main(["--reread", str(tmp_path / "missing.json")]) == 2
    assert ct.main(["--reread", str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err.count("cpu_threads: --reread ") == 2
