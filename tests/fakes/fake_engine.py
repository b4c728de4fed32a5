"""A stand-in for the vLLM OpenAI server, for tests of the real runtime process in seconds.

The runtime launches whatever ``engine.command`` says, so tests point it at this script. It
accepts any vLLM flags, serves ``/health``, ``/v1/models``, ``/v1/completions``,
``/v1/chat/completions`` and ``/metrics`` (the ``vllm:*`` families the runtime reads), and
misbehaves on request through environment variables:

- ``FAKE_ENGINE_STARTUP_S``: seconds before ``/health`` answers 200.
- ``FAKE_ENGINE_CAPTURE_FAIL``: when the engine runs in graph mode (no ``--enforce-eager``),
  print the lines of this log file (a real vllm-ascend capture failure) and hang, as vLLM does
  while its workers tear down; the runtime must not wait for the exit.
  ``FAKE_ENGINE_CAPTURE_FAIL_AFTER_S`` (default 0.3): seconds before the failure is printed.
- ``FAKE_ENGINE_REPLAY_FAIL_AFTER``: in graph mode, after this many completions print a real
  replay-failure traceback (``FAKE_ENGINE_REPLAY_LOG``) and exit 1.
- ``FAKE_ENGINE_CRASH_ONCE_AFTER_S``: exit 1 once, this long after start (a marker file in
  ``FAKE_ENGINE_STATE_DIR`` keeps it to once).
- ``FAKE_ENGINE_CRASH_AFTER_S``: exit 1 this long after the server is up, at every launch.
- ``FAKE_ENGINE_NO_CHAT_TEMPLATE``: a base model: chat requests get vLLM's HTTP 400 for a
  tokenizer without a chat template.
- ``FAKE_ENGINE_FAIL_REQUESTS``: answer completions with HTTP 500 (warmup must fail).
- ``FAKE_ENGINE_REQUEST_S``: seconds each completion takes (for drain tests).
- ``FAKE_ENGINE_RSS_MB_PER_S``: grow resident memory at this rate (leak tests).
- ``FAKE_ENGINE_HANG_AFTER``: after this many completions, requests never finish and the
  generated-token counter stops (hang tests).
- ``FAKE_ENGINE_HANG_ENGINES``: the data-parallel engine indices that ``FAKE_ENGINE_HANG_AFTER``
  stalls (comma-separated; default every engine); the others keep generating.
- ``FAKE_ENGINE_LAUNCH_LOG``: append one line per launch (the argv) to this file.
- ``FAKE_ENGINE_ENV_LOG``: append one JSON line per launch with the cache variables it got
  (``VLLM_CACHE_ROOT``, ``TORCHAIR_CACHE_HOME``, ``HF_HUB_OFFLINE``), and the adapter token
  (``ASCEND_LLM_ADAPTER_TOKEN``) when it got one, to this file.
- ``FAKE_ENGINE_THREADS_LOG``: append one JSON line per launch with the CPU thread settings it
  got (``VLLM_CPU_OMP_THREADS_BIND``, ``OMP_NUM_THREADS``, each when set) to this file.
- ``FAKE_ENGINE_COMPILE``: in a graph mode, "compile" as vLLM does: write an artefact under
  ``$VLLM_CACHE_ROOT/torch_compile_cache/`` (warm caches keep it).
- ``FAKE_ENGINE_CAPTURE_FAIL_MODES``: the graph modes in which ``FAKE_ENGINE_CAPTURE_FAIL``
  applies (comma-separated; default every graph mode). The mode is read from the argv as vLLM
  would: ``--enforce-eager`` is EAGER, else ``--compilation-config``'s ``cudagraph_mode``, else
  PIECEWISE (vLLM's default compile).
- ``FAKE_ENGINE_CAPTURE_FAIL_EXIT``: after printing the capture failure, exit 1 (as vLLM does
  once its workers are gone) instead of lingering.
- ``FAKE_ENGINE_OOM_LOG``: print this log (a real device OOM) and exit 1, once (marker file).
- ``FAKE_ENGINE_CAPTURE_OOM_LOG``: in a graph mode, print this log (memory running out inside
  capture) and exit 1, once (marker file): the relaunch of the same rung succeeds.
- ``FAKE_ENGINE_CAPTURE_HANG``: in a graph mode (``FAKE_ENGINE_CAPTURE_FAIL_MODES`` applies too),
  print vLLM's capture progress line and never finish: no HTTP server, no exit.
- ``FAKE_ENGINE_FREEZE_AFTER_S``: this long after the server is up, stop its own process
  (SIGSTOP): alive, but nothing answers, as a wedged API server.
- ``FAKE_ENGINE_ERRORS_AFTER_S``: this long after the server is up, answer every request
  (``/health`` too) with HTTP 500.
- ``FAKE_ENGINE_FAILURE_LINGER_S``: a replay failure (``FAKE_ENGINE_REPLAY_FAIL_AFTER``) or the
  injected crash (``FAKE_ENGINE_CRASH_ONCE_AFTER_S``, then printed as vLLM's fatal line) does not
  exit at once: ``/health`` keeps answering 200 for this long, then the process exits 1, as vLLM's
  API server outlives a dead engine core by a few seconds.
- ``FAKE_ENGINE_IGNORE_SIGTERM``: ignore SIGTERM (a stop then takes its whole grace period).
- ``FAKE_ENGINE_SPAWN_CHILD``: start a child that inherits stdout and outlives this process,
  as vLLM's engine core does when the API server dies; its pid is appended to
  ``FAKE_ENGINE_STATE_DIR``/children. ``detached``: the child runs in its own session, so
  stopping the engine's process group does not reach it.

LoRA, as vLLM 0.32 serves it (``entrypoints/openai/models/serving.py``,
``entrypoints/serve/lora/api_router.py``): with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` true,
``POST /v1/load_lora_adapter`` ``{lora_name, lora_path}`` answers 200 with a plain-text
"Success: ..."; 400 when a field is missing, the name is the base model's or is already loaded
(without ``load_inplace``); 404 ``NotFoundError`` "No adapter found" when the path has no
``adapter_config.json`` (the fake's stand-in for vLLM's loader). ``POST /v1/unload_lora_adapter``
``{lora_name}``: 200, or 404 when not loaded. Without the variable both routes are 404.
``/v1/models`` lists the loaded adapters with ``root`` (the path) and ``parent`` (the base model);
a completion whose ``model`` is neither the base model nor a loaded adapter gets vLLM's 404.
``--middleware PATH`` (repeatable) imports each ASGI middleware class as vLLM does and runs it in
front of every route, so the runtime's adapter gate (``ascend_runtime.adaptergate``) answers here
as it does in vLLM. ``FAKE_ENGINE_LORA_FAIL_LOADS``: the first N loads (counted in ``FAKE_ENGINE_STATE_DIR``) fail with
HTTP 500, as an engine error would, after printing ``FAKE_ENGINE_LORA_FAIL_LOG`` when set (vLLM's
worker-exception lines for a refused adapter; the engine serves on).

Model length: ``--max-model-len N`` (default ``FAKE_ENGINE_MAX_MODEL_LEN``, else 2048, standing in
for the model's config.json) is listed as ``max_model_len`` on ``/v1/models`` as vLLM lists it; a
completion whose token-id prompt plus ``max_tokens`` exceeds it gets vLLM's HTTP 400.

SIGTERM: with ``--shutdown-timeout N`` new requests get 503 and in-flight ones get up to N s;
without it in-flight requests are aborted (vLLM before 0.18).

Multi-node workers: ``fake_engine.py serve MODEL ...`` is the form of vLLM's ``serve``
subcommand (the model positional). With ``--headless`` (a data-parallel worker) it serves no
HTTP at all, as vLLM's headless mode starts no API server: it logs its launch, honours
``FAKE_ENGINE_CAPTURE_FAIL`` and ``FAKE_ENGINE_CRASH_ONCE_AFTER_S``, and runs until SIGTERM.
The data-parallel flags (``--data-parallel-*``) are accepted; ``--data-parallel-size N`` gives
the API server N engines, as vLLM's does: ``/metrics`` carries one label set per engine
(``engine="0"`` ... ``engine="N-1"``, with ``model_name``), and a completion goes to the engine
its ``X-data-parallel-rank`` header names (vLLM's header), else to the least busy one.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from aiohttp import web


def env_float(name: str) -> float | None:
    value = os.environ.get(name)
    return float(value) if value else None


class EngineCore:
    """One data-parallel engine of the API server: its running requests and generated tokens."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.running = 0
        self.tokens = 0


class FakeEngine:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.graph = not args.enforce_eager
        self.max_model_len = args.max_model_len
        self.started = time.monotonic()
        self.startup_s = env_float("FAKE_ENGINE_STARTUP_S") or 0.2
        self.engines = [EngineCore(index) for index in range(max(1, args.data_parallel_size))]
        self.completions = 0
        self.draining = False
        self.hang_after = env_float("FAKE_ENGINE_HANG_AFTER")
        hang_engines = os.environ.get("FAKE_ENGINE_HANG_ENGINES")
        self.hang_engines = (None if not hang_engines
                             else {int(index) for index in hang_engines.split(",") if index.strip()})
        self.replay_after = env_float("FAKE_ENGINE_REPLAY_FAIL_AFTER")
        self.request_s = env_float("FAKE_ENGINE_REQUEST_S") or 0.0
        self.ballast: list[bytes] = []
        self.up_at: float | None = None  # when the HTTP server started listening
        self.base_name = args.served_model_name or args.model
        self.loras: dict[str, str] = {}  # name -> path, in load order

    @property
    def running(self) -> int:
        return sum(core.running for core in self.engines)

    def route(self, request: web.Request) -> EngineCore:
        """vLLM's ``X-data-parallel-rank`` header picks the engine; else the least busy one."""

        rank = request.headers.get("X-data-parallel-rank")
        if rank is not None and rank.isdigit() and int(rank) < len(self.engines):
            return self.engines[int(rank)]
        return min(self.engines, key=lambda core: core.running)

    def stalls(self, core: EngineCore) -> bool:
        return (self.hang_after is not None and self.completions > self.hang_after
                and (self.hang_engines is None or core.index in self.hang_engines))

    def ready(self) -> bool:
        return time.monotonic() - self.started >= self.startup_s

    def erroring(self) -> bool:
        after = env_float("FAKE_ENGINE_ERRORS_AFTER_S")
        return after is not None and self.up_at is not None and time.monotonic() - self.up_at >= after

    async def health(self, _: web.Request) -> web.Response:
        if self.erroring():
            return web.Response(status=500, text="injected error")
        return web.Response(status=200 if self.ready() and not self.draining else 503)

    async def models(self, _: web.Request) -> web.Response:
        cards = [{"id": self.base_name, "object": "model", "root": self.args.model, "parent": None,
                  "max_model_len": self.max_model_len}]
        cards += [{"id": name, "object": "model", "root": path, "parent": self.base_name}
                  for name, path in self.loras.items()]
        return web.json_response({"object": "list", "data": cards})

    async def load_lora(self, request: web.Request) -> web.Response:
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return vllm_error("Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400)
        if name == self.base_name:
            return vllm_error(f"The lora adapter '{name}' conflicts with a served base model.", "InvalidUserInput", 400)
        if name in self.loras and not body.get("load_inplace"):
            return vllm_error(f"The lora adapter '{name}' has already been loaded. If you want to load the adapter "
                              "in place, set 'load_inplace' to True.", "InvalidUserInput", 400)
        if failing_load():
            if log := os.environ.get("FAKE_ENGINE_LORA_FAIL_LOG"):
                print_log(log)
            return vllm_error(f"injected engine failure loading {name}", "InternalServerError", 500)
        if not (Path(path) / "adapter_config.json").is_file():
            return vllm_error(f"Loading lora {name} failed: No adapter found for {path}", "NotFoundError", 404)
        self.loras[name] = path
        print(f"INFO fake engine: Loaded new LoRA adapter: name '{name}', path '{path}'", flush=True)
        return web.Response(status=200, text=f"Success: LoRA adapter '{name}' added successfully.")

    async def unload_lora(self, request: web.Request) -> web.Response:
        name = (await request.json()).get("lora_name")
        if not name:
            return vllm_error("'lora_name' needs to be provided to unload a LoRA adapter.", "InvalidUserInput", 400)
        if name not in self.loras:
            return vllm_error(f"The lora adapter '{name}' cannot be found.", "NotFoundError", 404)
        del self.loras[name]
        print(f"INFO fake engine: Removed LoRA adapter: name '{name}'", flush=True)
        return web.Response(status=200, text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def complete(self, request: web.Request) -> web.Response:
        if self.draining:
            return web.json_response({"error": "server shutting down"}, status=503)
        if os.environ.get("FAKE_ENGINE_FAIL_REQUESTS") or self.erroring():
            return web.json_response({"error": "injected failure"}, status=500)
        body = await request.json()
        model = body.get("model")
        if model and model != self.base_name and model not in self.loras:
            return vllm_error(f"The model `{model}` does not exist.", "NotFoundError", 404, param="model")
        if "messages" in body and os.environ.get("FAKE_ENGINE_NO_CHAT_TEMPLATE"):
            message = ("As of transformers v4.44, default chat template is no longer allowed, so you must "
                       "provide a chat template if the tokenizer does not define one.")
            return web.json_response({"object": "error", "message": message, "type": "BadRequestError",
                                      "param": None, "code": 400}, status=400)
        prompt = body.get("prompt")
        asked = (len(prompt) if isinstance(prompt, list) else 0) + int(body.get("max_tokens") or 16)
        if asked > self.max_model_len:
            message = (f"This model's maximum context length is {self.max_model_len} tokens. However, you "
                       f"requested {asked} tokens. Please reduce the length of the input prompt.")
            return vllm_error(message, "BadRequestError", 400)
        core = self.route(request)
        core.running += 1
        try:
            self.completions += 1
            if self.stalls(core):
                await asyncio.sleep(3600)
            if self.graph and self.replay_after is not None and self.completions > self.replay_after:
                print_log(os.environ["FAKE_ENGINE_REPLAY_LOG"])
                exit_after_linger()
                return web.json_response({"error": "engine dead"}, status=500)
            await asyncio.sleep(self.request_s)
            produced = int(body.get("max_tokens") or 4)
            core.tokens += produced
        finally:
            core.running -= 1
        key = "message" if "messages" in body else "text"
        choice = {"index": 0, key: {"role": "assistant", "content": "ok"} if key == "message" else "ok",
                  "finish_reason": "length"}
        return web.json_response({"object": "completion", "choices": [choice]})

    async def metrics(self, _: web.Request) -> web.Response:
        if self.erroring():
            return web.Response(status=500, text="injected error")
        def family(name: str, kind: str, doc: str, value) -> str:
            lines = [f"# HELP {name} {doc}", f"# TYPE {name} {kind}"]
            lines += [f'{name}{{engine="{core.index}",model_name="{self.base_name}"}} {float(value(core))}'
                      for core in self.engines]
            return "\n".join(lines) + "\n"

        text = (
            family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                   lambda core: core.running)
            + family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                     lambda core: 0)
            + family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                     lambda core: core.tokens)
        )
        return web.Response(text=text, content_type="text/plain")


def vllm_error(message: str, err_type: str, code: int, param: str | None = None) -> web.Response:
    """vLLM's ErrorResponse body."""
    return web.json_response({"error": {"message": message, "type": err_type, "param": param, "code": code}},
                             status=code)


def failing_load() -> bool:
    """One of the first ``FAKE_ENGINE_LORA_FAIL_LOADS`` loads (the count survives relaunches)."""
    limit = env_float("FAKE_ENGINE_LORA_FAIL_LOADS")
    if not limit:
        return False
    counter = Path(os.environ.get("FAKE_ENGINE_STATE_DIR", ".")) / "lora-load-failures"
    failed = int(counter.read_text()) if counter.exists() else 0
    if failed >= limit:
        return False
    counter.write_text(str(failed + 1))
    return True


def asgi_middleware(paths: list[str]):
    """vLLM's ``--middleware`` classes (pure ASGI) in front of the fake's aiohttp routes."""

    classes = []
    for path in paths:
        module, name = path.rsplit(".", 1)
        classes.append(getattr(importlib.import_module(module), name))

    @web.middleware
    async def apply(request: web.Request, handler):
        for cls in classes:
            passed, sent = False, []

            async def inner(scope, receive, send) -> None:
                nonlocal passed
                passed = True

            async def send(message) -> None:
                sent.append(message)

            async def receive() -> dict:
                return {"type": "http.request", "body": await request.read(), "more_body": False}

            scope = {"type": "http", "method": request.method, "path": request.path,
                     "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()]}
            await cls(inner)(scope, receive, send)
            if not passed:  # the middleware answered itself
                body = b"".join(message.get("body", b"") for message in sent[1:])
                return web.Response(status=sent[0]["status"], body=body, content_type="application/json")
        return await handler(request)

    return apply


def runtime_lora_updating() -> bool:
    """vLLM's envs.VLLM_ALLOW_RUNTIME_LORA_UPDATING: "1" or "true", any case."""
    return os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "0").strip().lower() in ("1", "true")


def print_log(path: str) -> None:
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        print(line, flush=True)


async def grow_rss(engine: FakeEngine, rate_mb_s: float) -> None:
    while True:
        chunk = bytearray(int(rate_mb_s * 1024 * 1024 * 0.1))
        for i in range(0, len(chunk), 4096):  # touch every page so it is resident
            chunk[i] = 1
        engine.ballast.append(bytes(chunk))
        await asyncio.sleep(0.1)


def exit_after_linger() -> None:
    """Exit 1 now, or after ``FAKE_ENGINE_FAILURE_LINGER_S`` while the server keeps answering."""

    linger = env_float("FAKE_ENGINE_FAILURE_LINGER_S")
    if not linger:
        os._exit(1)
    asyncio.get_running_loop().call_later(linger, os._exit, 1)


def schedule_crash_once(tasks: list[asyncio.Task]) -> None:
    crash_after = env_float("FAKE_ENGINE_CRASH_ONCE_AFTER_S")
    marker = Path(os.environ.get("FAKE_ENGINE_STATE_DIR", ".")) / "crashed-once"
    if crash_after is not None and not marker.exists():
        async def crash() -> None:
            await asyncio.sleep(crash_after)
            marker.write_text("1")
            if env_float("FAKE_ENGINE_FAILURE_LINGER_S"):
                # vLLM's words when the engine core died (the API server exits a few seconds later).
                print("ERROR 11-10 12:30:57 [core.py:710] EngineCore encountered a fatal error.", flush=True)
            else:
                print("ERROR fake engine: injected crash", flush=True)
            exit_after_linger()
        tasks.append(asyncio.create_task(crash()))


def graph_mode(argv: list[str]) -> str:
    """The mode vLLM would run for this argv (see the module docstring)."""

    if "--enforce-eager" in argv:
        return "EAGER"
    for flag in ("--compilation-config", "-cc"):
        if flag in argv and argv.index(flag) + 1 < len(argv):
            try:
                return str(json.loads(argv[argv.index(flag) + 1]).get("cudagraph_mode") or "PIECEWISE")
            except (json.JSONDecodeError, AttributeError):
                return "PIECEWISE"
    return "PIECEWISE"


def capture_fails(argv: list[str], variable: str = "FAKE_ENGINE_CAPTURE_FAIL") -> bool:
    if not os.environ.get(variable):
        return False
    mode = graph_mode(argv)
    if mode == "EAGER":
        return False
    modes = os.environ.get("FAKE_ENGINE_CAPTURE_FAIL_MODES")
    return modes is None or mode in {m.strip() for m in modes.split(",")}


async def fail_capture() -> None:
    await asyncio.sleep(env_float("FAKE_ENGINE_CAPTURE_FAIL_AFTER_S") or 0.3)
    print_log(os.environ["FAKE_ENGINE_CAPTURE_FAIL"])
    if os.environ.get("FAKE_ENGINE_CAPTURE_FAIL_EXIT"):
        os._exit(1)
    await asyncio.sleep(3600)  # vLLM often lingers while its workers die


async def run_headless(args: argparse.Namespace) -> None:
    """A headless data-parallel worker: no HTTP server, just a process until SIGTERM."""

    graph = not args.enforce_eager
    print(f"INFO fake engine: headless model={args.model} graph={graph} "
          f"start_rank={args.data_parallel_start_rank} address={args.data_parallel_address}", flush=True)
    if capture_fails(sys.argv[1:]):
        await fail_capture()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks: list[asyncio.Task] = []
    schedule_crash_once(tasks)
    print("INFO fake engine: headless engine running", flush=True)
    await stop.wait()
    print("INFO fake engine: headless engine shutting down", flush=True)


async def main() -> None:
    argv = sys.argv[1:]
    serve_form = bool(argv) and argv[0] == "serve"
    parser = argparse.ArgumentParser()
    if serve_form:  # vLLM's `serve MODEL [flags]`
        parser.add_argument("subcommand", choices=["serve"])
        parser.add_argument("model")
    else:
        parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--shutdown-timeout", type=float, default=None)
    parser.add_argument("--max-model-len", type=int, default=int(os.environ.get("FAKE_ENGINE_MAX_MODEL_LEN", "2048")))
    parser.add_argument("--headless", action="store_true")
    parser.add_argument("--data-parallel-start-rank", type=int, default=None)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--data-parallel-address", default=None)
    parser.add_argument("--middleware", action="append", default=[])
    args, _unknown = parser.parse_known_args(argv)
    if log := os.environ.get("FAKE_ENGINE_LAUNCH_LOG"):
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(sys.argv[1:]) + "\n")
    if log := os.environ.get("FAKE_ENGINE_THREADS_LOG"):
        with open(log, "a", encoding="utf-8") as handle:
            names = ("VLLM_CPU_OMP_THREADS_BIND", "OMP_NUM_THREADS")
            handle.write(json.dumps({name: os.environ[name] for name in names if name in os.environ}) + "\n")
    if log := os.environ.get("FAKE_ENGINE_ENV_LOG"):
        with open(log, "a", encoding="utf-8") as handle:
            names = ("VLLM_CACHE_ROOT", "TORCHAIR_CACHE_HOME", "HF_HUB_OFFLINE")
            logged = {name: os.environ.get(name) for name in names}
            if "ASCEND_LLM_ADAPTER_TOKEN" in os.environ:
                logged["ASCEND_LLM_ADAPTER_TOKEN"] = os.environ["ASCEND_LLM_ADAPTER_TOKEN"]
            handle.write(json.dumps(logged) + "\n")
    if os.environ.get("FAKE_ENGINE_COMPILE") and not args.enforce_eager and os.environ.get("VLLM_CACHE_ROOT"):
        artefact = Path(os.environ["VLLM_CACHE_ROOT"]) / "torch_compile_cache" / "fake" / "graph.py"
        artefact.parent.mkdir(parents=True, exist_ok=True)
        artefact.write_text("# compiled\n")
    if args.headless:
        if not serve_form:  # vLLM reads --headless only in its serve subcommand
            print("ERROR fake engine: --headless needs the `serve` subcommand form", flush=True)
            sys.exit(2)
        await run_headless(args)
        return

    if os.environ.get("FAKE_ENGINE_SPAWN_CHILD"):
        import subprocess

        detached = os.environ["FAKE_ENGINE_SPAWN_CHILD"] == "detached"  # its own session: no group kill reaches it
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"], start_new_session=detached)
        state_dir = Path(os.environ.get("FAKE_ENGINE_STATE_DIR", "."))
        with open(state_dir / "children", "a", encoding="utf-8") as handle:
            handle.write(f"{child.pid}\n")
    engine = FakeEngine(args)
    print(f"INFO fake engine: model={args.model} graph={engine.graph} mode={graph_mode(argv)}", flush=True)
    if capture_fails(argv):
        await fail_capture()
    if capture_fails(argv, "FAKE_ENGINE_CAPTURE_HANG"):
        print(f"INFO 01-09 16:59:20 [model_runner_v1.py:2979] Capturing CUDA graphs (mixed prefill-decode, "
              f"{graph_mode(argv)}): 0%|          | 0/67", flush=True)
        await asyncio.sleep(3600)
    capture_oom_marker = Path(os.environ.get("FAKE_ENGINE_STATE_DIR", ".")) / "capture-oom-once"
    if capture_fails(argv, "FAKE_ENGINE_CAPTURE_OOM_LOG") and not capture_oom_marker.exists():
        capture_oom_marker.write_text("1")
        await asyncio.sleep(0.3)
        print_log(os.environ["FAKE_ENGINE_CAPTURE_OOM_LOG"])
        os._exit(1)
    oom_marker = Path(os.environ.get("FAKE_ENGINE_STATE_DIR", ".")) / "oom-once"
    if os.environ.get("FAKE_ENGINE_OOM_LOG") and not oom_marker.exists():
        oom_marker.write_text("1")
        await asyncio.sleep(0.3)
        print_log(os.environ["FAKE_ENGINE_OOM_LOG"])
        os._exit(1)

    app = web.Application(middlewares=[asgi_middleware(args.middleware)] if args.middleware else [])
    app.router.add_get("/health", engine.health)
    app.router.add_get("/v1/models", engine.models)
    app.router.add_post("/v1/completions", engine.complete)
    app.router.add_post("/v1/chat/completions", engine.complete)
    app.router.add_get("/metrics", engine.metrics)
    if runtime_lora_updating():
        app.router.add_post("/v1/load_lora_adapter", engine.load_lora)
        app.router.add_post("/v1/unload_lora_adapter", engine.unload_lora)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.host, args.port).start()

    engine.up_at = time.monotonic()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if os.environ.get("FAKE_ENGINE_IGNORE_SIGTERM"):
        loop.add_signal_handler(signal.SIGTERM, lambda: print("INFO fake engine: SIGTERM ignored", flush=True))
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    tasks = []
    if (freeze := env_float("FAKE_ENGINE_FREEZE_AFTER_S")) is not None:
        loop.call_later(freeze, os.kill, os.getpid(), signal.SIGSTOP)
    if rate := env_float("FAKE_ENGINE_RSS_MB_PER_S"):
        tasks.append(asyncio.create_task(grow_rss(engine, rate)))
    schedule_crash_once(tasks)
    if (crash_after := env_float("FAKE_ENGINE_CRASH_AFTER_S")) is not None:
        loop.call_later(crash_after, os._exit, 1)
    print("INFO:     Application startup complete.", flush=True)
    await stop.wait()
    engine.draining = True
    if args.shutdown_timeout:
        deadline = time.monotonic() + args.shutdown_timeout
        while engine.running and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
