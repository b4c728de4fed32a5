"""The KV transfer renderer against the keys read by each vllm-ascend version (docs/kv-transfer.md)."""

from __future__ import annotations

import json

import pytest

from ascend_runtime.kvtransfer import (
    HCCN_CONF,
    HCCN_TOOL,
    Connector,
    KvGeometry,
    KvPlatform,
    KvTransferError,
    KvTransferInputs,
    Parallelism,
    PdRole,
    Transport,
    check_kv_transfer,
    default_connector,
    render_kv_transfer,
)

ASCEND = KvPlatform.ASCEND
TP4 = Parallelism(tensor=4)
TP2 = Parallelism(tensor=2)
#: Qwen3-8B-like: 36 layers, 8 KV heads of 128, bf16.
DENSE = KvGeometry(layers=36, kv_heads=8, head_dim=128, dtype_bytes=2)


def pd(version: str, role: PdRole = PdRole.PREFILL, **kw) -> KvTransferInputs:
    base = dict(platform=ASCEND, role=role, parallel=TP4, peer=TP2 if role is PdRole.PREFILL else TP4,
                vllm_ascend=version)
    if role is PdRole.DECODE:
        base["parallel"] = TP2
    base.update(kw)
    return KvTransferInputs(**base)


def refusal(inputs: KvTransferInputs, field_name: str) -> KvTransferError:
    with pytest.raises(KvTransferError) as info:
        render_kv_transfer(inputs)
    errors = check_kv_transfer(inputs, need_geometry=True)
    assert field_name in [e.field for e in errors], errors
    return next(e for e in errors if e.field == field_name)


# --- which connector per version ----------------------------------------------------------------

@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.8.5rc1", None),
        ("0.9.0rc2", None),
        ("0.9.1rc2", Connector.LLMDATADIST),
        ("0.9.1", Connector.LLMDATADIST),
        ("0.9.2rc1", None),  # main-branch 0.9.2rc1 registers no LLMDataDistCMgrConnector
        ("0.10.0rc1", Connector.LLMDATADIST),
        ("0.10.1rc1", Connector.MOONCAKE),
        ("v0.10.2rc1", Connector.MOONCAKE),
        ("0.11.0", Connector.MOONCAKE),
        ("0.13.0", Connector.MOONCAKE),
        ("0.23.0", Connector.MOONCAKE),
    ],
)
def test_default_connector_follows_what_each_version_registers(version, expected):
    assert default_connector(ASCEND, version) is expected


def test_a_version_without_any_pd_connector_is_refused_naming_the_versions_that_have_one():
    err = refusal(pd("0.9.2rc1"), "connector")
    assert "0.10.1rc1" in err.fix and "LLMDataDistCMgrConnector" in err.fix


def test_an_unknown_version_is_refused():
    err = refusal(pd("latest"), "vllmAscend")
    assert "tag" in err.fix


# --- MooncakeConnectorV1 ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["0.10.1rc1", "0.10.2rc1", "0.11.0", "0.12.0rc1", "0.13.0", "0.18.0", "0.23.0"])
def test_mooncake_prefill_config_has_the_keys_the_worker_reads(version):
    plan = render_kv_transfer(pd(version, engine_id="prefill-0"))
    cfg = plan.kv_transfer_config
    assert cfg == {
        "kv_connector": "MooncakeConnectorV1",
        "kv_role": "kv_producer",
        "kv_buffer_device": "npu",
        "engine_id": "prefill-0",
        "kv_port": 28000,
        "kv_connector_extra_config": {"prefill": {"dp_size": 1, "tp_size": 4}, "decode": {"dp_size": 1, "tp_size": 2}},
    }
    assert plan.env_from_pod_ip == ("HCCL_IF_IP",)
    assert {m.path for m in plan.mounts} == {HCCN_CONF, HCCN_TOOL}
    assert plan.ports == (28000, 28003)  # one handshake port per rank: dp 1 x tp 4
    args = plan.args()
    assert args[0] == "--kv-transfer-config" and json.loads(args[1]) == cfg


def test_mooncake_decode_is_the_consumer_with_the_same_extra_config():
    prefill = render_kv_transfer(pd("0.23.0")).kv_transfer_config
    decode = render_kv_transfer(pd("0.23.0", role=PdRole.DECODE)).kv_transfer_config
    assert decode["kv_role"] == "kv_consumer"
    assert decode["kv_connector_extra_config"] == prefill["kv_connector_extra_config"]
    assert "engine_id" not in decode  # vLLM then draws a random one per engine


def test_prefill_tp_below_decode_tp_is_refused():
    inputs = pd("0.23.0", parallel=TP2, peer=TP4)
    err = refusal(inputs, "prefill.parallel.tensor")
    assert "prefill TP >= decode TP" in err.problem
    # the same pair seen from the decode side
    refusal(pd("0.23.0", role=PdRole.DECODE, parallel=TP4, peer=TP2), "prefill.parallel.tensor")


def test_pp_size_is_rendered_from_0_12_and_refused_before():
    pp = Parallelism(tensor=4, pipeline=2)
    cfg = render_kv_transfer(pd("0.12.0rc1", parallel=pp)).kv_transfer_config
    assert cfg["kv_connector_extra_config"]["prefill"] == {"dp_size": 1, "tp_size": 4, "pp_size": 2}
    refusal(pd("0.11.0", parallel=pp), "prefill.parallel.pipeline")
    refusal(pd("0.23.0", role=PdRole.DECODE, parallel=Parallelism(tensor=2, pipeline=2)), "decode.parallel.pipeline")


@pytest.mark.parametrize(("npus", "port"), [(8, 28000), (16, 36000)])
def test_default_kv_port_clears_the_transfer_engine_range(npus, port):
    assert render_kv_transfer(pd("0.23.0", npus_per_node=npus)).kv_transfer_config["kv_port"] == port


@pytest.mark.parametrize(("kv_port", "ok"), [(20001, False), (27997, False), (28000, True), (19990, True),
                                             (19998, False), (65535, False)])
def test_kv_port_overlapping_the_transfer_engine_range_is_refused(kv_port, ok):
    inputs = pd("0.23.0", kv_port=kv_port)  # four ports: kv_port .. kv_port + 3
    errors = check_kv_transfer(inputs)
    assert (not errors) is ok, errors
    if not ok:
        assert errors[0].field == "kvPort"


def test_data_parallel_widens_the_port_range():
    plan = render_kv_transfer(pd("0.23.0", parallel=Parallelism(tensor=4, data=2), kv_port=30000))
    assert plan.ports == (30000, 30007)


def test_timeouts_and_transport_env_by_version():
    plan = render_kv_transfer(pd("0.23.0", connect_timeout_ms=10000, transfer_timeout_ms=10000,
                                 transport=Transport.FABRIC_MEM))
    assert plan.env == {"ASCEND_CONNECT_TIMEOUT": "10000", "ASCEND_TRANSFER_TIMEOUT": "10000",
                        "ASCEND_ENABLE_USE_FABRIC_MEM": "1"}
    assert render_kv_transfer(pd("0.22.1rc1", transport=Transport.BUFFER_POOL)).env == {"ASCEND_BUFFER_POOL": "4:8"}
    assert render_kv_transfer(pd("0.13.0", transport=Transport.ROCE)).env == {"HCCL_INTRA_ROCE_ENABLE": "1"}
    err = refusal(pd("0.23.0", transport=Transport.BUFFER_POOL), "transport")
    assert "fabricMem" in err.fix and "roce" in err.fix
    refusal(pd("0.13.0", transport=Transport.FABRIC_MEM), "transport")


# --- LLMDataDistCMgrConnector ------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["0.9.1", "0.10.0rc1", "0.11.0"])
def test_llmdatadist_needs_a_rank_table_and_renders_it(version):
    inputs = pd(version, connector=Connector.LLMDATADIST)
    err = refusal(inputs, "rankTablePath")
    assert "gen_ranktable.sh" in err.fix
    plan = render_kv_transfer(pd(version, connector=Connector.LLMDATADIST, rank_table_path="/etc/pd/ranktable.json"))
    assert plan.kv_transfer_config == {"kv_connector": "LLMDataDistCMgrConnector", "kv_role": "kv_producer",
                                       "kv_buffer_device": "npu"}
    assert plan.env == {"DISAGGREGATED_PREFILL_RANK_TABLE_PATH": "/etc/pd/ranktable.json"}
    assert plan.env_from_pod_ip == ("HCCL_IF_IP",)


def test_llmdatadist_is_refused_from_0_12_and_mooncake_before_0_10_1():
    err = refusal(pd("0.12.0rc1", connector=Connector.LLMDATADIST, rank_table_path="/r.json"), "connector")
    assert "MooncakeConnectorV1" in err.fix
    refusal(pd("0.10.0rc1", connector=Connector.MOONCAKE), "connector")


# --- KV offload -------------------------------------------------------------------------------------

def test_offload_alone_renders_the_npu_offloading_spec_sized_in_blocks():
    inputs = KvTransferInputs(platform=ASCEND, vllm_ascend="0.23.0", parallel=TP4, offload_gib=64, geometry=DENSE)
    cfg = render_kv_transfer(inputs).kv_transfer_config
    # one 128-token block: 128 x 36 layers x 2 (K, V) x 8 heads x 128 x 2 bytes = 18 MiB
    assert cfg == {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"num_cpu_blocks": 64 * 1024 // 18, "block_size": 128,
                                      "spec_name": "NPUOffloadingSpec", "spec_module_path": "vllm_ascend.kv_offload.npu"},
    }


def test_offload_with_pd_is_a_multiconnector_pd_first():
    cfg = render_kv_transfer(pd("0.23.0", role=PdRole.DECODE, offload_gib=8, geometry=DENSE)).kv_transfer_config
    assert cfg["kv_connector"] == "MultiConnector" and cfg["kv_role"] == "kv_consumer"
    children = cfg["kv_connector_extra_config"]["connectors"]
    assert [c["kv_connector"] for c in children] == ["MooncakeConnectorV1", "OffloadingConnector"]


def test_offload_refusals():
    base = dict(platform=ASCEND, parallel=TP4, offload_gib=8)
    err = refusal(KvTransferInputs(**base, vllm_ascend="0.23.0", geometry=KvGeometry(61, 1, 576, mla=True)),
                  "offload.sizeGiB")
    assert "#7971" in err.problem
    refusal(KvTransferInputs(**base, vllm_ascend="0.11.0", geometry=DENSE), "offload.sizeGiB")
    refusal(KvTransferInputs(**base, vllm_ascend="0.23.0", geometry=DENSE, offload_block_size=100), "offload.blockSize")
    refusal(KvTransferInputs(**base, vllm_ascend="0.23.0"), "geometry")
    # admission has no geometry yet: nothing to refuse
    assert check_kv_transfer(KvTransferInputs(**base, vllm_ascend="0.23.0")) == []
    err = refusal(KvTransferInputs(platform=KvPlatform.CPU, offload_gib=1, geometry=DENSE), "offload.sizeGiB")
    assert "CUDA-alike and XPU" in err.problem


def test_geometry_from_a_hugging_face_config():
    llama = {"num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "hidden_size": 128,
             "dtype": "float32"}
    assert KvGeometry.from_hf_config(llama) == KvGeometry(layers=2, kv_heads=2, head_dim=64, dtype_bytes=4)
    deepseek = {"num_hidden_layers": 61, "num_attention_heads": 128, "hidden_size": 7168, "kv_lora_rank": 512,
                "torch_dtype": "bfloat16"}
    assert KvGeometry.from_hf_config(deepseek).mla
    vl = {"text_config": {"num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
                          "head_dim": 128, "hidden_size": 1024}}
    assert KvGeometry.from_hf_config(vl) == KvGeometry(layers=4, kv_heads=2, head_dim=128, dtype_bytes=2)
    # fewer KV heads than TP ranks: each rank keeps one, so the host copy grows with TP
    assert KvGeometry(2, 2, 64).block_bytes(128, 4) == 2 * KvGeometry(2, 2, 64).block_bytes(128, 2)


# --- CPU ---------------------------------------------------------------------------------------------

def test_cpu_nixl_is_producer_or_consumer_on_cpu_buffers_with_its_side_channel():
    inputs = KvTransferInputs(platform=KvPlatform.CPU, role=PdRole.DECODE, peer=Parallelism(), side_channel_port=5601)
    plan = render_kv_transfer(inputs)
    assert plan.kv_transfer_config == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                                       "kv_buffer_device": "cpu"}
    assert plan.env == {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5601"}
    assert plan.env_from_pod_ip == ("VLLM_NIXL_SIDE_CHANNEL_HOST",)
    assert plan.mounts == ()


def test_cpu_example_connector_needs_the_shared_path():
    inputs = KvTransferInputs(platform=KvPlatform.CPU, role=PdRole.PREFILL, peer=Parallelism(),
                              connector=Connector.EXAMPLE)
    refusal(inputs, "sharedStoragePath")
    plan = render_kv_transfer(KvTransferInputs(platform=KvPlatform.CPU, role=PdRole.PREFILL, peer=Parallelism(),
                                               connector=Connector.EXAMPLE, shared_storage_path="/kv"))
    assert plan.kv_transfer_config == {"kv_connector": "ExampleConnector", "kv_role": "kv_producer",
                                       "kv_connector_extra_config": {"shared_storage_path": "/kv"}}
    refusal(KvTransferInputs(platform=KvPlatform.CPU, role=PdRole.PREFILL, peer=Parallelism(),
                             connector=Connector.MOONCAKE), "connector")


def test_all_refusals_are_reported_at_once():
    inputs = pd("0.23.0", parallel=TP2, peer=TP4, kv_port=20000, transport=Transport.BUFFER_POOL)
    fields = {e.field for e in check_kv_transfer(inputs)}
    assert fields == {"prefill.parallel.tensor", "kvPort", "transport"}
    with pytest.raises(KvTransferError) as info:
        render_kv_transfer(inputs)
    assert "also:" in "".join(getattr(info.value, "__notes__", []))


def test_the_renderer_imports_only_the_standard_library_and_packaging():
    """The operator imports this module (pyproject's import-linter contract), so it stays pure."""
    import ast
    import sys
    from pathlib import Path

    import ascend_runtime.kvtransfer as module

    tree = ast.parse(Path(module.__file__).read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert roots - set(sys.stdlib_module_names) == {"packaging"}


def test_the_two_step_protocol_bodies():
    from ascend_runtime.kvtransfer import decode_request, prefill_request

    body = {"model": "m", "prompt": "hello", "max_tokens": 32, "stream": True, "temperature": 0}
    first = prefill_request(body)
    assert first["max_tokens"] == 1 and "stream" not in first
    assert first["kv_transfer_params"]["do_remote_decode"] is True
    assert first["kv_transfer_params"]["do_remote_prefill"] is False
    assert body["max_tokens"] == 32 and "kv_transfer_params" not in body  # the caller's body is untouched
    params = {"do_remote_prefill": True, "remote_engine_id": "p", "remote_block_ids": [1, 2],
              "remote_host": "10.0.0.1", "remote_port": 5600}
    second = decode_request(body, {"choices": [], "kv_transfer_params": params})
    assert second == {**body, "kv_transfer_params": params}
    with pytest.raises(ValueError, match="kv_producer"):
        decode_request(body, {"choices": [], "kv_transfer_params": None})
