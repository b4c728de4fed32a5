"""Hung-engine detection: stalled tokens while requests run, idle engines, restarts, /metrics text."""

from __future__ import annotations

import pytest

from ascend_runtime.health.hang import EngineCounters, HangDetector, MetricsParseError, parse_engine_metrics

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


def test_counters_are_summed_over_label_sets() -> None:
    assert parse_engine_metrics(VLLM_METRICS) == EngineCounters(
        num_requests_running=3.0, generation_tokens_total=1234.0
    )


def test_untyped_exposition_keeps_the_total_suffix() -> None:
    text = 'vllm:num_requests_running{a="1"} 1\nvllm:generation_tokens_total{a="1"} 7\n'
    assert parse_engine_metrics(text) == EngineCounters(1.0, 7.0)


def test_missing_metrics_are_named() -> None:
    with pytest.raises(MetricsParseError, match="lacks vllm:generation_tokens_total"):
        parse_engine_metrics("vllm:num_requests_running 1\n")


def test_stalled_tokens_with_running_requests_is_hung_after_the_timeout() -> None:
    detector = HangDetector(timeout_s=300)
    assert not detector.observe(0, 2, 100).hung
    assert not detector.observe(299, 2, 100).hung
    result = detector.observe(300, 2, 100)
    assert result.hung
    assert result.reason is not None and "2 requests running" in result.reason and "300s" in result.reason


def test_progress_restarts_the_clock() -> None:
    detector = HangDetector(timeout_s=300)
    detector.observe(0, 1, 100)
    detector.observe(250, 1, 101)
    assert not detector.observe(500, 1, 101).hung
    assert detector.observe(550, 1, 101).hung


def test_idle_engine_is_healthy_however_long() -> None:
    detector = HangDetector(timeout_s=300)
    for t in range(0, 10_000, 100):
        assert not detector.observe(t, 0, 100).hung


def test_work_arriving_after_idle_gets_a_full_timeout() -> None:
    detector = HangDetector(timeout_s=300)
    detector.observe(0, 0, 100)
    detector.observe(5000, 1, 100)  # a request arrives; the counter has not moved yet
    assert not detector.observe(5299, 1, 100).hung
    assert detector.observe(5300, 1, 100).hung


def test_counter_reset_means_restart_not_hang() -> None:
    detector = HangDetector(timeout_s=300)
    detector.observe(0, 1, 5000)
    assert not detector.observe(290, 1, 3).hung  # went backwards: a new engine
    assert not detector.observe(500, 1, 3).hung
    assert detector.observe(590, 1, 3).hung


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
