"""The pure parts of the operator scale benchmark (bench/operator_scale.py): the writes and reads
read from the API server's ``apiserver_request_total`` text (with prometheus_client's parser), the
idle check after a restart, the lag statistics (the percentile of bench/loadgen.py), the verdict
against issue #10's targets and the table. Synthetic inputs with complete expected values; no
cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import asdict

import pytest
from benchload import load_bench


osb = load_bench("operator_scale")
Key = osb.WriteKey


def sample(verb: str, resource: str, value: int, *, group: str = "", subresource: str = "", code: str = "200",
           system_client: str = "", dry_run: str = "") -> str:
    return (f'apiserver_request_total{{code="{code}",component="apiserver",dry_run="{dry_run}",'
            f'group="{group}",resource="{resource}",scope="resource",subresource="{subresource}",'
            f'system_client="{system_client}",verb="{verb}",version="v1"}} {value}')


HEADER = ("# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb.\n"
          "# TYPE apiserver_request_total counter\n")
# Another family around it, as in the real /metrics text.
OTHER = ("# HELP apiserver_request_duration_seconds latency\n"
         "# TYPE apiserver_request_duration_seconds histogram\n"
         'apiserver_request_duration_seconds_bucket{verb="PATCH",le="0.1"} 99\n')


def metrics(*lines: str) -> str:
    return OTHER + HEADER + "\n".join(lines) + "\n" + OTHER


def test_parse_writes_counts_writes_of_non_system_clients_only() -> None:
    text = metrics(
        sample("APPLY", "configmaps", 7),
        sample("APPLY", "configmaps", 2, code="409"),  # refused writes are writes too
        sample("PATCH", "ascendllmdeployments", 5, group="llm.ascend.dev", subresource="status"),
        sample("POST", "events", 3),
        sample("DELETE", "deployments", 1, group="apps"),
        sample("PUT", "deployments", 4, group="apps", subresource="status",
               system_client="kube-controller-manager"),
        sample("APPLY", "configmaps", 6, dry_run="All"),
        sample("GET", "configmaps", 100),
        sample("LIST", "deployments", 100, group="apps"),
        sample("WATCH", "deployments", 100, group="apps"),
        # kwok, the fake kubelet, is a non-system client too: its kinds are left out.
        sample("PATCH", "nodes", 9, subresource="status"),
        sample("PUT", "leases", 9, group="coordination.k8s.io"),
        sample("PATCH", "pods", 9, subresource="status"),
        sample("DELETE", "pods", 9),
    )
    assert osb.parse_writes(text) == Counter({
        Key("", "configmaps", "", "APPLY"): 9,
        Key("llm.ascend.dev", "ascendllmdeployments", "status", "PATCH"): 5,
        Key("", "events", "", "POST"): 3,
        Key("apps", "deployments", "", "DELETE"): 1,
    })


def test_parse_writes_of_text_without_the_metric_is_empty() -> None:
    assert osb.parse_writes(OTHER) == Counter()


def test_request_delta_keeps_only_what_changed() -> None:
    cm = Key("", "configmaps", "", "APPLY")
    status = Key("llm.ascend.dev", "ascendllmdeployments", "status", "PATCH")
    events = Key("", "events", "", "POST")
    before = Counter({cm: 10, status: 4})
    after = Counter({cm: 10, status: 7, events: 2})
    assert osb.request_delta(before, after) == Counter({status: 3, events: 2})
    assert sum(osb.request_delta(after, after).values()) == 0


def test_request_delta_refuses_a_counter_that_went_down() -> None:
    cm = Key("", "configmaps", "", "APPLY")
    with pytest.raises(ValueError, match="restarted"):
        osb.request_delta(Counter({cm: 10}), Counter({cm: 3}))


def test_write_key_label() -> None:
    assert Key("llm.ascend.dev", "ascendllmdeployments", "status", "PATCH").label() == \
        "PATCH ascendllmdeployments.llm.ascend.dev/status"
    assert Key("", "configmaps", "", "APPLY").label() == "APPLY configmaps"


def test_lag_stats_interpolates_between_ranks() -> None:
    values = [float(v) for v in range(1, 102)]  # 1..101
    assert osb.lag_stats(values) == {"median_s": 51.0, "p99_s": 100.0, "max_s": 101.0}
    assert osb.lag_stats([2.0, 1.0]) == {"median_s": 1.5, "p99_s": pytest.approx(1.99), "max_s": 2.0}
    assert osb.lag_stats([]) == {"median_s": None, "p99_s": None, "max_s": None}


def result(name: str, **values):
    base = dict(count=1000, converge_children_s=10.0, converge_status_s=12.0, rss_peak_mb=100.0,
                rss_restart_peak_mb=90.0, idle_writes=0, idle_writes_per_resync=0.0, restart_writes=0,
                restart_idle=True, converge_cpu_s=10.0, idle_window_s=65.0, idle_cpu_cores=0.01, ready=1000)
    base.update(values)
    return osb.OperatorResult(name=name, **base)


def verdicts(targets) -> dict[str, bool | None]:
    return {target.name: target.passed for target in targets}


def again(ours: float, minimal: float, ours_cpu: float = 10.0, minimal_cpu: float = 10.0) -> dict:
    """One further converge round: both operators' converge seconds (children and status alike)
    and their CPU seconds to converge."""
    return {"ours": result("ours", converge_children_s=ours, converge_status_s=ours, converge_cpu_s=ours_cpu),
            "minimal": result("minimal", converge_children_s=minimal, converge_status_s=minimal,
                              converge_cpu_s=minimal_cpu)}


def test_evaluate_passes_when_every_target_holds() -> None:
    targets = osb.evaluate(result("ours", converge_children_s=11.9, converge_status_s=14.4),
                           result("minimal", converge_children_s=10.0, converge_status_s=12.0),
                           [again(10.5, 10.0), again(9.0, 10.0)])
    assert verdicts(targets) == {
        "converge to last child / minimal": True, "converge to last status / minimal": True,
        "operator CPU to converge / minimal": True, "peak RSS (MB)": True, "CPU while idle (cores)": True,
        "resources Ready before the idle window": True, "writes per idle resync": True, "writes on restart": True,
    }
    assert osb.failures(targets) == []


def test_one_round_leaves_a_ratio_target_inconclusive() -> None:
    """Fewer than 3 rounds cannot bound the spread: a ratio under the target is not met (bench/verdict.py)."""
    targets = osb.evaluate(result("ours", converge_children_s=11.9), result("minimal", converge_children_s=10.0))
    child = next(t for t in targets if t.name == "converge to last child / minimal")
    assert child.passed is None and child.value == 1.19 and "fewer than 3 samples" in child.detail
    assert osb.failures(targets) == []
    assert osb.format_targets([child]).startswith("- inconclusive: converge to last child / minimal = 1.190")


def test_evaluate_names_each_failure() -> None:
    ours = result("ours", converge_children_s=12.1, converge_status_s=30.0, rss_peak_mb=140.0,
                  rss_restart_peak_mb=151.0, idle_writes=4, idle_writes_per_resync=2.0,
                  idle_writes_by_kind={"PATCH ascendllmdeployments.llm.ascend.dev/status": 4},
                  restart_writes=3, restart_writes_by_kind={"APPLY configmaps": 3}, converge_cpu_s=25.0,
                  idle_cpu_cores=0.05, ready=990)
    targets = osb.evaluate(ours, result("minimal", converge_children_s=10.0, converge_status_s=12.0),
                           [again(13.0, 10.0, 21.0), again(12.5, 10.0, 30.0)])
    assert verdicts(targets) == {
        "converge to last child / minimal": False, "converge to last status / minimal": False,
        "operator CPU to converge / minimal": False, "peak RSS (MB)": False, "CPU while idle (cores)": False,
        "resources Ready before the idle window": False, "writes per idle resync": False, "writes on restart": False,
    }
    reasons = osb.failures(targets)
    assert reasons[0] == ("converge to last child / minimal: 1.25 (target <= 1.2x): MISSED: range 1.21-1.3 over "
                          "3 samples, all on the wrong side of 1.2; median of 3 rounds (1.21, 1.30, 1.25): 12.1 s "
                          "vs 10.0 s; 13.0 s vs 10.0 s; 12.5 s vs 10.0 s")
    assert reasons[2].startswith("operator CPU to converge / minimal: 2.5 (target <= 2.0x): MISSED: range 2.1-3")
    assert reasons[3] == "peak RSS (MB): 151.0 (target <= 150 at N=1000)"  # the restart's peak counts
    assert reasons[4] == "CPU while idle (cores): 0.05 (target <= 0.02 at N=1000)"
    assert reasons[5] == "resources Ready before the idle window: 990 (target = 1000)"
    assert "PATCH ascendllmdeployments.llm.ascend.dev/status x4" in reasons[6]
    assert "APPLY configmaps x3" in reasons[7]


def test_above_1000_resources_the_large_limits_apply() -> None:
    ours = result("ours", count=10000, rss_peak_mb=450.0, idle_cpu_cores=0.08, ready=10000)
    got = verdicts(osb.evaluate(ours, result("minimal")))
    assert got["peak RSS (MB)"] is True and got["CPU while idle (cores)"] is True
    assert osb.limits(1000) == (150.0, 0.02) and osb.limits(10000) == (600.0, 0.1)


def test_evaluate_fails_a_restart_that_never_went_idle_and_an_unconverged_run() -> None:
    ours = result("ours", converge_status_s=None, restart_idle=False, errors=["not converged within 900 s"])
    targets = osb.evaluate(ours, result("minimal"))
    got = verdicts(targets)
    assert got["converge to last status / minimal"] is False
    assert got["writes on restart"] is False
    assert got["run"] is False
    assert "not idle" in next(t.detail for t in targets if t.name == "writes on restart")


def test_evaluate_takes_the_median_of_the_rounds_ratios() -> None:
    ours = result("ours", converge_children_s=13.0, converge_status_s=13.0)
    minimal = result("minimal", converge_children_s=10.0, converge_status_s=10.0)
    rounds = [{"minimal": result("minimal", converge_children_s=20.0, converge_status_s=20.0),
               "ours": result("ours", converge_children_s=22.0, converge_status_s=22.0)},
              {"ours": result("ours", converge_children_s=9.0, converge_status_s=9.0),
               "minimal": result("minimal", converge_children_s=10.0, converge_status_s=10.0)}]
    targets = osb.evaluate(ours, minimal, rounds)
    child = next(t for t in targets if t.name == "converge to last child / minimal")
    # 1.3, 1.1 and 0.9: the median passes but the range straddles 1.2, so the target is undecided.
    assert child.value == 1.1 and child.passed is None
    assert child.detail.startswith("inconclusive: range 0.9-1.3 over 3 samples straddles 1.2")
    assert "median of 3 rounds (1.30, 1.10, 0.90)" in child.detail
    rounds[1]["ours"] = result("ours", converge_children_s=None, converge_status_s=None)
    assert verdicts(osb.evaluate(ours, minimal, rounds))["converge to last child / minimal"] is False
    same = [{"ours": r["ours"], "minimal-same": r["minimal"]} for r in rounds]
    named = verdicts(osb.evaluate(ours, minimal, same, yardstick="minimal-same"))
    assert "converge to last child / minimal-same" in named  # the rounds are read under the yardstick's name
    table = osb.format_rounds([{"ours": ours, "minimal": minimal}, rounds[0]]).splitlines()
    assert table[3] == ("| 2 | minimal, ours | minimal 20.0 / ours 22.0 | minimal 20.0 / ours 22.0 "
                        "| minimal 10.0 / ours 10.0 |")


def test_evaluate_without_a_yardstick_does_not_pass_the_ratio() -> None:
    alone = verdicts(osb.evaluate(result("ours"), None))
    assert alone["converge to last child / minimal"] is None
    no_base = verdicts(osb.evaluate(result("ours"), result("minimal", converge_children_s=None)))
    assert no_base["converge to last child / minimal"] is None
    assert osb.failures(osb.evaluate(result("ours"), None)) == []


def test_format_table_puts_the_operators_side_by_side() -> None:
    table = osb.format_table([result("ours", applied=1000, idle_window_s=None),
                              result("minimal", applied=1000, idle_window_s=None)]).splitlines()
    assert table[0] == "| | ours | minimal |"
    assert "| converge: first apply to last status (s) | 12.0 | 12.0 |" in table
    assert "| writes per idle resync | 0.00 | 0.00 |" in table  # no window measured: none shown
    assert "| writes on restart | 0 | 0 |" in table
    assert "| CPU while idle (cores) | - | - |" in table  # no window: not 0
    assert "| control plane's CPU s in the same span | - | - |" in table  # --kubeconfig: not measured


def test_format_table_ranks_the_control_planes_processes_by_cpu() -> None:
    ours = result("ours", converge_control_plane_cpu_s={"etcd": 17.8, "kube-apiserver": 120.4,
                                                        "kube-controller-manager": 98.9})
    table = osb.format_table([ours]).splitlines()
    assert ("| control plane's CPU s in the same span | kube-apiserver 120.4, kube-controller-manager 98.9, "
            "etcd 17.8 (all 237.1) |") in table


def test_plane_cpu_s_reads_each_pid_files_process_and_skips_the_rest(tmp_path) -> None:
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.process_time() + 0.3\n"
                             "while time.process_time() < end: pass\ntime.sleep(60)"])
    try:
        (tmp_path / "kube-apiserver.pid").write_text(f"{busy.pid}\n")
        (tmp_path / "etcd.pid").write_text("999999999\n")  # no such process
        (tmp_path / "kwok.pid").write_text("")  # being written
        (tmp_path / "up.lock").write_text(str(os.getpid()))  # not a pid file
        deadline = time.monotonic() + 30
        while (cpu := osb.plane_cpu_s(tmp_path)).get("kube-apiserver", 0.0) < 0.25:
            assert time.monotonic() < deadline, cpu
        assert set(cpu) == {"kube-apiserver"}
    finally:
        busy.kill()
        busy.wait()
    assert osb.plane_cpu_s(None) == {}


def test_idle_since_needs_a_full_quiet_window_without_writes_and_busy_cpu() -> None:
    check = osb.IdleCheck(quiet_s=10.0, cpu_limit=0.1)
    # (time, writes so far, CPU seconds so far)
    busy_start = [(0.0, 0, 0.0), (3.0, 5, 3.0), (6.0, 5, 3.2), (9.0, 5, 3.3)]
    assert not osb.idle_since(busy_start, check)  # under 10 s of samples
    quiet = [*busy_start, (12.0, 5, 3.4), (15.0, 5, 3.5), (18.0, 5, 3.6)]
    # the last 10 s: from t=6 (the newest sample at least 10 s old) to 18, no write, 0.4 s CPU in 12 s
    assert osb.idle_since(quiet, check)
    late_write = [*quiet[:-1], (18.0, 6, 3.6)]
    assert not osb.idle_since(late_write, check)
    periodic_cpu = [*quiet[:-1], (18.0, 5, 5.0)]  # 1.8 s CPU in 12 s = 0.15 cores
    assert not osb.idle_since(periodic_cpu, check)
    assert not osb.idle_since([], check)


def test_parse_requests_keeps_the_reads_that_show_a_resync_ran() -> None:
    text = metrics(
        sample("LIST", "pods", 4),  # the operator reading its pods (kwok writes pods, it does not read them)
        sample("GET", "leases", 5, group="coordination.k8s.io"),  # kwok's node heartbeat
        sample("LIST", "pods", 2, system_client="kube-scheduler"),
        sample("GET", "ascendllmdeployments", 6, group="llm.ascend.dev"),
        sample("LIST", "deployments", 3, group="apps"),
        sample("WATCH", "deployments", 8, group="apps"),  # one long request, not a resync
        sample("GET", "", 9, subresource="/metrics"),  # the benchmark's own scrape
        sample("PATCH", "ascendllmdeployments", 1, group="llm.ascend.dev", subresource="status"),
        sample("CONNECT", "pods", 7, subresource="proxy", code="503"),  # a runtime's /state through the proxy
    )
    requests = osb.parse_requests(text)
    assert requests == Counter({
        Key("", "pods", "", "LIST"): 4,
        Key("llm.ascend.dev", "ascendllmdeployments", "", "GET"): 6,
        Key("apps", "deployments", "", "LIST"): 3,
        Key("llm.ascend.dev", "ascendllmdeployments", "status", "PATCH"): 1,
        Key("", "pods", "proxy", "CONNECT"): 7,
    })
    assert osb.only(requests, osb.PROXY_VERBS) == Counter({Key("", "pods", "proxy", "CONNECT"): 7})
    assert osb.only(requests, osb.READ_VERBS) == Counter({
        Key("", "pods", "", "LIST"): 4, Key("llm.ascend.dev", "ascendllmdeployments", "", "GET"): 6,
        Key("apps", "deployments", "", "LIST"): 3})
    status = Key("llm.ascend.dev", "ascendllmdeployments", "status", "PATCH")
    assert osb.parse_writes(text) == Counter({status: 1})


def test_idle_since_waits_for_the_floor() -> None:
    samples = [(float(t), 0, 0.0) for t in range(0, 31, 3)]  # quiet from the start, 30 s long
    assert osb.idle_since(samples, osb.IdleCheck(quiet_s=10.0, cpu_limit=0.1))
    assert not osb.idle_since(samples, osb.IdleCheck(quiet_s=10.0, cpu_limit=0.1, min_s=40.0))
    longer = [*samples, (42.0, 0, 0.0)]
    assert osb.idle_since(longer, osb.IdleCheck(quiet_s=10.0, cpu_limit=0.1, min_s=40.0))


def fake_pack(tmp_path, up_body: str):
    """A control-plane pack whose up.sh and down.sh record each call (their arguments) in calls.txt."""
    pack = tmp_path / "pack"
    pack.mkdir()
    calls = tmp_path / "calls.txt"
    (pack / "down.sh").write_text(f'echo "down $*" >> {calls}\n')
    (pack / "up.sh").write_text(f'echo "up $*" >> {calls}\n{up_body}\n')
    return pack, calls


def test_the_bench_stops_the_control_plane_it_started_when_the_run_fails(tmp_path) -> None:
    # The kubeconfig up.sh names does not exist: the run cannot start (exit 2) after the pack did.
    pack, calls = fake_pack(tmp_path, f"echo export KUBECONFIG={tmp_path}/missing.kubeconfig")
    workdir = tmp_path / "work"
    assert osb.main(["--pack", str(pack), "--workdir", str(workdir), "--port-base", "23000"]) == 2
    assert calls.read_text().splitlines() == [f"down {workdir} --wipe", f"up {workdir} --port-base 23000",
                                              f"down {workdir}"]


def test_the_bench_stops_the_control_plane_on_sigterm(tmp_path) -> None:
    # up.sh's parent is the bench: a SIGTERM while the pack starts ends the run like Ctrl-C.
    pack, calls = fake_pack(tmp_path, "kill -TERM $PPID; sleep 5")
    workdir = tmp_path / "work"
    with pytest.raises(KeyboardInterrupt):
        osb.main(["--pack", str(pack), "--workdir", str(workdir), "--port-base", "23000"])
    assert calls.read_text().splitlines()[-1] == f"down {workdir}"


def test_the_bench_leaves_a_given_cluster_alone(tmp_path) -> None:
    pack, calls = fake_pack(tmp_path, "exit 1")
    assert osb.main(["--pack", str(pack), "--kubeconfig", str(tmp_path / "missing"), "--count", "1"]) == 2
    assert not calls.exists()


def earlier_run(*status_s: float | None, count: int = 1000) -> dict:
    """An earlier --out JSON: its count and the project's operator's converge seconds per round."""
    return {"count": count, "rounds": [{"ours": {"converge_status_s": s}, "minimal-same": {}} for s in status_s]}


def test_growth_judges_converge_time_against_linear_from_an_earlier_run() -> None:
    (one,) = osb.growth([600.0], 10000, earlier_run(80.0, 90.0, 100.0))
    # One run at 10,000 against three at 1,000: ratios 6.0-7.5, under 10x, but one sample bounds nothing.
    assert one.name == "converge growth 1000 -> 10000 (to last status)" and one.limit == "<= 10x"
    assert one.value == 6.667 and one.passed is None
    assert one.detail.startswith("inconclusive: range 6-7.5 over 1 sample: fewer than 3 samples")
    assert one.detail.endswith("600.0 s at 10000 vs 80.0, 90.0, 100.0 s at 1000")
    (three,) = osb.growth([600.0, 700.0, 650.0], 10000, earlier_run(80.0, 90.0, 100.0))
    assert three.passed is True and three.detail.startswith("met: range 6-8.75 over 3 samples")
    (slow,) = osb.growth([1100.0, 1200.0, 1300.0], 10000, earlier_run(80.0, 90.0, 100.0))
    assert slow.passed is False and osb.failures([slow])[0].startswith(
        "converge growth 1000 -> 10000 (to last status): 13.333 (target <= 10x): MISSED")
    (straddles,) = osb.growth([700.0, 800.0, 900.0], 10000, earlier_run(80.0, 90.0, 100.0))
    assert straddles.passed is None  # 7.0-11.25


def test_the_minimal_operators_growth_reads_its_own_rounds_and_is_named_for_it() -> None:
    earlier = {"count": 1000, "rounds": [{"ours": {"converge_status_s": 50.0},
                                          "minimal-same": {"converge_status_s": s}} for s in (40.0, 60.0, 50.0)]}
    (grown,) = osb.growth([700.0], 10000, earlier, "minimal-same")
    assert grown.name == "converge growth 1000 -> 10000 (to last status), minimal-same"
    assert grown.value == 14.0  # 700 over the median of 40, 60, 50; not the project's 50 s
    assert grown.detail.endswith("700.0 s at 10000 vs 40.0, 60.0, 50.0 s at 1000")
    (ours,) = osb.growth([700.0], 10000, earlier)
    assert ours.name == "converge growth 1000 -> 10000 (to last status)" and ours.value == 14.0
    (missing,) = osb.growth([700.0], 10000, earlier_run(80.0), "minimal-same")  # that run had none
    assert missing.value is None


def test_the_report_prints_the_minimal_operators_growth_apart_from_the_targets() -> None:
    earlier = {"count": 1000, "rounds": [{"minimal-same": {"converge_status_s": 50.0}}]}
    (grown,) = osb.growth([700.0], 10000, earlier, "minimal-same")
    report = {"count": 10000, "operators": {}, "rounds": [], "targets": [],
              "yardstick_growth": [asdict(grown)]}
    text = osb.format_report(json.loads(json.dumps(report)))
    assert text.endswith("The same growth of the minimal operator (the control plane's, on this machine; "
                         "not a target):\n" + osb.format_targets([grown]))
    assert "minimal operator" not in osb.format_report({**report, "yardstick_growth": []})


def test_growth_without_every_round_converged_is_not_measured() -> None:
    (target,) = osb.growth([None], 10000, earlier_run(80.0))
    assert target.value is None and target.passed is None
    (target,) = osb.growth([600.0], 10000, earlier_run(80.0, None))
    assert target.value is None and target.passed is None
    with pytest.raises(ValueError, match="not fewer than"):
        osb.growth([600.0], 1000, earlier_run(80.0))


def test_the_default_layout_puts_every_resource_in_one_namespace_the_operator_alone_watches() -> None:
    layout = osb.Layout(("bench-ours-1",))
    assert not layout.every_namespace
    assert [layout.namespace_of(i) for i in (0, 9999)] == ["bench-ours-1", "bench-ours-1"]
    assert layout.path(osb.CHILD_COLLECTIONS["Service"]) == "/api/v1/namespaces/bench-ours-1/services"
    assert layout.holds({"namespace": "elsewhere"})  # its watches are the namespace's own
    assert osb.operator_command("ours", "bench-ours-1", "/x/ascend-llm") == [
        "/x/ascend-llm", "operator", "run", "--standalone", "-n", "bench-ours-1"]


def test_per_namespace_spreads_the_resources_and_the_operator_watches_every_namespace() -> None:
    assert [osb.namespace_count(c, 100) for c in (1000, 10000, 1001, 50)] == [10, 100, 11, 1]
    assert osb.namespace_count(10000, 0) == 1
    layout = osb.Layout(tuple(f"b-{i:03d}" for i in range(10)), per_namespace=100)
    assert layout.every_namespace
    assert [layout.namespace_of(i) for i in (0, 99, 100, 999)] == ["b-000", "b-000", "b-001", "b-009"]
    assert layout.path(osb.CHILD_COLLECTIONS["PodDisruptionBudget"]) == "/apis/policy/v1/poddisruptionbudgets"
    crd = osb.Crd("llm.ascend.dev", "v1alpha1", "ascendllmdeployments", "AscendLLMDeployment", {})
    assert layout.path(crd.collection_template()) == "/apis/llm.ascend.dev/v1alpha1/ascendllmdeployments"
    assert crd.collection("b-001") == "/apis/llm.ascend.dev/v1alpha1/namespaces/b-001/ascendllmdeployments"
    assert layout.holds({"namespace": "b-004"}) and not layout.holds({"namespace": "kube-system"})
    assert osb.operator_command("ours", None, "/x/ascend-llm") == ["/x/ascend-llm", "operator", "run", "--standalone"]
    assert osb.operator_command("minimal", None, "/x/ascend-llm")[-2:] == ["--all-namespaces",
                                                                          str(osb.MINIMAL_OPERATOR)]


def test_a_cluster_wide_watch_tracks_only_the_runs_namespaces() -> None:
    """A child or status seen in another namespace (an earlier round's, another user's) is not counted."""

    run = object.__new__(osb.OperatorRun)
    run.layout = osb.Layout(("b-000", "b-001"), per_namespace=1)
    run.tracker = osb.Tracker(["llm-0000"], "K")
    owned = [{"kind": "K", "name": "llm-0000"}]
    run.seen_resource({"metadata": {"name": "llm-0000", "namespace": "old"}, "status": {"observedGeneration": 1}})
    run.seen_child("Service", {"metadata": {"namespace": "old", "ownerReferences": owned}})
    assert run.tracker.status == {} and run.tracker.children == {}
    run.seen_resource({"metadata": {"name": "llm-0000", "namespace": "b-001"}, "status": {"observedGeneration": 1}})
    run.seen_child("Service", {"metadata": {"namespace": "b-001", "ownerReferences": owned}})
    assert list(run.tracker.status) == ["llm-0000"] and list(run.tracker.children) == [("Service", "llm-0000")]


def test_the_table_names_the_layout_only_when_resources_were_spread() -> None:
    assert not any(line.startswith("| namespaces") for line in osb.format_table([result("ours")]).splitlines())
    table = osb.format_table([result("ours", count=10000, namespaces=100)]).splitlines()
    assert table[2:4] == ["| resources applied | 0 |", "| namespaces (resources in each) | 100 (100) |"]


def test_linear_from_must_be_a_run_of_the_same_layout(tmp_path, capsys) -> None:
    small = tmp_path / "r1000.json"
    small.write_text(json.dumps({**earlier_run(80.0), "per_namespace": 100}))
    args = osb.parse_args(["--count", "10000", "--per-namespace", "100", "--linear-from", str(small)])
    assert args.per_namespace == 100
    with pytest.raises(SystemExit) as stop:
        osb.parse_args(["--count", "10000", "--linear-from", str(small)])
    assert stop.value.code == 2
    assert "--linear-from: its run had --per-namespace 100" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        osb.parse_args(["--count", "10000", "--per-namespace", "-1"])


def test_linear_from_must_name_a_run_at_fewer_resources(tmp_path) -> None:
    small = tmp_path / "r1000.json"
    small.write_text(json.dumps(earlier_run(80.0)))
    assert osb.parse_args(["--count", "10000", "--linear-from", str(small)]).linear_from_report["count"] == 1000
    with pytest.raises(SystemExit):
        osb.parse_args(["--count", "1000", "--linear-from", str(small)])
    with pytest.raises(SystemExit):
        osb.parse_args(["--count", "10000", "--linear-from", str(tmp_path / "missing.json")])


class FakeApi:
    """The API server's request counters: one operator write more on every reading."""

    def __init__(self) -> None:
        self.writes = 0

    def metrics_requests(self) -> Counter:
        self.writes += 1
        return Counter({Key("", "configmaps", "", "APPLY"): self.writes})


class FakeOperator:
    peak_rss = 120_000_000

    def stop(self) -> None: ...

    def start(self, timeout_s: float) -> None: ...


def test_a_restart_window_stopped_by_a_signal_reports_what_it_saw(monkeypatch) -> None:
    run = object.__new__(osb.OperatorRun)
    run.api, run.op = FakeApi(), FakeOperator()
    run.ctx = type("Ctx", (), {"restart_quiet_s": 15.0, "resync_s": 30.0, "restart_timeout_s": 600.0})()
    run.result = result("ours", restart_writes=None, restart_idle=None)

    def stopped(*_args, **_kwargs):
        raise KeyboardInterrupt("signal 15")

    monkeypatch.setattr(osb, "wait_idle", stopped)
    with pytest.raises(KeyboardInterrupt):
        run.restart()
    got = run.result
    assert got.restart_idle is False and got.restart_writes == 1 and got.rss_restart_peak_mb == 120.0
    assert got.restart_writes_by_kind == {"APPLY configmaps": 1}
    assert got.errors == ["stopped (signal 15) 0 s into the restart window"]


def test_a_run_stopped_by_a_signal_is_reported_and_fails(tmp_path, monkeypatch) -> None:
    ran = []

    class StoppedRun:
        def __init__(self, ctx, name, *_args, **_kwargs) -> None:
            self.result = result(name, count=10, ready=10, converge_status_s=50.0, restart_writes=None,
                                 restart_idle=None)

        def run(self, full: bool = True):
            ran.append(self.result.name)
            raise KeyboardInterrupt("signal 15")

    ctx = type("Ctx", (), {"log_dir": tmp_path})()
    monkeypatch.setattr(osb, "prepare", lambda *_args, **_kwargs: ctx)
    monkeypatch.setattr(osb, "OperatorRun", StoppedRun)
    out = tmp_path / "r.json"
    code = osb._run(osb.parse_args(["--count", "10", "--operators", "ours,minimal-same", "--rounds", "3",
                                    "--kubeconfig", "k", "--out", str(out)]), None)
    assert code == 1 and ran == ["ours"]  # no further run after the stop
    report = json.loads(out.read_text())
    assert report["operators"]["ours"]["converge_status_s"] == 50.0
    assert report["failures"] == ["run: None (target no error): stopped (signal 15)"]
    assert report["passed"] is False


def test_a_converge_stopped_by_a_signal_reports_how_far_it_got(monkeypatch, tmp_path) -> None:
    """Two resources: one has its status and every child, the other nothing, when the stop comes."""

    class Api(FakeApi):
        def metrics_writes(self) -> Counter:
            return self.metrics_requests()

        def request(self, method: str, path: str, *, accept: str) -> str:
            assert (method, path, accept) == ("GET", "/metrics", "text/plain")
            return "apiserver_request_total 1\n"

        def apply(self, path: str, body: dict) -> None: ...

    class Operator(FakeOperator):
        def cpu_s(self) -> float:
            return 1.0

    class Watcher:
        ready = type("Ready", (), {"wait": staticmethod(lambda _timeout: True)})()

        def __init__(self) -> None:
            import threading
            self.stopped, self.error = threading.Event(), None

        def start(self) -> None: ...

    class Done:
        @staticmethod
        def wait(_timeout: float) -> bool:
            raise KeyboardInterrupt("signal 15")

    run = object.__new__(osb.OperatorRun)
    run.api, run.op, run.watchers, run.layout = Api(), Operator(), [Watcher()], osb.Layout(("ns",))
    run.names = ["llm-0000", "llm-0001"]
    run.namespace_of = dict.fromkeys(run.names, "ns")
    run.ctx = type("Ctx", (), {"workers": 2, "plane_run_dir": None, "converge_timeout_s": 900.0, "example": {"spec": {}},
                               "log_dir": tmp_path,
                               "crd": type("Crd", (), {"group": "g", "version": "v", "kind": "K",
                                                       "collection": staticmethod(lambda ns: f"/c/{ns}")})()})()
    run.result = osb.OperatorResult(name="ours", count=2)
    run.tracker = osb.Tracker(run.names, "K")
    run.tracker.done = Done()
    run.tracker.resource({"metadata": {"name": "llm-0000"}, "status": {"observedGeneration": 1}})
    for kind in osb.CHILD_COLLECTIONS:
        run.tracker.child(kind, {"ownerReferences": [{"kind": "K", "name": "llm-0000"}]})
    with pytest.raises(KeyboardInterrupt):
        run.converge()
    got = run.result
    assert got.applied == 2 and got.status_missing == 1 and got.children_missing == len(osb.CHILD_COLLECTIONS)
    assert got.converge_status_s is None and got.converge_cpu_s is None and got.rss_peak_mb == 120.0
    assert len(got.errors) == 1 and got.errors[0].startswith("stopped (signal 15) 0 s after the first apply: "
                                                             f"{len(osb.CHILD_COLLECTIONS)} children and 1 statuses")
    assert run.watchers[0].stopped.is_set()
    # The API server's /metrics at the first apply is kept; a converge that did not end has no end.
    assert (tmp_path / "ours-metrics-converge-start.txt").read_text() == "apiserver_request_total 1\n"
    assert not (tmp_path / "ours-metrics-converge-end.txt").exists()


def test_converge_only_runs_no_idle_window_and_no_restart(tmp_path, monkeypatch) -> None:
    runs = []

    class Run:
        def __init__(self, ctx, name, *_args, **_kwargs) -> None:
            self.result = result(name, count=10, ready=None, converge_status_s=50.0, restart_writes=None,
                                 restart_idle=None, idle_writes_per_resync=None, idle_cpu_cores=None, idle_window_s=None)

        def run(self, full: bool = True):
            runs.append(full)
            return self.result

    ctx = type("Ctx", (), {"log_dir": tmp_path})()
    monkeypatch.setattr(osb, "prepare", lambda *_args, **_kwargs: ctx)
    monkeypatch.setattr(osb, "OperatorRun", Run)
    out = tmp_path / "r.json"
    osb._run(osb.parse_args(["--count", "10", "--operators", "ours", "--converge-only", "--kubeconfig", "k",
                             "--out", str(out)]), None)
    assert runs == [False]
    report = json.loads(out.read_text())
    assert {t["name"]: t["passed"] for t in report["targets"]}["writes on restart"] is None


def test_the_wait_for_ready_lasts_while_the_count_rises_and_stops_when_it_stalls(monkeypatch) -> None:
    """The count rises slowly (the control plane's pace): the wait goes on past any fixed budget;
    once it stops rising for ``stall_s`` the wait ends with the count reached."""

    clock = [0.0]
    monkeypatch.setattr(osb.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(osb.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    monkeypatch.setattr(osb, "log", lambda _text: None)
    ready_at = {0: 0, 1: 0, 2: 1, 3: 1, 4: 2}  # polls (100 s apart) -> resources Ready; then stuck at 2

    class Api:
        polls = 0

        def request(self, verb: str, path: str) -> dict:
            count = ready_at.get(Api.polls, 2)
            Api.polls += 1
            return {"items": [{"metadata": {"namespace": "ns"}, "status": {"phase": "Ready" if i < count else "Progressing"}}
                              for i in range(3)]}

    run = object.__new__(osb.OperatorRun)
    run.api, run.layout = Api(), osb.Layout(("ns",))
    run.result = osb.OperatorResult(name="ours", count=3)
    run.ctx = type("Ctx", (), {"count": 3, "converge_timeout_s": 3600.0,
                               "crd": type("Crd", (), {"collection_template": staticmethod(lambda: "/c/{ns}")})()})()
    assert run._wait_all_ready(stall_s=250.0, poll_s=100.0) == 2
    assert clock[0] == 700.0  # the last rise at 400 s, then 300 s (3 polls) without one
    ready_at.update({5: 3})
    Api.polls, clock[0] = 0, 0.0
    assert run._wait_all_ready(stall_s=250.0, poll_s=100.0) == 3  # all Ready at the sixth poll
    assert clock[0] == 500.0


def test_reread_prints_what_the_run_printed_from_its_saved_report(tmp_path, capsys) -> None:
    ours = result("ours", converge_control_plane_cpu_s={"kube-apiserver": 12.5})
    targets = osb.evaluate(ours, None)
    report = {"count": 1000, "operators": {"ours": asdict(ours)},
              "rounds": [{"ours": {"converge_children_s": 10.0, "converge_status_s": 12.0, "converge_cpu_s": 10.0,
                                   "converge_writes": None, "errors": []}}],
              "targets": [asdict(t) for t in targets], "against_minimal": [],
              "failures": ["a reason"], "inconclusive": []}
    text = osb.format_report(json.loads(json.dumps(report)))
    assert text == (osb.format_table([ours]) + "\n\nTargets (the project's operator):\n" + osb.format_targets(targets)
                    + "\n\nFAILED:\n- a reason")  # one round: no rounds table
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert osb.main(["--reread", str(tmp_path / "r.json"), "--pack", str(tmp_path / "no-pack")]) == 0
    assert capsys.readouterr().out == text + "\n"


def test_reread_of_a_file_that_is_not_a_report_exits_2_naming_the_option(tmp_path, capsys) -> None:
    (tmp_path / "x.json").write_text('{"count": 1}')
    assert osb.main(["--reread", str(tmp_path / "missing.json"), "--pack", str(tmp_path)]) == 2
    assert osb.main(["--reread", str(tmp_path / "x.json"), "--pack", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("operator_scale: --reread ") == 2
