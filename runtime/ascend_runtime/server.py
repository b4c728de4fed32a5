"""The runtime's HTTP server: kubelet's probes, ``/state`` for the operator, ``/metrics``.

- ``GET /startup``: 200 once the engine has been up and warm at least once (kubelet stops
  asking after the first success), 503 before.
- ``GET /ready``: 200 while the engine is warm, answers its ``/health`` and is not draining (or
  being stopped), 503 otherwise.
- ``GET /live``: 200 while the engine is alive and making progress and memory is not leaking
  past its limits; 503 with the reasons otherwise, so kubelet restarts the container.
- ``GET /state``: the :class:`~ascend_runtime.config.RuntimeState` as JSON (camelCase).
- ``GET /metrics``: the runtime's ``ascend_llm_*`` metrics followed by the engine's own
  ``vllm:*`` metrics (fetched live, so one scrape target serves both).
"""

from __future__ import annotations

import json
import logging
from typing import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ascend_runtime.state import StateStore

log = logging.getLogger(__name__)


def build_app(store: StateStore, engine_metrics: Callable[[], Awaitable[str | None]]) -> web.Application:
    async def startup(_: web.Request) -> web.Response:
        if store.started_once:
            return web.json_response({"started": True})
        return web.json_response({"started": False, "phase": store.state.phase.value,
                                  "message": store.state.message}, status=503)

    async def ready(_: web.Request) -> web.Response:
        body = {"ready": store.state.ready, "phase": store.state.phase.value, "message": store.state.message,
                "unanswered": store.state.unanswered}
        return web.json_response(body, status=200 if store.state.ready else 503)

    async def live(_: web.Request) -> web.Response:
        body = {"live": store.state.live, "reasons": store.state.live_reasons}
        return web.json_response(body, status=200 if store.state.live else 503)

    async def state(_: web.Request) -> web.Response:
        return web.Response(text=json.dumps(store.snapshot()), content_type="application/json")

    async def metrics(_: web.Request) -> web.Response:
        text = generate_latest(store.registry).decode()
        engine_text = await engine_metrics()
        if engine_text:
            text += engine_text if engine_text.endswith("\n") else engine_text + "\n"
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/startup", startup)
    app.router.add_get("/ready", ready)
    app.router.add_get("/live", live)
    app.router.add_get("/state", state)
    app.router.add_get("/metrics", metrics)
    return app


async def start_server(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    log.info("runtime server on %s:%d (/startup /ready /live /state /metrics)", host, port)
    return runner
