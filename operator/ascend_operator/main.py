"""kopf registrations only; the work is in ``ascend_operator.handlers``.

Run with ``ascend-llm operator run`` (or ``kopf run -m ascend_operator.main``).

kopf is used for what it does well: watching the resources, re-listing after a dropped watch,
Events and the liveness endpoint (leader election is ``ascend_operator.leader``'s; the children
and pods are watched by ``ascend_operator.reflector``, lighter than kopf's per-object workers).
The one handler of the resources is an ``on.event`` handler, which writes nothing to the
resource: no diff-base annotation and no finalizer, so deleting a resource (or its namespace)
never waits for a running operator. The events feed a keyed work queue
(``ascend_operator.workqueue``) that runs the level-based reconcile, one at a time per resource,
with requeue timers for the resync and backoff for failures. The event handler is a coroutine:
kopf runs plain functions in threads, and the queue is not thread-safe.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from ascend_operator.api import GROUP, PLURAL, VERSION
from ascend_operator.handlers import context, handle_events, handle_startup


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    await handle_startup.configure(settings, memo, logger)


@kopf.on.login()
def login(memo: kopf.Memo, logger: logging.Logger, settings: kopf.OperatorSettings,
          **kwargs: Any) -> kopf.ConnectionInfo | None:
    return handle_startup.login(memo=memo, logger=logger, settings=settings, **kwargs)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    await handle_startup.cleanup(memo)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def resource_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:  # noqa: A002
    handle_events.resource_event(context(memo), type, body)
