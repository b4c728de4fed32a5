"""`ascend-llm`: the project's one command-line tool.

Sub-commands of the runtime live here; other installed packages (the operator) add theirs
through the ``ascend_llm.commands`` entry-point group, so this module never imports them.
Each sub-command imports what it needs when it runs, to keep `--help` and probes fast.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib.metadata import entry_points
from typing import Callable, Sequence

#: Exit codes, documented in docs/runtime.md ("Exit codes").
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _open_input(name: str):
    if name == "-":
        return sys.stdin
    return open(name, encoding="utf-8", errors="replace")


def _cmd_doctor_log(args: argparse.Namespace) -> int:
    from ascend_runtime.logclass import classify_lines

    try:
        with _open_input(args.file) as stream:
            result = classify_lines(stream)
    except OSError as error:
        print(f"ascend-llm doctor log: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    out = {"outcome": result.outcome.value}
    if args.verbose:
        out.update(result.details())
    print(json.dumps(out, indent=2 if args.verbose else None))
    return EXIT_OK


def _cmd_doctor_npu_smi(args: argparse.Namespace) -> int:
    from ascend_runtime.memory.npusmi import NpuSmiParseError, parse_npu_smi

    try:
        with _open_input(args.file) as stream:
            text = stream.read()
    except OSError as error:
        print(f"ascend-llm doctor npu-smi: cannot read {args.file}: {error.strerror}", file=sys.stderr)
        return EXIT_USAGE
    try:
        parsed = parse_npu_smi(text)
    except NpuSmiParseError as error:
        print(f"ascend-llm doctor npu-smi: {args.file}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(parsed.to_json(), indent=2))
    return EXIT_OK


def _cmd_doctor_tuning(args: argparse.Namespace) -> int:
    from ascend_runtime.config import ConfigError, EngineConfig, ModelConfig, load_config
    from ascend_runtime.tuning import describe_report, tune
    from ascend_runtime.versions import Versions, detect_versions

    try:
        config = load_config(args.config) if args.config else EngineConfig(model=ModelConfig(path=args.model_dir))
        versions = detect_versions()
        if args.vllm_ascend_version or args.vllm_version or args.chip:
            versions = Versions.assumed(
                vllm=args.vllm_version or versions.vllm,
                vllm_ascend=args.vllm_ascend_version or versions.vllm_ascend,
                chip_name=args.chip or versions.chip_name,
            )
    except (ConfigError, ValueError) as error:
        print(f"ascend-llm doctor tuning: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.tensor_parallel:
        config.engine.parallel.tensor = args.tensor_parallel
    result = tune(config, versions, {} if args.ignore_env else os.environ, model_dir=args.model_dir)
    out = {"tunedDefaults": result.report.model_dump(mode="json", by_alias=True, exclude_none=True),
           "lines": describe_report(result.report)}
    print(json.dumps(out, indent=2))
    return EXIT_OK


def _cmd_run(args: argparse.Namespace) -> int:
    from ascend_runtime.main import run_from_args

    return run_from_args(args)


def _cmd_flags(args: argparse.Namespace) -> int:
    from ascend_runtime.main import print_flags

    return print_flags(args)


def _cmd_fetch(args: argparse.Namespace) -> int:
    from ascend_runtime.fetch import run_from_args

    return run_from_args(args)


def _cmd_tiny_model(args: argparse.Namespace) -> int:
    from ascend_runtime.tinymodel import build_tiny_model

    path = build_tiny_model(args.dir, seed=args.seed)
    print(path)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ascend-llm", description="Serve LLMs on Ascend NPUs: in-pod runtime, diagnostics, operator."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="The in-pod runtime: supervise the engine, serve probes and /metrics.")
    run.add_argument("--config", default=None, help="Engine config file (default: $ASCEND_LLM_CONFIG or "
                     "/etc/ascend-llm/engine-config.yaml).")
    run.add_argument("--model", default=None, help="Override model.path.")
    run.set_defaults(func=_cmd_run)

    flags = sub.add_parser("flags", help="Print the engine command the runtime would launch, as JSON.")
    flags.add_argument("--config", default=None)
    flags.add_argument("--model", default=None)
    flags.add_argument("--vllm-version", default=None, help="Render for this vLLM version, not the installed one.")
    flags.add_argument("--vllm-ascend-version", default=None,
                       help="Render for this vllm-ascend version (implies the Ascend platform).")
    flags.add_argument("--mode", default=None, help="Render for this graph mode rung.")
    flags.set_defaults(func=_cmd_flags)

    fetch = sub.add_parser(
        "fetch", help="The model cache Job: download one hub model revision into the cache volume, once.",
        description="Exit codes: 0 cached (or already cached), 1 unknown failure, 2 invalid request, "
                    "3 unauthorized, 4 not found, 5 disk full, 6 network, 7 integrity (content not the hub's, or "
                    "a link leading out of the cache); 2, 3 and 4 are permanent.",
    )
    fetch.add_argument("--request-json", default=None,
                       help="The FetchRequest (ascend_runtime.cachelayout) as camelCase JSON; "
                            "default: $ASCEND_LLM_FETCH_REQUEST.")
    fetch.add_argument("--progress-host", default="0.0.0.0", help="Address of GET /progress.")
    fetch.add_argument("--progress-port", type=int, default=8080,
                       help="Port of GET /progress (default 8080).")
    fetch.add_argument("--termination-log", default="/dev/termination-log",
                       help="Where a failure's one-line JSON {reason, message} goes.")
    fetch.set_defaults(func=_cmd_fetch)

    tiny = sub.add_parser("tiny-model", help="Build a tiny random Llama model with a local tokenizer.")
    tiny.add_argument("dir")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=_cmd_tiny_model)

    doctor = sub.add_parser("doctor", help="Diagnose from captured output.")
    dsub = doctor.add_subparsers(dest="doctor_command", required=True, metavar="WHAT")
    log = dsub.add_parser("log", help="Classify a vLLM / vllm-ascend log; prints {\"outcome\": ...}.")
    log.add_argument("file", help="Log file, or - for standard input.")
    log.add_argument("-v", "--verbose", action="store_true", help="Also print the evidence lines.")
    log.set_defaults(func=_cmd_doctor_log)
    smi = dsub.add_parser("npu-smi", help="Parse `npu-smi info` output into chips and processes (JSON).")
    smi.add_argument("file", help="Captured output, or - for standard input.")
    smi.set_defaults(func=_cmd_doctor_npu_smi)
    tuning = dsub.add_parser(
        "tuning", help="Which tuned defaults (docs/tuned-defaults.md) the runtime applies to a model, and why.")
    tuning.add_argument("model_dir", help="The model directory (its config.json is read).")
    tuning.add_argument("--config", default=None, help="Engine config file (default: model_dir alone).")
    tuning.add_argument("--vllm-ascend-version", default=None, help="Assume this vllm-ascend (Ascend platform).")
    tuning.add_argument("--vllm-version", default=None, help="Assume this vLLM.")
    tuning.add_argument("--chip", default=None, help="Assume this chip name (e.g. 910B3, A3).")
    tuning.add_argument("--tensor-parallel", type=int, default=None, help="Override engine.parallel.tensor.")
    tuning.add_argument("--ignore-env", action="store_true",
                        help="Do not treat this shell's environment as the user's settings.")
    tuning.set_defaults(func=_cmd_doctor_tuning)

    for ep in entry_points(group="ascend_llm.commands"):
        try:
            register: Callable[[argparse._SubParsersAction], None] = ep.load()
        except ImportError:
            continue  # that package's optional dependencies are not installed (a runtime image)
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader of our output went away (`... | head`): not a failure of the command.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
