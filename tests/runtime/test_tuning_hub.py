"""Tuned defaults for a hub-id model the engine downloads itself: the runtime fetches config.json
alone, from the pod's endpoint with its token into its cache, before the first launch
(ascend_runtime.modelconfig); a local hub (tests/fakes/fake_hub.py) serves a real config.json."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from fake_hub import FakeHub, FakeRepo  # noqa: E402

from ascend_runtime.config import EngineConfig  # noqa: E402
from ascend_runtime.state import StateStore  # noqa: E402
from ascend_runtime.supervisor import Supervisor  # noqa: E402
from ascend_runtime.versions import Versions  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: The real config.json of deepseek-ai/DeepSeek-V3 (tests/data/model-configs/README.md names its source).
CONFIG = (ROOT / "tests" / "data" / "model-configs" / "deepseek-v3" / "config.json").read_bytes()
REPO = "deepseek-ai/DeepSeek-V3"
TOKEN = "hf_test_secret_token_456"


def supervisor(tmp_path: Path, hub: FakeHub, versions: Versions, **env: str) -> tuple[Supervisor, StateStore]:
    config = EngineConfig.model_validate({"model": {"path": REPO}, "engine": {"parallel": {"tensor": 16}}})
    store = StateStore()
    full_env = {"HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf-home"), **env}
    return Supervisor(config, versions, store, env=full_env), store


def prepare(sup: Supervisor) -> None:
    sup._apply_tuned_defaults(*asyncio.run(sup._model_config_dir()))


def test_a_hub_model_is_classified_from_its_config_json_fetched_alone_into_the_pods_cache(tmp_path: Path) -> None:
    repo = FakeRepo(token=TOKEN)
    repo.add({"config.json": CONFIG, "model-00001-of-00163.safetensors": b"\0" * 64})
    with FakeHub({REPO: repo}) as hub:
        sup, store = supervisor(tmp_path, hub, Versions.assumed(vllm_ascend="0.11.0"), HF_TOKEN=TOKEN)
        prepare(sup)
        downloads = [r.path for r in hub.file_downloads()]
    report = store.snapshot()["tunedDefaults"]
    assert report["modelClass"] == "MLA" and report["applied"], report
    assert sup.config.ascend.additional_config["torchair_graph_config"] == {"enabled": True}
    assert downloads == [f"/{REPO}/resolve/main/config.json"]  # nothing but config.json
    assert list((tmp_path / "hf-home" / "hub").glob("models--deepseek-ai--DeepSeek-V3/snapshots/*/config.json"))


def test_a_fetch_that_fails_says_why_and_applies_nothing(tmp_path: Path) -> None:
    repo = FakeRepo(token=TOKEN)
    repo.add({"config.json": CONFIG})
    with FakeHub({REPO: repo}) as hub:
        sup, store = supervisor(tmp_path, hub, Versions.assumed(vllm_ascend="0.13.0"))  # no token: gated
        prepare(sup)
    report = store.snapshot()["tunedDefaults"]
    assert report["reason"].startswith(f"cannot fetch {REPO}'s config.json from the hub (")
    assert report["reason"].endswith("; no tuned defaults") and not report["applied"]
    assert sup.config.engine.env == {}


@pytest.mark.parametrize("versions, env", [
    (Versions(platform="cpu", vllm="0.32.0"), {}),  # no tuned default applies off Ascend
    (Versions.assumed(vllm_ascend="0.13.0"), {"VLLM_USE_MODELSCOPE": "true"}),
    (Versions.assumed(vllm_ascend="0.13.0"), {"HF_HUB_OFFLINE": "1"}),
])
def test_nothing_is_fetched_where_it_cannot_be_used(tmp_path: Path, versions: Versions, env: dict[str, str]) -> None:
    repo = FakeRepo()
    repo.add({"config.json": CONFIG})
    with FakeHub({REPO: repo}) as hub:
        sup, store = supervisor(tmp_path, hub, versions, **env)
        prepare(sup)
        assert hub.count() == 0
    assert store.snapshot()["tunedDefaults"]["reason"]
