"""A realistic Kubernetes API emulator for the operator tests, built on kmock's scaffold.

kmock's stock ``KubernetesEmulator`` is too thin for kopf plus the official client (see
/work/shared/reference/kubernetes-facts.md). This subclass of ``kmock.KubernetesScaffold`` keeps
kmock's discovery endpoints, error rendering and request recording, and serves the object API
itself with the behaviour a real API server has and the operator depends on:

- server-set metadata on create: uid, resourceVersion, generation, creationTimestamp, namespace,
  apiVersion/kind; ``generateName``; 409 AlreadyExists;
- one global resourceVersion; list returns it; watch from a resourceVersion replays only later
  events (no resourceVersion: synthetic ADDED for what exists); watch ``timeoutSeconds``;
- PATCH as merge-patch, JSON patch (with ``test`` ops -> 422), strategic merge (approximated as a
  merge patch: lists replace), server-side apply (``fieldManager``; fields the manager stops applying
  are removed; creates a missing object); a ``metadata.resourceVersion`` in a body is checked (409);
- PUT (replace, resourceVersion-checked);
- status subresource: writes to ``/status`` change only status, main writes never change it;
  generation bumps only when something outside metadata and status changes; a write that changes
  nothing bumps nothing and sends no watch event;
- ``labelSelector`` (equality and set-based) and ``fieldSelector`` on metadata.name/namespace;
- ``/api/v1/namespaces`` (list, watch, get); objects cannot be created in a missing namespace;
- finalizers and deletionTimestamp; owner-reference garbage collection (background cascade);
- the pod proxy ``GET /api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy/{path}``, answered from
  ``pod_states`` (what a test sets per pod), 503 when a pod serves nothing (as a real proxy
  answers for a refused connection).

- add-on APIs served or withheld per test (:meth:`RealisticEmulator.serve` / ``withhold``):
  LeaderWorkerSet, KEDA, a custom metrics API. A withheld group is absent from discovery
  (``/apis``) and its paths answer 404, as on a cluster without the CRD or APIService.

What it still does not do: schema validation and pruning (tests that need those validate the
manifests against OpenAPI schemas elsewhere), admission, RBAC, the controllers (no ReplicaSets or
pods appear by themselves: tests create pods), strategic-merge list semantics, managedFields.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import re
import traceback
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import rendering  # the Request type kmock records; not re-exported by name

ResourceKey = tuple[str, str, str]  # (group, version, plural)
ObjectKey = tuple[ResourceKey, str | None, str]  # (resource, namespace, name)

#: How often an idle watch stream checks whether its client is still there.
WATCH_POLL_S = 0.1

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: Resources whose objects carry a ``status`` written only through ``/status``.
STATUS_SUBRESOURCE = "status"


class EmulatorError(Exception):
    """An API error answered as a Kubernetes ``Status`` object."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class ParsedPath:
    group: str
    version: str
    plural: str | None
    namespace: str | None
    name: str | None
    subresource: str | None


def parse_api_path(path: str) -> ParsedPath | None:
    """Split an API path; unlike kmock's parser it knows ``/api/v1/namespaces[/{name}]``."""

    parts = [part for part in path.strip("/").split("/") if part]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if rest and rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else None
    name = rest[1] if len(rest) >= 2 else None
    subresource = "/".join(rest[2:]) or None
    return ParsedPath(group, version, plural, namespace, name, subresource)


def _now() -> str:
    return datetime.datetime.now(tz=datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""

    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 JSON patch: add, remove, replace, test (what kopf and clients send)."""

    doc = copy.deepcopy(target)
    for op in ops:
        parts = _pointer(op["path"])
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1] if parts else ""
        kind = op["op"]
        if kind == "test":
            current: Any = doc
            for part in parts:
                current = (current[int(part)] if isinstance(current, list) else current.get(part))
                if current is None:
                    break
            if current != op.get("value"):
                raise EmulatorError(422, "Invalid", f"test operation failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, op["value"])
                else:
                    parent[index] = op["value"]
            else:
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise EmulatorError(422, "Invalid", f"remove of a missing path {op['path']}")
        else:
            raise EmulatorError(415, "UnsupportedMediaType", f"JSON patch op {kind!r} is not emulated")
    return doc


def _prune_unapplied(obj: Any, previous: Any, current: Any) -> Any:
    """Remove from ``obj`` what a manager applied before (``previous``) but no longer applies."""

    if not isinstance(obj, dict) or not isinstance(previous, dict):
        return obj
    result = dict(obj)
    for key, old_value in previous.items():
        if not isinstance(current, dict) or key not in current:
            result.pop(key, None)
        elif isinstance(old_value, dict) and key in result:
            result[key] = _prune_unapplied(result[key], old_value, current[key])
    return result


def parse_label_selector(selector: str) -> list[Callable[[dict[str, str]], bool]]:
    """Parse a label selector (``a=b,c!=d,e in (f,g),h notin (i),j,!k``) into predicates."""

    terms: list[Callable[[dict[str, str]], bool]] = []
    for raw in re.findall(r"(?:[^,(]|\([^)]*\))+", selector):
        term = raw.strip()
        if not term:
            continue
        if match := re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", term):
            key, operator, values = match[1], match[2], {v.strip() for v in match[3].split(",")}
            if operator == "in":
                terms.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                terms.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif match := re.fullmatch(r"([\w./-]+)\s*!=\s*(\S*)", term):
            terms.append(lambda labels, k=match[1], v=match[2]: labels.get(k) != v)
        elif match := re.fullmatch(r"([\w./-]+)\s*==?\s*(\S*)", term):
            terms.append(lambda labels, k=match[1], v=match[2]: labels.get(k) == v)
        elif match := re.fullmatch(r"!([\w./-]+)", term):
            terms.append(lambda labels, k=match[1]: k not in labels)
        elif re.fullmatch(r"[\w./-]+", term):
            terms.append(lambda labels, k=term: k in labels)
        else:
            raise EmulatorError(400, "BadRequest", f"unable to parse requirement: {term!r}")
    return terms


#: Add-on APIs a cluster may or may not have: ``api_version/plural`` -> how discovery describes it.
ADDONS: dict[str, tuple[str, kmock.ResourceInfo]] = {
    "leaderworkerset": ("leaderworkerset.x-k8s.io/v1/leaderworkersets", kmock.ResourceInfo(
        kind="LeaderWorkerSet", singular="leaderworkerset", namespaced=True, shortnames={"lws"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"}, subresources={"status", "scale"})),
    "keda": ("keda.sh/v1alpha1/scaledobjects", kmock.ResourceInfo(
        kind="ScaledObject", singular="scaledobject", namespaced=True, shortnames={"so"},
        verbs={"get", "list", "watch", "create", "update", "patch", "delete"}, subresources={"status"})),
    # prometheus-adapter's aggregated API; what matters is that the group/version is listed.
    "custom-metrics": ("custom.metrics.k8s.io/v1beta2/pods", kmock.ResourceInfo(
        kind="MetricValueList", singular="", namespaced=True, verbs={"get"})),
}


@dataclass
class PodEndpoint:
    """What the pod proxy answers for one pod: a JSON document, or an HTTP error status."""

    body: Any = None
    status: int = 200


@dataclass
class _Watcher:
    resource: ResourceKey
    namespace: str | None
    matches: Callable[[dict[str, Any]], bool]
    queue: asyncio.Queue[dict[str, Any]] = field(default_factory=asyncio.Queue)


@attrs.define(kw_only=True)
class RealisticEmulator(kmock.KubernetesScaffold):
    """kmock's Kubernetes scaffold plus an in-memory object store that behaves like a server."""

    store: dict[ObjectKey, dict[str, Any]] = attrs.field(factory=dict, init=False)
    history: list[tuple[int, ResourceKey, dict[str, Any]]] = attrs.field(factory=list, init=False)
    #: The last configuration each field manager applied to each object (server-side apply).
    applied: dict[tuple[ObjectKey, str], Any] = attrs.field(factory=dict, init=False)
    pod_endpoints: dict[tuple[str, str, int, str], PodEndpoint] = attrs.field(factory=dict, init=False)
    #: Tracebacks of requests the emulator could not serve (a test fixture asserts it stays empty).
    failures: list[str] = attrs.field(factory=list, init=False)
    _watchers: list[_Watcher] = attrs.field(factory=list, init=False)
    _rv: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.resources.load_bundled()

    # ----------------------------------------------------------------- test-facing helpers

    def serve(self, *addons: str) -> None:
        """Serve the named add-on APIs (keys of :data:`ADDONS`), as if their CRDs were installed."""

        for addon in addons:
            key, info = ADDONS[addon]
            self.resources[key] = info

    def withhold(self, *addons: str) -> None:
        """Stop serving the named add-on APIs (their objects, if any, stay stored but unreachable)."""

        for addon in addons:
            key, _ = ADDONS[addon]
            if key in self.resources:
                del self.resources[key]

    @staticmethod
    def resource_key(api_version: str, plural: str) -> ResourceKey:
        group, _, version = api_version.rpartition("/")
        return (group, version, plural)

    def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        obj = self.store.get((self.resource_key(api_version, plural), namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(self, api_version: str, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        key = self.resource_key(api_version, plural)
        return [copy.deepcopy(obj) for (res, ns, _), obj in sorted(self.store.items(), key=lambda i: str(i[0]))
                if res == key and (namespace is None or ns == namespace)]

    def put_object(self, api_version: str, plural: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace an object as a controller would (status included), with a watch event."""

        key = self.resource_key(api_version, plural)
        meta = obj.setdefault("metadata", {})
        object_key = (key, meta.get("namespace"), meta["name"])
        existing = self.store.get(object_key)
        if existing is None:
            return self._create(key, meta.get("namespace"), obj, keep_status=True)
        merged = copy.deepcopy(obj)
        merged["metadata"] = {**existing["metadata"], **meta}
        return self._commit(object_key, existing, merged)

    def set_pod_state(self, namespace: str, pod: str, body: Any, *, port: int = 8080,
                      path: str = "state", status: int = 200) -> None:
        self.pod_endpoints[(namespace, pod, port, path)] = PodEndpoint(body=body, status=status)

    def writes(self, resource: str | None = None) -> list[rendering.Request]:
        """Recorded write requests (POST/PUT/PATCH/DELETE), optionally of one plural (``pods``,
        ``ascendllmdeployments/status``)."""

        result = []
        for request in self._requests:
            if request.method.value not in WRITE_METHODS:
                continue
            parsed = parse_api_path(request.url.path)
            if resource is not None:
                if parsed is None:
                    continue
                plural = parsed.plural if not parsed.subresource else f"{parsed.plural}/{parsed.subresource}"
                if plural != resource:
                    continue
            result.append(request)
        return result

    @property
    def request_log(self) -> list[rendering.Request]:
        return list(self._requests)

    # ----------------------------------------------------------------- the HTTP entry point

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        await raw_request.read()
        parsed = parse_api_path(raw_request.path)
        body = await raw_request.read()
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = None
        request = rendering.Request(
            id=len(self._requests), raw_request=raw_request, url=raw_request.url,
            method=raw_request.method, params=dict(raw_request.query), headers=dict(raw_request.headers),
            body=body, text=body.decode(errors="replace"), data=data,
            resource=(kmock.resource(group=parsed.group, version=parsed.version, plural=parsed.plural)
                      if parsed else None),
            namespace=parsed.namespace if parsed else None, name=parsed.name if parsed else None,
            subresource=parsed.subresource if parsed else None,
        )
        self._requests.append(request)
        try:
            if parsed is not None and parsed.plural is not None:
                return await self._serve(request, parsed, raw_request)
            if raw_request.path == "/apis/":
                # The official client's ApisApi asks for "/apis/"; kmock's route is "/apis" only.
                return aiohttp.web.json_response(await self._serve_apis(request))
            try:
                return await self._handle(request)  # discovery, /version: kmock's scaffold
            except kmock.KubernetesError as error:
                return await self._render_error(error)
        except EmulatorError as error:
            return self._status_response(error.code, error.reason, error.message)
        except (KeyError, ValueError, TypeError, AttributeError, AssertionError, NotImplementedError):
            # An emulator bug or an unexpected request: the test must see it, not just the client.
            self.failures.append(f"{raw_request.method} {raw_request.path_qs}\n{traceback.format_exc()}")
            return self._status_response(500, "InternalError", traceback.format_exc())

    @staticmethod
    def _status_response(code: int, reason: str, message: str) -> aiohttp.web.Response:
        return aiohttp.web.json_response({
            "apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
            "code": code, "reason": reason, "message": message,
        }, status=code)

    def _info(self, key: ResourceKey) -> kmock.ResourceInfo:
        for resource, info in self.resources._resources.items():
            if (resource.group, resource.version, resource.plural) == key:
                return info
        raise EmulatorError(404, "NotFound", f"the server could not find the requested resource {key}")

    async def _serve(self, request: rendering.Request, parsed: ParsedPath,
                     raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        assert parsed.plural is not None
        key: ResourceKey = (parsed.group, parsed.version, parsed.plural)
        self._info(key)
        method = raw.method
        params = dict(raw.query)
        if parsed.subresource and parsed.subresource.startswith("proxy") or (
                parsed.plural == "pods" and parsed.name and ":" in parsed.name):
            return self._proxy(parsed)
        if method == "GET" and params.get("watch") in ("true", "1"):
            return await self._watch(key, parsed, params, raw)
        if method == "GET" and parsed.name is None:
            return aiohttp.web.json_response(self._list(key, parsed.namespace, params))
        if method == "POST" and parsed.name is None:
            if not isinstance(request.data, dict):
                raise EmulatorError(400, "BadRequest", "the body must be a JSON object")
            return aiohttp.web.json_response(self._create(key, parsed.namespace, request.data), status=201)
        if parsed.name is None:
            raise EmulatorError(405, "MethodNotAllowed", f"{method} on a collection is not emulated")
        object_key: ObjectKey = (key, parsed.namespace, parsed.name)
        if method == "GET":
            return aiohttp.web.json_response(self._existing(object_key))
        if method == "DELETE":
            return aiohttp.web.json_response(self._delete(object_key, params))
        if method == "PUT":
            return aiohttp.web.json_response(self._replace(object_key, parsed.subresource, request.data))
        if method == "PATCH":
            content_type = raw.headers.get("Content-Type", "").split(";")[0].strip()
            return aiohttp.web.json_response(
                self._patch(object_key, parsed.subresource, content_type, request.data, params))
        raise EmulatorError(405, "MethodNotAllowed", f"{method} is not emulated")

    # ----------------------------------------------------------------- reads

    def _existing(self, object_key: ObjectKey) -> dict[str, Any]:
        obj = self.store.get(object_key)
        if obj is None:
            (_, _, plural), _, name = object_key
            raise EmulatorError(404, "NotFound", f'{plural} "{name}" not found')
        return obj

    def _selected(self, params: dict[str, str]) -> Callable[[dict[str, Any]], bool]:
        label_terms = parse_label_selector(params.get("labelSelector", ""))
        field_terms: list[tuple[str, str]] = []
        for term in filter(None, params.get("fieldSelector", "").split(",")):
            path, _, value = term.partition("=")
            if path not in ("metadata.name", "metadata.namespace"):
                raise EmulatorError(400, "BadRequest", f"field selector {path!r} is not emulated")
            field_terms.append((path.split(".")[1], value.lstrip("=")))

        def matches(obj: dict[str, Any]) -> bool:
            labels = obj.get("metadata", {}).get("labels") or {}
            meta = obj.get("metadata", {})
            return all(term(labels) for term in label_terms) and all(
                meta.get(key) == value for key, value in field_terms)

        return matches

    def _items(self, key: ResourceKey, namespace: str | None) -> Iterator[dict[str, Any]]:
        for (res, ns, _), obj in self.store.items():
            if res == key and (namespace is None or ns == namespace):
                yield obj

    def _list(self, key: ResourceKey, namespace: str | None, params: dict[str, str]) -> dict[str, Any]:
        matches = self._selected(params)
        info = self._info(key)
        return {
            "apiVersion": "/".join(filter(None, key[:2])),
            "kind": f"{info.kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": [copy.deepcopy(obj) for obj in self._items(key, namespace) if matches(obj)],
        }

    async def _watch(self, key: ResourceKey, parsed: ParsedPath, params: dict[str, str],
                     raw: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        watcher = _Watcher(resource=key, namespace=parsed.namespace, matches=self._selected(params))
        since = params.get("resourceVersion")
        if since in (None, "", "0"):
            backlog = [{"type": "ADDED", "object": copy.deepcopy(obj)}
                       for obj in self._items(key, parsed.namespace) if watcher.matches(obj)]
        else:
            backlog = [copy.deepcopy(event) for rv, res, event in self.history
                       if rv > int(since) and res == key and self._sees(watcher, event["object"])]
        self._watchers.append(watcher)
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        timeout = float(params["timeoutSeconds"]) if "timeoutSeconds" in params else None
        try:
            for event in backlog:
                await response.write(json.dumps(event).encode() + b"\n")
            async with asyncio.timeout(timeout):
                while raw.transport is not None and not raw.transport.is_closing():
                    try:
                        # Wake up now and then: aiohttp does not cancel a handler whose client left,
                        # and a stream nobody reads must end (kopf waits for leftover tasks on exit).
                        event = await asyncio.wait_for(watcher.queue.get(), WATCH_POLL_S)
                    except TimeoutError:
                        continue
                    await response.write(json.dumps(event).encode() + b"\n")
        except (TimeoutError, ConnectionResetError):
            pass  # the server-side timeout ends the stream; a client going away ends it too
        finally:
            self._watchers.remove(watcher)
        await response.write_eof()
        return response

    @staticmethod
    def _sees(watcher: _Watcher, obj: dict[str, Any]) -> bool:
        namespace = obj.get("metadata", {}).get("namespace")
        return (watcher.namespace is None or namespace == watcher.namespace) and watcher.matches(obj)

    def _notify(self, key: ResourceKey, kind: str, obj: dict[str, Any]) -> None:
        event = {"type": kind, "object": copy.deepcopy(obj)}
        self.history.append((self._rv, key, event))
        for watcher in self._watchers:
            if watcher.resource == key and self._sees(watcher, obj):
                watcher.queue.put_nowait(copy.deepcopy(event))

    def _proxy(self, parsed: ParsedPath) -> aiohttp.web.Response:
        pod, _, port = (parsed.name or "").partition(":")
        if self.store.get((("", "v1", "pods"), parsed.namespace, pod)) is None:
            raise EmulatorError(404, "NotFound", f'pods "{pod}" not found')
        path = (parsed.subresource or "proxy").removeprefix("proxy").strip("/")
        endpoint = self.pod_endpoints.get((parsed.namespace or "", pod, int(port or 80), path))
        if endpoint is None:
            # What a real API server answers when nothing listens on the pod's port.
            raise EmulatorError(503, "ServiceUnavailable", f"error trying to reach service: dial tcp {pod}:{port}")
        if endpoint.status != 200:
            return aiohttp.web.Response(status=endpoint.status, text=json.dumps(endpoint.body))
        return aiohttp.web.json_response(endpoint.body)

    # ----------------------------------------------------------------- writes

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _create(self, key: ResourceKey, namespace: str | None, body: dict[str, Any], *,
                keep_status: bool = False) -> dict[str, Any]:
        info = self._info(key)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise EmulatorError(422, "Invalid", "metadata.name or metadata.generateName is required")
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if info.namespaced:
            namespace = namespace or meta.get("namespace")
            if not namespace:
                raise EmulatorError(422, "Invalid", "metadata.namespace is required")
            if meta.get("namespace", namespace) != namespace:
                raise EmulatorError(400, "BadRequest", "the namespace of the object does not match the URL")
            meta["namespace"] = namespace
            if (("", "v1", "namespaces"), None, namespace) not in self.store:
                raise EmulatorError(404, "NotFound", f'namespaces "{namespace}" not found')
        else:
            namespace = None
        object_key: ObjectKey = (key, namespace, meta["name"])
        if object_key in self.store:
            raise EmulatorError(409, "AlreadyExists", f'{key[2]} "{meta["name"]}" already exists')
        obj["apiVersion"] = "/".join(filter(None, key[:2]))
        obj["kind"] = info.kind
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1,
                    resourceVersion=self._next_rv())
        meta.pop("deletionTimestamp", None)
        if STATUS_SUBRESOURCE in info.subresources and not keep_status:
            obj.pop("status", None)  # the server ignores status on create where it is a subresource
        self.store[object_key] = obj
        self._notify(key, "ADDED", obj)
        return copy.deepcopy(obj)

    def _check_rv(self, existing: dict[str, Any], body: Any) -> None:
        wanted = (body or {}).get("metadata", {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted and wanted != existing["metadata"]["resourceVersion"]:
            raise EmulatorError(409, "Conflict", "the object has been modified; please apply your "
                                "changes to the latest version and try again")

    def _confine(self, key: ResourceKey, existing: dict[str, Any], new: dict[str, Any],
                 subresource: str | None) -> dict[str, Any]:
        """Keep what a write may not change: identity fields; status or everything-but-status."""

        info = self._info(key)
        if subresource == STATUS_SUBRESOURCE:
            result = copy.deepcopy(existing)
            if "status" in new:
                result["status"] = new["status"]
            else:
                result.pop("status", None)
            return result
        if subresource:
            raise EmulatorError(404, "NotFound", f"subresource {subresource!r} is not emulated")
        result = copy.deepcopy(new)
        if STATUS_SUBRESOURCE in info.subresources:
            if "status" in existing:
                result["status"] = copy.deepcopy(existing["status"])
            else:
                result.pop("status", None)
        for field_name in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace", "name"):
            if field_name in existing["metadata"]:
                result.setdefault("metadata", {})[field_name] = existing["metadata"][field_name]
        result["apiVersion"], result["kind"] = existing["apiVersion"], existing["kind"]
        return result

    def _commit(self, object_key: ObjectKey, existing: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        key = object_key[0]
        new.setdefault("metadata", {})["resourceVersion"] = existing["metadata"]["resourceVersion"]
        if new == existing:
            return copy.deepcopy(existing)  # a no-op write: no new version, no event
        outside = lambda obj: {k: v for k, v in obj.items() if k not in ("metadata", "status")}
        if outside(new) != outside(existing):
            new["metadata"]["generation"] = existing["metadata"].get("generation", 1) + 1
        new["metadata"]["resourceVersion"] = self._next_rv()
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(object_key, new)
        self.store[object_key] = new
        self._notify(key, "MODIFIED", new)
        return copy.deepcopy(new)

    def _replace(self, object_key: ObjectKey, subresource: str | None, body: Any) -> dict[str, Any]:
        existing = self._existing(object_key)
        if not isinstance(body, dict):
            raise EmulatorError(400, "BadRequest", "the body must be a JSON object")
        self._check_rv(existing, body)
        return self._commit(object_key, existing, self._confine(object_key[0], existing, body, subresource))

    def _patch(self, object_key: ObjectKey, subresource: str | None, content_type: str, body: Any,
               params: dict[str, str]) -> dict[str, Any]:
        if content_type == "application/apply-patch+yaml":
            return self._apply(object_key, subresource, body, params)
        existing = self._existing(object_key)
        if content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            if not isinstance(body, dict):
                raise EmulatorError(400, "BadRequest", "a merge patch must be a JSON object")
            self._check_rv(existing, body)
            new = merge_patch(existing, body)
        elif content_type == "application/json-patch+json":
            if not isinstance(body, list):
                raise EmulatorError(400, "BadRequest", "a JSON patch must be a list of operations")
            new = json_patch(existing, body)
        else:
            raise EmulatorError(415, "UnsupportedMediaType", f"unsupported patch type {content_type!r}")
        return self._commit(object_key, existing, self._confine(object_key[0], existing, new, subresource))

    def _apply(self, object_key: ObjectKey, subresource: str | None, body: Any,
               params: dict[str, str]) -> dict[str, Any]:
        manager = params.get("fieldManager")
        if not manager:
            raise EmulatorError(400, "BadRequest", "fieldManager is required for apply requests")
        if not isinstance(body, dict):
            raise EmulatorError(400, "BadRequest", "an apply patch must be an object")
        applied = copy.deepcopy(body)
        key, namespace, name = object_key
        existing = self.store.get(object_key)
        if existing is None:
            if subresource:
                raise EmulatorError(404, "NotFound", f'{key[2]} "{name}" not found')
            applied.setdefault("metadata", {})["name"] = name
            created = self._create(key, namespace, applied)
            self.applied[(object_key, manager)] = body
            return created
        previous = self.applied.get((object_key, manager), {})
        base = _prune_unapplied(existing, previous, applied)
        new = merge_patch(base, {k: v for k, v in applied.items() if k not in ("apiVersion", "kind")})
        self.applied[(object_key, manager)] = body
        return self._commit(object_key, existing, self._confine(key, existing, new, subresource))

    def _delete(self, object_key: ObjectKey, params: dict[str, str]) -> dict[str, Any]:
        existing = self._existing(object_key)
        if existing["metadata"].get("finalizers"):
            if existing["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(existing)
            new = copy.deepcopy(existing)
            new["metadata"]["deletionTimestamp"] = _now()
            new["metadata"]["resourceVersion"] = self._next_rv()
            self.store[object_key] = new
            self._notify(object_key[0], "MODIFIED", new)
            return copy.deepcopy(new)
        return self._remove(object_key, existing, orphan=params.get("propagationPolicy") == "Orphan")

    def _remove(self, object_key: ObjectKey, obj: dict[str, Any], *, orphan: bool = False) -> dict[str, Any]:
        self.store.pop(object_key, None)
        for (applied_key, manager) in [k for k in self.applied if k[0] == object_key]:
            del self.applied[(applied_key, manager)]
        self._notify(object_key[0], "DELETED", obj)
        if not orphan:
            self._collect_garbage(obj["metadata"]["uid"])
        return copy.deepcopy(obj)

    def _collect_garbage(self, owner_uid: str) -> None:
        """The garbage collector's background cascade: dependents of a deleted owner go too."""

        dependents = [key for key, obj in self.store.items()
                      if any(ref.get("uid") == owner_uid
                             for ref in obj.get("metadata", {}).get("ownerReferences") or [])]
        for key in dependents:
            if key in self.store:
                self._delete(key, {})

    # Hook for kmock's pytest plugin and tests that poke at objects by kmock's key notation.
    def dump(self) -> dict[str, Any]:
        grouped: dict[str, list[str]] = defaultdict(list)
        for (res, ns, name) in self.store:
            grouped["/".join(filter(None, res))].append(f"{ns}/{name}")
        return dict(grouped)
