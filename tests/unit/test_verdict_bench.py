"""bench/verdict.py: a goal is met only when the whole measured range lies on its side, missed
when the whole range lies on the other, inconclusive otherwise or from a single sample."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "verdict.py"


def load():
    spec = importlib.util.spec_from_file_location("verdict_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


v = load()
AT_LEAST, AT_MOST = v.Direction.AT_LEAST, v.Direction.AT_MOST


def test_the_issues_throughput_case_is_inconclusive_not_met():
    # Ratio 1.96 median, +-93 % over 2 pairs: 0.14 .. 1.96 + 1.68; two pairs cannot decide at all.
    verdict = v.judge([0.14, 3.64], 0.99, AT_LEAST)
    assert verdict.outcome is v.Outcome.INCONCLUSIVE and not verdict.met
    assert "fewer than 3 samples cannot bound the spread" in verdict.reason
    # Nor can they when both lie past the goal: 2.8 and 4.6 for two identical engines was load noise.
    assert v.judge([2.8, 4.6], 0.99, AT_LEAST).outcome is v.Outcome.INCONCLUSIVE
    wide = v.judge([0.14, 1.96, 3.64], 0.99, AT_LEAST)
    assert wide.reason.startswith("range 0.14-3.64 over 3 samples straddles 0.99")


@pytest.mark.parametrize(("values", "goal", "direction", "outcome"), [
    ([0.995, 1.02, 1.4], 0.99, AT_LEAST, "met"),
    ([0.5, 0.9, 0.7], 0.99, AT_LEAST, "MISSED"),
    ([0.99, 0.99, 0.99], 0.99, AT_LEAST, "met"),  # on the goal counts as its side
    ([1.0, 1.25, 1.1], 1.3, AT_MOST, "met"),
    ([1.35, 2.0, 1.5], 1.3, AT_MOST, "MISSED"),
    ([1.2, 1.4, 1.3], 1.3, AT_MOST, "inconclusive"),
    ([1.0, 1.1], 1.3, AT_MOST, "inconclusive"),  # two samples bound the median only half the time
    ([1.0], 1.3, AT_MOST, "inconclusive"),
    ([], 1.3, AT_MOST, "inconclusive"),
])
def test_judge_decides_on_the_whole_range(values, goal, direction, outcome):
    assert v.judge(values, goal, direction).outcome.value == outcome


def test_judge_range_names_too_few_samples_and_rejects_an_inverted_range():
    assert "fewer than 3 samples" in v.judge_range(1.0, 1.0, 1, 1.3, AT_MOST).reason
    with pytest.raises(ValueError, match="above high"):
        v.judge_range(2.0, 1.0, 3, 1.3, AT_MOST)


def test_combine_reports_the_worst_part_and_names_it():
    met = v.judge([1.0, 1.1, 1.2], 1.3, AT_MOST)
    unsure = v.judge([1.2, 1.4, 1.3], 1.3, AT_MOST)
    missed = v.judge([1.5, 1.6, 1.7], 1.3, AT_MOST)
    assert v.combine([("a", met), ("b", met)]) == v.Verdict(v.Outcome.MET, "all 2 met")
    both = v.combine([("a", met), ("b", unsure)])
    assert both.outcome is v.Outcome.INCONCLUSIVE and both.reason.startswith("1 of 2 inconclusive (b: range 1.2-1.4")
    assert v.combine([("a", unsure), ("c", missed)]).outcome is v.Outcome.MISSED
    assert v.combine([]).outcome is v.Outcome.INCONCLUSIVE


def test_format_verdicts_writes_one_line_per_goal():
    text = v.format_verdicts([("x >= 1", v.judge([1.0, 2.0, 1.5], 1, AT_LEAST))])
    assert text == "Goals:\n- x >= 1: met (range 1-2 over 3 samples, all >= 1)"
    assert v.judge([1.0, 2.0, 1.5], 1, AT_LEAST).as_dict() == {"outcome": "met",
                                                               "reason": "range 1-2 over 3 samples, all >= 1"}


#: Benches that state no median goal: leak_detection's targets hold for every simulated trace (no
#: false alarm, every leak of 1 GB/h found within 20 min: the worst trace decides, never a median);
#: loadgen suggests an autoscaling target; prefix_routing, cpu_threads and queue_resync report figures
#: (queue_resync's goal is operator_scale's idle CPU; heap_probe says where that CPU goes); minimal_operator is operator_scale's yardstick, not a bench.
NO_GOAL = {"heap_probe.py", "leak_detection.py", "loadgen.py", "prefix_routing.py", "cpu_threads.py", "minimal_operator.py",
           "queue_resync.py", "service_alloc.py", "readable_runtimes.py",
           "read_connections.py"}


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.parent.glob("*.py") if p != BENCH))
def test_every_bench_that_judges_a_goal_judges_it_with_verdict_py(script):
    text = (BENCH.parent / script).read_text(encoding="utf-8")
    judges = re.search(r"^from verdict import .*\bjudge(_range)?\b", text, re.M) is not None
    if script in NO_GOAL:
        # Nothing it prints is a goal met or missed.
        assert not judges and not re.search(r"\b(met|MISSED|goal)\b", text), script
    else:
        assert judges, f"bench/{script} states a goal but does not judge it with bench/verdict.py"
