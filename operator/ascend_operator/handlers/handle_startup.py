"""Operator start-up: kopf's settings, the operator settings (loaded once), the API connection,
the resource store, the watch cache (filled by one list per kind and namespace, then kept current
by the reflectors of ``ascend_operator.reflector``) and the work queue that runs the reconciles.

The operator settings come from the environment (:func:`ascend_operator.settings.load_settings`),
or from kopf's operator memo under :data:`SETTINGS_KEY` when the embedding code (the tests) put
them there. Whichever runs first, login or start-up, loads them and stores them in the memo.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf
from ascend_runtime import redact

from ascend_operator import allocator, collector
from ascend_operator.api import GROUP
from ascend_operator.handlers import MEMO_KEY, OperatorContext, context, handle_events, handle_reconcile
from ascend_operator.k8s import WATCHED_KINDS, Kube, connect
from ascend_operator.leader import LeaderElector, LeaseTiming, own_namespace
from ascend_operator.podreads import PodReader
from ascend_operator.rediscovery import Rediscovery, guard_watches
from ascend_operator.reflector import Reflector, Reflectors, ReflectorTiming, scopes
from ascend_operator.settings import OperatorSettings, StateRead, load_settings
from ascend_operator.workqueue import QueueSettings, WorkQueue

SETTINGS_KEY = "ascend_settings"
TRIM_TASK_KEY = "ascend_trim_task"
FREEZE_TASK_KEY = "ascend_freeze_task"
#: kopf's insights (what it serves), put in the memo by ``ascend-llm operator run``.
INSIGHTS_KEY = "ascend_kopf_insights"
REDISCOVERY_KEY = "ascend_rediscovery"

#: kopf's progress annotations and its finalizer, under the API group's prefix (no diff-base:
#: see NoDiffBase).
#: The handlers are all ``on.event`` handlers, which need none of them; an operator of version
#: 0.1 put this finalizer on every resource, and kopf removes it when it sees a resource that
#: carries it while no handler needs it (tests/cluster/test_operator.py checks that).
ANNOTATION_PREFIX = GROUP
FINALIZER = f"{GROUP}/finalizer"

# Watch timeouts. Without a server-side timeout an idle watch can hang forever on a connection a
# load balancer or NAT dropped silently (kopf #204, #698): the operator would stop seeing changes.
# The server ends each watch after WATCH_SERVER_TIMEOUT_S; kopf (the resources) re-lists and
# re-watches, a reflector (children, pods) resumes from its last version; either client gives up
# 30 s later if even that end never arrives.
WATCH_SERVER_TIMEOUT_S = 300
WATCH_CLIENT_TIMEOUT_S = WATCH_SERVER_TIMEOUT_S + 30
#: Connecting to the API server takes milliseconds in a cluster; 30 s covers a busy control plane.
CONNECT_TIMEOUT_S = 30
#: One API request (not a watch); kopf retries with backoff after it.
REQUEST_TIMEOUT_S = 60
#: Seconds an idle kopf worker (one per watched object) lives on (kopf's default: 5).
WORKER_IDLE_S = 0.5
#: Objects per page of a list (kopf's initial listings and the watch cache's prefill).
LIST_PAGE = 250


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds an "essence" of every event's body (a deep copy) to find what changed for its
    change handlers (on.create/update/field); this operator has only on.event handlers, which
    never read it, and at 1,000 resources the copies took about a seventh of the event loop's
    time (py-spy, bench/README.md). Nothing is stored."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> Any:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


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


def tune_kopf(settings: kopf.OperatorSettings, ops: OperatorSettings) -> bool:
    """kopf's settings for this operator (pure: no connection is made); whether to elect a leader."""

    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.persistence.finalizer = FINALIZER
    # Handler successes stay in the log; only warnings and errors (and the operator's own
    # kopf.event calls) become Kubernetes Events, so a healthy reconcile posts no Event.
    settings.posting.level = logging.WARNING
    # kopf logs every successful event handler call ("Handler 'watch-pods' succeeded"): one line
    # per watch event of every child and pod. The reconcile logs what it changes instead.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_S
    settings.watching.client_timeout = WATCH_CLIENT_TIMEOUT_S
    settings.watching.connect_timeout = CONNECT_TIMEOUT_S
    settings.networking.request_timeout = REQUEST_TIMEOUT_S
    # kopf keeps a worker per object, holding the object's last event, until it has been idle
    # this long; at start-up every object is listed at once, so the default 5 s keeps thousands
    # of bodies alive together. A worker is cheap to make again for the object's next event.
    settings.queueing.idle_timeout = WORKER_IDLE_S
    # kopf lists each watched kind whole before it watches (its default); at 1,000 resources
    # that is several lists of megabytes parsed at once. In pages, like the watch cache's prefill.
    settings.watching.chunk_size = LIST_PAGE
    # One active operator at a time: replicas elect a leader with a Lease (ascend_operator.leader),
    # unless the settings or the command line (--standalone) say the operator runs alone. kopf's
    # own peering stays off either way: it pauses kopf's watches, not the operator's work queue.
    elect = not (settings.peering.standalone or ops.standalone)
    settings.peering.standalone = True
    return elect


async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: logging.Logger) -> None:
    """Tune kopf, connect to the API once, start the work queue."""

    ops = operator_settings(memo)
    # kopf's debug log shows specs: mask --api-key values of one stored before the CRD refused them.
    redact.install()
    guard_watches()  # a CRD deleted under an open watch ends that watch, not the operator
    elect = tune_kopf(settings, ops)

    # One pooled connection per worker thread: no request waits for, or discards, a connection.
    workers = ops.max_concurrent_reconciles * 2
    kube = Kube(connect(api_server(ops), ca_file=ops.api_ca_file, insecure=ops.api_insecure_skip_tls_verify,
                        pool_size=workers),
                field_manager=ops.field_manager, workers=workers,
                cluster_ip_creates=ops.max_concurrent_cluster_ip_creates)
    ctx = OperatorContext(
        settings=ops, kube=kube,
        pods=PodReader(kube, timeout_s=ops.status_read_timeout_s,
                       via_proxy=ops.state_read_mode() == StateRead.PROXY,
                       retry_base_s=ops.progress_poll_interval_s,
                       # A settled runtime is asked at least every fifth resync (podreads.Settled).
                       settled_max_s=5 * ops.resync_interval_s),
    )
    ctx.queue = WorkQueue(
        lambda key: handle_reconcile.reconcile_key(ctx, key),
        QueueSettings(concurrency=ops.max_concurrent_reconciles, backoff_base_s=ops.retry_backoff_base_s,
                      backoff_max_s=ops.retry_backoff_max_s),
    )
    memo[MEMO_KEY] = ctx
    memo[TRIM_TASK_KEY] = asyncio.create_task(_trim_forever(), name="ascend-llm malloc_trim")
    memo[FREEZE_TASK_KEY] = asyncio.create_task(_freeze_forever(collector.Freezer()), name="ascend-llm gc.freeze")
    if memo.get(INSIGHTS_KEY) is not None:
        memo[REDISCOVERY_KEY] = Rediscovery(memo[INSIGHTS_KEY], kopf.get_default_registry(), settings, logger)
        memo[REDISCOVERY_KEY].start()
    await prefill(ctx, logger)
    if elect:
        ctx.queue.pause()  # a standby keeps its store current and reconciles nothing

        def lead() -> None:
            ctx.work.resume()
            for key in ctx.store.keys():
                ctx.work.request(key)

        timing = LeaseTiming(ops.lease_duration_s, ops.lease_renew_deadline_s, ops.lease_retry_period_s)
        LeaderElector(ctx.kube.api_client, ops.lease_name, own_namespace(ops.lease_namespace), lead, timing).start()
    logger.info("ascend-llm operator configured: resync every %ss, leader election %s",
                ops.resync_interval_s, "on" if elect else "off (standalone)")


def reflectors(ctx: OperatorContext) -> Reflectors:
    """One reflector per watched kind and namespace, feeding the watch cache and the queue."""

    def sink(event_type: str | None, body: Mapping[str, Any]) -> None:
        handle_events.child_event(ctx, event_type, body)

    timing = ReflectorTiming(server_timeout_s=WATCH_SERVER_TIMEOUT_S, client_grace_s=WATCH_CLIENT_TIMEOUT_S - WATCH_SERVER_TIMEOUT_S,
                             connect_timeout_s=CONNECT_TIMEOUT_S, page=LIST_PAGE)
    return Reflectors([Reflector(scope, ctx.kube, ctx.watch_cache, sink, timing)
                       for scope in scopes(WATCHED_KINDS, ctx.settings.namespaces)])


async def prefill(ctx: OperatorContext, logger: logging.Logger) -> None:
    """Fill the watch cache with every child and pod (a paged list per kind and namespace), then
    start watching from those lists: the first passes after a start see them all and write
    nothing. A list that fails is retried by its reflector (a pass reads a missing child from the API)."""

    ctx.reflectors = reflectors(ctx)
    await ctx.reflectors.list_all()
    logger.info("watch cache filled: %d children and pods", len(ctx.watch_cache))
    ctx.reflectors.start()


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


async def _trim_forever() -> None:
    """Hand free heap back to the system now and then (``ascend_operator.allocator``)."""
    while True:
        await asyncio.sleep(allocator.TRIM_INTERVAL_S)
        allocator.trim()


async def _freeze_forever(freezer: collector.Freezer) -> None:
    """Keep full collections off the settled heap (``ascend_operator.collector``)."""
    while True:
        await asyncio.sleep(collector.CHECK_INTERVAL_S)
        freezer.step()


async def cleanup(memo: kopf.Memo) -> None:
    """Stop the queue (running reconciles are cancelled: each is safe to repeat), close the pool;
    unfreeze the heap (an operator embedded in a longer process leaves it as it found it)."""

    for key in (TRIM_TASK_KEY, FREEZE_TASK_KEY):
        task = memo.get(key)
        if task is not None:
            task.cancel()
    if memo.get(FREEZE_TASK_KEY) is not None:
        collector.unfreeze()
    if memo.get(REDISCOVERY_KEY) is not None:
        memo[REDISCOVERY_KEY].stop()
    if MEMO_KEY in memo:
        ctx = context(memo)
        if ctx.reflectors is not None:
            await ctx.reflectors.stop()
        if ctx.queue is not None:
            await ctx.queue.stop()
        await ctx.pods.close()
        ctx.kube.close()
