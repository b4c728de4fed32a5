"""Watch the resources again after their CRD is deleted and applied again (or applied late).

kopf re-reads the API server's discovery on each event of a CRD, but the server can start
serving a re-created CRD's group a moment after that CRD's last event (Established): kopf then
logs "Unresolved resources cannot be served" and never watches the resource again until a
restart (seen on a real API server: tests/cluster/test_install.py deletes and re-applies the
CRD). While kopf watches no resource of this operator, :class:`Rediscovery` repeats kopf's own
rescan of the group every few seconds; a rescan is a discovery read, made only in that state
(or after a 404, below).

The other side of the same race: a watch that kopf opens again (its list, or the watch after a
server timeout) while the CRD is being deleted gets "404 page not found", which kopf 1.45 lets
out of the watch task, and the whole operator stops. :func:`guard_watches` ends such a stream
instead, after a pause (doubling while the 404s go on), as kopf ends one on "410 Gone", and has
:class:`Rediscovery` re-read discovery at its next check even while kopf watches the resource:
kopf stops watching once discovery no longer lists it, or opens the watch again.

It calls kopf's observation function and wraps its watch function (neither public API):
``tests/unit/test_rediscovery.py`` fails if a kopf release moves either.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kopf._cogs.clients import errors, watching
from kopf._cogs.structs.references import Insights
from kopf._core.reactor import observation

from ascend_operator.api import GROUP, PLURAL

#: Seconds between checks; a rescan happens only while the resource is not watched, or after a 404.
INTERVAL_S = 5.0
#: Seconds before a watch that found its resource not served is opened again, doubling with each
#: 404 in a row up to NOT_SERVED_PAUSE_MAX_S.
NOT_SERVED_PAUSE_S = 2.0
NOT_SERVED_PAUSE_MAX_S = 60.0

logger = logging.getLogger(__name__)
#: Called on each 404 of a watch (a :class:`Rediscovery` re-reads discovery at its next check).
_not_served_listeners: list[Callable[[], None]] = []
#: Resource -> 404s in a row (the pause doubles; only the first is a warning).
_not_served_runs: dict[Any, int] = {}


def guard_watches(pause_s: float = NOT_SERVED_PAUSE_S, max_pause_s: float = NOT_SERVED_PAUSE_MAX_S) -> None:
    """Make kopf's watch streams end, not fail, on a 404 (the resource's CRD gone); idempotent."""

    original = watching.continuous_watch
    if getattr(original, "ascend_guarded", False):
        return

    async def continuous_watch(**kwargs: Any) -> Any:
        resource = kwargs.get("resource")
        try:
            async for event in original(**kwargs):
                _not_served_runs.pop(resource, None)
                yield event
        except errors.APINotFoundError as error:
            run = _not_served_runs[resource] = _not_served_runs.get(resource, 0) + 1
            pause = min(max_pause_s, pause_s * 2 ** min(run - 1, 30))
            logger.log(logging.WARNING if run == 1 else logging.DEBUG,
                       "%s is not served (%s): discovery read again, the watch opened again in %g s",
                       resource, error, pause)
            for listener in list(_not_served_listeners):
                listener()
            await asyncio.sleep(pause)

    continuous_watch.ascend_guarded = True  # type: ignore[attr-defined]
    watching.continuous_watch = continuous_watch  # type: ignore[assignment]


def new_insights() -> Insights:
    """kopf's record of what it serves, made by the caller so :class:`Rediscovery` can read it."""

    return Insights()


class Rediscovery:
    """Rescans the API group while kopf watches none of its resources."""

    def __init__(self, insights: Insights, registry: Any, settings: Any, logger: logging.Logger,
                 interval_s: float = INTERVAL_S) -> None:
        self.insights = insights
        self.registry = registry
        self.settings = settings
        self.logger = logger
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        #: A watch got a 404: discovery may have dropped the resource while kopf still watches it.
        self._recheck = False

    def not_served(self) -> None:
        self._recheck = True

    def watching(self) -> bool:
        """Whether kopf watches this operator's resource now."""

        return any(r.group == GROUP and r.plural == PLURAL for r in self.insights.watched_resources)

    async def rescan(self) -> bool:
        """kopf's rescan of the group, as on a CRD event; whether the resource is watched after."""

        # The event kopf's CRD watch would pass: only the group is read from it.
        event = {"type": "MODIFIED", "object": {"spec": {"group": GROUP}}}
        await observation.process_discovered_resource_event(
            raw_event=event, settings=self.settings, registry=self.registry, insights=self.insights)
        return self.watching()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            if self.watching() and not self._recheck:
                continue
            self._recheck = False
            try:
                if await self.rescan():
                    self.logger.info("%s.%s is served again: watching it", PLURAL, GROUP)
            except Exception as error:  # noqa: BLE001  (a failed discovery read is retried next interval)
                self.logger.warning("rescan of %s failed: %s", GROUP, error)

    def start(self) -> None:
        _not_served_listeners.append(self.not_served)
        self._task = asyncio.create_task(self.run(), name="ascend-llm rediscovery")

    def stop(self) -> None:
        if self.not_served in _not_served_listeners:
            _not_served_listeners.remove(self.not_served)
        if self._task is not None:
            self._task.cancel()
