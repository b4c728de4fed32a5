"""The pure parts of the load generator (bench/loadgen.py): schedule parsing, percentiles, the
engine's Prometheus text -> autoscaling gauges, per-step statistics, the target suggestion,
the table, the loopback check and the engine config that ``--start`` renders. Synthetic inputs
with complete expected values; nothing here sends a request or depends on timing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from benchload import load_bench


lg = load_bench("loadgen")
Gauges = lg.EngineGauges
Result = lg.RequestResult


# -- schedule ---------------------------------------------------------------------------------


def test_schedule_of_clients_and_of_rates() -> None:
    assert lg.parse_schedule("1, 4,16,64", "concurrency") == [1.0, 4.0, 16.0, 64.0]
    assert lg.parse_schedule("0.5,2,8,", "rate") == [0.5, 2.0, 8.0]


@pytest.mark.parametrize(("text", "mode", "message"), [
    ("", "concurrency", "--steps is empty"),
    ("1,x", "concurrency", "--steps: 'x' is not a number"),
    ("1,0", "concurrency", "--steps: '0' must be a positive number"),
    ("-2", "rate", "--rate: '-2' must be a positive number"),
    ("nan", "rate", "--rate: 'nan' must be a positive number"),
    ("1.5", "concurrency", "--steps: '1.5' is a number of clients; use a whole number"),
    ("2048", "concurrency", "--steps: '2048' exceeds 1024 clients"),
    ("5000", "rate", "--rate: '5000' exceeds 1000 requests per second"),
    (",".join(["1"] * 33), "concurrency", "--steps has 33 steps; at most 32"),
])
def test_bad_schedule_names_the_option_and_the_fix(text: str, mode: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(".", r"\.")):
        lg.parse_schedule(text, mode)


# -- percentiles ------------------------------------------------------------------------------


def test_percentile_interpolates_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert lg.percentile(values, 0) == 1.0
    assert lg.percentile(values, 50) == 2.5
    assert lg.percentile(values, 95) == pytest.approx(3.85)
    assert lg.percentile(values, 100) == 4.0
    assert lg.percentile([7.0], 95) == 7.0
    assert lg.percentile([], 50) is None


def test_percentile_outside_0_to_100_is_refused() -> None:
    with pytest.raises(ValueError, match="percentile 101 is outside 0..100"):
        lg.percentile([1.0], 101)


# -- metrics text -----------------------------------------------------------------------------

# The shape of vLLM 0.32's /metrics with data parallel 2 (one series per engine), behind the
# runtime's own ascend_llm_* families, as the runtime's /metrics serves them.
RUNTIME_METRICS = """\
# HELP ascend_llm_ready 1 while the engine is warm and not draining.
# TYPE ascend_llm_ready gauge
ascend_llm_ready 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 8.0
vllm:num_requests_running{engine="1",model_name="tiny"} 6.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 5.0
vllm:num_requests_waiting{engine="1",model_name="tiny"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.25
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 12345.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="tiny"} 3.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny"} 4.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="tiny"} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="tiny"} 3.5
"""


def test_gauges_sum_requests_and_average_kv_cache_over_engines() -> None:
    assert lg.parse_engine_gauges(RUNTIME_METRICS) == Gauges(waiting=5.0, running=14.0, kv_usage=0.375)


def test_older_vllm_kv_cache_gauge_name_is_read() -> None:
    text = ("# TYPE vllm:gpu_cache_usage_perc gauge\n"
            'vllm:gpu_cache_usage_perc{model_name="m"} 0.9\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            'vllm:num_requests_waiting{model_name="m"} 2.0\n')
    assert lg.parse_engine_gauges(text) == Gauges(waiting=2.0, running=None, kv_usage=0.9)


def test_absent_gauges_are_none() -> None:
    # The runtime serves only its own families while the engine is down.
    assert lg.parse_engine_gauges("# TYPE ascend_llm_ready gauge\nascend_llm_ready 0.0\n") == Gauges(None, None, None)


def test_malformed_metrics_text_raises_value_error() -> None:
    with pytest.raises(ValueError):
        lg.parse_engine_gauges("vllm:num_requests_waiting abc\n")


# -- step statistics --------------------------------------------------------------------------


def test_step_statistics_from_requests_and_samples() -> None:
    # Window 100..110 s. Four successes (one finishing after the window), one failure.
    results = [
        Result(started=100.0, finished=101.0, ok=True, output_tokens=64, ttft_s=0.10),
        Result(started=101.0, finished=103.0, ok=True, output_tokens=64, ttft_s=0.30),
        Result(started=103.0, finished=106.0, ok=True, output_tokens=64, ttft_s=0.20),
        Result(started=106.0, finished=110.5, ok=False, error="HTTP 503: draining"),
        Result(started=108.0, finished=112.0, ok=True, output_tokens=64),
    ]
    samples = [
        (100.5, Gauges(9.0, 1.0, 0.9)),  # inside the settle time: left out
        (102.0, Gauges(0.0, 8.0, 0.1)),
        (104.0, Gauges(2.0, 8.0, 0.2)),
        (106.0, Gauges(4.0, 8.0, None)),
        (108.0, Gauges(None, 6.0, 0.3)),
        (111.0, Gauges(9.0, 9.0, 0.9)),  # after the window: left out
    ]
    stats = lg.summarize_step("concurrency", 4, 100.0, 110.0, results, samples, settle_s=1.0, dropped=0)
    assert stats == lg.StepStats(
        mode="concurrency", offered=4, duration_s=10.0, sent=5, completed=4, failed=1, dropped=0,
        req_per_s=0.3, output_tokens_per_s=19.2,
        latency_p50_s=2.5, latency_p95_s=pytest.approx(3.85), ttft_p50_s=0.20,
        waiting_mean=2.0, waiting_p95=pytest.approx(3.8), running_mean=7.5, running_p95=8.0,
        kv_usage_mean=pytest.approx(0.2), samples=4,
    )


def test_step_without_successes_or_samples_has_no_percentiles() -> None:
    results = [Result(started=0.0, finished=1.0, ok=False, error="ClientConnectorError")]
    stats = lg.summarize_step("rate", 2.5, 0.0, 5.0, results, [], dropped=3)
    assert stats == lg.StepStats(
        mode="rate", offered=2.5, duration_s=5.0, sent=1, completed=0, failed=1, dropped=3,
        req_per_s=0.0, output_tokens_per_s=0.0, latency_p50_s=None, latency_p95_s=None, ttft_p50_s=None,
        waiting_mean=None, waiting_p95=None, running_mean=None, running_p95=None, kv_usage_mean=None, samples=0,
    )


def test_empty_window_is_refused() -> None:
    with pytest.raises(ValueError, match="positive length"):
        lg.summarize_step("concurrency", 1, 5.0, 5.0, [], [])


# -- target suggestion ------------------------------------------------------------------------


def step(offered: float, p50: float, p95: float, waiting: float | None, running: float | None,
         kv: float | None = 0.1, mode: str = "concurrency") -> object:
    return lg.StepStats(
        mode=mode, offered=offered, duration_s=15.0, sent=10, completed=10, failed=0, dropped=0, req_per_s=1.0,
        output_tokens_per_s=64.0, latency_p50_s=p50, latency_p95_s=p95, ttft_p50_s=None,
        waiting_mean=waiting, waiting_p95=waiting, running_mean=running, running_p95=running,
        kv_usage_mean=kv, samples=20)


def test_default_slo_is_twice_the_median_at_the_lowest_load() -> None:
    steps = [step(4, 1.5, 2.0, 0, 4), step(1, 0.8, 0.9, 0, 1), step(16, 3.0, 4.0, 8, 8)]
    assert lg.default_latency_slo(steps) == 1.6
    assert lg.default_latency_slo([]) is None


def test_target_is_the_queue_interpolated_where_p95_crosses_the_slo() -> None:
    # Unordered on purpose: the suggestion sorts by offered load.
    steps = [step(16, 3.0, 4.0, 8.0, 8.0, 0.4), step(1, 0.8, 1.0, 0.0, 1.0, 0.1), step(4, 1.0, 2.0, 2.0, 4.0, 0.2)]
    suggestion = lg.suggest_target(steps, slo_s=3.0)
    # 3.0 s lies halfway between p95 2.0 s (4 clients) and 4.0 s (16 clients).
    assert suggestion == lg.TargetSuggestion(
        slo_s=3.0, crossed=True, below_offered=4, above_offered=16, waiting_at_slo=5.0, running_at_slo=6.0,
        kv_usage_at_slo=pytest.approx(0.3), signal="waitingRequestsPerReplica", target=5.0,
        note="p95 latency crosses 3.00 s between 4 and 16 clients (p95 2.00 -> 4.00 s); there a replica has "
             "5.00 requests waiting and 6.00 running. signal waitingRequestsPerReplica, target 5 (or lower, for "
             "headroom while a new replica starts)")


def test_target_is_rounded_down() -> None:
    steps = [step(1, 1.0, 1.0, 0.0, 1.0), step(2, 1.0, 3.0, 2.99, 2.0)]
    suggestion = lg.suggest_target(steps, slo_s=2.9)  # fraction 0.95 -> waiting 2.8405
    assert (suggestion.signal, suggestion.target) == ("waitingRequestsPerReplica", 2.8)


def test_running_requests_are_suggested_when_no_queue_forms_before_the_slo() -> None:
    steps = [step(1, 1.0, 1.0, 0.0, 1.0), step(4, 2.0, 3.0, 0.2, 4.0)]
    suggestion = lg.suggest_target(steps, slo_s=2.0, min_waiting_target=0.5)
    assert suggestion == lg.TargetSuggestion(
        slo_s=2.0, crossed=True, below_offered=1, above_offered=4, waiting_at_slo=0.1, running_at_slo=2.5,
        kv_usage_at_slo=pytest.approx(0.1), signal="runningRequestsPerReplica", target=2.5,
        note="p95 latency crosses 2.00 s between 1 and 4 clients (p95 1.00 -> 3.00 s); the queue is still "
             "(nearly) empty there (0.1 waiting): latency grows inside the running batch, so waiting requests "
             "see it too late. signal runningRequestsPerReplica, target 2.5")


def test_no_crossing_asks_for_higher_steps() -> None:
    steps = [step(0.5, 1.0, 1.1, 0.0, 1.0, mode="rate"), step(2, 1.0, 1.5, 0.5, 3.0, mode="rate")]
    suggestion = lg.suggest_target(steps, slo_s=2.0)
    assert suggestion == lg.TargetSuggestion(
        slo_s=2.0, crossed=False, below_offered=2, above_offered=None, waiting_at_slo=None, running_at_slo=None,
        kv_usage_at_slo=None, signal=None, target=None,
        note="p95 latency stayed within 2.00 s up to 2 req/s (waiting 0.5, running 3.0): add higher steps to "
             "find the limit")


def test_slo_below_the_lowest_load_asks_for_a_looser_slo() -> None:
    suggestion = lg.suggest_target([step(1, 1.0, 1.2, 0.0, 1.0), step(2, 1.5, 2.0, 1.0, 2.0)], slo_s=1.0)
    assert suggestion == lg.TargetSuggestion(
        slo_s=1.0, crossed=True, below_offered=None, above_offered=1, waiting_at_slo=None, running_at_slo=None,
        kv_usage_at_slo=None, signal=None, target=None,
        note="p95 latency is already 1.20 s > 1.00 s at the lowest load (1 clients): raise --latency-slo or "
             "start the schedule lower")


def test_no_completed_request_gives_no_target() -> None:
    empty = lg.summarize_step("concurrency", 1, 0.0, 1.0, [], [])
    suggestion = lg.suggest_target([empty], slo_s=1.0)
    assert (suggestion.crossed, suggestion.signal, suggestion.target) == (False, None, None)
    assert suggestion.note.startswith("no step completed a request")


def test_non_positive_slo_is_refused() -> None:
    with pytest.raises(ValueError, match="--latency-slo must be positive"):
        lg.suggest_target([], slo_s=0)


# -- table ------------------------------------------------------------------------------------


def test_table_rows() -> None:
    rows = [step(1, 0.8, 0.95, 0.0, 1.0, 0.012),
            lg.summarize_step("concurrency", 2, 0.0, 1.0, [], [], dropped=0)]
    assert lg.format_table(rows) == (
        "| clients | sent | ok | failed | req/s | output tok/s | p50 s | p95 s | TTFT p50 s | waiting mean / p95 "
        "| running mean / p95 | KV cache % |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        "| 1 | 10 | 10 | 0 | 1.00 | 64 | 0.80 | 0.95 | - | 0.0 / 0.0 | 1.0 / 1.0 | 1.2 |\n"
        "| 2 | 0 | 0 | 0 | 0.00 | 0 | - | - | - | - / - | - / - | - |"
    )


# -- saved reports ----------------------------------------------------------------------------


def test_saved_report_reads_back_into_the_same_steps() -> None:
    from dataclasses import asdict

    steps = [step(1, 0.7, 1.2, 0.0, 1.0), step(16, 1.6, 4.5, 7.5, 7.7)]
    report = {"model": "tiny", "steps": [asdict(item) for item in steps]}
    assert lg.steps_from_report(report) == steps


@pytest.mark.parametrize(("report", "message"), [
    ([], "run.json: no 'steps' list"),
    ({"steps": []}, "run.json: no 'steps' list"),
    ({"steps": [{"mode": "concurrency", "offered": 1}]}, r"run.json: steps\[0\] is not a loadgen step \(missing completed, "),
    ({"steps": ["x"]}, r"run.json: steps\[0\] is not a loadgen step"),
])
def test_a_report_that_is_not_the_loadgens_is_refused(report: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lg.steps_from_report(report, "run.json")


# -- loopback only ----------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "expected"), [
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
    ("http://localhost:8000", "http://localhost:8000"),
    ("http://[::1]:8000", "http://[::1]:8000"),
    ("http://127.0.0.2:9", "http://127.0.0.2:9"),
])
def test_loopback_urls_are_accepted(url: str, expected: str) -> None:
    assert lg.validate_loopback_url(url) == expected


@pytest.mark.parametrize(("url", "message"), [
    ("http://10.0.0.1:8000", "loopback endpoints only"),
    ("http://engine.llm.svc:8000", "loopback endpoints only"),
    ("127.0.0.1:8000", "is not an http URL"),
    ("ftp://127.0.0.1/", "is not an http URL"),
])
def test_other_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"--metrics-url '{url}'.*{message}"):
        lg.validate_loopback_url(url, "--metrics-url")


# -- the engine config of --start -------------------------------------------------------------


def test_start_config_is_eager_with_cpu_settings_and_a_small_warmup(tmp_path: Path) -> None:
    config = lg.start_config(tmp_path / "model", tmp_path, engine_port=18000, runtime_port=18080, max_num_seqs=8,
                             kv_cache_gib=1, engine_command=["python", "-m", "vllm.entrypoints.openai.api_server"],
                             cpus=2)
    assert config["model"] == {"path": str(tmp_path / "model"), "servedName": "tiny", "trustRemoteCode": False}
    assert config["engine"] == {
        "command": ["python", "-m", "vllm.entrypoints.openai.api_server"], "host": "127.0.0.1", "port": 18000,
        "maxModelLen": 512, "maxNumSeqs": 8, "dtype": "float32",
        "parallel": {"tensor": 1, "pipeline": 1, "data": 1, "expert": False}, "extraArgs": [],
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0-1",
                "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"), "TMPDIR": str(tmp_path / "tmp")},
        "shutdownTimeoutS": 30,
    }
    assert config["graph"]["policy"] == "eager"
    assert config["warmup"] == {"enabled": True, "promptLengths": [8], "concurrency": [1], "maxTokens": 2,
                                "chat": False, "timeoutS": 120}
    assert (config["runtime"]["host"], config["runtime"]["port"], config["runtime"]["restart"]["maxRestarts"]) == (
        "127.0.0.1", 18080, 0)


def test_start_config_binds_one_core_on_a_one_core_machine(tmp_path: Path) -> None:
    config = lg.start_config(tmp_path, tmp_path, 18000, 18080, 4, 2, ["vllm"], cpus=1)
    assert config["engine"]["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert config["engine"]["env"]["VLLM_CPU_KVCACHE_SPACE"] == "2"
