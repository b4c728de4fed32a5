"""The operator's CLI commands, run through the real ``ascend-llm`` entry point parser.

Covered: ``render`` prints exactly the builders' children for an example (YAML stream and JSON
List), with no owner references, strings that go-yaml reads as numbers or booleans quoted; an invalid resource or a wrong kind exits 2 naming the field;
``crd --check`` passes on the committed CRDs and fails (exit 1) naming a stale copy;
``operator run --help`` lists the options.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from ascend_operator.api import parse_spec
from ascend_operator.builders import BuildMeta, build_children
from ascend_operator.cli import write_manifests
from ascend_operator.crdgen import CRD_PATHS
from ascend_operator.settings import OperatorSettings
from ascend_runtime.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "cpu-tiny.yaml"


@pytest.fixture(autouse=True)
def _plain_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in __import__("os").environ if k.startswith("ASCEND_LLM_OPERATOR_")]:
        monkeypatch.delenv(key)


def expected() -> list[dict]:
    resource = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    children = build_children(BuildMeta(resource["metadata"]["name"], "default", None),
                              parse_spec(resource["spec"]), OperatorSettings())
    return children.objects()


def test_render_prints_the_children_as_yaml_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EXAMPLE)]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert documents == expected()
    assert not any("ownerReferences" in doc["metadata"] for doc in documents)

    assert main(["render", str(EXAMPLE), "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed == {"apiVersion": "v1", "kind": "List", "items": expected()}


def test_render_quotes_strings_that_kubectls_yaml_reader_takes_for_numbers_or_booleans() -> None:
    """PyYAML (YAML 1.1) leaves ``1e5`` or ``y`` plain; go-yaml, under kubectl, reads a number or a
    boolean there (the cluster tier pipes such a render through kubectl)."""

    go_reads_otherwise = ["1e5", "-1e-5", "1.5e5", "84e12345", "0o17", "1_0e2", "y", "N"]
    plain = ["cpu-tiny", "e5", "1e", "1.5.5", "yes-no", "0x1g"]
    out = io.StringIO()
    write_manifests([{"data": {value: value for value in go_reads_otherwise + plain}}], "yaml", out)
    lines = dict(line.strip().split(": ", 1) for line in out.getvalue().splitlines()[1:])
    assert {key: value for key, value in lines.items() if value.startswith("'")} == {
        f"'{value}'": f"'{value}'" for value in go_reads_otherwise}
    assert yaml.safe_load(out.getvalue())["data"] == {value: value for value in go_reads_otherwise + plain}


def test_render_refuses_an_invalid_resource_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    bad["spec"]["parallelism"] = {"tensor": 2}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad), encoding="utf-8")
    assert main(["render", str(path)]) == 2
    err = capsys.readouterr().err
    assert "spec.parallelism" in err and "cpu-tiny" in err

    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", encoding="utf-8")
    assert main(["render", str(path)]) == 2
    assert "expected apiVersion llm.ascend.dev/v1alpha1, kind AscendLLMDeployment; got v1/ConfigMap" in (
        capsys.readouterr().err)


def test_crd_check_fails_on_a_stale_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["crd", "--root", str(tmp_path)]) == 0
    assert main(["crd", "--check", "--root", str(tmp_path)]) == 0
    stale = tmp_path / CRD_PATHS[1]
    stale.write_text(stale.read_text(encoding="utf-8") + "# edited\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["crd", "--check", "--root", str(tmp_path)]) == 1
    assert str(CRD_PATHS[1]) in capsys.readouterr().err


def test_operator_run_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["operator", "run", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--namespace", "--standalone", "--liveness", "--verbose"):
        assert option in out


async def test_operator_run_uses_the_kubeconfig_like_in_production(emulator, tmp_path: Path) -> None:
    """`ascend-llm operator run` as a process, logging in the production way (kopf piggybacking
    on the kubernetes client's kubeconfig), reconciles a resource created afterwards."""

    import asyncio
    import os
    import sys

    from operator_harness import DEPLOYMENTS, NAMESPACE, apply_resource

    url = str(emulator.url).rstrip("/")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": "tester", "user": {"token": "not-checked"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester"}}],
    }), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASCEND_LLM_OPERATOR_")}
    env.update(KUBECONFIG=str(kubeconfig), ASCEND_LLM_OPERATOR_RESYNC_INTERVAL_S="0.5",
               ASCEND_LLM_OPERATOR_HOST_PATH_PREFIXES="/m")
    log = tmp_path / "operator.log"
    with log.open("wb") as sink:  # a file, not a pipe: nobody reads a pipe while the test polls
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "ascend_runtime.cli", "operator", "run", "--standalone", "-n", NAMESPACE,
            env=env, stdout=sink, stderr=asyncio.subprocess.STDOUT)
    await apply_resource(emulator, "tiny", {"platform": "CPU", "model": {"hostPath": {"path": "/m"}}})
    for _ in range(300):  # about 30 s: the process starts Python, kopf and the client first
        if emulator.get(*DEPLOYMENTS, NAMESPACE, "tiny") or process.returncode is not None:
            break
        await asyncio.sleep(0.1)
    if process.returncode is None:
        process.terminate()
    await process.wait()
    output = log.read_text(encoding="utf-8", errors="replace")
    assert emulator.get(*DEPLOYMENTS, NAMESPACE, "tiny"), f"no Deployment; the operator said:\n{output[-3000:]}"
    assert process.returncode == 0, output[-3000:]
