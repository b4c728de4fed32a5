"""The pure parts of bench/pd_latency.py: prompts, the ABBA order, reading the stream (TTFT, ITL,
token ids), the decode engine's prompt tokens by source and the KV check, the decode leg per
connector, the engines' wiring and command line, per-pair ratios, the verdicts, the options and
the report. Synthetic inputs; nothing here starts a process or sends a request."""

from __future__ import annotations

import argparse
import json
import re

import pytest
from benchload import load_bench

pd = load_bench("pd_latency")

# Cut from a real vLLM 0.32 CPU engine's /metrics (the tiny model, a consumer after one NIXL request).
METRICS = """\
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 0.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 0.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="external_kv_transfer"} 479.0
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 479.0
"""


# -- prompts and order -----------------------------------------------------------------------

def test_prompts_have_the_length_are_reproducible_and_never_repeat_across_pairs_phases_and_lengths():
    prompts = pd.make_prompts(0, "ExampleConnector", 2, 160, 3)
    assert [len(p) for p in prompts] == [160, 160, 160]
    assert all(pd.TOKEN_IDS[0] <= t < pd.TOKEN_IDS[1] for p in prompts for t in p)
    assert pd.make_prompts(0, "ExampleConnector", 2, 160, 3) == prompts  # both sides of a pair get these
    assert len({tuple(p) for p in prompts}) == 3
    others = [pd.make_prompts(0, "ExampleConnector", 3, 160, 3), pd.make_prompts(0, "NixlConnector", 2, 160, 3),
              pd.make_prompts(1, "ExampleConnector", 2, 160, 3)]
    assert all(not {tuple(p) for p in prompts} & {tuple(p) for p in other} for other in others)
    assert pd.make_prompts(0, "ExampleConnector", 2, 480, 1)[0][:160] not in prompts


def test_rounds_alternate_abba_and_pair_up():
    assert pd.alternation(3) == [("colocated", 0), ("pd", 0), ("pd", 1), ("colocated", 1),
                                 ("colocated", 2), ("pd", 2)]
    with pytest.raises(ValueError, match="at least 1"):
        pd.alternation(0)


# -- the stream ------------------------------------------------------------------------------

def test_sse_lines_give_their_json_and_nothing_else():
    assert pd.parse_sse('data: {"choices": []}\n') == {"choices": []}
    assert pd.parse_sse("data: [DONE]") is None
    assert pd.parse_sse("") is None
    assert pd.parse_sse(": keep-alive") is None


def test_chunk_tokens_reads_return_token_ids_and_skips_usage_chunks():
    assert pd.chunk_tokens({"choices": [{"text": "a b", "token_ids": [5, 6]}]}) == [5, 6]
    assert pd.chunk_tokens({"choices": [], "usage": {"completion_tokens": 4}}) == []
    assert pd.chunk_tokens({"choices": [{"text": "", "token_ids": None}]}) == []


def test_ttft_runs_to_the_first_token_and_itl_spreads_a_multi_token_chunk():
    timing = pd.stream_timing(10.0, [(10.5, 0), (10.75, 1), (10.8, 1), (11.0, 2), (11.2, 0)])
    assert timing.ttft_s == pytest.approx(0.75)
    assert timing.itl_s == pytest.approx([0.05, 0.1, 0.1])
    assert timing.tokens == 4
    first_two = pd.stream_timing(0.0, [(1.0, 2), (1.5, 1)])
    assert first_two.itl_s == pytest.approx([0.0, 0.5]) and first_two.tokens == 3
    with pytest.raises(ValueError, match="no token"):
        pd.stream_timing(0.0, [(1.0, 0)])


def test_summaries_give_median_p90_and_range():
    summary = pd.summarize([float(v) for v in range(1, 11)])
    assert summary == pd.Summary(n=10, median=5.5, p90=pytest.approx(9.1), low=1.0, high=10.0)
    assert pd.summarize([]) is None


# -- the KV check ----------------------------------------------------------------------------

def test_prompt_tokens_by_source_are_read_and_their_absence_is_an_error():
    before = pd.parse_prompt_sources(METRICS)
    assert before == {"local_compute": 0.0, "local_cache_hit": 0.0, "external_kv_transfer": 479.0}
    after = pd.parse_prompt_sources(METRICS.replace("} 0.0\nvllm:prompt_tokens_by_source_total{engine=\"0\","
                                                    "model_name=\"tiny\",source=\"local_cache_hit\"",
                                                    "} 65.0\nvllm:prompt_tokens_by_source_total{engine=\"0\","
                                                    "model_name=\"tiny\",source=\"local_cache_hit\""))
    assert pd.source_delta(before, after) == {"local_compute": 65.0, "local_cache_hit": 0.0,
                                              "external_kv_transfer": 0.0}
    with pytest.raises(ValueError, match="prompt_tokens_by_source_total"):
        pd.parse_prompt_sources('vllm:prompt_tokens_total{engine="0"} 5.0\n')


def test_examples_connector_loads_whole_blocks_of_all_but_the_last_token_nixl_the_whole_prompt():
    assert pd.expected_loaded(pd.Connector.EXAMPLE, 577) == 512  # the engine test's figures
    assert pd.expected_loaded(pd.Connector.EXAMPLE, 129) == 128
    assert pd.expected_loaded(pd.Connector.EXAMPLE, 128) == 0
    assert pd.expected_loaded(pd.Connector.NIXL, 479) == 479


def test_kv_moved_only_when_the_decode_engine_computed_under_a_block_per_request_and_loaded_the_rest():
    # the engine tier's measured figures: ExampleConnector 577 -> 65 / 512; NIXL 479 -> 0 / 479
    assert pd.KvCheck(577 * 3, 3, 65 * 3, 512 * 3, 512 * 3).moved
    assert pd.KvCheck(479, 1, 0, 479, 479).moved
    assert not pd.KvCheck(479, 1, 479, 0, 479).moved  # prefilled again on the decode engine
    assert not pd.KvCheck(577, 1, 200, 377, 512).moved
    assert not pd.KvCheck(0, 0, 0, 0, 0).moved


def test_the_decode_leg_carries_the_prefills_params_for_nixl_and_is_the_request_for_example_connector():
    body = {"model": "tiny", "prompt": [11, 12], "max_tokens": 8}
    params = {"remote_engine_id": "prefill-0", "remote_block_ids": [1], "remote_host": "127.0.0.1",
              "remote_port": 5600}
    assert pd.decode_leg(pd.Connector.NIXL, body, {"kv_transfer_params": params}) == {**body,
                                                                                      "kv_transfer_params": params}
    assert pd.decode_leg(pd.Connector.EXAMPLE, body, {"kv_transfer_params": None}) == body
    with pytest.raises(ValueError, match="no kv_transfer_params"):
        pd.decode_leg(pd.Connector.NIXL, body, {"kv_transfer_params": None})


# -- the engines -----------------------------------------------------------------------------

def test_each_role_is_wired_by_the_renderers_cpu_branch_with_the_pod_ip_on_loopback():
    args, env = pd.role_wiring(pd.Connector.NIXL, pd.PdRole.DECODE, 5601, None)
    assert args[0] == "--kv-transfer-config"
    assert json.loads(args[1]) == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                                   "kv_buffer_device": "cpu", "engine_id": "decode-0"}
    assert env == {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5601", "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1"}
    args, env = pd.role_wiring(pd.Connector.EXAMPLE, pd.PdRole.PREFILL, 5602, pd.Path("/tmp/kv"))
    assert json.loads(args[1]) == {"kv_connector": "ExampleConnector", "kv_role": "kv_producer",
                                   "kv_connector_extra_config": {"shared_storage_path": "/tmp/kv"}}
    assert env == {}


def test_every_engine_runs_on_one_core_with_the_engine_tiers_settings():
    argv = pd.engine_argv("/m", 8123, "1", ["--kv-transfer-config", "{}"])
    assert argv[:3] == ["taskset", "-c", "1"]
    assert argv[-2:] == ["--kv-transfer-config", "{}"]
    for flag in ("--enforce-eager", "--no-enable-prefix-caching"):
        assert flag in argv
    assert argv[argv.index("--port") + 1] == "8123" and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert pd.CORES["prefill"] != pd.CORES["decode"]


def test_the_colocated_engine_shares_the_prefill_core_unless_told_the_decode_core():
    assert pd.options_from_args(args()).cores == {"colocated": "0", "prefill": "0", "decode": "1"}
    assert pd.options_from_args(args(colocated_core=1)).cores == {"colocated": "1", "prefill": "0", "decode": "1"}


def test_the_nixl_path_is_made_absolute_since_each_engine_runs_in_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert pd.options_from_args(args(nixl_path="a:b")).nixl_path == f"{tmp_path}/a:{tmp_path}/b"
    assert pd.options_from_args(args(nixl_path="")).nixl_path == ""


def test_the_installed_vllm_version_is_found():
    assert re.fullmatch(r"\d+\.\d+\S*", pd.vllm_version() or "")


# -- ratios, verdicts, report ----------------------------------------------------------------

def test_pair_ratios_divide_each_pd_round_by_its_colocated_partner():
    assert pd.pair_ratios([0.1, 0.2], [0.15, 0.2]) == pytest.approx([1.5, 1.0])
    with pytest.raises(ValueError, match="pair up"):
        pd.pair_ratios([0.1], [0.1, 0.2])
    with pytest.raises(ValueError, match="no positive"):
        pd.pair_ratios([0.0], [0.1])


def timing(ttft: float, gap: float, tokens: int = 4):
    return pd.StreamTiming(ttft, [gap] * (tokens - 1), tokens)


def report_with(ttft_pd: list[float], local: float = 0.0) -> dict:
    colocated, pdside = pd.SideRecord(), pd.SideRecord()
    for index, value in enumerate(ttft_pd):
        colocated.add_round([timing(0.1, 0.01)], 480, {"local_compute": 480.0, "external_kv_transfer": 0.0})
        pdside.add_round([timing(value, 0.012)], 480, {"local_compute": local, "external_kv_transfer": 480 - local})
        pdside.prefill_leg.append(value / 2)
        pdside.decode_ttft.append(value / 2)
    return {"setup": {"requests": 1, "rounds": len(ttft_pd), "maxTokens": 4, "vllm": "0.32.0"},
            "phases": [{"connector": "NixlConnector", "healthyS": 80.0, "identical": {"same": 3, "total": 3},
                        "lengths": {"480": pd.length_report(pd.Connector.NIXL, colocated, pdside)}}],
            "skipped": []}


def test_the_length_report_holds_both_sides_the_ratios_and_the_kv_check():
    entry = report_with([0.15, 0.2, 0.3])["phases"][0]["lengths"]["480"]
    assert entry["ratio"]["ttft"]["median"] == pytest.approx(2.0)
    assert (entry["ratio"]["ttft"]["low"], entry["ratio"]["ttft"]["high"]) == pytest.approx((1.5, 3.0))
    assert entry["ratio"]["itl"]["median"] == pytest.approx(1.2)
    assert entry["pd"]["prefillLegS"]["median"] == pytest.approx(0.1)
    assert entry["kv"]["moved"] and entry["kv"]["expected_external"] == 480 * 3
    assert entry["colocated"]["sources"]["local_compute"] == 480 * 3


def test_pd_costing_ttft_is_judged_on_every_pairs_ratio():
    assert pd.goals(report_with([0.15, 0.2, 0.3]))[
        "NixlConnector: PD TTFT >= colocated TTFT (the CPU expectation)"].outcome is pd.Outcome.MET
    (verdict,) = pd.goals(report_with([0.15, 0.08, 0.3])).values()
    assert verdict.outcome is pd.Outcome.INCONCLUSIVE and "straddles" in verdict.reason
    (verdict,) = pd.goals(report_with([0.15, 0.2])).values()
    assert verdict.outcome is pd.Outcome.INCONCLUSIVE and "fewer than 3" in verdict.reason


def test_a_cell_whose_kv_did_not_move_is_named():
    assert pd.kv_failures(report_with([0.15, 0.2, 0.3])) == []
    assert pd.kv_failures(report_with([0.15, 0.2, 0.3], local=480.0)) == ["NixlConnector 480 tok"]


def test_the_report_is_marked_cpu_and_shows_each_cell():
    text = pd.format_report(report_with([0.15, 0.2, 0.3]))
    assert text.startswith("**CPU only**")
    assert "NixlConnector (CPU)" in text
    assert "| 480 | 100.0 / 100.0 | 200.0 / 280.0 | 2.00 (1.50-3.00) | 10.0 / 10.0 | 12.0 / 12.0 | 1.20 (1.20-1.20)" in text
    assert "| 0 / 480 |" in text and "KV NOT MOVED" not in text
    assert "identical to colocated: 3 of 3" in text
    assert "Goals:\n- NixlConnector: PD TTFT >= colocated TTFT (the CPU expectation): met" in text
    assert "KV NOT MOVED" in pd.format_report(report_with([0.15, 0.2, 0.3], local=480.0))


def test_the_report_survives_json_and_reread(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report_with([0.15, 0.2, 0.3])))
    assert pd.main(["--reread", str(path)]) == 0
    assert "NixlConnector (CPU)" in capsys.readouterr().out
    path.write_text("{}")
    assert pd.main(["--reread", str(path)]) == 1


def test_proc_stat_gives_the_group_and_cpu_ticks_even_with_parentheses_in_the_name():
    line = "4242 (python (vllm) x) S 1 4200 4200 0 -1 4194304 10 0 0 0 150 25 0 0 20 0 3 0 100 0 0"
    assert pd.parse_proc_stat(line) == (4200, 175)
    with pytest.raises(ValueError, match="not a /proc/PID/stat"):
        pd.parse_proc_stat("garbage")


def test_cpu_per_round_is_summarized_per_engine_and_shown_per_side():
    rounds = [{"colocated": 1.0, "prefill": 0.1, "decode": 0.0}, {"colocated": 3.0, "prefill": 0.3, "decode": 0.2},
              {"colocated": 2.0, "prefill": 0.2, "decode": 0.1}]
    assert pd.cpu_medians(rounds) == {"colocated": 2.0, "decode": 0.1, "prefill": 0.2}
    report = report_with([0.15, 0.2, 0.3])
    report["phases"][0]["cpuS"] = {"colocated": {"median": pd.cpu_medians(rounds)},
                                   "pd": {"median": {"colocated": 0.05, "decode": 1.5, "prefill": 1.0}}}
    assert ("CPU seconds per round (median), by engine: colocated rounds: colocated 2.00, decode 0.10, prefill 0.20; "
            "pd rounds: colocated 0.05, decode 1.50, prefill 1.00") in pd.format_report(report)


# -- options ---------------------------------------------------------------------------------

def args(**over) -> argparse.Namespace:
    return pd.build_parser().parse_args([f"--{k.replace('_', '-')}={v}" for k, v in over.items()])


def test_defaults_and_quick():
    options = pd.options_from_args(args())
    assert (options.lengths, options.rounds, options.requests, options.max_tokens) == ([160, 480, 960], 5, 3, 32)
    assert options.connectors == [pd.Connector.EXAMPLE, pd.Connector.NIXL]
    quick = pd.options_from_args(pd.build_parser().parse_args(["--quick"]))
    assert (quick.rounds, quick.requests) == (3, 2)


@pytest.mark.parametrize("over, message", [
    ({"lengths": "128"}, "129.."),  # one block or less: ExampleConnector moves nothing
    ({"lengths": "1000"}, "129..992"),
    ({"lengths": "200,200"}, "each length once"),
    ({"lengths": "x"}, "comma-separated"),
    ({"rounds": 0}, "--rounds 0"),
    ({"max_tokens": 1}, "--max-tokens 1"),
    ({"connectors": "MooncakeConnector"}, "--connectors"),
    ({"connectors": "LMCacheConnectorV1"}, "--connectors"),
])
def test_bad_options_are_refused_by_name(over, message):
    with pytest.raises(ValueError, match=message):
        pd.options_from_args(args(**over))


def test_bad_options_exit_2(capsys):
    assert pd.main(["--lengths", "64"]) == 2
    assert "--lengths" in capsys.readouterr().err
