"""The periodic resync: re-run the reconcile every ``resync_interval_s`` for each resource.

This is what turns pod and runtime changes into status (the operator watches no pods) and what
repairs drifted or deleted children. A kopf daemon rather than ``@kopf.timer``: a timer's interval
is fixed when the decorator runs, before the settings are loaded; the daemon reads it from them.
Its first pass waits one interval, because the create/resume handler has just reconciled.

An API failure in one pass is logged (not posted as an Event, so a failing API does not flood
the resource with Events) and the next pass tries again; it never ends the loop.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException

from ascend_operator.handlers import context
from ascend_operator.handlers.handle_reconcile import reconcile

logger = logging.getLogger(__name__)


async def resync_forever(stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo,
                         log: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    """Reconcile ``body`` (kopf keeps it current) every interval until kopf stops the daemon."""

    ctx = context(memo)
    interval = ctx.settings.resync_interval_s
    await stopped.wait(interval)
    while not stopped:
        try:
            await reconcile(ctx, body, memo, log)
        except ApiException as error:
            logger.warning("resync of %s/%s failed (HTTP %s %s); retrying in %ss",
                           body.metadata.namespace, body.metadata.name, error.status, error.reason, interval)
        except urllib3.exceptions.HTTPError as error:
            logger.warning("resync of %s/%s failed (%s); retrying in %ss",
                           body.metadata.namespace, body.metadata.name, error, interval)
        await stopped.wait(interval)
