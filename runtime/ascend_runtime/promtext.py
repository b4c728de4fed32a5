"""The one reader of Prometheus text exposition (vLLM's ``/metrics``, or the runtime's own).

Built on ``prometheus_client.parser``, so typed and untyped exposition, escaped label values,
timestamps and comments are read as Prometheus reads them. The supervisor (requests in flight
while draining), the hang detector (running requests and generated tokens) and
``bench/loadgen.py`` (the autoscaling gauges) all read their numbers through :func:`sample_values`.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MetricsTextError", "sample_values", "total"]


class MetricsTextError(ValueError):
    """The text is not Prometheus text exposition; the message says where it broke."""


def sample_values(text: str, names: Iterable[str]) -> dict[str, list[float]]:
    """Every sample value of the wanted series, one entry per label set, keyed by series name.

    ``names`` are sample names as exposed (``vllm:generation_tokens_total``, not the family
    ``vllm:generation_tokens``): the parser strips ``_total`` from typed counter families but
    not from untyped ones, so samples are matched by their own name. A name with no sample is
    absent from the result.
    """

    wanted = set(names)
    found: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted:
                    found.setdefault(sample.name, []).append(float(sample.value))
    except ValueError as error:
        raise MetricsTextError(f"expected Prometheus text exposition: {error}") from None
    return found


def total(values: dict[str, list[float]], name: str) -> float | None:
    """The sum over label sets of one series from :func:`sample_values`; None when absent."""

    series = values.get(name)
    return sum(series) if series else None
