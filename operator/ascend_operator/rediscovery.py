"""Watch the resources again after their CRD is deleted and applied again (or applied late).

kopf re-reads the API server's discovery on each event of a CRD, but the server can start
serving a re-created CRD's group a moment after that CRD's last event (Established): kopf then
logs "Unresolved resources cannot be served" and never watches the resource again until a
restart (seen on a real API server: tests/cluster/test_install.py deletes and re-applies the
CRD). While kopf watches no resource of this operator, :class:`Rediscovery` repeats kopf's own
rescan of the group every few seconds; a rescan is a discovery read, made only in that state.

The other side of the same race: a watch that kopf opens again (its list, or the watch after a
server timeout) while the CRD is being deleted gets "404 page not found", which kopf 1.45 lets
out of the watch task, and the whole operator stops. :func:`guard_watches` ends such a stream
instead, after a pause, as kopf ends one on "410 Gone": kopf opens it again, or stops watching
once discovery no longer lists the resource.

It calls kopf's observation function and wraps its watch function (neither public API):
``tests/unit/test_rediscovery.py`` fails if a kopf release moves either.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kopf._cogs.clients import errors, watching
from kopf._cogs.structs.references import Insights
from kopf._core.reactor import observation

from ascend_operator.api import GROUP, PLURAL

#: Seconds between checks; a rescan happens only while the resource is not watched.
INTERVAL_S = 5.0
#: Seconds before a watch that found its resource not served is opened again.
NOT_SERVED_PAUSE_S = 2.0

logger = logging.getLogger(__name__)


def guard_watches(pause_s: float = NOT_SERVED_PAUSE_S) -> None:
    """Make kopf's watch streams end, not fail, on a 404 (the resource's CRD gone); idempotent."""

    original = watching.continuous_watch
    if getattr(original, "ascend_guarded", False):
        return

    async def continuous_watch(**kwargs: Any) -> Any:
        try:
            async for event in original(**kwargs):
                yield event
        except errors.APINotFoundError as error:
            logger.warning("%s is not served (%s): watching it again in %s s unless discovery drops it",
                           kwargs.get("resource"), error, pause_s)
            await asyncio.sleep(pause_s)

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
            if self.watching():
                continue
            try:
                if await self.rescan():
                    self.logger.info("%s.%s is served again: watching it", PLURAL, GROUP)
            except Exception as error:  # noqa: BLE001  (a failed discovery read is retried next interval)
                self.logger.warning("rescan of %s failed: %s", GROUP, error)

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="ascend-llm rediscovery")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
