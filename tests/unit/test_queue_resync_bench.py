"""The pure part of bench/queue_resync.py (the table), and one small cell run for real."""

from __future__ import annotations

import asyncio
import json

from benchload import load_bench

qr = load_bench("queue_resync")


def test_format_report_puts_each_count_and_timer_setting_on_a_row() -> None:
    report = {"commit": "abc1234", "resyncS": 30.0, "seconds": 10.0, "cells": [
        {"count": 1000, "granularityS": 0.0, "resyncs": 333, "wallS": 10.0, "cpuS": 0.09, "perResyncUs": 274.2,
         "idleCores": 0.009},
        {"count": 1000, "granularityS": 1.0, "resyncs": 334, "wallS": 10.0, "cpuS": 0.012, "perResyncUs": 35.0,
         "idleCores": 0.0012},
        {"count": 1000, "granularityS": 1.0, "reads": "every", "runtimeReads": 331, "resyncs": 331, "wallS": 10.0,
         "cpuS": 0.09, "perResyncUs": 271.9, "idleCores": 0.009},
        {"count": 1000, "granularityS": 1.0, "reads": "settled", "runtimeReads": 60, "resyncs": 332, "wallS": 10.0,
         "cpuS": 0.026, "perResyncUs": 78.3, "idleCores": 0.0026},
        {"count": 5, "granularityS": 1.0, "resyncs": 0, "wallS": 10.0, "cpuS": 0.0, "perResyncUs": None,
         "idleCores": 0.0}]}
    lines = qr.format_report(json.loads(json.dumps(report))).splitlines()
    assert lines[0] == "Resyncs of settled resources every 30 s, 10 s measured per cell (commit abc1234):"
    assert lines[2:] == [
        "| resources | timers | runtimes | resyncs run | runtime reads | CPU per resync (us) | cores while idle |",
        "|---|---|---|---|---|---|---|",
        "| 1000 | one per resource | not read (not due) | 333 | 0 | 274 | 0.0090 |",
        "| 1000 | coarse (1 s) | not read (not due) | 334 | 0 | 35 | 0.0012 |",
        "| 1000 | coarse (1 s) | 304, asked every resync | 331 | 331 | 272 | 0.0090 |",
        "| 1000 | coarse (1 s) | 304, settled backoff | 332 | 60 | 78 | 0.0026 |",
        "| 5 | coarse (1 s) | not read (not due) | 0 | 0 | - | 0.0000 |"]


def test_an_unknown_read_mode_is_refused_naming_the_modes() -> None:
    import pytest

    with pytest.raises(ValueError, match="none, every, settled"):
        asyncio.run(qr.measure(5, 0.5, 0.1, 1.0, reads="sometimes"))


def test_a_cell_runs_every_resources_resync_through_the_skip_path() -> None:
    # 50 resources resynced every 0.5 s for 1 s: about 100 resyncs, none a full pass (the stand-in
    # API client has no patch_status: a full pass would fail and back off, running far fewer).
    cell = asyncio.run(qr.measure(50, 0.5, 1.0, 0.0))
    assert cell["count"] == 50 and 80 <= cell["resyncs"] <= 120
    assert cell["perResyncUs"] is not None and cell["perResyncUs"] > 0


def test_reread_of_a_file_that_is_not_a_report_exits_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert qr.main(["--reread", str(bad)]) == 2
    assert "--reread" in capsys.readouterr().err
