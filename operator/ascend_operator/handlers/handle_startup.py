"""Operator start-up: kopf's settings, the operator settings (loaded once), the API connection.

The operator settings come from the environment (:func:`ascend_operator.settings.load_settings`),
or from kopf's operator memo under :data:`SETTINGS_KEY` when the embedding code (the tests) put
them there. Whichever runs first, login or start-up, loads them and stores them in the memo.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Mapping
from typing import Any

import kopf
from ascend_runtime import redact

from ascend_operator.api import GROUP
from ascend_operator.handlers import MEMO_KEY, OperatorContext, context
from ascend_operator.k8s import Kube, connect
from ascend_operator.settings import OperatorSettings, StateRead, load_settings

SETTINGS_KEY = "ascend_settings"

#: kopf's progress and diff-base annotations, and its finalizer, under the API group's prefix.
ANNOTATION_PREFIX = GROUP
FINALIZER = f"{GROUP}/finalizer"

# Watch timeouts. Without a server-side timeout an idle watch can hang forever on a connection a
# load balancer or NAT dropped silently (kopf #204, #698): the operator would stop seeing changes.
# The server ends each watch after WATCH_SERVER_TIMEOUT_S and kopf re-lists and re-watches; the
# client gives up 30 s later if even that end never arrives.
WATCH_SERVER_TIMEOUT_S = 300
WATCH_CLIENT_TIMEOUT_S = WATCH_SERVER_TIMEOUT_S + 30
#: Connecting to the API server takes milliseconds in a cluster; 30 s covers a busy control plane.
CONNECT_TIMEOUT_S = 30
#: One API request (not a watch); kopf retries with backoff after it.
REQUEST_TIMEOUT_S = 60


#: kopf's default peering priority; a value other than this came from ``--priority`` (or ``--dev``).
KOPF_DEFAULT_PRIORITY = 0
#: Priorities are drawn from [1, 2**31): far apart enough that two replicas practically never tie
#: (kopf pauses *every* operator when two peers have the same priority), and within a Go int32.
PRIORITY_SPACE = 2**31 - 1
#: Where the pod's name is found: the chart sets POD_ID (kopf's own identity variable) from
#: metadata.name; HOSTNAME is the pod name in any pod.
POD_NAME_VARIABLES = ("POD_ID", "HOSTNAME")


def peering_priority(env: Mapping[str, str]) -> int:
    """A peering priority for this operator replica: a stable hash of its pod name (the same pod
    keeps its priority across container restarts), or random when no name is known."""

    pod_name = next((env[key] for key in POD_NAME_VARIABLES if env.get(key)), None)
    if pod_name is None:
        return 1 + secrets.randbelow(PRIORITY_SPACE)
    digest = int.from_bytes(hashlib.sha256(pod_name.encode("utf-8")).digest()[:8], "big")
    return 1 + digest % PRIORITY_SPACE


def operator_settings(memo: Any) -> OperatorSettings:
    """The operator settings from the memo, loading them from the environment the first time."""

    found = memo.get(SETTINGS_KEY)
    if isinstance(found, OperatorSettings):
        return found
    loaded = load_settings()
    memo[SETTINGS_KEY] = loaded
    return loaded


def api_server(settings: OperatorSettings) -> str | None:
    """The explicit API URL for tests and local development (settings ``api_server``), if any."""

    value = settings.api_server
    return str(value) if value else None


def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger) -> None:
    """Tune kopf and connect to the API once."""

    ops = operator_settings(memo)
    # kopf's debug log shows specs: mask --api-key values of one stored before the CRD refused them.
    redact.install()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration",
    )
    settings.persistence.finalizer = FINALIZER
    # Handler successes stay in the log; only warnings and errors (and the operator's own
    # kopf.event calls) become Kubernetes Events, so a healthy reconcile posts no Event.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_S
    settings.watching.client_timeout = WATCH_CLIENT_TIMEOUT_S
    settings.watching.connect_timeout = CONNECT_TIMEOUT_S
    settings.networking.request_timeout = REQUEST_TIMEOUT_S
    # One active operator at a time: replicas elect a leader through kopf's peering object,
    # unless the settings or the command line (--standalone) say the operator runs alone.
    # Whether the peering object is cluster-wide follows the watched namespaces (kopf sets it).
    settings.peering.standalone = bool(settings.peering.standalone) or ops.standalone
    settings.peering.name = ops.peering_name
    # kopf pauses every operator that sees a peer of the same priority (kopf docs, "Peering"), and
    # all replicas of a Deployment would otherwise share the default 0: give each its own, so the
    # highest one acts and the others wait, unless --priority chose one already.
    if not settings.peering.standalone and settings.peering.priority == KOPF_DEFAULT_PRIORITY:
        settings.peering.priority = peering_priority(os.environ)

    memo[MEMO_KEY] = OperatorContext(
        settings=ops,
        kube=Kube(connect(api_server(ops), ca_file=ops.api_ca_file,
                          insecure=ops.api_insecure_skip_tls_verify),
                  field_manager=ops.field_manager, state_timeout_s=ops.status_read_timeout_s,
                  state_via_proxy=ops.state_read_mode() == StateRead.PROXY),
    )
    logger.info("ascend-llm operator configured: namespaces=%s, resync every %ss, standalone=%s, "
                "peering priority %s", ",".join(ops.namespaces) or "(all)", ops.resync_interval_s,
                settings.peering.standalone, settings.peering.priority)


def login(memo: kopf.Memo, logger: logging.Logger, settings: kopf.OperatorSettings,
          **kwargs: Any) -> kopf.ConnectionInfo | None:
    """The explicit API URL when the settings name one; otherwise kopf's usual piggybacking on the
    kubernetes client's configuration (in-cluster service account or kubeconfig)."""

    server = api_server(operator_settings(memo))
    if server:
        ops = operator_settings(memo)
        return kopf.ConnectionInfo(server=server, insecure=ops.api_insecure_skip_tls_verify,
                                   ca_path=ops.api_ca_file)
    return kopf.login_via_client(logger=logger, settings=settings, **kwargs)


def cleanup(memo: kopf.Memo) -> None:
    """Close the API connection pool."""

    if MEMO_KEY in memo:
        context(memo).kube.close()
