"""The one Prometheus text reader, and the three places that read engine metrics through it."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from ascend_runtime.config import EngineConfig
from ascend_runtime.health.hang import parse_engine_metrics
from ascend_runtime.promtext import MetricsTextError, sample_values, total, values_by_labels
from ascend_runtime.state import StateStore
from ascend_runtime.supervisor import Supervisor
from ascend_runtime.versions import Versions

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import loadgen  # noqa: E402

# Timestamps and a label value with a space and an escaped quote: a split on the last space
# would read the timestamp as the value.
EXPOSITION = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="a \\"b\\" c"} 2 1700000000000
vllm:num_requests_running{engine="1",model_name="a \\"b\\" c"} 1 1700000000000
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="a \\"b\\" c"} 4 1700000000000
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="a \\"b\\" c"} 10 1700000000000
vllm:generation_tokens_created{engine="0",model_name="a \\"b\\" c"} 1.7e9 1700000000000
"""


def test_values_per_label_set_by_sample_name() -> None:
    values = sample_values(EXPOSITION, ["vllm:num_requests_running", "vllm:generation_tokens_total", "absent"])
    assert values == {"vllm:num_requests_running": [2.0, 1.0], "vllm:generation_tokens_total": [10.0]}
    assert total(values, "vllm:num_requests_running") == 3.0
    assert total(values, "absent") is None


def test_malformed_text_is_one_error_type() -> None:
    with pytest.raises(MetricsTextError, match="expected Prometheus text exposition"):
        sample_values("vllm:num_requests_running{ 1\n", ["vllm:num_requests_running"])


def test_values_keyed_by_labels() -> None:
    values = values_by_labels(EXPOSITION, ["vllm:num_requests_running", "absent"], ("model_name", "engine"))
    assert values == {"vllm:num_requests_running": {('a "b" c', "0"): 2.0, ('a "b" c', "1"): 1.0}}
    assert values_by_labels(EXPOSITION, ["vllm:num_requests_running"], ("pod",)) == {
        "vllm:num_requests_running": {("",): 3.0}  # samples that share a key are summed
    }
    with pytest.raises(MetricsTextError, match="expected Prometheus text exposition"):
        values_by_labels("vllm:num_requests_running{ 1\n", ["vllm:num_requests_running"], ("engine",))


def test_hang_detector_and_loadgen_read_the_same_numbers() -> None:
    engines = parse_engine_metrics(EXPOSITION)
    gauges = loadgen.parse_engine_gauges(EXPOSITION)
    assert [(e.engine, c.num_requests_running, c.generation_tokens_total) for e, c in engines.items()] == [
        ("0", 2.0, 10.0),
        ("1", 1.0, 0.0),
    ]
    assert sum(c.num_requests_running for c in engines.values()) == gauges.running == 3.0
    assert gauges.waiting == 4.0


def test_the_drain_counts_running_and_waiting_over_every_engine() -> None:
    config = EngineConfig.model_validate({"model": {"path": "/m"}})
    supervisor = Supervisor(config, Versions(platform="cpu"), StateStore(), env={}, echo_engine=False)

    async def metrics() -> str:
        return EXPOSITION

    supervisor.engine_metrics_text = metrics  # type: ignore[method-assign]
    assert asyncio.run(supervisor._requests_in_flight()) == 7.0
