"""kopf registrations only; the work is in ``ascend_operator.handlers``.

Run with ``ascend-llm operator run`` (or ``kopf run -m ascend_operator.main``).

Handler styles, chosen for the write count (each kopf annotation is a write):
- create / update / resume: the reconcile. kopf writes its diff-base annotation after a create
  or update (it detects spec changes with it); a resume of an unchanged object writes nothing.
- a daemon per object: the periodic resync (see ``handlers.handle_status``); it writes only when
  something changed. Like a timer, it makes kopf put a finalizer on the resource, so kopf can stop
  it before the object goes.
- no ``on.delete``: children carry owner references, so the garbage collector deletes them.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException

from ascend_operator.api import GROUP, PLURAL, VERSION
from ascend_operator.handlers import context, handle_reconcile, handle_startup, handle_status

#: How long kopf waits before retrying a create/update/resume whose API calls failed.
API_RETRY_DELAY_S = 15
#: Seconds a stopping daemon gets to finish its pass before kopf cancels it (a pass is short).
DAEMON_CANCELLATION_TIMEOUT_S = 10.0


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    handle_startup.configure(settings, memo, logger)


@kopf.on.login()
def login(memo: kopf.Memo, logger: logging.Logger, settings: kopf.OperatorSettings,
          **kwargs: Any) -> kopf.ConnectionInfo | None:
    return handle_startup.login(memo=memo, logger=logger, settings=settings, **kwargs)


@kopf.on.cleanup()
def cleanup(memo: kopf.Memo, **_: Any) -> None:
    handle_startup.cleanup(memo)


@kopf.on.resume(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.create(GROUP, VERSION, PLURAL, id="reconcile")
@kopf.on.update(GROUP, VERSION, PLURAL, id="reconcile")
async def reconcile(body: kopf.Body, memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    try:
        await handle_reconcile.reconcile(context(memo), body, memo, logger)
    except ApiException as error:
        raise kopf.TemporaryError(f"API request failed: HTTP {error.status} {error.reason}",
                                  delay=API_RETRY_DELAY_S) from error
    except urllib3.exceptions.HTTPError as error:
        raise kopf.TemporaryError(f"API request failed: {error}", delay=API_RETRY_DELAY_S) from error


@kopf.daemon(GROUP, VERSION, PLURAL, id="resync", cancellation_timeout=DAEMON_CANCELLATION_TIMEOUT_S)
async def resync(stopped: kopf.DaemonStopped, body: kopf.Body, memo: kopf.Memo, logger: logging.Logger,
                 **_: Any) -> None:
    await handle_status.resync_forever(stopped, body, memo, logger)
