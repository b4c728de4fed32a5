#!/usr/bin/env python3
"""Weights load time per loader on the real CPU engine, side by side in one run, page cache cold.

Run:  python bench/weights_load.py [--rounds 3] [--size-gb 1.3] [--json] [--work-dir DIR]
          [--extra-pythonpath DIR]   # where runai-model-streamer is installed, if not in this venv

It writes a Llama model of random bfloat16 weights (hidden 2048, 5632 intermediate, 32,000
vocabulary, as many layers as ``--size-gb`` needs; two safetensors shards) with the tiny model's
tokenizer, then starts vLLM's OpenAI server on it once per loader and round: ``--enforce-eager``,
``--dtype bfloat16``, 1 GiB of KV cache, with the loader flags that
``ascend_runtime.weightsload.resolve`` renders for the installed vLLM (the flags a pod gets). A
loader the installed vLLM or this platform cannot run is reported with the reason and not started.

Before every start the model's pages are evicted from the page cache: ``posix_fadvise(DONTNEED)``
on each file (only this model's pages; the other jobs on the machine keep theirs), checked with
``fincore`` where it exists, and ``/proc/sys/vm/drop_caches`` (1) when pages are still resident
(root only); the report says which worked. The load time is from the engine's "Initializing model
took" line (the model's tensors exist; its weights are read next) to the first engine line after the
weights are in and processed (each line timestamped as it arrives); then the engine is stopped (its process group). Rounds rotate the loaders' order so that
a drift of the machine falls on every loader alike. Per loader: the times' median and range, and
the per-round ratio to vLLM's default loader judged by bench/verdict.py against "faster than the
default" (ratio <= 1): met only when every round is faster, MISSED when every round is slower,
else inconclusive.

The pure parts (``layers_for``, ``load_seconds``, ``rotation``, ``summarize_loads``,
``format_report``) are tested by tests/unit/test_weights_load_bench.py. Exit status 0 when the run
completed, 1 when a measurement failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from verdict import Direction, Verdict, judge, format_verdicts  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
HIDDEN, INTERMEDIATE, VOCAB, HEADS = 2048, 5632, 32000, 16
#: Bytes of one bfloat16 decoder layer (q, k, v, o; gate, up, down; two norms).
LAYER_BYTES = 2 * (4 * HIDDEN * HIDDEN + 3 * HIDDEN * INTERMEDIATE + 2 * HIDDEN)
#: Embeddings and the untied LM head.
FIXED_BYTES = 2 * (2 * VOCAB * HIDDEN + HIDDEN)
START_MARKER = "Initializing model took"
#: Engine lines that belong to the load itself (progress bars, the loader's own notes).
LOAD_NOISE = re.compile(r"(?i)Loading safetensors|Loading weights took|Filesystem type for checkpoints|Auto-prefetch|"
                        r"prefetch|Runai|runai|streamer|it/s\]|\d+%\|")
START_TIMEOUT_S = 600.0
DEFAULT_LOADER = "default"


# --------------------------------------------------------------------------------------------
# Pure parts


def layers_for(size_gb: float) -> int:
    """Decoder layers that bring the model to about ``size_gb`` GB (10^9 bytes) of bfloat16."""
    if size_gb <= 0:
        raise ValueError(f"--size-gb must be positive, got {size_gb}")
    return max(1, round((size_gb * 1e9 - FIXED_BYTES) / LAYER_BYTES))


def load_seconds(lines: Sequence[tuple[float, str]]) -> float:
    """Seconds from the "Initializing model took" line to the first later line that is not the load's own.

    Raises ValueError when either is missing (the engine failed or logged differently).
    """

    start = next((at for at, line in lines if START_MARKER in line), None)
    if start is None:
        raise ValueError(f"no {START_MARKER!r} line: the engine did not reach the weights")
    after = next((at for at, line in lines if at >= start and START_MARKER not in line
                  and line.strip() and not LOAD_NOISE.search(line)), None)
    if after is None:
        raise ValueError("no engine line after the load: the engine stopped while loading")
    return after - start


def rotation(loaders: Sequence[str], rounds: int) -> list[list[str]]:
    """Each round's order: the loaders rotated by the round's index (round 2 starts with the second)."""
    if rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {rounds}")
    n = len(loaders)
    return [[loaders[(index + shift) % n] for index in range(n)] for shift in range(rounds)]


@dataclass(frozen=True)
class LoaderSummary:
    loader: str
    args: list[str]
    seconds: list[float]
    median: float | None
    low: float | None
    high: float | None
    #: loader / default per round (same round), None for the default itself.
    ratios: list[float] | None
    skipped: str | None = None


def _median(values: Sequence[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarize_loads(times: Mapping[str, Sequence[float]], args: Mapping[str, list[str]],
                    skipped: Mapping[str, str]) -> list[LoaderSummary]:
    """Per loader, in ``args`` order then the skipped ones: times, median, range, ratio to the default."""

    base = list(times.get(DEFAULT_LOADER, ()))
    out = []
    for loader, flags in args.items():
        values = list(times.get(loader, ()))
        ratios = None
        if loader != DEFAULT_LOADER and base and len(base) == len(values):
            ratios = [value / ref for value, ref in zip(values, base)]
        out.append(LoaderSummary(loader, flags, values, _median(values), min(values, default=None),
                                 max(values, default=None), ratios))
    out += [LoaderSummary(loader, [], [], None, None, None, None, why) for loader, why in skipped.items()]
    return out


def goals(summaries: Sequence[LoaderSummary]) -> dict[str, Verdict]:
    """Per loader other than the default: faster than vLLM's default (per-round ratio <= 1)."""
    return {f"{item.loader} faster than vLLM's default (per-round ratio <= 1)": judge(item.ratios, 1.0, Direction.AT_MOST)
            for item in summaries if item.ratios is not None}


def format_report(report: Mapping[str, Any]) -> str:
    """The Markdown table and the goals of a report (the dict ``--json`` prints)."""

    model = report["model"]
    lines = [f"Model: {model['layers']} layers, {model['bytes'] / 1e9:.2f} GB bfloat16 in {model['files']} files; "
             f"vLLM {report['vllm']} ({report['platform']}); page cache: {report['cacheDrop']}", "",
             "| loader | flags | load s per round (in run order) | median (min-max) | loader / default per round |",
             "|---|---|---|---|---|"]
    summaries = [LoaderSummary(**item) for item in report["loaders"]]
    for item in summaries:
        if item.skipped:
            lines.append(f"| {item.loader} | - | not run: {item.skipped} | - | - |")
            continue
        ratios = ", ".join(f"{r:.2f}" for r in item.ratios) if item.ratios else "-"
        lines.append(f"| {item.loader} | `{' '.join(item.args) or '(none)'}` | "
                     f"{', '.join(f'{s:.2f}' for s in item.seconds)} | "
                     f"{item.median:.2f} ({item.low:.2f}-{item.high:.2f}) | {ratios} |")
    lines += ["", format_verdicts(goals(summaries).items())]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The model and the page cache


def build_model(directory: Path, layers: int) -> dict[str, Any]:
    """A Llama of random bfloat16 weights in two shards, with the tiny model's tokenizer."""

    import torch
    from safetensors.torch import save_file

    marker = directory / "weights-bench.json"
    if marker.exists():
        return json.loads(marker.read_text())
    subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "tiny-model", str(directory)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    for old in directory.glob("*.safetensors"):
        old.unlink()
    config = json.loads((directory / "config.json").read_text())
    config.update({"hidden_size": HIDDEN, "intermediate_size": INTERMEDIATE, "num_hidden_layers": layers,
                   "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "head_dim": HIDDEN // HEADS,
                   "vocab_size": VOCAB, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
                   "max_position_embeddings": 2048})
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    generator = torch.Generator().manual_seed(0)

    def tensor(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    half = layers // 2
    shards: list[dict[str, torch.Tensor]] = [{"model.embed_tokens.weight": tensor(VOCAB, HIDDEN)}, {}]
    for index in range(layers):
        shard = shards[0 if index < half else 1]
        prefix = f"model.layers.{index}."
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            shard[f"{prefix}self_attn.{name}.weight"] = tensor(HIDDEN, HIDDEN)
        shard[f"{prefix}mlp.gate_proj.weight"] = tensor(INTERMEDIATE, HIDDEN)
        shard[f"{prefix}mlp.up_proj.weight"] = tensor(INTERMEDIATE, HIDDEN)
        shard[f"{prefix}mlp.down_proj.weight"] = tensor(HIDDEN, INTERMEDIATE)
        shard[f"{prefix}input_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
        shard[f"{prefix}post_attention_layernorm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    shards[1]["model.norm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
    shards[1]["lm_head.weight"] = tensor(VOCAB, HIDDEN)
    index_map: dict[str, str] = {}
    total = 0
    for number, shard in enumerate(shards, start=1):
        name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(directory / name), metadata={"format": "pt"})
        index_map.update({key: name for key in shard})
        total += sum(t.numel() * t.element_size() for t in shard.values())
    (directory / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": index_map}, indent=1))
    info = {"layers": layers, "bytes": total, "files": len(shards)}
    marker.write_text(json.dumps(info))
    return info


def resident_bytes(files: Sequence[Path]) -> int | None:
    """Bytes of ``files`` in the page cache per ``fincore``; None without it."""
    if shutil.which("fincore") is None:
        return None
    run = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, files)],
                         capture_output=True, text=True, timeout=30, check=False)
    if run.returncode != 0:
        return None
    return sum(int(line.strip() or 0) for line in run.stdout.splitlines())


def evict(files: Sequence[Path]) -> str:
    """Drop ``files`` from the page cache; returns how (for the report)."""
    for path in files:
        with open(path, "rb") as handle:
            os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    left = resident_bytes(files)
    if left is None:
        return "posix_fadvise(DONTNEED) per file (not checked: no fincore)"
    if left == 0:
        return "posix_fadvise(DONTNEED) per file, fincore: 0 bytes resident"
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError as error:
        return f"NOT cold: {left} bytes still resident after fadvise, drop_caches refused ({error.strerror})"
    return f"drop_caches (fadvise left {left} bytes), fincore after: {resident_bytes(files)} bytes"


# --------------------------------------------------------------------------------------------
# Engine starts


def engine_load(argv: list[str], env: Mapping[str, str], log_path: Path) -> float:
    """Start the engine, time its weight load from its output, stop its process group."""

    lines: list[tuple[float, str]] = []
    done = threading.Event()
    with open(log_path, "w", encoding="utf-8") as log:
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**os.environ, **env, "PYTHONUNBUFFERED": "1"}, start_new_session=True)

        def read() -> None:
            assert process.stdout is not None
            for raw in iter(process.stdout.readline, b""):
                line = raw.decode("utf-8", errors="replace")
                lines.append((time.monotonic(), line.rstrip("\n")))
                log.write(line)
                with contextlib.suppress(ValueError):
                    load_seconds(lines)
                    done.set()
            done.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            if not done.wait(START_TIMEOUT_S):
                raise RuntimeError(f"no load finished within {START_TIMEOUT_S:.0f} s; log {log_path}")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            reader.join(timeout=10)
    try:
        return load_seconds(lines)
    except ValueError as error:
        raise RuntimeError(f"{error}; log {log_path}") from None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def loader_plan(streamer: str | None, vllm: str | None, platform: str) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The loaders to start with their flags (as a pod gets them), and the ones skipped with why."""

    from ascend_runtime.versions import parse_version
    from ascend_runtime.weightsload import WeightsLoader, WeightsStorage, resolve

    version = parse_version(vllm)
    args: dict[str, list[str]] = {DEFAULT_LOADER: []}
    skipped: dict[str, str] = {}
    for loader in (WeightsLoader.EAGER, WeightsLoader.PREFETCH, WeightsLoader.RUNAI_STREAMER,
                   WeightsLoader.FASTSAFETENSORS):
        choice = resolve(loader, WeightsStorage.LOCAL, version, platform, streamer_installed=streamer is not None)
        if choice.error:
            skipped[loader.value] = choice.reason
        else:
            args[loader.value] = choice.args
    return args, skipped


def run(options: argparse.Namespace) -> dict[str, Any]:
    from ascend_runtime.versions import detect_versions

    work = Path(options.work_dir).resolve()
    model_dir = work / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    (work / "logs").mkdir(exist_ok=True)
    info = build_model(model_dir, layers_for(options.size_gb))
    files = sorted(model_dir.glob("*.safetensors"))
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0-1" if (os.cpu_count() or 1) > 1 else "0",
           "VLLM_CACHE_ROOT": str(work / "vllm-cache"), "TMPDIR": str(work / "tmp")}
    (work / "tmp").mkdir(exist_ok=True)
    if options.extra_pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [options.extra_pythonpath, os.environ.get("PYTHONPATH")]))
        sys.path.insert(0, options.extra_pythonpath)  # so the streamer's metadata is found below
    versions = detect_versions()
    args, skipped = loader_plan(versions.runai_streamer, versions.vllm, versions.platform)
    base = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--dtype", "bfloat16", "--enforce-eager", "--max-model-len", "512", "--host", "127.0.0.1"]
    times: dict[str, list[float]] = {name: [] for name in args}
    drops: list[str] = []
    for number, order in enumerate(rotation(list(args), options.rounds), start=1):
        for loader in order:
            drops.append(evict(files))
            seconds = engine_load(base + ["--port", str(free_port())] + args[loader], env,
                                  work / "logs" / f"r{number}-{loader}.log")
            times[loader].append(seconds)
            print(f"[{time.strftime('%H:%M:%S')}] round {number} {loader}: {seconds:.2f} s ({drops[-1]})",
                  file=sys.stderr, flush=True)
    summaries = summarize_loads(times, args, skipped)
    return {"model": info, "vllm": versions.vllm, "platform": versions.platform,
            "cacheDrop": "; ".join(sorted(set(drops))), "rounds": options.rounds,
            "loaders": [asdict(item) for item in summaries],
            "goals": {name: verdict.as_dict() for name, verdict in goals(summaries).items()}}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="Starts per loader (default: %(default)s).")
    parser.add_argument("--size-gb", type=float, default=1.3, help="Model size in GB (default: %(default)s).")
    parser.add_argument("--work-dir", default=".cache/weights-load", help="Model, logs (default: %(default)s).")
    parser.add_argument("--extra-pythonpath", default=None,
                        help="A folder prepended to the engine's PYTHONPATH (e.g. where runai-model-streamer is).")
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    parser.add_argument("--reread", metavar="FILE", default=None, help="Print the tables of a saved --json report.")
    options = parser.parse_args(argv)
    if options.reread:
        print(format_report(json.loads(Path(options.reread).read_text(encoding="utf-8"))))
        return 0
    if not 1 <= options.rounds <= 20 or not 0.1 <= options.size_gb <= 8:
        print("weights_load: --rounds must be 1..20 and --size-gb 0.1..8", file=sys.stderr)
        return 2
    def on_signal(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")  # the running start's finally stops its engine

    signal.signal(signal.SIGTERM, on_signal)
    try:
        report = run(options)
    except (RuntimeError, OSError, subprocess.SubprocessError) as error:
        print(f"weights_load: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("weights_load: interrupted; the engine it started is stopped", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if options.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
