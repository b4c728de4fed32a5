"""The pure parts of bench/prefix_routing.py: the workloads, the routing policies, reading vLLM's
Prometheus text, the summaries, the block bounds and the report."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest
from benchload import load_bench


pr = load_bench("prefix_routing")

# Cut from a real vLLM 0.32 CPU engine's /metrics (the tiny model), values changed.
METRICS = """\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.0855
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 41600.0
vllm:prefix_cache_queries_created{engine="0",model_name="tiny"} 1.796160578560035e+09
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 10752.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 41600.0
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_compute"} 30848.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="local_cache_hit"} 10752.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="tiny",source="external_kv_transfer"} 0.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0",num_gpu_blocks="4096",\
num_gpu_blocks_override="None"} 1.0
"""


def test_the_shared_workload_has_the_seeds_shape_and_is_reproducible():
    spec = pr.SharedWorkload(requests=50, shared_fraction=0.3, prefix_tokens=300, suffix_tokens=20, seed=7)
    requests = pr.make_shared_workload(spec)
    shared = [r for r in requests if r.group == "shared"]
    assert len(requests) == 50 and len(shared) == 15
    assert {len(r.prompt) for r in requests} == {320}
    assert len({r.prompt[:300] for r in shared}) == 1  # one prefix ...
    assert len({r.prompt[300:] for r in shared}) == 15  # ... and a suffix of its own each
    others = [r.prompt[:300] for r in requests if r.group is None]
    assert shared[0].prompt[:300] not in others and len(set(others)) == 35
    assert all(pr.TOKEN_IDS[0] <= t < pr.TOKEN_IDS[1] for r in requests for t in r.prompt)
    assert pr.make_shared_workload(spec) == requests
    assert pr.make_shared_workload(pr.SharedWorkload(seed=8, prefix_tokens=300, suffix_tokens=20)) != requests
    # shuffled: the shared requests are not all at the front
    assert [r.group for r in requests[:15]] != ["shared"] * 15
    with pytest.raises(ValueError, match="shared_fraction"):
        pr.make_shared_workload(pr.SharedWorkload(shared_fraction=1.5))


def test_the_group_workload_interleaves_groups_with_their_own_prefixes():
    spec = pr.GroupWorkload(groups=4, per_group=3, prefix_tokens=50, suffix_tokens=5, seed=1)
    requests = pr.make_group_workload(spec)
    assert len(requests) == 12
    by_group = {}
    for request in requests:
        by_group.setdefault(request.group, set()).add(request.prompt[:50])
    assert sorted(by_group) == ["g0", "g1", "g2", "g3"] and all(len(p) == 1 for p in by_group.values())
    assert len({next(iter(p)) for p in by_group.values()}) == 4
    assert [r.group for r in requests] != sorted(r.group for r in requests)
    assert pr.make_group_workload(spec) == requests
    with pytest.raises(ValueError, match="groups"):
        pr.make_group_workload(pr.GroupWorkload(groups=0))


def test_affinity_sends_a_prefix_to_one_replica_and_spreads_prefixes():
    requests = pr.make_group_workload(pr.GroupWorkload(groups=16, per_group=4, prefix_tokens=128, seed=3))
    replicas = pr.route(requests, pr.Policy.AFFINITY, 2, affinity_tokens=128, seed=0)
    per_group = {}
    for request, replica in zip(requests, replicas, strict=True):
        per_group.setdefault(request.group, set()).add(replica)
    assert all(len(r) == 1 for r in per_group.values())
    assert {next(iter(r)) for r in per_group.values()} == {0, 1}
    # only the first affinity_tokens count, and the hash is stable (no per-process salt)
    assert pr.affinity_replica([5] * 10 + [1], 4, 10) == pr.affinity_replica([5] * 10 + [2], 4, 10)
    assert pr.affinity_replica(list(range(100, 228)), 2, 128) == pr.affinity_replica(list(range(100, 228)), 2, 128)
    assert {pr.affinity_replica([i] * 8, 3, 8) for i in range(50)} == {0, 1, 2}
    with pytest.raises(ValueError, match="replicas"):
        pr.affinity_replica([1], 0, 1)


def test_random_routing_splits_a_group_and_is_seeded():
    requests = pr.make_group_workload(pr.GroupWorkload(groups=2, per_group=20, prefix_tokens=8, seed=0))
    replicas = pr.route(requests, pr.Policy.RANDOM, 2, affinity_tokens=8, seed=5)
    assert set(replicas) == {0, 1}
    assert {k for r, k in zip(requests, replicas, strict=True) if r.group == "g0"} == {0, 1}
    assert pr.route(requests, pr.Policy.RANDOM, 2, 8, seed=5) == replicas
    assert pr.route(requests, pr.Policy.RANDOM, 2, 8, seed=6) != replicas


def test_counters_are_read_from_vllm_prometheus_text_and_subtracted():
    counters = pr.parse_counters(METRICS)
    assert counters == pr.EngineCounters(prompt_tokens=41600, computed_tokens=30848, queries=41600, hits=10752)
    assert counters.hit_rate == pytest.approx(10752 / 41600)
    delta = counters - pr.EngineCounters(prompt_tokens=600, computed_tokens=600, queries=600, hits=0)
    assert delta == pr.EngineCounters(41000, 30248, 41000, 10752)
    assert (delta + delta).hits == 2 * 10752
    assert pr.EngineCounters().hit_rate is None
    assert pr.parse_counters("") == pr.EngineCounters()  # before any request: nothing counted yet
    # two engines (data parallel) are summed
    two = METRICS.replace('engine="0"', 'engine="1"')
    assert pr.parse_counters(METRICS + "\n".join(
        line for line in two.splitlines() if line.startswith("vllm:prefix_cache_hits_total"))).hits == 2 * 10752


def test_kv_usage_and_cache_info():
    assert pr.parse_kv_usage(METRICS) == pytest.approx(0.0855)
    assert pr.parse_kv_usage("# nothing\n") is None
    info = pr.parse_cache_info(METRICS)
    assert info == pr.CacheInfo(block_size=128, num_gpu_blocks=4096, prefix_caching=True)
    assert pr.usage_to_blocks(0.0855, info) == 350  # 0.0855 x 4095 (the null block is not counted)
    with pytest.raises(pr.BenchError, match="cache_config_info"):
        pr.parse_cache_info("vllm:kv_cache_usage_perc 0.1\n")
    with pytest.raises(pr.BenchError, match="Prometheus text"):
        pr.parse_counters("vllm:prompt_tokens_total{engine=0 1\n")


def test_blocks_needed_counts_a_shared_prefixs_full_blocks_once():
    spec = pr.SharedWorkload(requests=50, shared_fraction=0.3, prefix_tokens=768, suffix_tokens=64, seed=0)
    requests = pr.make_shared_workload(spec)
    # 832 prompt + 64 output tokens = 7 blocks of 128 each; the 15 sharers hold 6 prefix blocks once
    assert pr.blocks_needed(requests, 64, 128, sharing=False) == 350
    assert pr.blocks_needed(requests, 64, 128, sharing=True) == 350 - 14 * 6
    # a partial block is never shared: a 100-token prefix spans no full 128-token block
    short = pr.make_shared_workload(pr.SharedWorkload(prefix_tokens=100, suffix_tokens=20))
    assert pr.blocks_needed(short, 8, 128, sharing=True) == pr.blocks_needed(short, 8, 128, sharing=False)
    # a prompt that is all prefix keeps its last block to itself
    same = [pr.BenchRequest(tuple(range(256)), "g") for _ in range(3)]
    assert pr.blocks_needed(same, 1, 128, sharing=True) == 3 * 3 - 2 * 1


def test_summaries():
    summary = pr.summarize([0.1 * i for i in range(1, 11)])
    assert summary.n == 10 and summary.median == pytest.approx(0.55)
    assert summary.p90 == pytest.approx(0.91)  # linear between ranks 9 and 10
    assert pr.summarize([2.0]) == pr.Summary(1, 2.0, 2.0)
    assert pr.summarize([]) is None


def sample_report():
    def row(peak_blocks, needed, computed, hits):
        return {"counters": {"prompt_tokens": 41600, "computed_tokens": computed, "queries": 41600, "hits": hits},
                "hitRate": hits / 41600, "peakKvUsage": peak_blocks / 4095, "peakBlocks": peak_blocks,
                "numGpuBlocks": 4096, "blockSize": 128, "samples": 40, "seconds": 3.0,
                "ttft": {"n": 50, "median": 1.2, "p90": 2.0}, "ttftShared": {"n": 15, "median": 1.0, "p90": 1.5},
                "ttftOthers": {"n": 35, "median": 1.3, "p90": 2.1}, "blocksNeeded": needed}

    routing_row = {"hitRate": 0.8, "hitBound": 0.85, "counters": {}, "ttft": {"n": 64, "median": 0.05, "p90": 0.08},
                   "perReplica": [{"requests": 30, "groups": 4, "hitRate": 0.79},
                                  {"requests": 34, "groups": 4, "hitRate": 0.81}]}
    report = {"setup": {"shared": asdict(pr.SharedWorkload()), "sharedCount": 15, "groups": asdict(pr.GroupWorkload()),
                        "maxTokens": 64, "routingBlocks": 28, "date": "2026-12-01 21:40 UTC", "cpus": 2,
                        "loadAverage": {"start": [3.24, 3.0, 2.9], "end": [11.0, 9.0, 7.0]}, "totalS": 370.2,
                        "healthyS": {"caching-on": 120.4, "replica-0": 134.6}},
              "caching": {"off": row(350, 350, 41600, 0), "on": row(280, 266, 30848, 10752)},
              "routing": {"affinity": routing_row, "random": {**routing_row, "hitRate": 0.25}}}
    return report


def test_the_report_sets_measured_beside_the_bound():
    text = pr.format_report(sample_report())
    assert text.startswith("Run 2026-12-01 21:40 UTC, 2 CPUs, load average (1 min) 3.2 at the start and 11.0 "
                           "at the end, 370 s in all (135 s until the four engines were healthy)")
    assert "| off | 8.5 % | 350 of 4096 | 350 | 41600 | 41600 | 0 | 1200 / 2000 |" in text
    assert "| on | 6.8 % | 280 of 4096 | 266 |" in text
    assert "peak blocks saved: 20.0 % (the most this workload allows: 24.0 %)" in text
    assert "prefill tokens saved: 25.8 %" in text
    assert "| affinity | 80.0 % | 85.0 % | 30, 4, 79.0 %; 34, 4, 81.0 % | 50 / 80 |" in text
    assert "| random | 25.0 % | 85.0 % |" in text


def test_reread_prints_a_saved_report_and_refuses_other_files(tmp_path, capsys):
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(sample_report()))
    assert pr.main(["--reread", str(saved)]) == 0
    assert "| random | 25.0 % | 85.0 % |" in capsys.readouterr().out
    saved.write_text('{"setup": {}}')
    assert pr.main(["--reread", str(saved)]) == 1
    assert "not a saved --json report" in capsys.readouterr().err


def test_hit_bound_counts_first_visits_of_a_group_to_a_replica_as_misses():
    prefix = tuple(range(10, 266))  # two full blocks of 128
    requests = [pr.BenchRequest(prefix + (1000 + i,) * 10, "g") for i in range(4)]
    requests.append(pr.BenchRequest(tuple(range(500, 766)), None))
    queried = sum(len(r.prompt) for r in requests)
    assert pr.shared_blocks(requests, requests[0], 128) == 2 and pr.shared_blocks(requests, requests[4], 128) == 0
    # one replica: 3 of the 4 group requests hit 256 tokens each
    assert pr.hit_bound(requests, [0] * 5, 128) == pytest.approx(3 * 256 / queried)
    # split over two replicas: each replica's first visit misses
    assert pr.hit_bound(requests, [0, 1, 0, 1, 0], 128) == pytest.approx(2 * 256 / queried)
    assert pr.hit_bound([], [], 128) is None


def test_engine_argv_sets_caching_and_extra_flags():
    on = pr.engine_argv("/m", 8000, pr.EngineSpec("a", True, ("--num-gpu-blocks-override", "28")), 1024, 64)
    off = pr.engine_argv("/m", 8000, pr.EngineSpec("b", False), 1024, 64)
    assert "--enable-prefix-caching" in on and "--no-enable-prefix-caching" not in on
    assert "--no-enable-prefix-caching" in off
    assert on[on.index("--num-gpu-blocks-override") + 1] == "28"
    assert on[on.index("--host") + 1] == pr.LOOPBACK and on[on.index("--max-model-len") + 1] == "1024"


@pytest.mark.parametrize("prefix_tokens", [128, 768, 1280, 1920])
def test_sharing_by_30_percent_of_equal_requests_saves_at_most_28_percent(prefix_tokens):
    # docs/routing.md's bound beside the seeds' 42 %: (sharers - 1) / requests, whatever the prefix.
    for shared_fraction, bound in ((0.3, 14 / 50), (0.44, 21 / 50)):
        spec = pr.SharedWorkload(shared_fraction=shared_fraction, prefix_tokens=prefix_tokens, suffix_tokens=1)
        requests = pr.make_shared_workload(spec)
        off = pr.blocks_needed(requests, 1, 128, sharing=False)
        saved = 1 - pr.blocks_needed(requests, 1, 128, sharing=True) / off
        assert 0 < saved < bound
    assert 21 / 50 >= 0.42 > 20 / 50  # so 42 % needs at least 22 sharers of 50


@pytest.mark.parametrize(("argv", "field"), [(["--max-tokens", "0"], "--max-tokens must be 1..192"),
                                             (["--max-tokens", "193"], "--max-tokens must be 1..192"),
                                             (["--routing-blocks", "8"], "--routing-blocks must be >= 9")])
def test_bad_arguments_name_the_option_before_anything_starts(argv, field, capsys):
    with pytest.raises(SystemExit) as exit_info:
        pr.main(argv)
    assert exit_info.value.code == 2 and field in capsys.readouterr().err
