"""The one reader of Prometheus text exposition (vLLM's ``/metrics``, or the runtime's own).

Built on ``prometheus_client.parser``, so typed and untyped exposition, escaped label values,
timestamps and comments are read as Prometheus reads them. The supervisor (requests in flight
while draining) and ``bench/loadgen.py`` (the autoscaling gauges) read sums through
:func:`sample_values`; the hang detector reads each engine's own figures through
:func:`values_by_labels` (vLLM labels them ``model_name`` and ``engine``, one engine index per
data-parallel rank), since a sum over engines hides one that stalls while another works.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MetricsTextError", "sample_values", "total", "values_by_labels"]


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


def values_by_labels(
    text: str, names: Iterable[str], labels: Sequence[str]
) -> dict[str, dict[tuple[str, ...], float]]:
    """Sample values of the wanted series keyed by the values of ``labels``, one entry per key.

    The key holds each label's value in the order of ``labels`` ("" where a sample lacks the
    label). Samples that share a key (they differ only in labels outside ``labels``) are summed.
    Names are matched as in :func:`sample_values`; a name with no sample is absent.
    """

    wanted = set(names)
    found: dict[str, dict[tuple[str, ...], float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in wanted:
                    key = tuple(sample.labels.get(label, "") for label in labels)
                    series = found.setdefault(sample.name, {})
                    series[key] = series.get(key, 0.0) + float(sample.value)
    except ValueError as error:
        raise MetricsTextError(f"expected Prometheus text exposition: {error}") from None
    return found


def total(values: dict[str, list[float]], name: str) -> float | None:
    """The sum over label sets of one series from :func:`sample_values`; None when absent."""

    series = values.get(name)
    return sum(series) if series else None
