"""`ascend-llm demo`: the main job on a machine without an accelerator.

It does what the operator and the pod do, on localhost: reads an `AscendLLMDeployment`
(by default the embedded copy of ``examples/cpu-tiny.yaml``), validates it with the same
model the operator uses, renders the engine config with the same builder that writes the
pod's ConfigMap, and starts the in-pod runtime (`ascend-llm run`, a separate process, as
in the pod) serving a tiny real Llama model built locally on the CPU engine. It then
follows the runtime through its phases, sends OpenAI requests, prints what it measured and
stops the runtime with SIGTERM (the pod's drain path), unless ``--keep-serving``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

#: The embedded default resource; tests/unit/test_demo.py keeps it equal to examples/cpu-tiny.yaml.
EMBEDDED_RESOURCE = Path(__file__).with_name("cpu-tiny.yaml")
#: Seconds the demo waits for Ready (a CPU engine start is 40-100 s; fallback doubles it).
READY_TIMEOUT_S = 600


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="The main job: serve a tiny local LLM on CPU through the in-pod runtime, from an example.")
    demo.add_argument("--resource", default=None,
                      help="An AscendLLMDeployment YAML with spec.platform CPU (default: the embedded "
                           "examples/cpu-tiny.yaml).")
    demo.add_argument("--model", default=None, help="A local model directory (default: build the tiny model).")
    demo.add_argument("--work-dir", default=".cache/demo", help="Model, config, caches and logs (default: %(default)s).")
    demo.add_argument("--port", type=int, default=8000, help="The engine's OpenAI port (default: %(default)s).")
    demo.add_argument("--runtime-port", type=int, default=8080, help="The runtime's probe port (default: %(default)s).")
    demo.add_argument("--keep-serving", action="store_true", help="Keep serving until Ctrl-C.")
    demo.set_defaults(func=demo_from_args)


def _http(method: str, url: str, body: Any = None, timeout: float = 60) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            text = response.read().decode()
            status = response.status
    except urllib.error.HTTPError as error:
        text, status = error.read().decode(), error.code
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def load_resource(path: Path | None) -> dict[str, Any]:
    source = path or EMBEDDED_RESOURCE
    document = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(document, dict) or document.get("kind") != "AscendLLMDeployment":
        raise SystemExit(f"ascend-llm demo: {source} is not an AscendLLMDeployment (kind: AscendLLMDeployment)")
    return document


def render_local_config(resource: dict[str, Any], model_dir: Path, work_dir: Path, port: int,
                        runtime_port: int) -> dict[str, Any]:
    """The pod's engine config, adapted to localhost: model path, ports, this Python, caches."""

    from ascend_operator.api import Platform, SpecError, parse_spec
    from ascend_operator.builders import resolve_image
    from ascend_operator.builders.engine_config import build_engine_config
    from ascend_operator.builders.modelcache import plan_cache
    from ascend_operator.settings import OperatorSettings

    name = resource.get("metadata", {}).get("name", "demo")
    try:
        spec = parse_spec(resource.get("spec") or {})
    except SpecError as error:
        raise SystemExit(f"ascend-llm demo: invalid resource: {error}") from None
    if spec.platform != Platform.CPU:
        raise SystemExit("ascend-llm demo: the demo serves on this machine's CPU; the resource needs "
                         "spec.platform: CPU (see examples/cpu-tiny.yaml)")
    settings = OperatorSettings()
    config = build_engine_config(name, spec, settings, image=resolve_image(spec, settings),
                                 cache_plan=plan_cache(name, spec, settings))
    config.model.path = str(model_dir)
    config.engine.host = "127.0.0.1"
    config.engine.port = port
    config.runtime.host = "127.0.0.1"
    config.runtime.port = runtime_port
    # The pod's `python3` is the image's; here it is this environment's.
    if config.engine.command[:1] == ["python3"]:
        config.engine.command = [sys.executable, *config.engine.command[1:]]
    cache = work_dir / "vllm-cache"
    config.engine.env.setdefault("VLLM_CACHE_ROOT", str(cache))
    config.engine.env.setdefault("TMPDIR", str(work_dir / "tmp"))
    return config.model_dump(mode="json", by_alias=True, exclude_none=True)


def demo_from_args(args: argparse.Namespace) -> int:
    work_dir = Path(args.work_dir).resolve()
    (work_dir / "tmp").mkdir(parents=True, exist_ok=True)
    resource = load_resource(Path(args.resource) if args.resource else None)
    if args.model:
        model_dir = Path(args.model).resolve()
    else:
        print("demo: building the tiny model (random weights, local tokenizer) ...", flush=True)
        model_dir = work_dir / "tiny-model"
        # The runtime's own command builds it: the operator imports only the runtime's config model.
        subprocess.run([sys.executable, "-m", "ascend_runtime.cli", "tiny-model", str(model_dir)], check=True,
                       stdout=subprocess.DEVNULL)
    config = render_local_config(resource, model_dir, work_dir, args.port, args.runtime_port)
    config_path = work_dir / "engine-config.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    log_path = work_dir / "runtime.log"
    print(f"demo: engine config {config_path}; runtime and engine log {log_path}", flush=True)

    runtime_url = f"http://127.0.0.1:{args.runtime_port}"
    engine_url = f"http://127.0.0.1:{args.port}"
    started = time.monotonic()
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(config_path)],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        state = _follow(process, runtime_url, started)
        if state is None:
            print(f"demo: the runtime did not become ready; see {log_path}", file=sys.stderr)
            return 1
        model = config["model"].get("servedName") or config["model"]["path"]
        if not _requests(engine_url, model):
            return 1
        _summary(runtime_url, state, time.monotonic() - started)
        if args.keep_serving:
            print(f"demo: serving; try: curl {engine_url}/v1/chat/completions -H 'content-type: application/json' "
                  f"-d '{{\"model\": \"{model}\", \"messages\": [{{\"role\": \"user\", \"content\": \"hi\"}}]}}'"
                  " (Ctrl-C stops)", flush=True)
            try:
                process.wait()
            except KeyboardInterrupt:
                pass
    finally:
        code = _stop(process)
    print(f"demo: runtime exited with code {code}", flush=True)
    return 0 if code == 0 else 1


def _follow(process: subprocess.Popen, runtime_url: str, started: float) -> dict | None:
    phase = None
    deadline = started + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None
        try:
            status, state = _http("GET", f"{runtime_url}/state", timeout=5)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.5)
            continue
        if status == 200 and isinstance(state, dict):
            if state["phase"] != phase:
                phase = state["phase"]
                mode = state.get("mode") or "-"
                print(f"demo: [{time.monotonic() - started:6.1f} s] {phase:<16} mode {mode:<18} "
                      f"{state.get('message') or ''}", flush=True)
            if state["phase"] == "Ready":
                return state
            if state["phase"] == "Failed":
                return None
        time.sleep(0.5)
    return None


def _requests(engine_url: str, model: str) -> bool:
    status, body = _http("POST", f"{engine_url}/v1/chat/completions",
                         {"model": model, "messages": [{"role": "user", "content": "Hello from ascend-llm!"}],
                          "max_tokens": 16})
    if status != 200:
        print(f"demo: chat completion failed: HTTP {status}: {body}", file=sys.stderr)
        return False
    print(f"demo: chat completion: {json.dumps(body['choices'][0]['message']['content'])} "
          f"(random weights, so gibberish is right)", flush=True)
    status, body = _http("POST", f"{engine_url}/v1/completions",
                         {"model": model, "prompt": "The quick brown fox", "max_tokens": 16})
    if status != 200:
        print(f"demo: completion failed: HTTP {status}: {body}", file=sys.stderr)
        return False
    usage = body.get("usage", {})
    print(f"demo: completion: {usage.get('completion_tokens')} tokens for a {usage.get('prompt_tokens')}-token prompt",
          flush=True)
    return True


def _summary(runtime_url: str, state: dict, elapsed: float) -> None:
    warmup = state.get("warmup") or {}
    print(f"demo: ready after {elapsed:.1f} s in {state.get('mode')} mode; fallbacks {state.get('fallbacks')}; "
          f"warmup {warmup.get('outcome')} ({warmup.get('requests')} requests, {warmup.get('seconds')} s); "
          f"probes: startup {_status(runtime_url + '/startup')}, ready {_status(runtime_url + '/ready')}, "
          f"live {_status(runtime_url + '/live')}", flush=True)


def _status(url: str) -> int:
    return _http("GET", url, timeout=5)[0]


def _stop(process: subprocess.Popen) -> int:
    if process.poll() is None:
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            code = process.wait()
        print(f"demo: SIGTERM -> drained and stopped in {time.monotonic() - sent:.1f} s", flush=True)
        return code
    return process.returncode
