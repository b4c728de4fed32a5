"""Hung-engine detection: stalled tokens while requests run (per data-parallel engine), idle engines,
restarts, /metrics text."""

from __future__ import annotations

import pytest

from ascend_runtime.health.hang import (
    EngineCounters,
    EngineKey,
    HangDetector,
    MetricsParseError,
    parse_engine_metrics,
)

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen"} 2.0
vllm:num_requests_running{engine="1",model_name="qwen"} 1.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="qwen"} 1200.0
vllm:generation_tokens_total{engine="1",model_name="qwen"} 34.0
# HELP vllm:generation_tokens_created Number of generation tokens processed.
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="qwen"} 1.7e+09
"""

E0, E1 = EngineKey("qwen", "0"), EngineKey("qwen", "1")
ONE = EngineKey("qwen", "0")


def one(detector: HangDetector, now: float, running: float, tokens: float):
    """A scrape of a single-engine server."""
    return detector.observe(now, {ONE: EngineCounters(running, tokens)})


def two(detector: HangDetector, now: float, engine0: tuple[float, float], engine1: tuple[float, float]):
    """A scrape of a data-parallel server with two engines: (running, tokens) each."""
    return detector.observe(now, {E0: EngineCounters(*engine0), E1: EngineCounters(*engine1)})


def test_each_engine_is_read_by_its_labels() -> None:
    assert parse_engine_metrics(VLLM_METRICS) == {
        E0: EngineCounters(num_requests_running=2.0, generation_tokens_total=1200.0),
        E1: EngineCounters(num_requests_running=1.0, generation_tokens_total=34.0),
    }


def test_engines_come_in_index_order_and_other_labels_are_summed() -> None:
    text = (
        'vllm:num_requests_running{engine="10",model_name="m"} 1\n'
        'vllm:num_requests_running{engine="2",model_name="m"} 0\n'
        # A label outside model_name/engine (a multiprocess server's pid) splits one engine.
        'vllm:generation_tokens_total{engine="10",model_name="m",pid="7"} 3\n'
        'vllm:generation_tokens_total{engine="10",model_name="m",pid="8"} 4\n'
        'vllm:generation_tokens_total{engine="2",model_name="m"} 9\n'
    )
    engines = parse_engine_metrics(text)
    assert list(engines) == [EngineKey("m", "2"), EngineKey("m", "10")]
    assert engines[EngineKey("m", "10")] == EngineCounters(1.0, 7.0)


def test_an_engine_with_one_series_counts_zero_for_the_other() -> None:
    text = ('vllm:num_requests_running{engine="0"} 1\nvllm:num_requests_running{engine="1"} 2\n'
            'vllm:generation_tokens_total{engine="0"} 5\n')
    assert parse_engine_metrics(text)[EngineKey("", "1")] == EngineCounters(2.0, 0.0)


def test_untyped_exposition_keeps_the_total_suffix() -> None:
    text = 'vllm:num_requests_running{a="1"} 1\nvllm:generation_tokens_total{a="1"} 7\n'
    assert parse_engine_metrics(text) == {EngineKey(): EngineCounters(1.0, 7.0)}


def test_missing_metrics_are_named() -> None:
    with pytest.raises(MetricsParseError, match="lacks vllm:generation_tokens_total"):
        parse_engine_metrics("vllm:num_requests_running 1\n")


def test_an_engine_is_named_by_its_label_selector() -> None:
    assert str(EngineKey("qwen", "1")) == '{engine="1",model_name="qwen"}'
    assert str(EngineKey('a "b"\\', "")) == '{model_name="a \\"b\\"\\\\"}'
    assert str(EngineKey()) == ""


def test_stalled_tokens_with_running_requests_is_hung_after_the_timeout() -> None:
    detector = HangDetector(timeout_s=300)
    assert not one(detector, 0, 2, 100).hung
    assert not one(detector, 299, 2, 100).hung
    result = one(detector, 300, 2, 100)
    assert result.hung and result.hung_engines == (ONE,)
    assert result.reason is not None and "2 requests running" in result.reason and "300s" in result.reason
    assert 'engine {engine="0",model_name="qwen"}' in result.reason


def test_progress_restarts_the_clock() -> None:
    detector = HangDetector(timeout_s=300)
    one(detector, 0, 1, 100)
    one(detector, 250, 1, 101)
    assert not one(detector, 500, 1, 101).hung
    assert one(detector, 550, 1, 101).hung


def test_idle_engine_is_healthy_however_long() -> None:
    detector = HangDetector(timeout_s=300)
    for t in range(0, 10_000, 100):
        assert not one(detector, t, 0, 100).hung


def test_work_arriving_after_idle_gets_a_full_timeout() -> None:
    detector = HangDetector(timeout_s=300)
    one(detector, 0, 0, 100)
    one(detector, 5000, 1, 100)  # a request arrives; the counter has not moved yet
    assert not one(detector, 5299, 1, 100).hung
    assert one(detector, 5300, 1, 100).hung


def test_counter_reset_means_restart_not_hang() -> None:
    detector = HangDetector(timeout_s=300)
    one(detector, 0, 1, 5000)
    assert not one(detector, 290, 1, 3).hung  # went backwards: a new engine
    assert not one(detector, 500, 1, 3).hung
    assert one(detector, 590, 1, 3).hung


def test_one_stalled_engine_is_hung_while_another_generates() -> None:
    detector = HangDetector(timeout_s=300)
    for t in range(0, 300, 10):  # engine 0 generates all along: the pod's sum keeps advancing
        assert not two(detector, t, (1, 1000 + t), (3, 34)).hung
    result = two(detector, 300, (1, 1300), (3, 34))
    assert result.hung and result.hung_engines == (E1,)
    assert result.reason is not None
    assert result.reason.startswith('engine hung: engine {engine="1",model_name="qwen"}: 3 requests running')
    assert "stuck at 34" in result.reason and 'engine="0"' not in result.reason
    assert result.stalled_for_s == 300


def test_engines_that_all_generate_are_not_hung() -> None:
    detector = HangDetector(timeout_s=300)
    for t in range(0, 3000, 10):
        assert not two(detector, t, (2, 1000 + t), (1, 50 + t)).hung


def test_every_stalled_engine_is_named() -> None:
    detector = HangDetector(timeout_s=300)
    two(detector, 0, (1, 7), (2, 9))
    result = two(detector, 300, (1, 7), (2, 9))
    assert result.hung and result.hung_engines == (E0, E1)
    assert result.reason is not None and result.reason.startswith("engine hung (2 of 2 engines): ")
    assert 'engine="0"' in result.reason and 'engine="1"' in result.reason


def test_an_idle_engine_does_not_hide_or_cause_a_stall() -> None:
    detector = HangDetector(timeout_s=300)
    two(detector, 0, (0, 5), (1, 9))
    assert two(detector, 300, (0, 5), (1, 9)).hung_engines == (E1,)


def test_one_engine_restarting_does_not_excuse_another() -> None:
    detector = HangDetector(timeout_s=300)
    two(detector, 0, (1, 500), (1, 900))
    two(detector, 200, (1, 3), (1, 900))  # engine 0's counter went back: it restarted
    result = two(detector, 300, (1, 3), (1, 900))
    assert result.hung_engines == (E1,)  # engine 1 has owed tokens since 0; engine 0 since 200


def test_an_engine_that_disappears_is_forgotten() -> None:
    detector = HangDetector(timeout_s=300)
    two(detector, 0, (1, 5), (1, 9))
    assert not detector.observe(200, {E0: EngineCounters(1, 6)}).hung
    assert not two(detector, 400, (1, 7), (1, 9)).hung  # engine 1 is back: a fresh start, no debt
    assert two(detector, 700, (1, 8), (1, 9)).hung_engines == (E1,)


def test_engine_figures_are_kept_per_engine() -> None:
    detector = HangDetector(timeout_s=300)
    two(detector, 0, (1, 5), (2, 9))
    two(detector, 60, (1, 6), (2, 9))
    figures = detector.engines()
    assert figures[E0].stalled_for_s == 0 and figures[E1].stalled_for_s == 60 and not figures[E1].hung
    assert figures[E1].to_json(E1) == {"engine": "1", "model_name": "qwen", "running": 2.0,
                                       "generation_tokens_total": 9.0, "stalled_for_s": 60.0, "hung": False}


def test_non_positive_timeout_is_refused() -> None:
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        HangDetector(timeout_s=0)


def test_no_good_answer_for_the_timeout_is_hung_and_an_answer_clears_it() -> None:
    from ascend_runtime.health.hang import AnswerWatch

    watch = AnswerWatch(timeout_s=30)
    assert not watch.observe(0, None).hung
    assert not watch.observe(1, "/health answered HTTP 500").hung
    assert watch.observe(30, "/health did not answer within 2 s").stalled_for_s == 29
    hung = watch.observe(31, "/health did not answer within 2 s")
    assert hung.hung and hung.reason is not None
    assert "no good answer to /health for 30s" in hung.reason and "did not answer within 2 s" in hung.reason
    assert not watch.observe(32, None).hung  # one 200 ends it
    assert not watch.observe(100, "/health answered HTTP 503").hung  # the clock starts again


def test_the_monitor_fails_liveness_on_an_engine_that_answers_nothing() -> None:
    from prometheus_client import CollectorRegistry

    from ascend_runtime.config import HealthConfig
    from ascend_runtime.health.monitor import HealthMonitor

    now = [0.0]
    monitor = HealthMonitor(HealthConfig(hang_timeout_s=10), [], CollectorRegistry(), clock=lambda: now[0])
    monitor.observe_engine_answer("/health did not answer within 2 s")
    now[0] = 9.0
    assert monitor.verdict().healthy
    now[0] = 10.0
    verdict = monitor.verdict()  # judged at probe time, even without a new poll
    assert not verdict.healthy and verdict.details["engine"]["hung"] is True
    monitor.reset()  # a new engine owes nothing
    assert monitor.verdict().healthy


def dp_metrics(tokens0: float, tokens1: float) -> str:
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="qwen"} 1\n'
        'vllm:num_requests_running{engine="1",model_name="qwen"} 2\n'
        "# TYPE vllm:generation_tokens counter\n"
        f'vllm:generation_tokens_total{{engine="0",model_name="qwen"}} {tokens0}\n'
        f'vllm:generation_tokens_total{{engine="1",model_name="qwen"}} {tokens1}\n'
    )


def test_the_monitor_fails_liveness_on_one_stalled_engine_of_a_data_parallel_server() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from ascend_runtime.config import HealthConfig
    from ascend_runtime.health.monitor import HealthMonitor

    now = [0.0]
    registry = CollectorRegistry()
    monitor = HealthMonitor(HealthConfig(hang_timeout_s=10), [], registry, clock=lambda: now[0])
    for t in range(0, 10):  # engine 0 advances every scrape, engine 1 never does
        now[0] = float(t)
        monitor.observe_engine_metrics(dp_metrics(100 + 10 * t, 34))
        assert monitor.verdict().healthy
    now[0] = 10.0
    monitor.observe_engine_metrics(dp_metrics(200, 34))
    verdict = monitor.verdict()
    assert not verdict.healthy
    assert len(verdict.reasons) == 1
    assert 'engine {engine="1",model_name="qwen"}: 2 requests running' in verdict.reasons[0]
    engine = verdict.details["engine"]
    assert engine["hung"] is True and engine["stalled_for_s"] == 10.0
    assert [(e["engine"], e["hung"]) for e in engine["engines"]] == [("0", False), ("1", True)]
    assert b"ascend_llm_engine_hung 1.0" in generate_latest(registry)
    now[0] = 11.0
    monitor.observe_engine_metrics(dp_metrics(210, 35))  # engine 1 generates again
    assert monitor.verdict().healthy
