"""The pure parts of bench/weights_load.py: model size, the load time from the engine's lines, the
rotation of loaders over rounds, the per-round ratios and their verdicts, the loaders a run starts."""

from __future__ import annotations

import pytest

from benchload import load_bench

wl = load_bench("weights_load")


def test_layers_bring_the_model_near_the_size_asked() -> None:
    for size in (0.5, 1.3, 2.0):
        layers = wl.layers_for(size)
        assert abs(wl.FIXED_BYTES + layers * wl.LAYER_BYTES - size * 1e9) <= wl.LAYER_BYTES / 2
    with pytest.raises(ValueError, match="--size-gb"):
        wl.layers_for(0)


def test_the_load_runs_from_the_init_line_to_the_first_line_after_the_loaders_own() -> None:
    lines = [
        (1.0, "INFO [cpu_model_runner.py:68] Starting to load model /m..."),
        (2.0, "INFO [base_loader.py:82] Initializing model took 0.13 seconds"),
        (2.1, "INFO [weight_utils.py:1070] Prefetching checkpoint files into page cache started"),
        (2.5, "Loading safetensors checkpoint shards:  50% Completed | 1/2"),
        (6.0, "INFO [default_loader.py:502] Loading weights took 4.00 seconds"),
        (7.5, "WARNING [torch_utils.py:283] OMP_NUM_THREADS=2 is set"),
        (9.0, "INFO later"),
    ]
    assert wl.load_seconds(lines) == 5.5
    with pytest.raises(ValueError, match="did not reach the weights"):
        wl.load_seconds(lines[:1])
    with pytest.raises(ValueError, match="stopped while loading"):
        wl.load_seconds(lines[:4])


def test_rounds_rotate_the_order() -> None:
    assert wl.rotation(["a", "b", "c"], 3) == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    with pytest.raises(ValueError, match="--rounds"):
        wl.rotation(["a"], 0)


def test_ratios_pair_each_round_with_the_default_and_are_judged_on_their_range() -> None:
    times = {"default": [10.0, 12.0, 11.0], "eager": [5.0, 6.0, 5.5], "prefetch": [9.0, 13.0, 11.0]}
    args = {"default": [], "eager": ["--safetensors-load-strategy", "eager"],
            "prefetch": ["--safetensors-load-strategy", "prefetch"]}
    summaries = wl.summarize_loads(times, args, {"fastsafetensors": "CUDA only"})
    by = {item.loader: item for item in summaries}
    assert by["eager"].ratios == [0.5, 0.5, 0.5] and by["default"].ratios is None
    assert (by["prefetch"].median, by["prefetch"].low, by["prefetch"].high) == (11.0, 9.0, 13.0)
    assert by["fastsafetensors"].skipped == "CUDA only"
    verdicts = {name.split()[0]: verdict.outcome.value for name, verdict in wl.goals(summaries).items()}
    assert verdicts == {"eager": "met", "prefetch": "inconclusive"}
    report = {"model": {"layers": 10, "bytes": 1.29e9, "files": 2}, "vllm": "0.32.0", "platform": "cpu",
              "cacheDrop": "fadvise", "loaders": [item.__dict__ for item in summaries]}
    text = wl.format_report(report)
    assert "| eager | `--safetensors-load-strategy eager` | 5.00, 6.00, 5.50 | 5.50 (5.00-6.00) | 0.50, 0.50, 0.50 |" in text
    assert "not run: CUDA only" in text and "- eager faster than vLLM's default" in text


def test_a_run_starts_what_the_installed_vllm_has_with_the_pods_flags() -> None:
    args, skipped = wl.loader_plan(None, "0.32.0", "cpu")
    assert args == {"default": [], "eager": ["--safetensors-load-strategy", "eager"],
                    "prefetch": ["--safetensors-load-strategy", "prefetch"]}
    assert set(skipped) == {"runaiStreamer", "fastsafetensors"}
    older, _ = wl.loader_plan("0.15.7", "0.17.0", "cpu")
    assert older == {"default": [], "eager": ["--safetensors-load-strategy", "eager"],
                     "runaiStreamer": ["--load-format", "runai_streamer"]}
