"""The pure parts of bench/compile_cache.py: the start order, summaries, the goal, the per-start
engine config (a valid engine config in graph mode with the compile cache) and the report."""

from __future__ import annotations


import pytest

from ascend_runtime.config import parse_config
from benchload import load_bench


cc = load_bench("compile_cache")


def test_starts_alternate_cold_and_warm():
    assert cc.schedule(3) == ["cold", "warm", "cold", "warm", "cold", "warm"]
    with pytest.raises(ValueError, match="--runs"):
        cc.schedule(0)


def test_summaries_and_the_goal():
    cold, warm = cc.summarize([90.0, 70.0, 80.0]), cc.summarize([40.0, 50.0, 45.0])
    assert (cold.median, cold.low, cold.high, cold.n) == (80.0, 70.0, 90.0, 3)



def test_the_goal_is_judged_on_the_per_pair_ratios_range():
    def starts(*warm: float) -> list[tuple[str, float]]:
        return [item for seconds in warm for item in (("cold", 100.0), ("warm", seconds))]

    assert cc.pair_ratios([("cold", 80.0), ("warm", 40.0), ("cold", 90.0), ("warm", 63.0)]) == [0.5, 0.7]
    # Medians alone would say met (55 <= 60); the pairs 0.4, 0.55 and 0.7 straddle 0.6.
    assert cc.goal_verdict(starts(40.0, 55.0, 70.0)).outcome.value == "inconclusive"
    assert cc.goal_verdict(starts(40.0, 45.0, 59.0)).outcome.value == "met"
    assert cc.goal_verdict(starts(61.0, 65.0, 70.0)).outcome.value == "MISSED"
    assert "fewer than 3 samples" in cc.goal_verdict(starts(40.0, 41.0)).reason


def test_each_start_is_a_valid_graph_mode_config_with_the_compile_cache():
    config = parse_config(cc.bench_config("/m", "/cache", 8001, 8081))
    assert config.graph.policy.value == "piecewise" and config.graph.fallback is False
    assert config.compile_cache.root == "/cache" and config.warmup.enabled is False


def test_the_report_states_the_ratio_and_every_start():
    report = {"cold": vars(cc.summarize([80.0, 90.0])), "warm": vars(cc.summarize([40.0, 44.0])),
              "starts": [("cold", 80.0), ("warm", 40.0), ("cold", 90.0), ("warm", 44.0)]}
    text = cc.format_report(report)
    assert "| cold (empty) | 2 | 85.0 (80.0-90.0) |" in text
    assert ("warm / cold (medians): 0.49; goal <= 0.6: inconclusive (range 0.489-0.5 over 2 samples: fewer than 3 "
            "samples cannot bound the spread; measure more rounds)") in text
    assert "cold 80.0, warm 40.0, cold 90.0, warm 44.0" in text
