"""The pure part of bench/service_alloc.py: the seconds per thousand, the growth, the table."""

from __future__ import annotations

import json

from benchload import load_bench

sa = load_bench("service_alloc")


def test_blocks_are_the_seconds_between_each_thousandth_completion() -> None:
    # 2,500 completions 0.01 s, then 0.02 s apart: blocks end at the 1,000th (19.99 s), the
    # 2,000th (39.98 s) and the last (49.98 s).
    done = [10.0 + 0.01 * i for i in range(1000)] + [20.0 + 0.02 * i for i in range(1500)]
    assert sa.blocks(list(reversed(done)), start=10.0) == [9.99, 19.99, 10.0]


def test_blocks_of_an_exact_multiple_have_no_partial_block_and_none_for_nothing_done() -> None:
    assert sa.blocks([1.0, 2.0, 3.0, 4.0], start=0.0, block=2) == [2.0, 2.0]
    assert sa.blocks([], start=0.0) == []


def test_growth_is_linear_at_one_and_counts_each_block_against_the_first() -> None:
    assert sa.growth([10.0, 10.0, 10.0], 3000) == 1.0
    assert sa.growth([10.0, 20.0, 30.0], 3000) == 2.0  # each thousand slower than the last
    assert sa.growth([10.0], 1000) is None and sa.growth([0.0, 1.0], 2000) is None


def test_a_headless_service_asks_for_no_clusterip_and_a_clusterip_one_leaves_it_to_the_server() -> None:
    assert sa.service_body("svc-1", "headless")["spec"]["clusterIP"] == "None"
    assert "clusterIP" not in sa.service_body("svc-1", "clusterip")["spec"]


def test_format_report_puts_each_kind_on_a_row() -> None:
    report = {"count": 2000, "workers": 64, "perNamespace": 100, "commit": "abc1234", "cpus": 2, "kinds": [
        {"kind": "clusterip", "created": 2000, "wallS": 150.0, "blockS": [50.0, 100.0], "growth": 1.5,
         "planeCpuS": {"kube-apiserver": 120.25}, "errors": [], "errorCount": 0},
        {"kind": "headless", "created": 1999, "wallS": 20.0, "blockS": [10.0, 10.0], "growth": None,
         "planeCpuS": {}, "errors": ["POST ...: HTTP 500: x"], "errorCount": 1}]}
    lines = sa.format_report(json.loads(json.dumps(report))).splitlines()
    assert lines[0].startswith("2000 Services by 64 threads, 100 to a namespace")
    assert lines[4] == "| clusterip | 2000 | 150.0 | 1.50x | 50.0, 100.0 | 120.2 |"
    assert lines[5] == "| headless | 1999 | 20.0 | - | 10.0, 10.0 | - |"
    assert lines[6].startswith("|  | 1 refused, first: POST")


def test_reread_of_a_file_that_is_not_a_report_exits_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert sa.main(["--reread", str(bad)]) == 2
    assert "not a saved --out report" in capsys.readouterr().err


def test_each_kind_gets_a_fresh_control_plane_that_is_stopped_when_its_run_fails(tmp_path, capsys) -> None:
    # The kubeconfig up.sh names does not exist: neither kind is measured (exit 1), and each
    # plane started is stopped before the next starts.
    pack, calls = tmp_path / "pack", tmp_path / "calls.txt"
    pack.mkdir()
    (pack / "down.sh").write_text(f'echo "down $*" >> {calls}\n')
    (pack / "up.sh").write_text(f'echo "up $*" >> {calls}\necho export KUBECONFIG={tmp_path}/missing\n')
    work = tmp_path / "work"
    assert sa.main(["--pack", str(pack), "--workdir", str(work), "--port-base", "23000", "--count", "5"]) == 1
    one = [f"down {work} --wipe", f"up {work} --port-base 23000", f"down {work}"]
    assert calls.read_text().splitlines() == one + one
    assert "clusterip: not measured" in capsys.readouterr().err
