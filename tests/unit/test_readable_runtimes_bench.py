"""bench/readable_runtimes.py and operator_scale's ``--readable-runtimes``: the stand-in serves the
runtime's own ``/state`` (tagged, 304 to a matching ask) while its health samples move, and counts
its answers by status; the route makes a whole range local and is gone after the block; the
project's operator is told to read pod IPs (the minimal ones are not); the table shows the answers.
bench/read_connections.py prints its two ways side by side and rereads a saved report.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest
from ascend_operator.podreads import PodReader
from ascend_runtime.config import RuntimePhase
from benchload import load_bench

rr = load_bench("readable_runtimes")
osb = load_bench("operator_scale")


def test_the_stand_in_answers_ready_states_tagged_and_counts_its_answers(tmp_path) -> None:
    standin = rr.StandIn(osb.free_port(), osb.free_port(), tmp_path / "standin.log", sample_s=0.05)
    standin.start()

    async def two_reads():
        reader = PodReader(None, timeout_s=5, via_proxy=False)  # type: ignore[arg-type]
        try:
            first = await reader.read_state("llm", "a-0", standin.port, pod_ip="127.0.0.1")
            await asyncio.sleep(0.3)  # several health samples later
            return first, await reader.read_state("llm", "a-0", standin.port, pod_ip="127.0.0.1")
        finally:
            await reader.close()

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{standin.port}/state") as response:
            full = response.read()
        assert b'"used_mb"' in full  # the samples are there for a full read
        first, second = asyncio.run(two_reads())
        assert first is not None and first.phase is RuntimePhase.READY and first.ready
        assert first.versions["vllm"] and second is first
        assert standin.answers() == {"200": 2, "304": 1}
        assert standin.cpu_s() > 0
    finally:
        standin.stop()
    assert standin.process is not None and standin.process.poll() is not None


def test_the_operator_reads_pod_ips_only_when_the_runtimes_are_readable(tmp_path) -> None:
    base = dict(api=None, crd=None, example={}, count=1, workers=1, resync_s=30, idle_window_s=65,
                converge_timeout_s=1, restart_quiet_s=1, restart_timeout_s=1, kubeconfig="k", log_dir=tmp_path)
    plain = osb.RunContext(**base)
    readable = osb.RunContext(**base, standin=rr.StandIn(1, 2, tmp_path / "log"))
    assert "ASCEND_LLM_OPERATOR_STATE_READ" not in osb.operator_env(plain, osb.OURS)
    assert osb.operator_env(readable, osb.OURS)["ASCEND_LLM_OPERATOR_STATE_READ"] == "podIP"
    assert osb.operator_env(readable, osb.BASELINE)["ASCEND_LLM_OPERATOR_STATE_READ"] == "podIP"
    assert "ASCEND_LLM_OPERATOR_STATE_READ" not in osb.operator_env(readable, osb.MINIMAL_SAME)


def test_the_table_shows_the_runtimes_answers_only_when_they_were_readable() -> None:
    ours = osb.OperatorResult(name="ours", count=10, idle_state_answers={"200": 3, "304": 97},
                              idle_standin_cpu_cores=0.012)
    other = osb.OperatorResult(name="minimal", count=10)
    table = osb.format_table([ours, other]).splitlines()
    at = table.index("| runtime /state answers 200 / 304 in the idle window (readable runtimes) | 3 / 97 | - |")
    assert table[at - 1].startswith("| pod proxy reads")
    assert table[at + 1] == "| the stand-in runtimes' CPU in the idle window (cores) | 0.012 | - |"
    assert not any("runtime /state answers" in line for line in osb.format_table([other]).splitlines())


@pytest.mark.skipif(os.geteuid() != 0, reason="adding a route needs root (CI runs as root)")
def test_the_local_route_delivers_a_whole_range_here_and_is_removed_after(tmp_path) -> None:
    cidr, address = "10.254.250.0/24", "10.254.250.7"
    with socket.create_server(("0.0.0.0", 0)) as server:
        port = server.getsockname()[1]
        with rr.local_route(cidr):
            with socket.create_connection((address, port), timeout=5):
                pass
        routes = subprocess.run(["ip", "route", "show", "table", "local"], capture_output=True, text=True,
                                check=True).stdout
        assert cidr.split("/")[0] not in routes
        started = time.monotonic()
        with pytest.raises(OSError):
            socket.create_connection((address, port), timeout=2).close()
        assert time.monotonic() - started < 10


def test_read_connections_prints_both_ways_side_by_side_and_rereads_its_report(tmp_path, capsys) -> None:
    rc = load_bench("read_connections")
    rows = [{"connections": "closed after each read", "pods": 10, "cpu_us_per_read": 500.0, "resync_wall_s": 0.1,
             "rss_held_mb": 0.1, "descriptors_held": 0},
            {"connections": "kept alive", "pods": 10, "cpu_us_per_read": 180.0, "resync_wall_s": 0.05,
             "rss_held_mb": 0.2, "descriptors_held": 10}]
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps({"pods": 10, "rows": rows}))
    assert rc.main(["--reread", str(saved)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| closed after each read | 10 | 500.0 | 0.1 | 0.1 | 0 |"
    assert lines[3] == "| kept alive | 10 | 180.0 | 0.05 | 0.2 | 10 |"


def test_a_route_that_cannot_be_added_names_the_flag_and_root(monkeypatch) -> None:
    # What `ip route add` answers a user who is not root; nothing is run after it, nothing removed.
    calls: list[list[str]] = []

    def refused(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 2, "", "RTNETLINK answers: Operation not permitted\n")

    monkeypatch.setattr(rr.subprocess, "run", refused)
    with pytest.raises(RuntimeError, match=r"Operation not permitted.*--readable-runtimes needs root"):
        with rr.local_route("10.254.251.0/24"):
            pytest.fail("the block must not run without the route")
    assert calls == [["ip", "route", "add", "local", "10.254.251.0/24", "dev", "lo"]]
