"""Entry points of `ascend-llm run` and `ascend-llm flags`.

Both read the pod's environment for a multi-node replica (LeaderWorkerSet's ``LWS_*`` variables,
``POD_IP``): `run` checks that this pod can join its group before it starts anything (exit 2
with the reason otherwise), and `flags` prints this pod's role and commands.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry

from ascend_runtime import redact
from ascend_runtime.config import DEFAULT_CONFIG_PATH, ConfigError, EngineConfig, GraphMode, load_config
from ascend_runtime.distributed import plan_distributed, resolve_distributed
from ascend_runtime.flags import graph_ladder, kv_transfer_plan, loader_choice
from ascend_runtime.kvtransfer import NIXL_MODULE, Connector
from ascend_runtime.lora_support import check_lora_support
from ascend_runtime.memory.devices import VisibleDevicesError, visible_devices
from ascend_runtime.preflight import make_preflight
from ascend_runtime.server import build_app, start_server
from ascend_runtime.state import StateStore
from ascend_runtime.supervisor import EXIT_CONFIG, HealthHooks, Supervisor
from ascend_runtime.tuning import describe_report, tune
from ascend_runtime.versions import Versions, describe, detect_versions

log = logging.getLogger("ascend_runtime")


def _setup_logging() -> None:
    level = os.environ.get("ASCEND_LLM_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(level=level, format="%(asctime)s ascend-llm %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    redact.install()  # no secret value in any log line (ascend_runtime.redact)


def _load(args: argparse.Namespace) -> EngineConfig:
    path = args.config or os.environ.get("ASCEND_LLM_CONFIG") or DEFAULT_CONFIG_PATH
    config = load_config(path)
    if getattr(args, "model", None):
        config.model.path = args.model
    return config


class MonitorHooks(HealthHooks):
    """Connects the leak and hang detectors to the supervisor."""

    def __init__(self, config: EngineConfig, platform: str, registry: CollectorRegistry,
                 devices: frozenset[int] | None = None) -> None:
        from ascend_runtime.health.monitor import HealthMonitor

        self._config = config
        self._platform = platform
        self._devices = devices
        self._monitor = HealthMonitor(config.health, [], registry)

    def start(self, engine_pid: int) -> None:
        from ascend_runtime.memory.sources import select_sources

        # A new engine (first launch, relaunch or fallback): new PIDs, and a new baseline later.
        self._monitor.reset()
        self._monitor.set_sources(select_sources(self._platform, engine_pid, devices=self._devices))

    def mark_baseline(self) -> None:
        self._monitor.mark_baseline()

    def sample_memory(self) -> None:
        self._monitor.sample_memory()

    def observe_engine_metrics(self, text: str) -> None:
        self._monitor.observe_engine_metrics(text)

    def observe_engine_answer(self, problem: str | None) -> None:
        self._monitor.observe_engine_answer(problem)

    def verdict(self) -> tuple[bool, list[str], dict]:
        verdict = self._monitor.verdict()
        return verdict.healthy, list(verdict.reasons), dict(verdict.details)


def check_distributed(config: EngineConfig, versions: Versions, env: Mapping[str, str]) -> str | None:
    """Why this pod cannot run its part of the group (None when it can, or for a single node).

    Plans the first rung once, so a bad LeaderWorkerSet variable, a missing leader address, an
    engine too old for the backend or an underivable worker command fail at start-up, not at
    the first launch.
    """

    try:
        distributed = resolve_distributed(config.distributed, env)
        if distributed.nodes > 1:
            plan_distributed(config, versions, graph_ladder(config, versions)[0], env)
    except ValueError as error:  # ConfigError included
        return str(error)
    return None


def module_importable(name: str) -> bool:
    """Whether ``import name`` would find the module (in the engine's interpreter, which is this one)."""
    return importlib.util.find_spec(name) is not None


def check_kv_transfer_config(config: EngineConfig, versions: Versions, env: Mapping[str, str],
                             importable: Callable[[str], bool] = module_importable) -> str | None:
    """Why this engine's KV transfer cannot be wired on the installed versions (a connector the
    vllm-ascend lacks, offload of an MLA model, NixlConnector in an image without NIXL, ...), or
    None: refused at start-up, exit 2, not at the first launch."""
    if config.kv_transfer is None:
        return None
    try:
        plan = kv_transfer_plan(config, versions, env)
    except ValueError as error:  # KvTransferError: the field and the fix
        return f"kv_transfer: {error}"
    connector = (plan.kv_transfer_config or {}).get("kv_connector")
    # Without the bindings every launch of the engine fails; refused here with the fix instead.
    if connector == Connector.NIXL.value and not importable(NIXL_MODULE):
        return (f"kv_transfer: connector {Connector.NIXL.value} needs the NIXL Python bindings (module "
                f"'{NIXL_MODULE}'), which this image lacks; add them to the image, or use connector "
                f"{Connector.EXAMPLE.value} with sharedStoragePath")
    return None


async def _serve(config: EngineConfig, versions: Versions, devices: frozenset[int] | None) -> int:
    store = StateStore()
    store.state.versions = {
        "platform": versions.platform, "vllm": versions.vllm, "vllmAscend": versions.vllm_ascend,
        "torch": versions.torch, "torchNpu": versions.torch_npu, "cann": versions.cann,
    }
    store.state.image = config.image
    health = MonitorHooks(config, versions.platform, store.registry, devices)
    supervisor = Supervisor(
        config, versions, store, health=health,
        preflight=make_preflight(versions.platform, config.runtime.min_free_device_mb, devices=devices),
        reap_orphans=True,
    )
    supervisor.install_signal_handlers()
    app = build_app(store, supervisor.engine_metrics_text)
    runner = await start_server(app, config.runtime.host, config.runtime.port)
    try:
        return await supervisor.run()
    finally:
        await runner.cleanup()


def run_from_args(args: argparse.Namespace) -> int:
    _setup_logging()
    try:
        config = _load(args)
    except ConfigError as error:
        print(f"ascend-llm run: {error}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        versions = detect_versions()
    except ValueError as error:  # a malformed ASCEND_LLM_ASSUME_VERSIONS
        print(f"ascend-llm run: {error}", file=sys.stderr)
        return EXIT_CONFIG
    log.info("platform and versions: %s", describe(versions))
    lora = check_lora_support(config, versions.platform, versions.vllm_ascend)
    if lora.errors:
        print(f"ascend-llm run: {'; '.join(lora.errors)}", file=sys.stderr)
        return EXIT_CONFIG
    loader = loader_choice(config, versions)
    if loader.error:
        print(f"ascend-llm run: {loader.error}", file=sys.stderr)
        return EXIT_CONFIG
    log.info("weights loader: %s (%s)", loader.loader.value if loader.loader else "engine default", loader.reason)
    problem = check_distributed(config, versions, os.environ) or check_kv_transfer_config(config, versions, os.environ)
    if problem is not None:
        print(f"ascend-llm run: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        devices = visible_devices(os.environ)
    except VisibleDevicesError as error:
        print(f"ascend-llm run: {error}", file=sys.stderr)
        return EXIT_CONFIG
    if devices is not None:
        log.info("this pod's NPUs (physical device ids): %s", ", ".join(map(str, sorted(devices))))
    code = asyncio.run(_serve(config, versions, devices))
    log.info("exiting with code %d", code)
    return code


def print_flags(args: argparse.Namespace) -> int:
    try:
        config = _load(args)
    except ConfigError as error:
        print(f"ascend-llm flags: {error}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        versions = detect_versions()
    except ValueError as error:  # a malformed ASCEND_LLM_ASSUME_VERSIONS
        print(f"ascend-llm flags: {error}", file=sys.stderr)
        return EXIT_CONFIG
    if args.vllm_version or args.vllm_ascend_version:
        versions = Versions(
            platform="ascend" if args.vllm_ascend_version else versions.platform,
            vllm=args.vllm_version or versions.vllm,
            vllm_ascend=args.vllm_ascend_version or versions.vllm_ascend,
            torch=versions.torch, torch_npu=versions.torch_npu, cann=versions.cann,
            chip_name=versions.chip_name,
        )
    tuned = tune(config, versions, os.environ)
    config = tuned.config
    ladder = graph_ladder(config, versions)
    try:
        mode = GraphMode(args.mode.upper()) if args.mode else ladder[0]
    except ValueError:
        print(f"ascend-llm flags: --mode {args.mode!r} is not one of "
              f"{', '.join(m.value for m in GraphMode)}", file=sys.stderr)
        return 2
    try:
        plan = plan_distributed(config, versions, mode, os.environ)
    except ValueError as error:  # ConfigError included
        print(f"ascend-llm flags: {error}", file=sys.stderr)
        return EXIT_CONFIG
    out = {
        "versions": describe(versions), "ladder": [m.value for m in ladder],
        "mode": mode.value,
        "argv": plan.engine_argv, "env": plan.env, "warnings": plan.warnings,
        "tunedDefaults": describe_report(tuned.report),
    }
    if plan.distributed.nodes > 1:
        out["distributed"] = plan.to_json()
    print(json.dumps(out, indent=2))
    return 0
