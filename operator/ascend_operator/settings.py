"""Operator settings, read from the environment (prefix ``ASCEND_LLM_OPERATOR_``).

The Helm chart sets these as env on the operator's Deployment. Every number says what it is and
why it has its value. :func:`load_settings` turns a bad value into an error naming the variable.
Lists (``NAMESPACES``) accept a comma-separated string or a JSON list.
"""

from __future__ import annotations

import enum
import json
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any

from ascend_runtime.config import Chip
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ascend_operator.api import AutoscalerProvider

ENV_PREFIX = "ASCEND_LLM_OPERATOR_"


class HostMounts(str, enum.Enum):
    """Whether pods mount the Ascend driver from the node.

    ``none``: the cluster runs the Ascend Docker Runtime, which mounts driver and tools itself.
    ``driver``: it does not; pods hostPath-mount the driver, DCMI, npu-smi and the install info.
    """

    NONE = "none"
    DRIVER = "driver"


class StateRead(str, enum.Enum):
    """How the operator reads each runtime's ``GET /state``.

    ``podIP``: straight from the pod IP (needs no RBAC; the operator's pod must reach the pods'
    runtime port). ``proxy``: through the API server's pod proxy (needs ``pods/proxy get``; for an
    operator run outside the cluster). ``auto``: podIP when running in a pod, else proxy.
    """

    AUTO = "auto"
    POD_IP = "podIP"
    PROXY = "proxy"


#: A list-valued policy holding this entry allows any value.
ANY = "*"
#: What an allowed host path prefix must look like (the same shape spec.model.hostPath.path has).
_ABSOLUTE_NORMALISED = re.compile(r"^(/[^/\x00-\x1f]+)+$|^/$")


class SettingsError(ValueError):
    """Settings that cannot be used; the message names the environment variable."""


class OperatorSettings(BaseSettings):
    """Everything the operator's behaviour depends on besides the resources themselves."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    # --- What to watch -------------------------------------------------------------------
    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Namespaces to watch; empty watches the whole cluster."
    )

    # --- Images ----------------------------------------------------------------------------
    image_repository: str = Field("ghcr.io/ascend-llm/runtime", description="Runtime image repository.")
    image_tag: str = Field("0.1.0", description="Runtime (ascend-llm) version part of the image tag.")
    vllm_ascend_tag: str = Field("v0.23.0", description="vllm-ascend version part of the image tag.")
    cpu_image: str | None = Field(
        None, description="Image for platform CPU. Default: <repository>:<tag>-vllm-cpu."
    )
    image_pull_policy: str = Field("IfNotPresent", description="imagePullPolicy of engine containers.")

    # --- NPU resources and device wiring -------------------------------------------------------
    resource_name_910b: str = Field(
        "huawei.com/Ascend910", description="Extended resource of 910B (A2) NPUs."
    )
    resource_name_a3: str = Field("huawei.com/Ascend910", description="Extended resource of A3 NPUs.")
    resource_name_310p: str = Field("huawei.com/Ascend310P", description="Extended resource of 310P NPUs.")
    host_mounts: HostMounts = Field(HostMounts.NONE, description="Mount the Ascend driver from the node.")
    device_env_from_annotation: bool = Field(
        True, description="Set ASCEND_VISIBLE_DEVICES from the device plugin's pod annotation."
    )

    # --- Pod security (must match the runtime image's user) --------------------------------
    # 1000:1000 is the image's HwHiAiUser-compatible user; the driver files are group-readable.
    engine_run_as_user: int = Field(1000, ge=0, description="runAsUser of the engine container.")
    engine_run_as_group: int = Field(1000, ge=0, description="runAsGroup of the engine container.")
    engine_fs_group: int | None = Field(1000, ge=0, description="Pod fsGroup (writable cache volumes).")

    # --- Volumes ---------------------------------------------------------------------------
    # vLLM's shared-memory IPC between API server and engine core, and HCCL, use /dev/shm; the
    # container default of 64 MiB fails multi-process engines. 16 GiB counts against memory.
    shm_size: str = Field("16Gi", description="sizeLimit of the memory-backed /dev/shm.")
    model_cache_size: str | None = Field(
        None, description="sizeLimit of the hub download cache emptyDir; None = no limit."
    )

    # --- Model cache downloads (spec.model.cache) --------------------------------------------
    # Mirrors for users who cannot reach the hubs directly (for example https://hf-mirror.com).
    hf_endpoint: str | None = Field(None, description="Hugging Face endpoint (HF_ENDPOINT) of the fetch Jobs.")
    modelscope_domain: str | None = Field(
        None, description="ModelScope domain (MODELSCOPE_DOMAIN) of the fetch Jobs."
    )
    # The Job's own retries, with Kubernetes' pod backoff (10 s doubling to 6 min); permanent
    # failures (no access, no such repo) stop at once through the Job's podFailurePolicy.
    fetch_image: str = Field(
        "ghcr.io/ascend-llm/operator:0.1.0",
        description="Image of the fetch Jobs and init containers that write the model cache: the operator's "
        "own (the chart sets it to the operator image), never spec.image, so only code the administrator "
        "installed writes to a cache.",
    )
    fetch_backoff_limit: int = Field(4, ge=0, le=20, description="backoffLimit of a fetch Job.")
    fetch_deadline_s: int = Field(6 * 3600, ge=1, description="activeDeadlineSeconds of a fetch Job.")
    # After a fetch Job failed for good, a new one is made this long after the failure (the user
    # may have fixed the token Secret, which is no spec change).
    fetch_retry_interval_s: float = Field(600.0, gt=0, description="Seconds from a failed fetch Job to the next.")
    fetch_cpu: str = Field("1", description="CPU request of a fetch Job's pod.")
    fetch_memory: str = Field("2Gi", description="Memory request (and limit) of a fetch Job's pod.")

    # --- Probes and start-up budget ---------------------------------------------------------
    # 2 s: the probe asks the runtime for a flag it already holds (cheap), and the pod turns Ready
    # at the first tick after the engine is: at 10 s that tick cost up to 10 s of every start
    # (bench/README.md, node_ready: the probe period, not the engine, set the node's time).
    startup_period_s: int = Field(2, ge=1, description="startupProbe periodSeconds.")
    readiness_period_s: int = Field(
        5, ge=1, description="readinessProbe periodSeconds (5 s: quick failover)."
    )
    readiness_failure_threshold: int = Field(
        3, ge=1, description="Failed /ready checks before unready (15 s)."
    )
    liveness_period_s: int = Field(10, ge=1, description="livenessProbe periodSeconds.")
    # 3 x 10 s = 30 s of failed /live before a restart: the runtime's own leak/hang grace
    # periods (hangTimeoutSeconds) already delay /live failing, so the kubelet need not wait long
    # on top; three misses still ride out a runtime that answers one probe late.
    liveness_failure_threshold: int = Field(3, ge=1, description="Failed /live checks before a restart.")
    probe_timeout_s: int = Field(5, ge=1, description="timeoutSeconds of every probe.")
    # Start-up budget = fixed + load(size) + capture(policy) [+ again when fallback] + warmup.
    startup_base_s: int = Field(180, ge=0, description="Fixed start cost: preflight, imports, HCCL init.")
    # Local weights (PVC/hostPath) read at about 0.5 GiB/s on shared storage -> 2 s/GiB.
    load_s_per_gib_local: float = Field(2.0, ge=0, description="Seconds per GiB of weights from a volume.")
    # Hub downloads at about 100 MB/s -> 10 s/GiB, plus the load itself.
    load_s_per_gib_hub: float = Field(12.0, ge=0, description="Seconds per GiB of weights from a hub.")
    # Used when spec.model.sizeGiB is absent: a 32B model in bf16.
    default_model_size_gib: float = Field(64.0, gt=0, description="Assumed weight size when unknown.")
    # Measured captures are 20-40 s (vllm-ascend #4807, #2125); 300 s leaves room for big MoE.
    capture_s_full: int = Field(300, ge=0, description="Capture budget of FULL-type modes.")
    capture_s_piecewise: int = Field(240, ge=0, description="Capture budget of PIECEWISE.")
    # enable_static_kernel adds minutes to tens of minutes (ascend-vllm-facts.md section 1).
    static_kernel_s: int = Field(1800, ge=0, description="Extra start budget with static kernels.")

    # --- Shutdown --------------------------------------------------------------------------
    # 5 s lets kube-proxy / endpoints drop the pod before the engine stops taking requests.
    prestop_sleep_s: int = Field(5, ge=0, description="preStop sleep before SIGTERM.")
    termination_margin_s: int = Field(15, ge=0, description="Grace beyond preStop + drain for the exit.")

    # --- Multi-node replicas (LeaderWorkerSet) ------------------------------------------
    # DP/EP engines across nodes move activations through /dev/shm between the API server, the
    # engine cores and HCCL's host buffers; 16 GiB is tight for DeepSeek-class models. 64 GiB
    # is still under 5 % of an Atlas 800 A2/A3 node's 1.5 TiB and counts against pod memory.
    multinode_shm_size: str = Field("64Gi", description="sizeLimit of /dev/shm in multi-node pods.")
    # Cross-node HCCL init, worker join and the leader's wait for them come on top of the
    # single-node budget; 120 s per extra node covers slow rendezvous (vllm-ascend #2125 logs).
    startup_s_per_extra_node: int = Field(
        120, ge=0, description="Extra start-up budget per node beyond the first."
    )
    # The pod network interface: every CNI names the pod's primary interface eth0, and
    # vllm-ascend's own LWS example pins HCCL/GLOO/TP sockets to it.
    hccl_socket_ifname: str = Field(
        "eth0", description="HCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME / TP_SOCKET_IFNAME default."
    )
    # HCCL_BUFFSIZE (MB) per communicator; CANN's default is 200. vllm-ascend's multi-node
    # examples use 1024 for DeepSeek-class MoE (large all-to-all messages).
    hccl_buffer_size_mb: int = Field(1024, ge=1, le=65536, description="HCCL_BUFFSIZE default (MB).")
    # HCCL_CONNECT_TIMEOUT (s); CANN's default 120 s fails when one node loads weights minutes
    # later than the other. 1200 s covers a 600 GiB model read at 0.5 GiB/s; CANN allows <= 7200.
    hccl_connect_timeout_s: int = Field(
        1200, ge=120, le=7200, description="HCCL_CONNECT_TIMEOUT default (seconds)."
    )
    multinode_scheduler_name: str | None = Field(
        None,
        description=(
            "schedulerName of multi-node pods when spec.npu.schedulerName is unset (for example "
            "volcano, for gang scheduling); None: the cluster's default scheduler."
        ),
    )
    volcano_ring_controller: str | None = Field(
        None,
        description="Value of the pod label ring-controller.atlas (for example ascend-910b); None: no label.",
    )
    volcano_schedule_policy: str | None = Field(
        None,
        description="Value of the pod annotation huawei.com/schedule_policy (for example chip8); None: none.",
    )

    # --- Autoscaling -------------------------------------------------------------------------
    autoscaler_provider: AutoscalerProvider = Field(
        AutoscalerProvider.AUTO,
        description="auto (KEDA when installed, else HPA), hpa or keda; spec.autoscaling.provider wins.",
    )
    keda_prometheus_address: str = Field(
        "http://prometheus-operated.monitoring.svc:9090",
        description="Prometheus URL KEDA's prometheus trigger queries (serverAddress).",
    )
    # The label the chart's ServiceMonitor copies from the Service (targetLabels) onto every
    # series, holding the resource's name; KEDA queries filter on it and on namespace.
    prometheus_instance_label: str = Field(
        "app_kubernetes_io_instance", description="Series label holding the resource name."
    )
    prometheus_role_label: str = Field(
        "llm_ascend_dev_pd_role",
        description="Series label holding a pod's disaggregation role (the chart's ServiceMonitor copies it).",
    )
    # KEDA polls Prometheus every 15 s: queue length moves in seconds, and a replica takes
    # minutes to start, so polling faster buys nothing.
    keda_polling_interval_s: int = Field(15, ge=1, le=3600, description="ScaledObject pollingInterval.")
    # Prometheus series names (KEDA queries) and the adapter's names (HPA Pods metrics).
    prom_metric_waiting: str = Field("vllm:num_requests_waiting", description="Waiting-requests series.")
    prom_metric_running: str = Field("vllm:num_requests_running", description="Running-requests series.")
    prom_metric_kv_cache: str = Field("vllm:kv_cache_usage_perc", description="KV cache usage series (0-1).")
    hpa_metric_waiting: str = Field(
        "vllm_num_requests_waiting", description="Custom-metrics API name of waiting requests per pod."
    )
    hpa_metric_running: str = Field(
        "vllm_num_requests_running", description="Custom-metrics API name of running requests per pod."
    )
    hpa_metric_kv_cache: str = Field(
        "vllm_kv_cache_usage_perc", description="Custom-metrics API name of KV cache usage per pod."
    )

    # --- Prefix-aware routing (spec.routing) -------------------------------------------
    # Pinned to a release: the EPP's flags and config format change between releases, and the
    # builders render those of this one (llm-d router v0.10.0).
    epp_image: str = Field(
        "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.10.0",
        description="Endpoint Picker image of spec.routing (the llm-d router's EPP, v0.10.0 flags and config).",
    )
    routing_sidecar_image: str = Field(
        "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0",
        description=(
            "The llm-d routing sidecar on the decode pods of a disaggregated resource with spec.routing "
            "(the same llm-d router release as the EPP)."
        ),
    )
    routing_gateway_name: str | None = Field(
        None, description="Gateway the HTTPRoutes attach to when spec.routing.gateway is unset; None: no route."
    )
    routing_gateway_namespace: str | None = Field(
        None, description="Namespace of ROUTING_GATEWAY_NAME; None: the resource's namespace."
    )

    # --- Multi-tenant policies (what a resource may ask for) --------------------------
    # Each list is what a spec may use; "*" allows anything. The defaults keep a one-team
    # cluster working (any image, priority class, scheduler, toleration) except host paths,
    # which give a pod the node's files: none unless the administrator lists a prefix.
    host_path_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Directories under which spec.model.hostPath.path and spec.lora.adapters[].source.hostPath.path "
            "may lie; empty: no hostPath model or adapter."
        ),
    )
    cache_host_path_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description=(
            "Node directories spec.model.cache.hostPath may lie under; each resource gets "
            "<prefix>/<namespace>/<rest of its path> (a tenant never reaches another namespace's cache). "
            "Kept apart from HOST_PATH_PREFIXES (read-only model folders): neither may lie in the other. "
            "Empty: no hostPath cache."
        ),
    )
    allowed_image_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [ANY],
        description="Prefixes spec.image must start with (for example registry.example.com/llm/); * any.",
    )
    allowed_priority_classes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [ANY], description="PriorityClass names spec.npu.priorityClassName may name; * any."
    )
    allowed_scheduler_names: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [ANY], description="Schedulers spec.npu.schedulerName may name; * any."
    )
    allowed_toleration_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [ANY],
        description="Taint keys spec.npu.tolerations may tolerate; * any (and a key-less toleration).",
    )

    # --- kopf / API ------------------------------------------------------------------------
    standalone: bool = Field(False, description="Run without leader election (one operator replica, tests).")
    lease_name: str = Field("ascend-llm-operator", description="Lease the operator replicas elect a leader with.")
    lease_namespace: str | None = Field(
        None, description="Namespace of the Lease. Default: POD_NAMESPACE, else the pod's own namespace."
    )
    # controller-runtime's defaults: a standby takes over at most ~15 s after the leader died.
    lease_duration_s: int = Field(15, ge=2, description="How long a Lease holds without renewal, whole seconds.")
    lease_renew_deadline_s: float = Field(10.0, gt=0, description="How long the leader retries renewing, seconds.")
    lease_retry_period_s: float = Field(2.0, gt=1, description="Interval of election attempts, seconds (above 1).")
    resync_interval_s: float = Field(
        60.0, gt=0,
        description="Steady-state resync of each resource (runtime /state, leak and mode changes); "
                    "watches of the resource, its children and pods trigger a reconcile at once.",
    )
    # The runtime's start-up phases (Loading -> CapturingGraphs -> WarmingUp) are not API objects;
    # while a replica starts its /state is polled this often so status follows within seconds.
    progress_poll_interval_s: float = Field(
        5.0, gt=0, description="Reconcile interval while a replica is starting (runtime phase polling)."
    )
    # Reconciles run concurrently up to this many; the API client pool and its worker threads are
    # sized from it, so no request waits for (or discards) a pooled connection.
    max_concurrent_reconciles: int = Field(64, ge=1, le=256, description="Reconciles running at once.")
    # The API server gives Services their ClusterIPs one at a time; creates beyond a few in flight
    # only wait there (each holding a request seat, timing out after 60 s in a burst of thousands).
    max_concurrent_cluster_ip_creates: int = Field(
        4, ge=1, le=256, description="Creates of Services with a ClusterIP in flight at once."
    )
    retry_backoff_base_s: float = Field(2.0, gt=0, description="First retry delay after a failed reconcile.")
    retry_backoff_max_s: float = Field(300.0, gt=0, description="Longest retry delay (exponential backoff).")
    status_read_timeout_s: float = Field(5.0, gt=0, description="Timeout of one pod /state read.")
    # What the cluster serves (KEDA, custom metrics, LeaderWorkerSet) changes only when someone
    # installs or removes an add-on; 300 s means such a change is noticed within 5 minutes while
    # the operator asks the API server's discovery endpoint (/apis) at most once per 5 minutes.
    discovery_ttl_s: float = Field(
        300.0, gt=0, description="How long the served API groups (discovery) are cached, seconds."
    )
    field_manager: str = Field("ascend-llm-operator", description="Field manager of the operator's writes.")
    api_server: str | None = Field(
        None,
        description=(
            "Talk to this API URL instead of in-cluster config or a kubeconfig, verifying its TLS "
            "certificate (against API_CA_FILE when set). For tests and local development; the chart never sets it."
        ),
    )
    api_ca_file: str | None = Field(None, description="CA bundle (PEM file) that signs API_SERVER's certificate.")
    api_insecure_skip_tls_verify: bool = Field(
        False, description="Do not verify API_SERVER's certificate (a test API server without a CA file only)."
    )
    state_read: StateRead = Field(
        StateRead.AUTO, description="How pod /state is read: podIP, proxy (pod proxy) or auto."
    )
    cluster_domain: str = Field("cluster.local", description="DNS domain used in status.endpoint.")

    @model_validator(mode="after")
    def _cache_prefixes_apart(self) -> OperatorSettings:
        # A cache prefix inside a read-only model prefix (or the other way round) would let a
        # tenant's model.hostPath read other namespaces' cached weights.
        def nested(a: str, b: str) -> bool:
            return a == b or a == "/" or b == "/" or b.startswith(a + "/") or a.startswith(b + "/")

        if "/" in self.cache_host_path_prefixes:
            raise ValueError("ASCEND_LLM_OPERATOR_CACHE_HOST_PATH_PREFIXES: '/' would put each namespace's "
                             "cache at /<namespace> on the node; name a directory such as /data/llm-cache")
        clashes = [(cache, model) for cache in self.cache_host_path_prefixes for model in self.host_path_prefixes
                   if nested(cache, model)]
        clashes += [(a, b) for i, a in enumerate(self.cache_host_path_prefixes)
                    for b in self.cache_host_path_prefixes[i + 1:] if nested(a, b)]
        if clashes:
            raise ValueError(
                f"ASCEND_LLM_OPERATOR_CACHE_HOST_PATH_PREFIXES: {clashes[0][0]} and {clashes[0][1]} lie one in "
                "the other; cache prefixes must be apart from each other and from HOST_PATH_PREFIXES "
                "(for example /data/llm-cache and /data/models)")
        return self

    @model_validator(mode="after")
    def _lease_timing(self) -> OperatorSettings:
        # The client's election refuses these (and would end its thread): say so at start-up.
        if self.lease_renew_deadline_s <= 1.2 * self.lease_retry_period_s:
            raise ValueError("ASCEND_LLM_OPERATOR_LEASE_RENEW_DEADLINE_S must exceed 1.2 x "
                             "ASCEND_LLM_OPERATOR_LEASE_RETRY_PERIOD_S")
        if self.lease_duration_s <= self.lease_renew_deadline_s:
            raise ValueError("ASCEND_LLM_OPERATOR_LEASE_DURATION_S must exceed ASCEND_LLM_OPERATOR_LEASE_RENEW_DEADLINE_S")
        return self

    @field_validator(
        "namespaces",
        "host_path_prefixes",
        "cache_host_path_prefixes",
        "allowed_image_prefixes",
        "allowed_priority_classes",
        "allowed_scheduler_names",
        "allowed_toleration_keys",
        mode="before",
    )
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except json.JSONDecodeError as error:
                    raise ValueError(f"not a JSON list: {error}; or use a comma-separated list") from None
            return [item.strip() for item in text.split(",") if item.strip()]
        return value

    @field_validator("host_path_prefixes", "cache_host_path_prefixes")
    @classmethod
    def _absolute_prefixes(cls, value: list[str]) -> list[str]:
        bad = [prefix for prefix in value if not _ABSOLUTE_NORMALISED.match(prefix) or
               any(part in (".", "..") for part in prefix.split("/"))]
        if bad:
            raise ValueError(f"{bad} not absolute normalised directories (like /data/models, no trailing /)")
        return value

    # --- Derived values --------------------------------------------------------------------

    def runtime_image(self, chip: Chip | None) -> str:
        """Default image: ``<repo>:<tag>-vllm-ascend-<v>`` + ``-a3`` / ``-310p``; ``chip=None`` is CPU."""
        if chip is None:
            return self.cpu_image or f"{self.image_repository}:{self.image_tag}-vllm-cpu"
        suffix = {Chip.A2_910B: "", Chip.A3: "-a3", Chip.P310: "-310p"}[chip]
        return f"{self.image_repository}:{self.image_tag}-vllm-ascend-{self.vllm_ascend_tag}{suffix}"

    def state_read_mode(self, environ: Mapping[str, str] | None = None) -> StateRead:
        """``state_read`` with ``auto`` resolved: podIP inside a pod (the service-account env is set)
        unless an explicit API_SERVER says the operator runs elsewhere, proxy otherwise."""
        if self.state_read != StateRead.AUTO:
            return self.state_read
        env = os.environ if environ is None else environ
        in_cluster = bool(env.get("KUBERNETES_SERVICE_HOST")) and not self.api_server
        return StateRead.POD_IP if in_cluster else StateRead.PROXY

    def resource_name(self, chip: Chip) -> str:
        """Default extended resource name of ``chip``."""
        return {
            Chip.A2_910B: self.resource_name_910b,
            Chip.A3: self.resource_name_a3,
            Chip.P310: self.resource_name_310p,
        }[chip]


def load_settings(env: Mapping[str, str] | None = None) -> OperatorSettings:
    """Settings from ``env`` (default ``os.environ``); raise :class:`SettingsError` naming the variable."""
    source = os.environ if env is None else env
    values = {
        key[len(ENV_PREFIX) :].lower(): value
        for key, value in source.items()
        if key.upper().startswith(ENV_PREFIX)
    }
    known = set(OperatorSettings.model_fields)
    unknown = sorted(f"{ENV_PREFIX}{key.upper()}" for key in values if key not in known)
    if unknown:
        raise SettingsError(
            f"unknown operator setting(s) {', '.join(unknown)}; known: "
            + ", ".join(f"{ENV_PREFIX}{name.upper()}" for name in sorted(known))
        )
    try:
        # init kwargs, not the process env: the result depends on ``env`` alone.
        return OperatorSettings.model_validate(values)
    except ValidationError as error:
        lines = []
        for item in error.errors():
            if not item["loc"]:  # a rule across settings: its message names them
                lines.append(str(item["msg"]))
                continue
            name = f"{ENV_PREFIX}{str(item['loc'][0]).upper()}"
            lines.append(f"{name}={values.get(str(item['loc'][0]), '')!r}: {item['msg']}")
        raise SettingsError("invalid operator settings: " + "; ".join(lines)) from None
