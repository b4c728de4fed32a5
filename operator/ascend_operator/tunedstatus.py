"""``status.tunedDefaults``: the tuned defaults the engine runs with, and why (pure).

Read from one updated, ready replica's runtime report (``/state`` ``tunedDefaults``, made by
``ascend_runtime.tuning``): the pods of one spec and image classify the same model against the
same vllm-ascend, so one report speaks for them all. Kept small: one line per applied default with
its source, and only the count of skipped ones (each pod's ``/state`` and ``ascend-llm doctor``
say why). The replica chosen is the first by name, so a resync that changes nothing writes nothing.
"""

from __future__ import annotations

from ascend_runtime.config import TunedDefaultsReport

from ascend_operator.api import TunedDefaultsStatus
from ascend_operator.api.status import MAX_TUNED_APPLIED
from ascend_operator.replicastatus import Replica


def tuned_defaults_status(replicas: list[Replica]) -> TunedDefaultsStatus | None:
    """The report of the first updated, ready replica that has one; None while none has."""
    reporting = sorted(
        (r for r in replicas
         if r.updated and r.ready and r.state is not None and r.state.tuned_defaults is not None),
        key=lambda r: r.name,
    )
    if not reporting:
        return None
    report = reporting[0].state.tuned_defaults  # type: ignore[union-attr]
    assert report is not None
    return _from_report(reporting[0].name, report)


def _from_report(pod: str, report: TunedDefaultsReport) -> TunedDefaultsStatus:
    status = TunedDefaultsStatus(pod=pod, summary=report.summary, reason=report.reason)
    if report.applied:  # set only when there are some: an unset list or count is not written
        status.applied = [f"{item.setting} ({item.source})" for item in report.applied][:MAX_TUNED_APPLIED]
    if report.skipped:
        status.skipped = len(report.skipped)
    return status
