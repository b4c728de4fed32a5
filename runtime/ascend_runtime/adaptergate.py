"""Only the runtime may load or unload LoRA adapters: an ASGI middleware inside vLLM's API server.

With ``lora`` on, vLLM serves its runtime adapter endpoints (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``)
on the port the Service, the InferencePool and the HTTPRoute send clients to, so any client could
unload adapters or make the engine read a path of its choosing. The renderer passes
``--middleware ascend_runtime.adaptergate.AdapterGate`` (:data:`MIDDLEWARE`); vLLM adds it as the
outermost middleware of its app, ahead of its own API-key check. It answers 403 to every request
for an adapter-mutating route (:func:`is_adapter_route`) that lacks the header
:data:`TOKEN_HEADER` with the engine's launch token, which the leader draws afresh for each
launch (:func:`new_token`), hands the engine in :data:`TOKEN_ENV` and sends itself
(:func:`token_headers`). Without a token in its environment the gate refuses every such request.

Why a middleware and not a second port: vLLM serves one app on one port, and a proxy in the
runtime would put every inference byte through it. Stdlib only: it is imported into the engine.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

__all__ = ["MIDDLEWARE", "TOKEN_ENV", "TOKEN_HEADER", "AdapterGate", "is_adapter_route", "new_token",
           "token_headers"]

#: The ``--middleware`` import path the renderer passes while ``lora`` is enabled.
MIDDLEWARE = "ascend_runtime.adaptergate.AdapterGate"
#: The engine's environment variable holding this launch's token.
TOKEN_ENV = "ASCEND_LLM_ADAPTER_TOKEN"
#: The request header the runtime sends it in.
TOKEN_HEADER = "X-Ascend-LLM-Adapter-Token"

#: Path segments of the routes that change the loaded adapters, in vLLM 0.32:
#: ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``, the SageMaker-standard ``POST /adapters``
#: and ``DELETE /adapters/{name}`` (registered with the same handlers), and the development-mode
#: ``/collective_rpc`` (which can call the workers' ``add_lora`` / ``remove_lora``). A segment
#: anywhere in the path counts, so a ``--root-path`` prefix or a trailing part does not slip past.
GUARDED_SEGMENTS = frozenset({"load_lora_adapter", "unload_lora_adapter", "adapters", "collective_rpc"})

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def new_token() -> str:
    """A fresh launch token (256 random bits)."""

    return secrets.token_urlsafe(32)


def token_headers(token: str | None) -> dict[str, str]:
    """The header that lets the runtime's own adapter calls through (none without a token)."""

    return {TOKEN_HEADER: token} if token else {}


def is_adapter_route(path: str) -> bool:
    """Whether ``path`` (an ASGI scope's decoded path) is one of the guarded routes."""

    return any(segment.lower() in GUARDED_SEGMENTS for segment in path.split("/"))


def _refusal(path: str) -> bytes:
    message = (f"{path} is reserved for the ascend-llm runtime: LoRA adapters are loaded and unloaded from "
               "the resource's spec.lora.adapters, not by clients")
    # vLLM's error body, so that clients and the runtime read it the same way.
    return json.dumps({"error": {"message": message, "type": "Forbidden", "param": None, "code": 403}}).encode()


class AdapterGate:
    """Pure ASGI middleware (module docstring); vLLM constructs it with the next app."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 environ: Mapping[str, str] | None = None) -> None:
        self.app = app
        token = (os.environ if environ is None else environ).get(TOKEN_ENV, "")
        self._token = token.encode() if token else None

    def allows(self, scope: Scope) -> bool:
        if scope.get("type") != "http" or not is_adapter_route(scope.get("path", "")):
            return True
        if self._token is None:
            return False
        wanted = TOKEN_HEADER.lower().encode()
        sent = [value for name, value in scope.get("headers", ()) if name.lower() == wanted]
        return len(sent) == 1 and hmac.compare_digest(sent[0], self._token)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.allows(scope):
            await self.app(scope, receive, send)
            return
        body = _refusal(scope.get("path", ""))
        await send({"type": "http.response.start", "status": 403,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
