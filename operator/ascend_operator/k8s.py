"""The operator's only way to the Kubernetes API (the official ``kubernetes`` client).

Everything that reads or writes children, pods or the resource's status goes through :class:`Kube`,
so the API error policy lives in one place (the pods' own ``/state`` and ``/progress`` are read by
:mod:`ascend_operator.podreads`). The policy (server-side apply, when a child is written, refused
and foreign children, discovery, threads): ``docs/operator.md`` ("The API client").
"""

from __future__ import annotations

import asyncio
import enum
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from ascend_operator.api import GROUP, PLURAL, VERSION
from ascend_operator.builders.common import SPEC_HASH_ANNOTATION
from ascend_operator.drift import find_drift, immutable_changes

logger = logging.getLogger(__name__)

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"


@dataclass(frozen=True)
class ListPage:
    """One page of a list: its objects and the list's ``resourceVersion`` (to watch from)."""

    items: list[dict[str, Any]]
    resource_version: str | None


@dataclass(frozen=True)
class ChildKind:
    """A kind of child object and the client methods that serve it."""

    kind: str
    api_version: str
    plural: str
    #: A custom resource (a CRD's kind): a 404 for its collection means the CRD is not installed.
    custom: bool = False

    @property
    def group(self) -> str:
        group, _, _ = self.api_version.rpartition("/")
        return group

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]



CONFIGMAP = ChildKind("ConfigMap", "v1", "configmaps")
SERVICE = ChildKind("Service", "v1", "services")
DEPLOYMENT = ChildKind("Deployment", "apps/v1", "deployments")
PDB = ChildKind("PodDisruptionBudget", "policy/v1", "poddisruptionbudgets")
LEADERWORKERSET = ChildKind("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "leaderworkersets", custom=True)
HPA = ChildKind("HorizontalPodAutoscaler", "autoscaling/v2", "horizontalpodautoscalers")
SCALED_OBJECT = ChildKind("ScaledObject", "keda.sh/v1alpha1", "scaledobjects", custom=True)
POD = ChildKind("Pod", "v1", "pods")
JOB = ChildKind("Job", "batch/v1", "jobs")
#: The model cache's claim: applied, never pruned (kept when the resource goes, unless owned).
PVC = ChildKind("PersistentVolumeClaim", "v1", "persistentvolumeclaims")

# spec.routing (builders/routing.py): the Endpoint Picker's identity and rights, the pool, the route.
SERVICE_ACCOUNT = ChildKind("ServiceAccount", "v1", "serviceaccounts")
ROLE = ChildKind("Role", "rbac.authorization.k8s.io/v1", "roles")
ROLE_BINDING = ChildKind("RoleBinding", "rbac.authorization.k8s.io/v1", "rolebindings")
INFERENCE_POOL = ChildKind("InferencePool", "inference.networking.k8s.io/v1", "inferencepools", custom=True)
HTTP_ROUTE = ChildKind("HTTPRoute", "gateway.networking.k8s.io/v1", "httproutes", custom=True)

CHILD_KINDS: Final = (CONFIGMAP, SERVICE, DEPLOYMENT, PDB, LEADERWORKERSET, HPA, SCALED_OBJECT, JOB,
                      SERVICE_ACCOUNT, ROLE, ROLE_BINDING, INFERENCE_POOL, HTTP_ROUTE)
KINDS_BY_NAME: Final = {kind.kind: kind for kind in (*CHILD_KINDS, POD, PVC)}
#: Watched (by the reflectors, filtered by the resource label): every child kind and the pods.
WATCHED_KINDS: Final = (*CHILD_KINDS, POD)
#: HTTP statuses with which the API server refuses an object as sent (not a transient failure).
REFUSED_STATUSES: Final = frozenset({400, 403, 409, 422})

#: Every (apiGroup, resource) -> verbs this module calls. :meth:`Kube._call` refuses any other
#: combination, and ``ascend_operator.rbac`` must grant exactly these (a unit test compares).
#: ``create`` beside ``patch``: server-side apply of a missing object is authorized as create.
API_VERBS: Final[Mapping[tuple[str, str], frozenset[str]]] = {
    # watch: ascend_operator.reflector (label-filtered list-then-watch of every child kind and the pods).
    **{(kind.group, kind.plural): frozenset({"get", "list", "watch", "create", "patch", "delete"})
       for kind in CHILD_KINDS},
    ("", "persistentvolumeclaims"): frozenset({"get", "create", "patch"}),
    ("", "pods"): frozenset({"list", "watch"}),
    ("", "pods/proxy"): frozenset({"get"}),
    (GROUP, f"{PLURAL}/status"): frozenset({"patch"}),
    # Not a call: the API server checks it when a child's owner reference sets blockOwnerDeletion.
    (GROUP, f"{PLURAL}/finalizers"): frozenset({"update"}),
}

_HTTP_METHOD = {"get": "GET", "list": "GET", "patch": "PATCH", "delete": "DELETE"}


def kind_path(kind: ChildKind, namespace: str | None, name: str | None = None) -> str:
    """The API path of ``kind``'s collection in ``namespace`` (None: every namespace), or of ``name``."""

    prefix = "/api/v1" if not kind.group else f"/apis/{kind.api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{prefix}{scope}/{kind.plural}" + (f"/{name}" if name else "")


def _timeout(value: float | tuple[float, float] | None) -> urllib3.Timeout | None:
    if value is None:
        return None
    if isinstance(value, tuple):
        return urllib3.Timeout(connect=value[0], read=value[1])
    return urllib3.Timeout(total=value)


class Outcome(str, enum.Enum):
    """What :meth:`Kube.ensure` did with one child."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    REPAIRED = "repaired"  # fields the operator sets had drifted and were set back
    REPLACED = "replaced"  # deleted and created again: a field the server keeps immutable changed
    CONFLICT = "conflict"  # a same-named object the resource does not own


@dataclass(frozen=True)
class EnsureResult:
    outcome: Outcome
    kind: str
    name: str
    detail: str = ""
    #: The object as the server has it after this call (the apply response, or the live object).
    live: Mapping[str, Any] | None = None


class NamespaceTerminating(Exception):
    """The namespace is being deleted: nothing can be created in it any more (not an error)."""


def _namespace_terminating(error: ApiException) -> bool:
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return False
    causes = ((body or {}).get("details") or {}).get("causes") or [] if isinstance(body, dict) else []
    return any(cause.get("reason") == "NamespaceTerminating" for cause in causes)


class ChildRefused(Exception):
    """The API server refused a child as built; ``message`` is the server's (it names the field)."""

    def __init__(self, kind: str, name: str, status: int, message: str) -> None:
        super().__init__(f"the API server refused {kind} {name} (HTTP {status}): {message}")
        self.kind, self.name, self.status, self.message = kind, name, status, message
        #: The live object still serves as it is (a kept claim whose change was refused), so the
        #: children after it are made all the same.
        self.live_serves = False


def server_message(error: ApiException) -> str:
    """The ``message`` of a Kubernetes ``Status`` body, else the HTTP reason."""

    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        body = None
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(error.reason or error.status)


def connect(api_server: str | None = None, *, ca_file: str | None = None, insecure: bool = False,
            pool_size: int | None = None) -> kubernetes.client.ApiClient:
    """One API client: ``api_server`` (tests, local development), its certificate verified against
    ``ca_file`` (else the system CAs) unless ``insecure``; otherwise the in-cluster service
    account, else the kubeconfig (``KUBECONFIG`` or ``~/.kube/config``). ``pool_size`` sizes the
    connection pool (one per thread that calls the client)."""

    configuration = kubernetes.client.Configuration()
    if pool_size is not None:
        configuration.connection_pool_maxsize = pool_size
    if api_server:
        configuration.host = api_server.rstrip("/")
        configuration.verify_ssl = not insecure
        if ca_file:
            configuration.ssl_ca_cert = ca_file
    else:
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        except ConfigException:
            kubernetes.config.load_kube_config(client_configuration=configuration)
    return kubernetes.client.ApiClient(configuration)


def owned_by(obj: Mapping[str, Any], owner_uid: str) -> bool:
    """Whether ``obj`` has an owner reference to ``owner_uid``."""

    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner_uid for ref in refs)


def allocates_cluster_ip(child: Mapping[str, Any]) -> bool:
    """Whether creating ``child`` makes the API server allocate a ClusterIP: a Service that is
    neither headless (``clusterIP: None``) nor an ExternalName."""

    spec = child.get("spec") or {}
    return (child.get("kind") == "Service" and spec.get("type") != "ExternalName"
            and spec.get("clusterIP") != "None")


def spec_hash(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(SPEC_HASH_ANNOTATION)


class Kube:
    """The API calls of the reconcile, each run in a worker thread."""

    def __init__(self, api_client: kubernetes.client.ApiClient, *, field_manager: str,
                 workers: int = 8, cluster_ip_creates: int = 4) -> None:
        self._client = api_client
        # The API server allocates ClusterIPs one at a time (one lock for the cluster): more
        # creates in flight only wait there, holding a request seat each, until they time out
        # (504 after 60 s when thousands are made at once; bench/README.md, issue 24).
        self._cluster_ip_creates = asyncio.Semaphore(cluster_ip_creates)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ascend-llm-api")
        self._field_manager = field_manager
        # Built now, at start-up: the first use of an API class costs about a second of imports.
        self._apis: dict[str, Any] = {"ApisApi": kubernetes.client.ApisApi(api_client)}
        #: (monotonic time of the read, the served group/versions) of the last discovery.
        self._served: tuple[float, frozenset[str]] | None = None
        self._discovery_lock = asyncio.Lock()

    @property
    def api_client(self) -> kubernetes.client.ApiClient:
        return self._client

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    async def _in_thread(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(method, *args, **kwargs))

    # ------------------------------------------------------------------ the choke point

    def _api(self, name: str) -> Any:
        return self._apis[name]

    def _request(self, method: str, path: str, query: Sequence[tuple[str, str]] = (), *,
                 body: str | None = None, content_type: str | None = None,
                 timeout: float | tuple[float, float] | None = None, stream: bool = False) -> Any:
        """One HTTP request through the client's connection pool and credentials (blocking: run it
        in a worker thread). The typed API methods validate every argument with pydantic, which at
        1,000 resources cost a sixth of the operator's CPU (bench/README.md); the paths here are
        built from a :class:`ChildKind` instead. Returns the parsed JSON body (``None`` if empty),
        or the open response when ``stream``; an error status raises :class:`ApiException`."""

        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        method, url, headers, _, _ = self._client.param_serialize(
            method=method, resource_path=path, query_params=list(query), header_params=headers,
            auth_settings=["BearerToken"])
        response = self._client.rest_client.pool_manager.request(
            method, url, headers=headers, body=body.encode("utf-8") if body is not None else None,
            preload_content=not stream,
            timeout=_timeout(timeout), retries=False)
        if response.status >= 400:
            data = response.data if not stream else response.read()
            response.release_conn()
            raise ApiException(status=response.status, reason=response.reason,
                               body=data.decode("utf-8", "replace") if isinstance(data, bytes) else data)
        if stream:
            return response
        return json.loads(response.data) if response.data else None

    async def _call(self, kind: ChildKind, verb: str, namespace: str, name: str | None = None, *,
                    resource: str | None = None, query: Sequence[tuple[str, str]] = (),
                    body: Mapping[str, Any] | None = None, timeout: float | None = None) -> Any:
        """Call ``verb`` on ``kind`` (``name`` None: the collection) with the JSON ``body`` if any;
        returns the decoded JSON body (raw, camelCase). ``resource`` ``pods/proxy``: ``name`` is
        ``<pod>:<port>/<path>``."""

        plural = resource or kind.plural
        if verb not in API_VERBS.get((kind.group, plural), frozenset()):
            raise PermissionError(f"{verb} on {plural} is not declared in k8s.API_VERBS (nor granted by rbac.py)")
        if resource == "pods/proxy":
            pod, _, path = (name or "").partition("/")
            url = f"{kind_path(kind, namespace)}/{pod}/proxy/{path}"
        else:
            url = kind_path(kind, namespace, name)
        return await self._in_thread(self._request, _HTTP_METHOD[verb], url, query, timeout=timeout,
                                     **({"body": json.dumps(body), "content_type": "application/json"}
                                        if body is not None else {}))

    # ------------------------------------------------------------------ children

    async def read(self, kind: ChildKind, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return await self._call(kind, "get", namespace, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    async def list(self, kind: ChildKind, namespace: str, selector: str) -> list[dict[str, Any]]:
        """Objects of ``kind`` matching ``selector``; none when the cluster does not serve the kind
        (a CRD not installed: the API server answers 404 for the whole collection)."""

        try:
            body = await self._call(kind, "list", namespace, query=[("labelSelector", selector)])
        except ApiException as error:
            if error.status == 404 and kind.custom:
                return []
            raise
        items = body.get("items") or []
        for item in items:  # list items carry no kind of their own
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items

    def _collection(self, kind: ChildKind, verb: str, namespace: str | None) -> str:
        """The path that lists (or watches) ``kind`` in ``namespace`` (None: every namespace)."""

        if verb not in API_VERBS.get((kind.group, kind.plural), frozenset()):
            raise PermissionError(f"{verb} on {kind.plural} is not declared in k8s.API_VERBS")
        return kind_path(kind, namespace)

    async def list_pages(self, kind: ChildKind, namespace: str | None, selector: str,
                         page: int = 250) -> AsyncIterator[ListPage]:
        """Objects of ``kind`` matching ``selector`` in ``namespace`` (None: every namespace), a page
        at a time (at most ``page`` objects parsed at once); nothing when the kind is not served."""

        path = self._collection(kind, "list", namespace)
        token: str | None = None
        while True:
            query = [("labelSelector", selector), ("limit", str(page)), *([("continue", token)] if token else [])]
            try:
                body = await self._in_thread(self._request, "GET", path, query) or {}
            except ApiException as error:
                if error.status == 404 and kind.custom:
                    return
                raise
            items = body.get("items") or []
            for item in items:  # list items carry no kind of their own
                item.setdefault("apiVersion", kind.api_version)
                item.setdefault("kind", kind.kind)
            meta = body.get("metadata") or {}
            yield ListPage(items, meta.get("resourceVersion") or None)
            token = meta.get("continue")
            if not token:
                return

    def watch_request(self, kind: ChildKind, namespace: str | None, selector: str, version: str,
                      server_timeout_s: int, request_timeout: tuple[float, float]) -> Any:
        """Open a watch of ``kind`` from ``version`` with bookmarks (blocking: the reflector calls it
        in its own thread); the streaming HTTP response, or :class:`ApiException` for an error status."""

        path = self._collection(kind, "watch", namespace)
        query = [("labelSelector", selector), ("watch", "true"), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(server_timeout_s)), *([("resourceVersion", version)] if version else [])]
        return self._request("GET", path, query, timeout=request_timeout, stream=True)

    async def apply(self, kind: ChildKind, child: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Server-side apply (``dry_run``: validated and admitted, not stored); a refusal of the
        object as sent raises :class:`ChildRefused`.

        The body is sent as JSON text with characters unescaped: the typed client would send
        ``\\ud83d\\ude00`` surrogate escapes for a character beyond U+FFFF, which the API
        server's YAML decoder (apply bodies are YAML) refuses with HTTP 400.
        """

        meta = child["metadata"]
        if "patch" not in API_VERBS.get((kind.group, kind.plural), frozenset()):
            raise PermissionError(f"patch on {kind.plural} is not declared in k8s.API_VERBS")
        path = kind_path(kind, meta["namespace"], meta["name"])
        query = [("fieldManager", self._field_manager), ("force", "true"), *([("dryRun", "All")] if dry_run else [])]
        try:
            return await self._in_thread(self._request, "PATCH", path, query, content_type=APPLY_CONTENT_TYPE,
                                         body=json.dumps(dict(child), ensure_ascii=False))
        except ApiException as error:
            if error.status == 403 and _namespace_terminating(error):
                raise NamespaceTerminating(meta["namespace"]) from error
            if error.status in REFUSED_STATUSES:
                raise ChildRefused(kind.kind, meta["name"], error.status, server_message(error)) from error
            raise

    async def ensure(self, child: Mapping[str, Any], owner_uid: str,
                     known: Mapping[str, Any] | None = None, *,
                     ours: Callable[[Mapping[str, Any]], bool] | None = None) -> EnsureResult:
        """Make ``child`` (a complete manifest with owner reference and spec-hash) exist as built.

        ``known`` is the live object as the watches show it; without it the object is read (it
        may exist unlabelled, or the watch may lag). Applies when it is missing, its spec-hash
        differs, or a field the operator sets drifted (:func:`ascend_operator.drift.find_drift`).
        ``ours`` says whether an existing object is the resource's (default: it carries the
        resource's owner reference; the model cache's kept claim carries only its label).
        """

        kind = KINDS_BY_NAME[child["kind"]]
        meta = child["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        live = known if known is not None else await self.read(kind, namespace, name)
        if live is not None and not (ours(live) if ours is not None else owned_by(live, owner_uid)):
            return EnsureResult(Outcome.CONFLICT, kind.kind, name,
                                f"{kind.kind} {namespace}/{name} exists and is not owned by this resource; "
                                "rename or delete it")
        drift: list[str] = []
        if live is not None and spec_hash(live) == spec_hash(child):
            drift = find_drift(child, live)
            if not drift:
                return EnsureResult(Outcome.UNCHANGED, kind.kind, name, live=live)
        immutable = immutable_changes(child, live) if live is not None else []
        if immutable:  # an apply would be refused (422): replace the object
            await self.delete(kind, namespace, name, uid=live["metadata"].get("uid"))
            applied = await self._create(kind, child)
            return EnsureResult(Outcome.REPLACED, kind.kind, name, "changed: " + ", ".join(immutable), live=applied)
        applied = await (self._create(kind, child) if live is None else self.apply(kind, child))
        if live is None:
            return EnsureResult(Outcome.CREATED, kind.kind, name, live=applied)
        if drift:
            return EnsureResult(Outcome.REPAIRED, kind.kind, name, "drifted: " + ", ".join(drift), live=applied)
        return EnsureResult(Outcome.UPDATED, kind.kind, name, live=applied)

    async def _create(self, kind: ChildKind, child: Mapping[str, Any]) -> dict[str, Any]:
        """Apply a child that does not exist; a Service the API server gives a ClusterIP waits
        for one of the ``cluster_ip_creates`` slots first."""

        if not allocates_cluster_ip(child):
            return await self.apply(kind, child)
        async with self._cluster_ip_creates:
            return await self.apply(kind, child)

    async def delete(self, kind: ChildKind, namespace: str, name: str, uid: str | None = None) -> bool:
        """Delete one child (only the object with ``uid`` when given: a precondition, so a
        same-named object made since is left alone); ``False`` when it was already gone."""

        body = {"preconditions": {"uid": uid}} if uid else None
        try:
            await self._call(kind, "delete", namespace, name, body=body,
                             query=[("propagationPolicy", "Background")])
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    async def prune(self, kind: ChildKind, namespace: str, items: Sequence[Mapping[str, Any]], owner_uid: str,
                    keep: set[str]) -> list[str]:
        """Of ``items`` (objects of ``kind``), delete those owned by ``owner_uid`` whose names are
        not in ``keep``."""

        deleted = []
        for item in items:
            name = item["metadata"]["name"]
            if name not in keep and owned_by(item, owner_uid) and await self.delete(kind, namespace, name):
                deleted.append(name)
        return deleted

    # ------------------------------------------------------------------ discovery

    async def served(self, max_age_s: float) -> frozenset[str]:
        """The group/versions the cluster serves (``"keda.sh/v1alpha1"``, ``"v1"``, ...), read from
        discovery at most once per ``max_age_s`` seconds.

        A failed refresh keeps the last answer (an add-on's state is no reason to stop
        reconciling); with no earlier answer the error propagates and the reconcile is retried.
        """

        async with self._discovery_lock:  # concurrent reconciles share one refresh
            now = time.monotonic()
            if self._served is not None and now - self._served[0] < max_age_s:
                return self._served[1]
            try:
                found = await self._discover()
            except (ApiException, urllib3.exceptions.HTTPError) as error:
                if self._served is None:
                    raise
                logger.warning("API discovery failed (%s); using the answer from %.0fs ago",
                               error, now - self._served[0])
                return self._served[1]
            self._served = (now, found)
            return found

    async def _discover(self) -> frozenset[str]:
        response = await self._in_thread(self._api("ApisApi").get_api_versions, _preload_content=False)
        body = json.loads(response.data) if response.data else {}
        group_versions = {
            version["groupVersion"]
            for group in body.get("groups") or []
            for version in group.get("versions") or []
            if version.get("groupVersion")
        }
        return frozenset({"v1", *group_versions})  # the core group (/api) is always served

    # ------------------------------------------------------------------ the resource's status

    async def patch_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> dict[str, Any] | None:
        """Merge-patch ``status`` of the resource through its status subresource; the resource as
        the server has it afterwards, or ``None`` when it is gone."""

        resource = f"{PLURAL}/status"
        if "patch" not in API_VERBS[(GROUP, resource)]:
            raise PermissionError(f"patch on {resource} is not declared in k8s.API_VERBS")
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"
        try:
            return await self._in_thread(self._request, "PATCH", path, [("fieldManager", self._field_manager)],
                                         body=json.dumps({"status": dict(patch)}, ensure_ascii=False),
                                         content_type="application/merge-patch+json")
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    # ------------------------------------------------------------------ the pod proxy

    async def proxy_get(self, namespace: str, pod: str, port: int, path: str, *,
                        query: Sequence[tuple[str, str]] = (), timeout: float) -> Any:
        """``GET <path>?<query>`` on ``pod``'s ``port`` through the API server's pod proxy (for
        :class:`ascend_operator.podreads.PodReader`); the decoded JSON body. Errors raise."""
        return await self._call(POD, "get", namespace, f"{pod}:{port}/{path}", resource="pods/proxy",
                                query=query, timeout=timeout)
