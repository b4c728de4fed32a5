"""The pure parts of bench/runtime_overhead.py: percentiles and summaries, the ABBA round order,
per-pair ratios, throughput of a round, the runtime's phase lines and the fallback timeline
from timestamped output, the start-up overhead, first-request ratios and the idle control, the per-start engine
config, the argv taken from ``ascend-llm flags``, option checks, goals and the report tables.
Synthetic inputs with complete expected values; nothing here starts a process or sends a request.
"""

from __future__ import annotations

import dataclasses

import re
from pathlib import Path

import pytest
from benchload import load_bench


ro = load_bench("runtime_overhead")


# -- statistics ------------------------------------------------------------------------------

def test_percentile_interpolates_between_ranks():
    assert ro.percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert ro.percentile([1.0, 2.0, 3.0, 4.0, 5.0], 25) == 2.0
    assert ro.percentile([7.0], 95) == 7.0
    assert ro.percentile([], 50) is None


def test_percentile_rejects_out_of_range_q():
    with pytest.raises(ValueError, match="outside 0..100"):
        ro.percentile([1.0], 101)


def test_summarize_gives_median_range_and_relative_spread():
    assert ro.summarize([10.0, 12.0, 8.0]) == ro.Summary(n=3, median=10.0, low=8.0, high=12.0, spread_pct=40.0)
    assert ro.summarize([]) is None
    assert ro.summarize([0.0, 0.0]).spread_pct is None


def test_alternation_swaps_the_leading_side_every_pair():
    assert ro.alternation(3) == ["bare", "runtime", "runtime", "bare", "bare", "runtime"]
    with pytest.raises(ValueError, match="--rounds"):
        ro.alternation(0)


def test_pair_ratios_divide_runtime_by_bare_pairwise():
    assert ro.pair_ratios([10.0, 20.0], [9.9, 22.0]) == pytest.approx([0.99, 1.1])
    with pytest.raises(ValueError, match="pair up"):
        ro.pair_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="zero throughput"):
        ro.pair_ratios([0.0], [1.0])


def test_ratio_summary_is_none_when_a_bare_round_has_nothing_to_divide_by():
    assert ro.ratio_summary([0.0, 5.0], [1.0, 5.0]) is None
    assert ro.ratio_summary([], []) is None
    assert ro.ratio_summary([10.0, 10.0, 10.0], [9.0, 10.0, 11.0]) == ro.Summary(
        n=3, median=1.0, low=0.9, high=1.1, spread_pct=pytest.approx(20.0))


def test_round_throughput_counts_successful_requests_and_tokens():
    result = ro.RoundResult(seconds=4.0, ok=46, failed=2, output_tokens=2944)
    assert ro.round_throughput(result) == (11.5, 736.0)
    with pytest.raises(ValueError, match="positive time"):
        ro.round_throughput(ro.RoundResult(seconds=0.0, ok=1, failed=0, output_tokens=1))


def test_parse_proc_stat_counts_fields_after_the_command_name():
    # A name with spaces and a parenthesis, as VLLM::Worker-style names or scripts can have.
    line = ("4242 (VLLM::Work er) x) S 4200 4100 4100 0 -1 4194560 9000 0 0 0 "
            "1234 567 0 0 20 0 3 0 100 1000000 500 18446744073709551615\n")
    assert ro.parse_proc_stat(line) == (4100, 1801)
    with pytest.raises(ValueError, match="not a /proc/PID/stat line"):
        ro.parse_proc_stat("4242 (short) S 1")


# -- the runtime's output --------------------------------------------------------------------

RUNTIME_LINES = [
    (100.0, "2026-12-01 09:00:01,000 ascend-llm INFO ascend_runtime.engine: launching engine: python -m vllm..."),
    (101.5, "2026-12-01 09:00:02,500 ascend-llm INFO ascend_runtime.state: phase Preflight -> Loading: Loading model"),
    (180.0, "(Worker pid=6447) ERROR [multiproc_executor.py:1063]     raise exc.InvalidCxxCompiler"),
    (180.2, "torch._inductor.exc.InductorError: InvalidCxxCompiler: No working C++ compiler found"),
    (180.9, "2026-12-01 ascend-llm WARNING ascend_runtime.supervisor: graph mode PIECEWISE failed (...)"),
    (181.0, "2026-12-01 ascend-llm INFO ascend_runtime.engine: launching engine: python -m vllm... --enforce-eager"),
    (181.1, "2026-12-01 ascend-llm INFO ascend_runtime.state: phase Loading -> Loading: restarting"),
    (220.0, "2026-12-01 ascend-llm INFO ascend_runtime.state: phase Loading -> WarmingUp: engine up; warming up"),
    (226.5, "2026-12-01 ascend-llm INFO ascend_runtime.state: phase WarmingUp -> Ready: serving in EAGER mode"),
]


def test_parse_phase_line_reads_old_and_new_phase():
    assert ro.parse_phase_line("x ascend_runtime.state: phase WarmingUp -> Ready: serving") == ("WarmingUp", "Ready")
    assert ro.parse_phase_line("INFO:     Application startup complete.") is None


def test_phase_times_keep_the_first_entry_into_each_phase():
    assert ro.phase_times(RUNTIME_LINES, origin=99.0) == {"Loading": 2.5, "WarmingUp": 121.0, "Ready": 127.5}


def test_fallback_timeline_runs_from_the_first_failure_line():
    times = ro.fallback_timeline(RUNTIME_LINES, origin=99.0)
    assert times == ro.FallbackTimes(failure_after_s=81.0, relaunch_s=pytest.approx(1.0),
                                     healthy_s=pytest.approx(40.0), ready_s=pytest.approx(46.5))


def test_fallback_timeline_names_what_is_missing():
    with pytest.raises(ValueError, match="did not fail as planned"):
        ro.fallback_timeline(RUNTIME_LINES[:2], origin=99.0)
    with pytest.raises(ValueError, match="did not relaunch"):
        ro.fallback_timeline(RUNTIME_LINES[:5], origin=99.0)
    with pytest.raises(ValueError, match="never entered Ready"):
        ro.fallback_timeline(RUNTIME_LINES[:-1], origin=99.0)
    # A Ready before the failure (there is none in a real fallback) does not count.
    early_ready = [(90.0, "phase Loading -> Ready: x"), *RUNTIME_LINES[:-1]]
    with pytest.raises(ValueError, match="never entered Ready"):
        ro.fallback_timeline(early_ready, origin=80.0)


def test_fallback_timeline_takes_another_marker():
    lines = [(1.0, "ACL graph capture failed: aclmdlRICaptureEnd"), (2.0, "launching engine: x"),
             (5.0, "phase Loading -> WarmingUp"), (6.0, "phase WarmingUp -> Ready")]
    assert ro.fallback_timeline(lines, 0.0, "capture failed") == ro.FallbackTimes(1.0, 1.0, 4.0, 5.0)


# -- derived figures -------------------------------------------------------------------------

def test_startup_overhead_subtracts_bare_start_and_warmup():
    assert ro.startup_overhead(95.0, 80.0, 12.5) == ro.StartupOverhead(95.0, 80.0, 12.5, 2.5)
    # Warmup off (/state warmup.seconds is null): nothing to subtract for it.
    assert ro.startup_overhead(81.0, 80.0, None) == ro.StartupOverhead(81.0, 80.0, 0.0, 1.0)


def test_first_request_stats_compare_each_length_and_batch_with_its_warm_median_and_range():
    stats = ro.first_request_stats([(40, 1, 0.9), (200, 1, 0.3), (40, 4, 0.6), (440, 1, 0.5)],
                                   {(40, 1): [0.3, 0.2, 0.4], (200, 1): [0.3, 0.3, 0.3], (40, 4): [0.5, 0.6],
                                    (440, 1): []})
    assert stats == [
        # first / slowest warm .. first / fastest warm: 0.9 / 0.4 .. 0.9 / 0.2.
        ro.LengthStats(40, 0.9, 0.3, pytest.approx(3.0), 1, pytest.approx(2.25), pytest.approx(4.5), 3),
        ro.LengthStats(200, 0.3, 0.3, pytest.approx(1.0), 1, pytest.approx(1.0), pytest.approx(1.0), 3),
        ro.LengthStats(40, 0.6, 0.55, pytest.approx(0.6 / 0.55), 4, pytest.approx(1.0), pytest.approx(1.2), 2),
        ro.LengthStats(440, 0.5, None, None, 1, None, None, 0),
    ]


def test_the_engines_cpu_seconds_per_wave_tell_a_busy_machine_from_extra_work():
    first = [(472, 4, 0.6), (264, 4, 0.6)]
    warm = {(472, 4): [0.3, 0.35, 0.32], (264, 4): [0.3, 0.3, 0.3]}
    # 472 x4 burned twice the CPU of its warm waves (a cold path); 264 x4 the same CPU (it waited).
    cpu_first = {(472, 4): 1.0, (264, 4): 0.5}
    cpu_warm = {(472, 4): [0.5, 0.5, 0.45], (264, 4): [0.5, 0.48, 0.52]}
    stats = ro.first_request_stats(first, warm, cpu_first, cpu_warm)
    assert (stats[0].cpu_first_s, stats[0].cpu_warm_median_s) == (1.0, 0.5)
    assert (stats[0].cpu_ratio_low, stats[0].cpu_ratio_high) == (pytest.approx(2.0), pytest.approx(1.0 / 0.45))
    entry = {"start": "rt", "kind": "runtime", "mode": "PIECEWISE", "warmup": "on",
             "lengths": [dataclasses.asdict(item) for item in stats]}
    goals = ro.goals({"firstRequest": [entry]})
    assert goals["first request <= 1.3x warm (rt)"].outcome.value == "MISSED"
    diagnostic = goals["engine CPU of the first wave <= 1.3x warm (rt; diagnostic)"]
    assert diagnostic.outcome.value == "MISSED" and "472 tok x4" in diagnostic.reason
    assert "264 tok x4" not in diagnostic.reason
    assert "CPU 1.00 / 0.50 s (2.00-2.22)" in ro.format_report({"firstRequest": [entry]})


# -- configs and commands --------------------------------------------------------------------

def test_bench_config_gives_each_start_its_own_cache_and_the_cpu_settings(tmp_path):
    config = ro.bench_config(Path("/m"), tmp_path, 18000, 18080, ["py", "-m", "vllm.x"],
                             policy="eager", warmup=False, warmup_lengths=[16, 128, 480], warmup_concurrency=[1, 8])
    assert config == {
        "schemaVersion": 1,
        "name": "overhead-bench",
        "model": {"path": "/m", "servedName": "tiny"},
        "engine": {
            "command": ["py", "-m", "vllm.x"], "host": "127.0.0.1", "port": 18000, "dtype": "float32",
            "maxModelLen": 512, "maxNumSeqs": 8, "shutdownTimeoutS": 30,
            "env": {"VLLM_CPU_KVCACHE_SPACE": "1",
                    "VLLM_CACHE_ROOT": str(tmp_path / "vllm-cache"), "TMPDIR": str(tmp_path / "tmp")},
        },
        "graph": {"policy": "eager"},
        "warmup": {"enabled": False, "promptLengths": [16, 128, 480], "concurrency": [1, 8], "maxTokens": 8,
                   "chat": True, "timeoutS": 300},
        "runtime": {"host": "127.0.0.1", "port": 18080, "readyTimeoutS": 600, "preflight": False,
                    "restart": {"maxRestarts": 0}},
    }


def test_bench_config_is_a_valid_engine_config(tmp_path):
    from ascend_runtime.config import EngineConfig

    config = EngineConfig.model_validate(ro.bench_config(Path("/m"), tmp_path, 1, 2, ["py"]))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in config.engine.env  # the runtime's default
    assert config.warmup.enabled is True
    # No lengths or levels given: the runtime derives its plan from the engine's configuration.
    assert {"prompt_lengths", "concurrency"}.isdisjoint(config.warmup.model_fields_set)


def test_engine_command_from_flags_takes_argv_env_and_mode():
    flags = {"mode": "PIECEWISE", "argv": ["py", "-m", "vllm.x", "--port", "9"], "env": {"A": 1}, "warnings": []}
    assert ro.engine_command_from_flags(flags) == (["py", "-m", "vllm.x", "--port", "9"], {"A": "1"}, "PIECEWISE")
    with pytest.raises(ValueError, match="no engine argv"):
        ro.engine_command_from_flags({"argv": None})
    with pytest.raises(TypeError, match="not a mapping"):
        ro.engine_command_from_flags({"argv": ["py"], "env": ["A=1"]})


def test_parse_env_splits_at_the_first_equals_sign():
    assert ro.parse_env(["CXX=/bin/false", "X=a=b", "EMPTY="]) == {"CXX": "/bin/false", "X": "a=b", "EMPTY": ""}
    with pytest.raises(ValueError, match="--fallback-env 'CXX' is not KEY=VALUE"):
        ro.parse_env(["CXX"])
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        ro.parse_env(["1X=y"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--first-lengths", "40,abc"], "--first-lengths '40,abc'"),
    (["--first-lengths", "40,500"], "each length must be 1..480"),
    (["--first-batches", "1,x"], "--first-batches '1,x'"),
    (["--first-batches", "16"], "each batch size must be 1..8"),
    (["--rounds", "0"], "--rounds 0 is outside 1..50"),
    (["--concurrency", "100"], "--concurrency 100 is outside 1..64"),
    (["--engine-command", " "], "--engine-command is empty"),
    (["--start-timeout", "5"], "--start-timeout 5.0 is outside 30..1800"),
])
def test_options_name_the_bad_option(argv, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        ro.options_from_args(ro.build_parser().parse_args(argv))


def test_quick_options_take_fewer_rounds_and_repeats():
    quick = ro.options_from_args(ro.build_parser().parse_args(["--quick"]))
    full = ro.options_from_args(ro.build_parser().parse_args([]))
    assert (quick.rounds, quick.repeats, full.rounds, full.repeats) == (2, 3, 8, 5)
    assert full.fallback_env == {"CXX": "/bin/false"}
    # More than 3 lengths, off the warmup's power-of-two ladder, and more than one batch size.
    assert (full.first_lengths, full.first_batches) == ([24, 72, 136, 264, 472], [1, 4])


# -- goals and the report --------------------------------------------------------------------

def _summary(median: float, low: float | None = None, high: float | None = None) -> dict:
    low = median if low is None else low
    high = median if high is None else high
    return {"n": 3, "median": median, "low": low, "high": high, "spread_pct": 100 * (high - low) / median}


REPORT = {
    "throughput": {
        "load": {"requests": 48, "maxTokens": 64, "promptTokens": 32, "concurrency": 8, "rounds": 3},
        "bare": {"reqPerS": _summary(10.0, 9.0, 11.0), "tokPerS": _summary(640.0), "failed": 0,
                 "cpu": {"servingEngineS": _summary(7.5), "idleEngineS": _summary(0.1),
                         "runtimeProcessS": _summary(0.02)}},
        "runtime": {"reqPerS": _summary(9.95), "tokPerS": _summary(636.8), "failed": 0,
                    "cpu": {"servingEngineS": _summary(7.6), "idleEngineS": _summary(0.2),
                            "runtimeProcessS": _summary(0.04)}},
        "ratio": {"reqPerS": _summary(0.995), "tokPerS": _summary(0.995, 0.992, 1.01)},
    },
    "firstRequest": [
        {"start": "runtime-graph-warmup", "kind": "runtime", "mode": "PIECEWISE", "warmup": "on",
         "lengths": [{"prompt_tokens": 40, "first_s": 0.2, "warm_median_s": 0.18, "ratio": 1.11, "batch": 1,
                      "ratio_low": 1.0, "ratio_high": 1.25, "warm_n": 3},
                     {"prompt_tokens": 440, "first_s": 0.5, "warm_median_s": 0.3, "ratio": 1.67, "batch": 4,
                      "ratio_low": 1.4, "ratio_high": 2.0, "warm_n": 3}]},
        {"start": "runtime-graph-nowarmup", "kind": "runtime", "mode": "PIECEWISE", "warmup": "off",
         "lengths": [{"prompt_tokens": 40, "first_s": 3.0, "warm_median_s": 0.2, "ratio": 15.0}]},
    ],
}


def test_goals_judge_throughput_and_warm_runtimes_only_on_their_ranges():
    goals = {name: verdict.outcome.value for name, verdict in ro.goals(REPORT).items()}
    # 0.992-1.01 lies above 0.99; the 440-token batch's 1.4-2.0 lies above 1.3.
    assert goals == {"throughput ratio >= 0.99": "met", "first request <= 1.3x warm (runtime-graph-warmup)": "MISSED"}


def test_a_median_past_the_goal_with_a_wide_spread_is_inconclusive():
    """The issue's case: a 1.96 median ratio with +-93 % spread over 2 pairs does not meet >= 0.99."""
    wide = {"throughput": {**REPORT["throughput"], "ratio": {"reqPerS": None, "tokPerS": {
        "n": 2, "median": 1.96, "low": 0.14, "high": 1.96 + 0.93 * 1.96 - 0.14, "spread_pct": 93.0}}}}
    verdict = ro.goals(wide)["throughput ratio >= 0.99"]
    assert verdict.outcome.value == "inconclusive" and "fewer than 3 samples" in verdict.reason
    wide["throughput"]["ratio"]["tokPerS"]["n"] = 8
    assert "straddles 0.99" in ro.goals(wide)["throughput ratio >= 0.99"].reason
    assert "throughput ratio >= 0.99: inconclusive" in ro.format_report(wide)


def test_first_request_goal_is_inconclusive_when_a_range_straddles_and_met_when_all_lie_below():
    entry = REPORT["firstRequest"][0]
    straddling = {"firstRequest": [{**entry, "lengths": [{**entry["lengths"][0], "ratio_high": 1.4}]}]}
    below = {"firstRequest": [{**entry, "lengths": [entry["lengths"][0]]}]}
    old = {"firstRequest": [{**entry, "lengths": [{"prompt_tokens": 40, "first_s": 0.2, "warm_median_s": 0.18,
                                                   "ratio": 1.11}]}]}
    name = "first request <= 1.3x warm (runtime-graph-warmup)"
    assert ro.goals(straddling)[name].outcome.value == "inconclusive"
    assert ro.goals(below)[name].outcome.value == "met"
    assert "no warm range recorded" in ro.goals(old)[name].reason


def test_format_report_renders_the_tables():
    text = ro.format_report({**REPORT, "goals": ro.goals(REPORT)})
    assert text.splitlines()[:10] == [
        "Throughput: 48 requests x 64 tokens, concurrency 8, 3 rounds per side, alternating; median (min-max, spread)",
        "",
        "| | bare engine | under the runtime | runtime / bare (per pair) |",
        "|---|---|---|---|",
        "| req/s | 10.00 (9.00-11.00, ±20%) | 9.95 (9.95-9.95, ±0%) | 0.995 (0.995-0.995, ±0%) |",
        "| output tokens/s | 640.00 (640.00-640.00, ±0%) | 636.80 (636.80-636.80, ±0%) | 0.995 (0.992-1.010, ±2%) |",
        "| failed requests | 0 | 0 | |",
        "| CPU s per round: the serving engine's processes | 7.50 (7.50-7.50, ±0%) | 7.60 (7.60-7.60, ±0%) | |",
        "| CPU s per round: the other (idle) engine | 0.10 (0.10-0.10, ±0%) | 0.20 (0.20-0.20, ±0%) | |",
        "| CPU s per round: the runtime process itself | 0.02 (0.02-0.02, ±0%) | 0.04 (0.04-0.04, ±0%) | |",
    ]
    assert ("| runtime-graph-warmup (PIECEWISE) | on | 40 tok x1: 0.200 / 0.180 = **1.11x** (1.00-1.25); "
            "440 tok x4: 0.500 / 0.300 = **1.67x** (1.40-2.00) | 1.11x |") in text
    assert text.splitlines()[-3:] == [
        "Goals:",
        "- throughput ratio >= 0.99: met (range 0.992-1.01 over 3 samples, all >= 0.99)",
        "- first request <= 1.3x warm (runtime-graph-warmup): MISSED (1 of 2 MISSED (440 tok x4: range 1.4-2 over "
        "3 samples, all on the wrong side of 1.3))",
    ]


def test_format_report_splits_the_fallback_into_stop_and_eager_start():
    fallback = {"failureAfterS": 55.6, "relaunchS": 10.1, "healthyS": 41.2, "readyS": 42.1, "warmupS": 0.9,
                "bareEagerHealthS": 41.2, "ratioWithWarmup": 1.0, "ratioHealth": 1.0, "totalReadyS": 97.6}
    assert ro.format_report({"fallback": fallback}).splitlines() == [
        "Fallback (CXX=/bin/false: torch.compile fails, the runtime falls back to eager)",
        "",
        "| | seconds |",
        "|---|---|",
        "| runtime launch to the InvalidCxxCompiler line | 55.6 |",
        "| failure line to the eager engine launched (the failed engine stopping) | 10.10 |",
        "| eager engine under the runtime: launch to /health 200 | 31.1 |",
        "| failure line to eager engine /health 200 | 41.2 |",
        "| failure line to Ready (warmup 0.90 s included) | **42.1** |",
        "| bare eager cold start: launch to /health 200 | 41.2 |",
        "| ratio (failure line to Ready) / (bare eager start + warmup) | **1.00** |",
        "| ratio (failure line to eager /health) / bare eager start | 1.00 |",
        "| total launch to Ready with the failed graph attempt | 97.6 |",
    ]


def test_after_idle_stats_divide_each_gaps_waves_by_the_warm_median_of_the_first_cell():
    after = [(0.5, 0.040), (0.5, 0.050), (5.0, 0.060), (5.0, 0.070)]
    assert ro.after_idle_stats(after, [0.030, 0.050, 0.040]) == [
        {"gapS": 0.5, "seconds": [0.040, 0.050], "ratios": [pytest.approx(1.0), pytest.approx(1.25)]},
        {"gapS": 5.0, "seconds": [0.060, 0.070], "ratios": [pytest.approx(1.5), pytest.approx(1.75)]},
    ]
    assert ro.after_idle_stats(after[:1], []) == [{"gapS": 0.5, "seconds": [0.040], "ratios": []}]


def test_format_report_renders_the_idle_control_under_the_first_wave_table():
    entry = {"start": "runtime-graph-warmup", "kind": "runtime", "mode": "PIECEWISE", "warmup": "on",
             "lengths": [{"prompt_tokens": 24, "batch": 1, "first_s": 0.047, "warm_median_s": 0.035, "ratio": 1.34}],
             "afterIdle": [{"gapS": 0.5, "seconds": [0.036], "ratios": [1.03]},
                           {"gapS": 5.0, "seconds": [0.046, 0.047], "ratios": [1.31, 1.34]}]}
    lines = ro.format_report({"firstRequest": [entry]}).splitlines()
    assert "- runtime-graph-warmup (24 tok x1, very first 1.34x): 0.5 s: 1.03x; 5 s: 1.31x, 1.34x" in lines
