"""Multi-tenant safety (issue 12), the pure parts: policies, secrets, redaction, the split
Services, TLS and the direct /state read. The API server's side is tests/cluster/test_tenancy_on_server.py."""

from __future__ import annotations

import io
import logging
import sys
from typing import Any

import pytest
import yaml
from aiohttp import web
from ascend_runtime import redact
from ascend_runtime.config import CONFIG_FILE_KEY
from ascend_runtime.engine import EngineProcess
from ascend_runtime.warmup import api_key_headers

from ascend_operator.api import SpecError, parse_spec
from ascend_operator.builders import BuildMeta, build_children
from ascend_operator.k8s import Kube, connect
from ascend_operator.podreads import PodReader
from ascend_operator.policy import enforce_policy, violations
from ascend_operator.settings import OperatorSettings, SettingsError, StateRead, load_settings

HF = {"huggingFace": {"id": "Qwen/Qwen2.5-0.5B"}}


def settings(**env: str) -> OperatorSettings:
    return load_settings({f"ASCEND_LLM_OPERATOR_{key.upper()}": value for key, value in env.items()})


def refused(spec: dict[str, Any], policy: OperatorSettings) -> list[tuple[str, str]]:
    try:
        enforce_policy(parse_spec(spec), policy)
    except SpecError as error:
        return error.problems
    return []


# --- item 1: host paths -----------------------------------------------------------------------


def test_host_paths_are_refused_unless_under_an_allowed_prefix() -> None:
    spec = {"model": {"hostPath": {"path": "/data/models/qwen"}}}
    ((field, message),) = refused(spec, OperatorSettings())
    assert field == "spec.model.hostPath.path"
    assert "ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES" in message and "none" in message
    assert refused(spec, settings(host_path_prefixes="/data/models")) == []
    assert refused({"model": {"hostPath": {"path": "/data/models"}}}, settings(host_path_prefixes="/data/models")) == []
    # A prefix is a directory, not a string prefix: /data/models2 is not under /data/models.
    assert refused({"model": {"hostPath": {"path": "/data/models2/x"}}}, settings(host_path_prefixes="/data/models"))


@pytest.mark.parametrize("path", ["/data/../etc", "/data/./m", "/data/..", "/data//m", "/data/m/", "relative", "/"])
def test_non_normalised_host_paths_are_refused_by_the_schema(path: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec({"model": {"hostPath": {"path": path}}})
    assert error.value.problems[0][0] == "spec.model.hostPath.path"


@pytest.mark.parametrize("value", ["data/models", "/data/../etc", "/data/models/"])
def test_host_path_prefix_settings_must_be_absolute_and_normalised(value: str) -> None:
    with pytest.raises(SettingsError, match="ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES"):
        settings(host_path_prefixes=value)


# --- item 2: image, priority class, scheduler, tolerations -------------------------------------


def test_defaults_allow_a_single_team_everything_but_host_paths() -> None:
    spec = {"model": HF, "image": "example.com/any:1", "npu": {
        "priorityClassName": "system-node-critical", "schedulerName": "volcano",
        "tolerations": [{"operator": "Exists"}, {"key": "node-role.kubernetes.io/control-plane"}]}}
    assert violations(parse_spec(spec), OperatorSettings()) == []


def test_each_policy_names_the_field_and_the_setting() -> None:
    policy = settings(allowed_image_prefixes="registry.example.com/llm/", allowed_priority_classes="llm-normal",
                      allowed_scheduler_names='["volcano"]', allowed_toleration_keys="huawei.com/Ascend910")
    spec = {"model": HF, "image": "docker.io/evil/x:1", "npu": {
        "priorityClassName": "system-node-critical", "schedulerName": "my-scheduler",
        "tolerations": [{"key": "huawei.com/Ascend910", "operator": "Exists"}, {"operator": "Exists"},
                        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}}
    problems = dict(refused(spec, policy))
    assert sorted(problems) == ["spec.image", "spec.npu.priorityClassName", "spec.npu.schedulerName",
                                "spec.npu.tolerations[1].key", "spec.npu.tolerations[2].key"]
    assert "ASCEND_LLM_OPERATOR_ALLOWED_IMAGE_PREFIXES" in problems["spec.image"]
    assert "ASCEND_LLM_OPERATOR_ALLOWED_PRIORITY_CLASSES" in problems["spec.npu.priorityClassName"]
    assert "ASCEND_LLM_OPERATOR_ALLOWED_SCHEDULER_NAMES" in problems["spec.npu.schedulerName"]
    assert "every taint" in problems["spec.npu.tolerations[1].key"]
    allowed = {"model": HF, "image": "registry.example.com/llm/runtime:2", "npu": {
        "priorityClassName": "llm-normal", "schedulerName": "volcano",
        "tolerations": [{"key": "huawei.com/Ascend910", "operator": "Exists"}]}}
    assert refused(allowed, policy) == []
    # The operator's own image (spec.image left out) is never subject to the image policy.
    assert refused({"model": HF}, policy) == []


# --- requests above limits (the API server refuses such a pod) ---------------------------------


@pytest.mark.parametrize(("quantity", "value"), [
    ("1Gi", 2**30), ("500m", 0.5), ("1e3", 1000), ("+2k", 2000), (".5", 0.5), ("1E", 10**18), (".0E", 0), (7, 7),
])
def test_quantities_are_read_as_kubernetes_reads_them(quantity: Any, value: float) -> None:
    from ascend_operator.api import quantity_value

    assert float(quantity_value(quantity)) == pytest.approx(value)


def test_requests_above_limits_and_negative_quantities_are_refused() -> None:
    with pytest.raises(SpecError) as error:
        parse_spec({"model": HF, "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}})
    assert error.value.problems == [("spec.resources", "requests.memory (2Gi) is above limits.memory (1Gi); "
                                                       "raise the limit or lower the request")]
    with pytest.raises(SpecError):
        parse_spec({"model": HF, "resources": {"limits": {"cpu": "-1"}}})
    parse_spec({"model": HF, "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": 1}}})


# --- item 6: reserved flags and env -----------------------------------------------------------


@pytest.mark.parametrize(("engine", "named"), [
    ({"extraArgs": ["--port", "9000"]}, "--port"),
    ({"extraArgs": ["--max_model_len=4", "--tensor_parallel_size=2"]}, "--tensor-parallel-size"),
    ({"extraArgs": ["--config", "/mnt/model/args.yaml"]}, "--config"),
    ({"extraArgs": ["--allowed-local-media-path=/"]}, "--allowed-local-media-path"),
    ({"env": {"ASCEND_VISIBLE_DEVICES": "0-7"}}, "ASCEND_VISIBLE_DEVICES"),
    ({"env": {"ASCEND_LLM_CONFIG": "/tmp/x.yaml"}}, "ASCEND_LLM_*"),
    ({"envValueFrom": {"HF_TOKEN": {"secretKeyRef": {"name": "s", "key": "k"}}}}, "HF_TOKEN"),
])
def test_reserved_flags_and_env_are_refused_naming_them(engine: dict[str, Any], named: str) -> None:
    with pytest.raises(SpecError) as error:
        parse_spec({"model": HF, "engine": engine})
    assert any(named in message for _, message in error.value.problems), error.value.problems
    assert all(path in ("spec.engine.extraArgs", "spec.engine.env") for path, _ in error.value.problems)


def test_a_refused_api_key_flag_never_echoes_the_key() -> None:
    with pytest.raises(SpecError) as error:
        parse_spec({"model": HF, "engine": {"extraArgs": ["--api-key=sk-topsecret"]}})
    assert "--api-key" in str(error.value) and "sk-topsecret" not in str(error.value)


# --- item 3: secrets --------------------------------------------------------------------------


def render(spec: dict[str, Any], policy: OperatorSettings | None = None) -> Any:
    return build_children(BuildMeta("demo", "team-a"), parse_spec(spec), policy or OperatorSettings())


def test_env_from_secrets_and_the_api_key_go_to_the_pod_env_never_the_configmap() -> None:
    children = render({"model": HF, "engine": {
        "env": {"PLAIN": "visible"},
        "envValueFrom": {"DB_PASSWORD": {"secretKeyRef": {"name": "db", "key": "password"}},
                         "REGION": {"configMapKeyRef": {"name": "site", "key": "region"}}},
        "apiKeySecretRef": {"name": "llm-key", "key": "key"}}})
    env = children.deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    by_name = {item["name"]: item for item in env}
    assert by_name["DB_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "db", "key": "password"}}
    assert by_name["REGION"]["valueFrom"] == {"configMapKeyRef": {"name": "site", "key": "region"}}
    assert by_name["VLLM_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "llm-key", "key": "key"}}
    # Secret-sourced names the runtime does not always mask are listed for it.
    assert by_name[redact.REDACT_ENV]["value"] == "DB_PASSWORD"
    config = yaml.safe_load(children.configmap["data"][CONFIG_FILE_KEY])
    assert config["engine"]["env"] == {"PLAIN": "visible"}
    text = children.configmap["data"][CONFIG_FILE_KEY]
    assert "DB_PASSWORD" not in text and "VLLM_API_KEY" not in text and "--api-key" not in text


def test_env_value_from_needs_exactly_one_source_and_no_duplicate_name() -> None:
    with pytest.raises(SpecError, match="exactly one of secretKeyRef and configMapKeyRef"):
        parse_spec({"model": HF, "engine": {"envValueFrom": {"A": {}}}})
    with pytest.raises(SpecError, match="both engine.env and engine.envValueFrom"):
        parse_spec({"model": HF, "engine": {"env": {"A": "1"},
                                            "envValueFrom": {"A": {"configMapKeyRef": {"name": "c", "key": "k"}}}}})


def test_redactor_masks_secret_flags_and_secret_sourced_values() -> None:
    env = {redact.REDACT_ENV: "DB_PASSWORD", "DB_PASSWORD": "hunter2hunter2", "VLLM_API_KEY": "sk-abc",
           "PLAIN": "not-secret"}
    redactor = redact.Redactor.from_env(env)
    shown = redactor.argv(["vllm", "--api-key", "k1", "--api_key=k2", "--seed", "hunter2hunter2", "not-secret"])
    assert shown == "vllm --api-key *** --api_key=*** --seed *** not-secret"
    assert redactor.text("key sk-abc in a line, --api-key k3") == "key *** in a line, --api-key ***"
    # A 3-character value would mask ordinary text everywhere: values that short are left alone.
    assert redact.Redactor.from_env({"VLLM_API_KEY": "on1"}).text("on1 line") == "on1 line"


def test_every_log_line_through_the_root_handler_is_redacted() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    redact.install([handler], {"VLLM_API_KEY": "sk-live-123"})
    log = logging.getLogger("ascend_runtime.any.module")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        log.info("engine said %s", "Authorization: Bearer sk-live-123")
    finally:
        log.removeHandler(handler)
    assert stream.getvalue().strip() == "engine said Authorization: Bearer ***"


async def test_engine_launch_line_and_echoed_output_are_redacted(monkeypatch, caplog, capsys) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-engine-999")
    argv = [sys.executable, "-c", "import os; print('key', os.environ['VLLM_API_KEY'])", "--api-key", "argv-key"]
    engine = EngineProcess(argv, {}, lambda event: None)
    with caplog.at_level(logging.INFO, logger="ascend_runtime.engine"):
        await engine.start()
        await engine.wait()
    launch = [r.getMessage() for r in caplog.records if r.getMessage().startswith("launching engine")]
    assert launch and "argv-key" not in launch[0] and "--api-key ***" in launch[0]
    assert "key ***" in capsys.readouterr().out
    assert engine.tail == ["key ***"]  # the tail reaches /state and the status: masked too


def test_warmup_sends_the_api_key_when_one_is_set() -> None:
    assert api_key_headers({"VLLM_API_KEY": "k"}) == {"Authorization": "Bearer k"}
    assert api_key_headers({}) == {}


# --- item 5: the Services ---------------------------------------------------------------------


def test_the_clients_service_carries_only_the_api_port_and_the_runtime_port_is_cluster_internal() -> None:
    children = render({"model": HF, "service": {"type": "LoadBalancer", "port": 80}})
    assert children.service["spec"]["type"] == "LoadBalancer"
    assert [p["name"] for p in children.service["spec"]["ports"]] == ["http"]
    runtime = children.runtime_service
    assert runtime["metadata"]["name"] == "demo-runtime"
    assert runtime["spec"]["type"] == "ClusterIP" and runtime["spec"]["clusterIP"] == "None"  # headless
    assert runtime["spec"]["ports"] == [{"name": "metrics", "port": 8080, "targetPort": "runtime", "protocol": "TCP"}]
    assert runtime["metadata"]["labels"]["app.kubernetes.io/component"] == "runtime"
    assert runtime["spec"]["selector"] == children.service["spec"]["selector"]
    assert runtime in children.objects()


# --- item 7: TLS ------------------------------------------------------------------------------


def test_an_api_url_is_verified_by_default_with_an_optional_ca() -> None:
    assert connect("https://127.0.0.1:6443").configuration.verify_ssl is True
    with_ca = connect("https://127.0.0.1:6443", ca_file="/etc/ca.pem")
    assert (with_ca.configuration.verify_ssl, with_ca.configuration.ssl_ca_cert) == (True, "/etc/ca.pem")
    assert connect("https://127.0.0.1:6443", insecure=True).configuration.verify_ssl is False
    loaded = settings(api_server="https://x", api_ca_file="/etc/ca.pem")
    assert (loaded.api_ca_file, loaded.api_insecure_skip_tls_verify) == ("/etc/ca.pem", False)


# --- item 4: /state from the pod IP ----------------------------------------------------------


def test_state_read_auto_means_pod_ip_in_a_pod_and_proxy_elsewhere() -> None:
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    assert OperatorSettings().state_read_mode(in_pod) == StateRead.POD_IP
    assert OperatorSettings().state_read_mode({}) == StateRead.PROXY
    assert settings(api_server="https://x").state_read_mode(in_pod) == StateRead.PROXY
    assert settings(state_read="proxy").state_read_mode(in_pod) == StateRead.PROXY
    assert settings(state_read="podIP").state_read_mode({}) == StateRead.POD_IP


async def test_state_is_read_from_the_pod_ip_without_the_api_server_over_one_kept_connection() -> None:
    peers: list[object] = []

    async def state(request: web.Request) -> web.Response:
        peers.append(request.transport.get_extra_info("peername") if request.transport else None)
        return web.json_response({"phase": "Ready", "ready": True})

    app = web.Application()
    app.router.add_get("/state", state)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    # An API client pointing nowhere: a proxy read would fail, the direct read must not need it.
    kube = Kube(connect("http://127.0.0.1:1"), field_manager="t")
    reader = PodReader(kube, timeout_s=2.0, via_proxy=False)
    try:
        pods = [
            {"metadata": {"name": "a"}, "status": {"phase": "Running", "podIP": "127.0.0.1"}},
            {"metadata": {"name": "b"}, "status": {"phase": "Running"}},  # no IP yet
            {"metadata": {"name": "c"}, "status": {"phase": "Pending", "podIP": "127.0.0.1"}},
        ]
        states = await reader.read_states("team-a", pods, port)
        again = await reader.read_states("team-a", pods, port)  # the next resync
    finally:
        await reader.close()
        kube.close()
        await runner.cleanup()
    assert states["a"] is not None and states["a"].ready and states["a"].phase.value == "Ready"
    assert states["b"] is None and states["c"] is None
    assert sorted(states) == ["a", "b", "c"] and again == states
    # Both reads came over one connection (the same client port): the session is shared, kept alive.
    assert len(peers) == 2 and peers[0] == peers[1], peers


async def test_the_operator_start_up_masks_api_keys_in_its_log(monkeypatch: pytest.MonkeyPatch) -> None:
    import kopf
    from ascend_operator.handlers import handle_startup

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [handler])
    memo = kopf.Memo()
    memo[handle_startup.SETTINGS_KEY] = settings(api_server="http://127.0.0.1:1", standalone="true")
    await handle_startup.configure(kopf.OperatorSettings(), memo, logging.getLogger("t"))
    try:
        logging.getLogger("kopf.objects").warning("diff: extraArgs ['--api-key', 'sk-old-123']")
    finally:
        await handle_startup.cleanup(memo)
    assert "sk-old-123" not in stream.getvalue()
    assert "extraArgs ['--api-key', '***']" in stream.getvalue()


def test_the_runtime_log_setup_installs_the_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    from ascend_runtime import main as runtime_main

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setenv(redact.REDACT_ENV, "DB_PASSWORD")
    monkeypatch.setenv("DB_PASSWORD", "s3cr3t-value")
    runtime_main._setup_logging()
    (handler,) = root.handlers
    stream = io.StringIO()
    monkeypatch.setattr(handler, "stream", stream)
    logging.getLogger("ascend_runtime.supervisor").warning("pre-command: connect --password s3cr3t-value")
    assert stream.getvalue().rstrip().endswith("pre-command: connect --password ***")
