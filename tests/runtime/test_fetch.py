"""`ascend-llm fetch` against a local Hugging Face hub: the real ``huggingface_hub`` download code.

The hub (tests/fakes/fake_hub.py) serves the tiny test model; nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fakes"))
from fake_hub import FakeHub, FakeRepo  # noqa: E402
from fake_modelscope import FakeModelScope  # noqa: E402

from ascend_runtime.cachelayout import (  # noqa: E402
    CacheMarker,
    FetchExit,
    FetchPhase,
    FetchReason,
    FetchRequest,
)
from ascend_runtime.fetch import Fetcher, FetchOptions  # noqa: E402

REPO_ID = "tiny/llama"
TOKEN = "hf_test_secret_token_123"


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> dict[str, bytes]:
    from ascend_runtime.tinymodel import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("tiny-model"))
    return {p.name: p.read_bytes() for p in sorted(Path(model).iterdir()) if p.is_file()}


@pytest.fixture(autouse=True)
def _hf_home(tmp_path, monkeypatch):
    # huggingface_hub's own cache and token lookup: never the user's.
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def make_repo(files: dict[str, bytes], token: str | None = None) -> FakeRepo:
    repo = FakeRepo(token=token)
    repo.add(files)
    return repo


def make_fetcher(hub: FakeHub | FakeModelScope, root: Path, env: dict[str, str] | None = None,
                 hub_: str = "huggingface", **fields) -> Fetcher:
    request = FetchRequest.model_validate(
        {"hub": hub_, "repoId": REPO_ID, "cacheRoot": str(root), "endpoint": hub.url, **fields})
    return Fetcher(request, FetchOptions(progress_host="127.0.0.1", progress_port=0,
                                         termination_log=str(root.parent / "termination-log")), env=env or {})


def fetch(hub: FakeHub | FakeModelScope, root: Path, env: dict[str, str] | None = None,
          **fields) -> tuple[FetchExit, Fetcher]:
    fetcher = make_fetcher(hub, root, env, **fields)
    return fetcher.run(), fetcher


def get_progress(fetcher: Fetcher) -> dict | None:
    if fetcher.server is None:
        return None
    with urllib.request.urlopen(f"http://127.0.0.1:{fetcher.server.port}/progress", timeout=2) as response:
        return json.loads(response.read())


def termination(root: Path) -> dict:
    text = (root.parent / "termination-log").read_text()
    assert text.count("\n") == 1, "the termination message is one line"
    return json.loads(text)


def test_download_completes_writes_the_marker_and_a_second_run_asks_the_hub_nothing(tmp_path, tiny_files):
    root = tmp_path / "cache"
    with FakeHub({REPO_ID: make_repo(tiny_files)}) as hub:
        code, fetcher = fetch(hub, root)
        assert code is FetchExit.OK
        request = fetcher.request
        snapshot = Path(request.model_dir)
        assert snapshot == root / "models" / "huggingface" / "tiny" / "llama" / "default"
        for name, data in tiny_files.items():
            assert (snapshot / name).read_bytes() == data
        marker = CacheMarker.model_validate_json(Path(request.marker_path).read_text())
        assert marker.files == len(tiny_files)
        assert marker.total_bytes == sum(len(d) for d in tiny_files.values())
        assert marker.commit == hub.repos[REPO_ID].refs["main"]
        assert marker.incomplete(snapshot) is None
        assert len(hub.file_downloads()) == len(tiny_files)
        progress = fetcher.progress.get()
        assert progress.phase is FetchPhase.COMPLETE and progress.bytes_done == progress.bytes_total

        before = hub.count()
        code, again = fetch(hub, root)
        assert code is FetchExit.OK
        assert hub.count() == before, "an already cached model costs no request to the hub"
        assert again.progress.get().phase is FetchPhase.COMPLETE


def test_a_download_that_is_not_the_hubs_listed_content_fails_as_integrity_and_marks_nothing(
        tmp_path, tiny_files):
    root = tmp_path / "cache"
    weights = next(name for name in tiny_files if name.endswith(".safetensors"))
    for corrupt in (weights, "config.json"):  # an LFS file (sha256) and a file kept in git (blob id)
        repo = make_repo(tiny_files)
        repo.corrupt = {corrupt}
        with FakeHub({REPO_ID: repo}) as hub:
            code, fetcher = fetch(hub, root / corrupt)
        assert code is FetchExit.INTEGRITY, corrupt
        assert not Path(fetcher.request.marker_path).exists()
        failure = termination(root / corrupt)
        assert failure["reason"] == "Integrity" and corrupt in failure["message"]


def test_files_and_a_marker_planted_in_the_cache_are_not_served_but_fetched_again(tmp_path, tiny_files):
    root = tmp_path / "cache"
    with FakeHub({REPO_ID: make_repo(tiny_files)}) as hub:
        request = make_fetcher(hub, root).request
        # Another writer's weights of the same sizes and a marker counting them (no digests, as
        # layout 1 wrote them, and with digests of its own files).
        snapshot = Path(request.model_dir)
        snapshot.mkdir(parents=True)
        for name, data in tiny_files.items():
            (snapshot / name).write_bytes(bytes(b ^ 0x55 for b in data))
        for planted in (CacheMarker.now(request, "f" * 40, len(tiny_files), sum(map(len, tiny_files.values()))),
                        CacheMarker.of_directory(request, "f" * 40, snapshot)):
            marker = planted.model_copy(update={"digests": {**planted.digests}})
            if marker.digests:  # digests that do not describe the files
                marker.digests = {name: "0" * 64 for name in marker.digests}
            Path(request.marker_path).write_text(marker.to_json())
            code, _ = fetch(hub, root)
            assert code is FetchExit.OK
            for name, data in tiny_files.items():
                assert (snapshot / name).read_bytes() == data, "the hub's files replace the planted ones"
            for name, data in tiny_files.items():
                (snapshot / name).write_bytes(bytes(b ^ 0x55 for b in data))
        assert len(hub.file_downloads()) == 2 * len(tiny_files)


def test_a_link_that_leads_out_of_the_cache_is_refused_before_anything_is_written(tmp_path, tiny_files):
    root, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "models" / "huggingface").mkdir(parents=True)
    (root / "models" / "huggingface" / "tiny").symlink_to(elsewhere, target_is_directory=True)
    with FakeHub({REPO_ID: make_repo(tiny_files)}) as hub:
        code, _ = fetch(hub, root)
        assert code is FetchExit.INTEGRITY
        assert hub.file_downloads() == []
    assert list(elsewhere.iterdir()) == [], "nothing was written through the link"
    assert "links that leave it" in termination(root)["message"]


def test_a_snapshot_with_a_file_missing_is_fetched_again(tmp_path, tiny_files):
    root = tmp_path / "cache"
    with FakeHub({REPO_ID: make_repo(tiny_files)}) as hub:
        code, fetcher = fetch(hub, root)
        assert code is FetchExit.OK
        (Path(fetcher.request.model_dir) / "config.json").unlink()
        code, _ = fetch(hub, root)
        assert code is FetchExit.OK
        assert [r.path.rsplit("/", 1)[-1] for r in hub.file_downloads()].count("config.json") == 2
        assert (Path(fetcher.request.model_dir) / "config.json").read_bytes() == tiny_files["config.json"]


def test_a_pinned_revision_fetches_that_commit_into_its_own_directory(tmp_path, tiny_files):
    repo = FakeRepo()
    old = repo.add({**tiny_files, "config.json": b'{"v": 1}'}, "v1")
    new = repo.add(tiny_files, "main")
    root = tmp_path / "cache"
    with FakeHub({REPO_ID: repo}) as hub:
        code, pinned = fetch(hub, root, revision="v1")
        assert code is FetchExit.OK
        assert Path(pinned.request.model_dir).name == "v1"
        assert (Path(pinned.request.model_dir) / "config.json").read_bytes() == b'{"v": 1}'
        assert CacheMarker.model_validate_json(Path(pinned.request.marker_path).read_text()).commit == old
        assert all(old in r.path for r in hub.file_downloads()), "every file comes from the pinned commit"

        code, latest = fetch(hub, root, revision="main")
        assert code is FetchExit.OK
        assert (Path(latest.request.model_dir) / "config.json").read_bytes() == tiny_files["config.json"]
        assert CacheMarker.model_validate_json(Path(latest.request.marker_path).read_text()).commit == new


def test_the_token_is_sent_and_a_wrong_one_fails_as_unauthorized_without_the_token_in_the_message(
        tmp_path, tiny_files):
    with FakeHub({REPO_ID: make_repo(tiny_files, token=TOKEN)}) as hub:
        code, _ = fetch(hub, tmp_path / "ok" / "cache", env={"HF_TOKEN": TOKEN})
        assert code is FetchExit.OK
        assert {r.authorization for r in hub.requests} == {f"Bearer {TOKEN}"}

        wrong = "hf_wrong_token_which_is_secret"
        root = tmp_path / "wrong" / "cache"
        code, fetcher = fetch(hub, root, env={"MY_TOKEN": wrong}, tokenEnv="MY_TOKEN")
        assert code is FetchExit.UNAUTHORIZED
        message = termination(root)
        assert message["reason"] == FetchReason.UNAUTHORIZED.value
        assert wrong not in json.dumps(message) and "Invalid credentials" in message["message"]
        assert fetcher.progress.get().reason is FetchReason.UNAUTHORIZED
        assert not Path(fetcher.request.marker_path).exists()

        root = tmp_path / "none" / "cache"
        code, _ = fetch(hub, root)
        assert code is FetchExit.UNAUTHORIZED, "a gated repo without a token"
        assert termination(root)["reason"] == "Unauthorized"


def test_an_unknown_repo_or_revision_fails_as_not_found(tmp_path, tiny_files):
    with FakeHub({REPO_ID: make_repo(tiny_files)}) as hub:
        root = tmp_path / "repo" / "cache"
        code, _ = fetch(hub, root, repoId="tiny/nothing-here")
        assert code is FetchExit.NOT_FOUND
        assert termination(root)["reason"] == "NotFound"

        root = tmp_path / "rev" / "cache"
        code, _ = fetch(hub, root, revision="no-such-tag")
        assert code is FetchExit.NOT_FOUND
        assert termination(root)["reason"] == "NotFound"
        assert hub.file_downloads() == []


def test_allow_patterns_fetch_only_the_matching_files(tmp_path, tiny_files):
    extra = {"pytorch_model.bin": b"pickle", "modeling.py": b"x = 1"}
    with FakeHub({REPO_ID: make_repo({**tiny_files, **extra})}) as hub:
        code, fetcher = fetch(hub, tmp_path / "cache", allowPatterns=["*.json"])
        assert code is FetchExit.OK
        present = sorted(p.name for p in Path(fetcher.request.model_dir).iterdir() if p.is_file())
        assert present == sorted(n for n in tiny_files if n.endswith(".json"))
        assert not any(r.path.endswith((".safetensors", ".bin", ".py")) for r in hub.file_downloads())

        root = tmp_path / "none" / "cache"
        code, none = fetch(hub, root, allowPatterns=["*.gguf"])
        assert code is FetchExit.NOT_FOUND
        assert "no file matching allowPatterns ['*.gguf']" in termination(root)["message"]
        assert not Path(none.request.marker_path).exists()

        code, default = fetch(hub, tmp_path / "default" / "cache")
        assert code is FetchExit.OK
        names = {p.name for p in Path(default.request.model_dir).iterdir() if p.is_file()}
        assert "model.safetensors" in names
        assert "pytorch_model.bin" not in names and "modeling.py" not in names

        code, remote = fetch(hub, tmp_path / "remote" / "cache", trustRemoteCode=True)
        assert code is FetchExit.OK
        assert (Path(remote.request.model_dir) / "modeling.py").exists()


def test_progress_shows_the_bytes_while_downloading_and_a_second_job_waits_for_the_first(
        tmp_path, tiny_files):
    """huggingface_hub writes 10 MiB chunks: the held shard is 24 MiB, so half of it puts one
    chunk on disk while the hub holds the rest back."""

    root = tmp_path / "cache"
    chunk = 10 * 1024 * 1024
    files = {**tiny_files, "model-extra.safetensors": bytes(range(256)) * (24 * 4096)}
    total = sum(len(d) for d in files.values())
    with FakeHub({REPO_ID: make_repo(files)}) as hub:
        release = hub.hold("model-extra.safetensors")
        first, second = make_fetcher(hub, root), make_fetcher(hub, root)
        results: dict[str, FetchExit] = {}
        threads = {name: threading.Thread(target=lambda n=name, f=f: results.__setitem__(n, f.run()))
                   for name, f in (("first", first), ("second", second))}
        threads["first"].start()
        deadline = time.monotonic() + 30
        seen = None
        while time.monotonic() < deadline:
            seen = get_progress(first)
            if seen and seen["phase"] == "Downloading" and seen["bytesDone"] >= chunk:
                break
            time.sleep(0.2)
        try:
            assert seen is not None and seen["phase"] == "Downloading" and seen["bytesDone"] >= chunk, seen
            assert seen["bytesTotal"] == total and seen["filesTotal"] == len(files)
            assert seen["bytesDone"] < total and seen["filesDone"] < len(files)

            threads["second"].start()
            time.sleep(1.5)
            assert threads["second"].is_alive(), "the second Job waits on the lock while the first downloads"
            assert get_progress(second)["phase"] == "Pending"
        finally:
            release.set()
            for thread in threads.values():
                if thread.is_alive() or thread.ident:
                    thread.join(30)
        assert results == {"first": FetchExit.OK, "second": FetchExit.OK}
        assert len(hub.file_downloads()) == len(files), "the second Job downloaded nothing"
        assert second.progress.get().phase is FetchPhase.COMPLETE


def _fetch_cli(request: dict, termination_log: Path, env: dict[str, str], prefix: list[str] | None = None
               ) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "ascend_runtime.cli", "fetch", "--request-json", json.dumps(request),
            "--progress-host", "127.0.0.1", "--progress-port", "0", "--termination-log", str(termination_log)]
    return subprocess.run((prefix or []) + argv, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=120)


def test_an_invalid_request_exits_2_naming_the_field(tmp_path):
    log = tmp_path / "termination-log"
    run = _fetch_cli({"repoId": "not a repo", "cacheRoot": "/cache"}, log, {})
    assert run.returncode == FetchExit.INVALID == 2
    failure = json.loads(log.read_text())
    assert failure["reason"] == "Invalid"
    assert "repoId" in failure["message"] and "org/name" in failure["message"]


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs unshare -rm and a tmpfs mount (user namespaces)")
def test_a_full_cache_volume_fails_as_disk_full(tmp_path, tiny_files):
    """A real ENOSPC: the cache root is a 512 KiB tmpfs (in a private mount namespace), the
    weights are 3 MB."""

    root = tmp_path / "cache"
    root.mkdir()
    log = tmp_path / "termination-log"
    with FakeHub({REPO_ID: make_repo(tiny_files)}) as hub:
        request = {"repoId": REPO_ID, "cacheRoot": str(root), "endpoint": hub.url}
        mount = f'mount -t tmpfs -o size=512k tmpfs "{root}" && exec "$@"'
        prefix = ["unshare", "-rm", "sh", "-c", mount, "sh"]
        run = _fetch_cli(request, log, {"HF_HUB_DISABLE_PROGRESS_BARS": "1"}, prefix)
    assert run.returncode == FetchExit.DISK_FULL == 5, run.stderr[-3000:]
    failure = json.loads(log.read_text())
    assert failure["reason"] == "DiskFull", failure
    assert "No space left on device" in failure["message"]


@pytest.mark.parametrize("missing", [
    ("modelscope", "modelscope.hub", "modelscope.hub.snapshot_download",
     "modelscope_hub", "modelscope_hub.api"),
    ("modelscope_hub", "modelscope_hub.api"),  # an older, self-contained modelscope: no modelscope-hub
], ids=["no-modelscope", "old-modelscope"])
def test_a_modelscope_request_without_a_recent_modelscope_package_is_invalid_naming_it(
        tmp_path, monkeypatch, missing):
    for name in missing:
        monkeypatch.setitem(sys.modules, name, None)  # `import` of these now raises ImportError
    root = tmp_path / "cache"
    request = FetchRequest(hub="modelscope", repo_id="Qwen/Qwen3-8B", cache_root=str(root))
    code = Fetcher(request, FetchOptions(progress_host="127.0.0.1", progress_port=0,
                                         termination_log=str(tmp_path / "termination-log")), env={}).run()
    assert code is FetchExit.INVALID
    failure = json.loads((tmp_path / "termination-log").read_text())
    assert failure["reason"] == "Invalid" and "pip install 'modelscope>=1.40'" in failure["message"]


def test_a_token_in_an_error_message_is_masked_in_the_termination_message(tmp_path):
    request = FetchRequest(repo_id="org/name", cache_root=str(tmp_path / "cache"), token_env="MY_TOKEN")
    log = tmp_path / "termination-log"
    fetcher = Fetcher(request, FetchOptions(progress_port=0, termination_log=str(log)),
                      env={"MY_TOKEN": TOKEN})
    code = fetcher.fail(ConnectionError(f"proxy said: bad header Authorization: Bearer {TOKEN}"))
    assert code is FetchExit.NETWORK
    failure = json.loads(log.read_text())
    assert TOKEN not in log.read_text() and "Bearer ***" in failure["message"]


# ---------------------------------------------------------------------------------------------
# ModelScope: the real `modelscope` client against tests/fakes/fake_modelscope.py
# ---------------------------------------------------------------------------------------------

MS_TOKEN = "ms-test-secret-token-456"


@pytest.fixture
def _modelscope_home(tmp_path, monkeypatch):
    # The client's session file and default cache, its endpoint and token lookup: never the user's.
    monkeypatch.setenv("MODELSCOPE_HOME", str(tmp_path / "ms-home"))
    monkeypatch.setenv("MODELSCOPE_CACHE", str(tmp_path / "ms-cache"))
    for name in ("MODELSCOPE_API_TOKEN", "MODELSCOPE_ENDPOINT", "MODELSCOPE_DOMAIN"):
        monkeypatch.delenv(name, raising=False)


def ms_repo(files: dict[str, bytes], token: str | None = None) -> FakeRepo:
    repo = FakeRepo(token=token)
    repo.add(files, "master")
    return repo


def ms_fetch(hub: FakeModelScope, root: Path, env: dict[str, str] | None = None, **fields
             ) -> tuple[FetchExit, Fetcher]:
    return fetch(hub, root, env, hub_="modelscope", **fields)


@pytest.mark.usefixtures("_modelscope_home")
def test_modelscope_download_writes_the_marker_and_a_second_run_asks_the_hub_nothing(tmp_path, tiny_files):
    root = tmp_path / "cache"
    files = {**tiny_files, "tokenizer/added_tokens.json": b"{}"}  # a directory: a "tree" entry
    with FakeModelScope({REPO_ID: ms_repo(files)}) as hub:
        code, fetcher = ms_fetch(hub, root)
        assert code is FetchExit.OK, termination(root)
        request = fetcher.request
        snapshot = Path(request.model_dir)
        assert snapshot == root / "models" / "modelscope" / "tiny" / "llama" / "default"
        for name, data in files.items():
            assert (snapshot / name).read_bytes() == data
        marker = CacheMarker.model_validate_json(Path(request.marker_path).read_text())
        assert marker.hub.value == "modelscope"
        assert marker.files == len(files) and marker.total_bytes == sum(len(d) for d in files.values())
        assert marker.commit is None, "ModelScope's listing names no commit: the requested revision (none)"
        assert marker.incomplete(snapshot) is None
        assert sorted(r.path.split("/@file/")[1] for r in hub.file_downloads()) == sorted(files)
        assert hub.unknown == [], "every endpoint the client called is one the fake implements"
        assert not [p for p in (tmp_path / "ms-cache").rglob("*") if p.is_file()], \
            "the client's lock files stay below the snapshot, not in its default cache"
        assert list((snapshot / ".cache" / "modelscope" / ".lock").iterdir())
        progress = fetcher.progress.get()
        assert progress.phase is FetchPhase.COMPLETE and progress.bytes_done == progress.bytes_total

        before = hub.count()
        code, again = ms_fetch(hub, root)
        assert code is FetchExit.OK
        assert hub.count() == before, "an already cached model costs no request to the hub"
        assert again.progress.get().phase is FetchPhase.COMPLETE

        (snapshot / "config.json").unlink()
        code, _ = ms_fetch(hub, root)
        assert code is FetchExit.OK
        assert [r.path.rsplit("/", 1)[-1] for r in hub.file_downloads()].count("config.json") == 2
        assert len(hub.file_downloads()) == len(files) + 1, "only the missing file is fetched again"

        # '*' matches the directory's "tree" entry too: it is no file to expect.
        code, everything = ms_fetch(hub, tmp_path / "all" / "cache", allowPatterns=["*"])
        assert code is FetchExit.OK, termination(tmp_path / "all" / "cache")
        marker = CacheMarker.model_validate_json(Path(everything.request.marker_path).read_text())
        assert marker.files == len(files)


@pytest.mark.usefixtures("_modelscope_home")
def test_modelscope_fetches_the_pinned_revision(tmp_path, tiny_files):
    repo = FakeRepo()
    old = {**tiny_files, "config.json": b'{"version": "old"}'}
    old_sha = repo.add(old, "v1")
    repo.add(tiny_files, "master")
    with FakeModelScope({REPO_ID: repo}) as hub:
        code, fetcher = ms_fetch(hub, tmp_path / "tag" / "cache", revision="v1")
        assert code is FetchExit.OK
        snapshot = Path(fetcher.request.model_dir)
        assert snapshot.name == "v1"
        assert (snapshot / "config.json").read_bytes() == b'{"version": "old"}'
        marker = CacheMarker.model_validate_json(Path(fetcher.request.marker_path).read_text())
        assert marker.revision == "v1" and marker.commit == "v1"

        code, by_sha = ms_fetch(hub, tmp_path / "sha" / "cache", revision=old_sha)
        assert code is FetchExit.OK
        assert (Path(by_sha.request.model_dir) / "config.json").read_bytes() == b'{"version": "old"}'


@pytest.mark.usefixtures("_modelscope_home")
def test_modelscope_sends_the_token_and_a_wrong_or_missing_one_is_unauthorized(tmp_path, tiny_files):
    with FakeModelScope({REPO_ID: ms_repo(tiny_files, token=MS_TOKEN)}) as hub:
        code, _ = ms_fetch(hub, tmp_path / "ok" / "cache", env={"MODELSCOPE_API_TOKEN": MS_TOKEN})
        assert code is FetchExit.OK
        assert {r.authorization for r in hub.file_downloads()} == {f"Bearer {MS_TOKEN}"}

        wrong = "ms-wrong-token-which-is-secret"
        root = tmp_path / "wrong" / "cache"
        code, fetcher = ms_fetch(hub, root, env={"MY_TOKEN": wrong}, tokenEnv="MY_TOKEN")
        assert code is FetchExit.UNAUTHORIZED
        message = termination(root)
        assert message["reason"] == "Unauthorized"
        assert wrong not in json.dumps(message) and "cannot access tiny/llama" in message["message"]
        assert not Path(fetcher.request.marker_path).exists()

        root = tmp_path / "none" / "cache"
        code, _ = ms_fetch(hub, root)
        assert code is FetchExit.UNAUTHORIZED, "a private repo without a token"
        assert termination(root)["reason"] == "Unauthorized"
        assert len(hub.file_downloads()) == len(tiny_files), "no file was fetched without the token"


@pytest.mark.usefixtures("_modelscope_home")
def test_modelscope_unknown_repo_or_revision_is_not_found_and_an_unreachable_hub_is_network(
        tmp_path, tiny_files):
    with FakeModelScope({REPO_ID: ms_repo(tiny_files)}) as hub:
        root = tmp_path / "repo" / "cache"
        code, _ = ms_fetch(hub, root, repoId="tiny/nothing-here")
        assert code is FetchExit.NOT_FOUND
        assert termination(root)["reason"] == "NotFound"

        root = tmp_path / "rev" / "cache"
        code, _ = ms_fetch(hub, root, revision="no-such-tag")
        assert code is FetchExit.NOT_FOUND
        assert termination(root)["reason"] == "NotFound"
        assert hub.file_downloads() == []
        closed = hub.url
    root = tmp_path / "down" / "cache"
    request = {"hub": "modelscope", "repoId": REPO_ID, "cacheRoot": str(root), "endpoint": closed}
    # The client retries a refused connection; one attempt each keeps the test short.
    run = _fetch_cli(request, root.parent / "termination-log",
                     {"MODELSCOPE_HOME": str(tmp_path / "ms-home"), "MODELSCOPE_API_MAX_RETRIES": "1",
                      "MODELSCOPE_REPO_TREE_PAGE_MAX_ATTEMPTS": "1"})
    assert run.returncode == FetchExit.NETWORK == 6, run.stderr[-3000:]
    assert termination(root)["reason"] == "Network"


@pytest.mark.usefixtures("_modelscope_home")
def test_modelscope_hub_outage_is_network(tmp_path, tiny_files, monkeypatch):
    import modelscope_hub._legacy_api as legacy

    monkeypatch.setattr(legacy, "REPO_TREE_PAGE_MAX_ATTEMPTS", 1)  # the client's own retries: one try
    with FakeModelScope({REPO_ID: ms_repo(tiny_files)}) as hub:
        hub.fail(503)
        root = tmp_path / "cache"
        code, fetcher = ms_fetch(hub, root)
        assert code is FetchExit.NETWORK, termination(root)
        assert termination(root)["reason"] == "Network"
        assert not Path(fetcher.request.marker_path).exists()


@pytest.mark.usefixtures("_modelscope_home")
def test_modelscope_allow_patterns_and_the_endpoint_from_modelscope_domain(tmp_path, tiny_files):
    extra = {"pytorch_model.bin": b"pickle", "modeling.py": b"x = 1"}
    with FakeModelScope({REPO_ID: ms_repo({**tiny_files, **extra})}) as hub:
        code, fetcher = ms_fetch(hub, tmp_path / "json" / "cache", allowPatterns=["*.json"])
        assert code is FetchExit.OK
        present = sorted(p.name for p in Path(fetcher.request.model_dir).iterdir() if p.is_file())
        assert present == sorted(n for n in tiny_files if n.endswith(".json"))

        root = tmp_path / "none" / "cache"
        code, _ = ms_fetch(hub, root, allowPatterns=["*.gguf"])
        assert code is FetchExit.NOT_FOUND
        assert "no file matching allowPatterns ['*.gguf']" in termination(root)["message"]

        # No endpoint in the request: the client reads MODELSCOPE_DOMAIN (in the Job's process, as
        # here: the client keeps the configuration it read first for the rest of a process).
        root = tmp_path / "env" / "cache"
        before = len(hub.file_downloads())
        run = _fetch_cli({"hub": "modelscope", "repoId": REPO_ID, "cacheRoot": str(root)},
                         root.parent / "termination-log", {"MODELSCOPE_DOMAIN": hub.url})
        assert run.returncode == FetchExit.OK, run.stderr[-3000:]
        snapshot = root / "models" / "modelscope" / "tiny" / "llama" / "default"
        names = {p.name for p in snapshot.iterdir() if p.is_file()}
        assert "model.safetensors" in names
        assert "pytorch_model.bin" not in names and "modeling.py" not in names
        assert len(hub.file_downloads()) - before == len(tiny_files)


@pytest.mark.usefixtures("_modelscope_home")
def test_modelscope_progress_shows_the_bytes_while_downloading(tmp_path, tiny_files):
    """The client writes ``<file>.incomplete`` beside the target in 1 MiB chunks: half of an
    8 MiB shard is on disk while the hub holds the rest back."""

    root = tmp_path / "cache"
    files = {**tiny_files, "model-extra.safetensors": bytes(range(256)) * (8 * 4096)}
    total = sum(len(d) for d in files.values())
    partial = sum(len(d) for d in tiny_files.values()) + 2 * 1024 * 1024  # the rest, and half the shard
    with FakeModelScope({REPO_ID: ms_repo(files)}) as hub:
        release = hub.hold("model-extra.safetensors")
        fetcher = make_fetcher(hub, root, hub_="modelscope")
        result: list[FetchExit] = []
        thread = threading.Thread(target=lambda: result.append(fetcher.run()))
        thread.start()
        deadline = time.monotonic() + 30
        seen = None
        try:
            while time.monotonic() < deadline:
                seen = get_progress(fetcher)
                if seen and seen["phase"] == "Downloading" and seen["bytesDone"] >= partial:
                    break
                time.sleep(0.2)
            assert seen is not None and seen["phase"] == "Downloading", seen
            assert partial <= seen["bytesDone"] < total, seen
            assert seen["filesDone"] == len(tiny_files), seen
            assert seen["bytesTotal"] == total and seen["filesTotal"] == len(files)
        finally:
            release.set()
            thread.join(60)
        assert result == [FetchExit.OK]
        assert fetcher.progress.get().bytes_done == total


# ---------------------------------------------------------------------------------------------
# Hub LoRA adapters: the operator's request, fetched, where the adapters ConfigMap points
# ---------------------------------------------------------------------------------------------

ADAPTER_FILES = {
    "adapter_config.json": json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 16,
                                       "target_modules": ["q_proj", "v_proj"]}).encode(),
    "adapter_model.safetensors": bytes(range(256)) * 64,
    "README.md": b"# an adapter card, not fetched",
}


@pytest.mark.usefixtures("_modelscope_home")
@pytest.mark.parametrize("source", ["huggingFace", "modelScope"])
def test_a_hub_adapter_is_fetched_where_its_configmap_entry_points_and_the_runtime_accepts_it(tmp_path, source):
    import yaml
    from ascend_operator.api import parse_spec
    from ascend_operator.builders import BuildMeta, Remembered, build_children
    from ascend_operator.builders.modelcache import CACHE_DIR, plan_adapter_fetches
    from ascend_operator.settings import load_settings
    from ascend_runtime.adapters import download_problem
    from ascend_runtime.config import ADAPTERS_FILE_KEY, parse_adapter_set

    spec = parse_spec({"model": {"pvc": {"claimName": "weights"}, "cache": {"claimName": "cache"}},
                       "platform": "CPU", "lora": {"adapters": [{"name": "sql", "source": {source: {
                           "id": "org/sql-lora", "tokenSecretRef": {"name": "hub", "key": "token"}}}}]}})
    settings = load_settings({})
    (planned,) = plan_adapter_fetches(spec, settings)
    root = tmp_path / "cache"  # the claim, where the Job mounts it at CACHE_DIR
    if source == "huggingFace":
        hub, repo = FakeHub, make_repo(ADAPTER_FILES, token=TOKEN)
    else:
        hub, repo = FakeModelScope, ms_repo(ADAPTER_FILES, token=TOKEN)
    with hub({"org/sql-lora": repo}) as fake:
        # What the fetch Job runs: the operator's request (its Job's command), on this machine's paths.
        request = planned.request.model_copy(update={"cache_root": str(root), "endpoint": fake.url})
        fetcher = Fetcher(request, FetchOptions(progress_host="127.0.0.1", progress_port=0,
                                                termination_log=str(tmp_path / "termination-log")),
                          env={request.default_token_env(): TOKEN})  # the Job's env from tokenSecretRef
        code = fetcher.run()
        assert code is FetchExit.OK, (tmp_path / "termination-log").read_text()

    # The entry the operator writes once the Job completed, seen where a pod mounts the cache.
    completed = frozenset({planned.job_name("demo", settings, "cache")})
    children = build_children(BuildMeta("demo", "llm"), spec, settings, Remembered(adapter_jobs_complete=completed))
    (entry,) = parse_adapter_set(yaml.safe_load(children.adapters_configmap["data"][ADAPTERS_FILE_KEY])).adapters
    assert entry.path.startswith(f"{CACHE_DIR}/models/") and entry.cache_marker.startswith(f"{CACHE_DIR}/models/")
    local = entry.model_copy(update={"path": entry.path.replace(CACHE_DIR, str(root), 1),
                                     "cache_marker": entry.cache_marker.replace(CACHE_DIR, str(root), 1)})
    assert download_problem(local) is None
    fetched = sorted(p.name for p in Path(local.path).iterdir() if p.is_file())
    assert fetched == ["adapter_config.json", "adapter_model.safetensors"]  # what vLLM loads, no card
    assert Path(local.path, "adapter_model.safetensors").read_bytes() == ADAPTER_FILES["adapter_model.safetensors"]
    # A file lost afterwards is seen before the engine is asked to load.
    Path(local.path, "adapter_model.safetensors").unlink()
    assert "incomplete" in download_problem(local)
