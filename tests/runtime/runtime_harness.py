"""Helpers that run the real `ascend-llm run` process, with a fake or the real engine."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FAKE_ENGINE = REPO / "tests" / "fakes" / "fake_engine.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def deep_merge(base: dict, extra: dict) -> dict:
    """``base`` with ``extra`` merged in; a ``None`` in ``extra`` removes the key (back to the default)."""
    out = dict(base)
    for key, value in extra.items():
        if value is None:
            out.pop(key, None)
            continue
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def http(method: str, url: str, body: Any = None, timeout: float = 30.0,
         headers: dict[str, str] | None = None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@dataclass
class RuntimeProcess:
    process: subprocess.Popen
    port: int
    engine_port: int
    workdir: Path
    log_path: Path
    exit_code: int | None = None
    _log: Any = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def engine_url(self) -> str:
        return f"http://127.0.0.1:{self.engine_port}"

    def state(self) -> dict | None:
        try:
            status, body = http("GET", f"{self.url}/state", timeout=5)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None
        return json.loads(body) if status == 200 else None

    def probe(self, name: str) -> int | None:
        try:
            return http("GET", f"{self.url}/{name}", timeout=5)[0]
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def wait_for(self, predicate: Callable[[dict], bool], timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"runtime exited with {self.process.returncode} while waiting for {what}; "
                                     f"last state {last}\n{self.log_tail()}")
            last = self.state()
            if last is not None and predicate(last):
                return last
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; last state {last}\n{self.log_tail()}")

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def launches(self) -> list[list[str]]:
        path = self.workdir / "launches.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def terminate(self, timeout: float = 60) -> int:
        state = self.state() if self.process.poll() is None else None
        engine_pid = (state or {}).get("enginePid")
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.exit_code = self.process.wait()
        if engine_pid:  # the engine runs in its own process group: never leave it behind
            try:
                os.killpg(engine_pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._log:
            self._log.close()
        return self.exit_code


def base_config(model: str, engine_port: int, runtime_port: int, command: list[str]) -> dict:
    return {
        "schemaVersion": 1,
        "name": "test",
        "model": {"path": model},
        "engine": {"command": command, "port": engine_port, "host": "127.0.0.1", "shutdownTimeoutS": 10},
        "warmup": {"promptLengths": [4, 16], "concurrency": [1, 2], "maxTokens": 2, "timeoutS": 120},
        "runtime": {"port": runtime_port, "host": "127.0.0.1", "readyTimeoutS": 300, "preflight": False,
                    "restart": {"maxRestarts": 3, "backoffInitialS": 0.2, "backoffMaxS": 1.0}},
    }


def start_runtime(tmp: Path, config_extra: dict, env_extra: dict[str, str], *, command: list[str] | None = None,
                  model: str = "fake-model") -> RuntimeProcess:
    port, engine_port = free_port(), free_port()
    command = command or [sys.executable, str(FAKE_ENGINE)]
    config = deep_merge(base_config(model, engine_port, port, command), config_extra)
    config_path = tmp / "engine-config.yaml"
    config_path.write_text(yaml.safe_dump(config))
    env = dict(os.environ)
    env.update({"FAKE_ENGINE_LAUNCH_LOG": str(tmp / "launches.jsonl"), "FAKE_ENGINE_STATE_DIR": str(tmp),
                "PYTHONUNBUFFERED": "1"})
    env.update(env_extra)
    log_path = tmp / "runtime.log"
    log = open(log_path, "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "ascend_runtime.cli", "run", "--config", str(config_path)],
        stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp, start_new_session=True,
    )
    return RuntimeProcess(process, port, engine_port, tmp, log_path, _log=log)


def is_ready(state: dict) -> bool:
    """A /state document of a runtime that serves."""
    return state["phase"] == "Ready" and state["ready"]


def mode_of(argv: list[str]) -> str:
    """The graph mode an engine command line asks for (the fake engine's argv)."""
    if "--enforce-eager" in argv:
        return "EAGER"
    if "--compilation-config" in argv:
        return json.loads(argv[argv.index("--compilation-config") + 1])["cudagraph_mode"]
    return "PIECEWISE"
