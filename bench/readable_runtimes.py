"""Readable runtimes for kwok's pods: what a cluster's settled runtimes cost the operator.

kwok's pods serve nothing, so in bench/operator_scale.py the operator's ``/state`` reads all
fail and are backed off (podreads.Unreadable): the idle figures there leave out the reads that a
cluster's runtimes answer at every resync. ``--readable-runtimes`` puts them back:

- :func:`local_route` makes kwok's pod range (10.244.0.0/16, ../shared/k8s/README.md) local to
  this machine (``ip route add local ... dev lo``, root), so a connection to any pod IP reaches
  a server listening here; the route is removed however the run ends.
- :class:`StandIn` runs this file as a process: one server on the runtime port answering for
  every pod with the runtime's own HTTP app (``ascend_runtime.server.build_app``) over a Ready
  state whose leak and hang samples change every ``--sample-s`` seconds, as a serving
  runtime's do; it counts its answers by status (``GET /bench/answers``).

The operator then reads each pod IP directly (``STATE_READ=podIP``), as it does in a pod.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: kwok's pod IPs (../shared/k8s/README.md, "Fake addresses").
POD_CIDR = "10.244.0.0/16"
#: Seconds between the stand-in's leak and hang samples (a runtime samples every few seconds).
SAMPLE_S = 2.0


@contextlib.contextmanager
def local_route(cidr: str = POD_CIDR) -> Iterator[None]:
    """Every address in ``cidr`` delivered to this machine while the block runs (needs root)."""

    command = ["ip", "route", "add", "local", cidr, "dev", "lo"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 and "File exists" not in done.stderr:
        raise RuntimeError(f"{' '.join(command)} failed ({done.stderr.strip()}): --readable-runtimes needs root")
    added = done.returncode == 0
    try:
        yield
    finally:
        if added:
            subprocess.run(["ip", "route", "del", "local", cidr, "dev", "lo"], capture_output=True, check=False)


class StandIn:
    """This file's server as a subprocess: the runtime port for every pod IP, and its answer counts."""

    def __init__(self, port: int, counts_port: int, log_path: Path, sample_s: float = SAMPLE_S) -> None:
        self.port, self.counts_port, self.log_path, self.sample_s = port, counts_port, log_path, sample_s
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30) -> None:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--port", str(self.port),
             "--counts-port", str(self.counts_port), "--sample-s", f"{self.sample_s:g}"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the stand-in runtimes exited ({self.process.returncode}): see {self.log_path}")
            with contextlib.suppress(OSError):
                self.answers()
                return
            time.sleep(0.2)
        raise RuntimeError(f"the stand-in runtimes did not listen within {timeout_s:g} s: see {self.log_path}")

    def answers(self) -> Counter[str]:
        """Its answers to ``GET /state`` so far, by HTTP status."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.counts_port}/bench/answers", timeout=5) as response:
            return Counter(json.load(response))

    def cpu_s(self) -> float:
        import psutil

        if self.process is None:
            return 0.0
        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def ready_store() -> Any:
    """A runtime's state store as a serving runtime's: Ready, with its versions and warmup."""

    from ascend_runtime.config import GraphMode, RuntimePhase, WarmupReport
    from ascend_runtime.state import StateStore

    store = StateStore()
    store.set_mode(GraphMode.EAGER, 0, [GraphMode.EAGER])
    store.set_warmup(WarmupReport(outcome="succeeded", seconds=3.2, requests=20))
    store.state.versions = {"vllm": "0.11.0", "vllm_ascend": "0.11.0rc0", "torch_npu": "2.7.1"}
    store.set_phase(RuntimePhase.READY)
    return store


async def serve(port: int, counts_port: int, sample_s: float) -> None:
    from aiohttp import web

    from ascend_runtime.server import build_app, start_server

    store = ready_store()
    answers: Counter[str] = Counter()

    @web.middleware
    async def count(request: web.Request, handler: Any) -> web.StreamResponse:
        response = await handler(request)
        if request.path == "/state":
            answers[str(response.status)] += 1
        return response

    async def no_engine_metrics() -> str | None:
        return None

    app = build_app(store, no_engine_metrics)
    app.middlewares.append(count)
    counts = web.Application()
    counts.router.add_get("/bench/answers", lambda _: web.json_response(dict(answers)))
    await start_server(app, "0.0.0.0", port)
    await start_server(counts, "127.0.0.1", counts_port)
    used = 2000.0
    while True:  # the monitor's samples: host memory moving a little, as a serving runtime's does
        used += 0.5
        store.state.health = {"memory": {"host": {"used_mb": round(used, 1), "slope_mb_per_h": 0.4}},
                              "engine": {"hung": False, "stalled_for_s": None}}
        await asyncio.sleep(sample_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="The runtime port (8080).")
    parser.add_argument("--counts-port", type=int, required=True, help="Where GET /bench/answers is served.")
    parser.add_argument("--sample-s", type=float, default=SAMPLE_S, help="Seconds between health samples.")
    args = parser.parse_args(argv)
    asyncio.run(serve(args.port, args.counts_port, args.sample_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
