"""The runtime's HTTP server: kubelet's probes, ``/state`` for the operator, ``/metrics``.

- ``GET /startup``: 200 once the engine has been up and warm at least once (kubelet stops
  asking after the first success), 503 before.
- ``GET /ready``: 200 while the engine is warm, answers its ``/health`` and is not draining (or
  being stopped), 503 otherwise.
- ``GET /live``: 200 while the engine is alive and making progress and memory is not leaking
  past its limits; 503 with the reasons otherwise, so kubelet restarts the container.
- ``GET /state``: the :class:`~ascend_runtime.config.RuntimeState` as JSON (camelCase), with a
  strong ``ETag`` (a digest of the body) and 304 for an ``If-None-Match`` that still matches.
  ``?omit=health`` leaves out the leak and hang details, which change with every sample: the
  operator reads that view at each resync, so a settled runtime answers 304 and nothing is decoded.
- ``GET /metrics``: the runtime's ``ascend_llm_*`` metrics followed by the engine's own
  ``vllm:*`` metrics (fetched live, so one scrape target serves both).
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Awaitable, Callable

from aiohttp import web
from aiohttp.helpers import ETAG_ANY
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ascend_runtime.state import StateStore

log = logging.getLogger(__name__)

#: Parts of ``/state`` that ``?omit=`` may leave out.
OMITTABLE = frozenset({"health"})


def state_etag(body: bytes) -> str:
    """The strong ETag of a ``/state`` body (unquoted): equal bodies, equal tags."""
    return hashlib.blake2b(body, digest_size=12).hexdigest()


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

    async def state(request: web.Request) -> web.Response:
        omit = set(request.query.getall("omit", ()))
        if omit - OMITTABLE:
            return web.json_response({"error": f"omit={','.join(sorted(omit - OMITTABLE))} is not a part of /state "
                                               f"that can be left out; omit takes: {', '.join(sorted(OMITTABLE))}"},
                                     status=400)
        snapshot = store.snapshot()
        for key in omit:
            snapshot.pop(key, None)
        body = json.dumps(snapshot).encode()
        etag = state_etag(body)
        if any(tag.value in (etag, ETAG_ANY) for tag in request.if_none_match or ()):
            response = web.Response(status=304)
        else:
            response = web.Response(body=body, content_type="application/json")
        response.etag = etag
        return response

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
