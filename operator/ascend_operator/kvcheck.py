"""KV transfer checks the schema cannot make, run when a resource is reconciled or rendered (pure).

The CRD's CEL rules refuse what holds for every version (prefill TP >= decode TP, the roles'
NPUs, platform CPU); what depends on the vllm-ascend version the image's tag names (the connector
it registers, ``transport`` fabricMem / bufferPool, offload before 0.12.0rc1) is checked here with
the renderer's own :func:`ascend_runtime.kvtransfer.check_kv_transfer`, and comes back as
:class:`ascend_operator.api.SpecError` problems naming the spec's fields. An image whose tag names
no version is checked as the newest version read (the runtime checks the installed one at start).
MLA models with offload are refused by the runtime, which reads the model's ``config.json``.
"""

from __future__ import annotations

from ascend_runtime.kvtransfer import KvPlatform, KvTransferError, KvTransferInputs, check_kv_transfer

from ascend_operator.api import AscendLLMDeploymentSpec, PdRoleName, Platform, SpecError
from ascend_operator.builders import resolve_image
from ascend_operator.builders.disaggregation import image_version, kv_inputs
from ascend_operator.settings import OperatorSettings

#: The renderer's field names -> the spec's.
_FIELDS = {
    "vllmAscend": "spec.image",
    "connector": "spec.disaggregation.connector",
    "kvPort": "spec.disaggregation.kvPort",
    "transport": "spec.disaggregation.transport",
    "rankTablePath": "spec.disaggregation.rankTablePath",
    "sharedStoragePath": "spec.disaggregation.sharedStoragePath",
    "prefill.parallel.tensor": "spec.disaggregation.prefill.parallelism.tensor",
    "prefill.parallel.pipeline": "spec.disaggregation.prefill.parallelism.pipeline",
    "decode.parallel.pipeline": "spec.disaggregation.decode.parallelism.pipeline",
    "offload.sizeGiB": "spec.kvOffload.sizeGiB",
    "offload.blockSize": "spec.kvOffload",
}


def _problem(error: KvTransferError) -> tuple[str, str]:
    return _FIELDS.get(error.field, "spec.disaggregation"), f"{error.problem}; {error.fix}"


def kv_problems(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> list[tuple[str, str]]:
    """``(field, message)`` for each KV transfer setting the image's vllm-ascend would refuse."""
    if spec.disaggregation is None and spec.kv_offload is None:
        return []
    image = resolve_image(spec, settings)
    if spec.disaggregation is not None:
        inputs = [kv_inputs(spec, role, image, with_offload=True) for role in PdRoleName]
    else:
        cpu = spec.platform == Platform.CPU
        assert spec.kv_offload is not None
        inputs = [KvTransferInputs(platform=KvPlatform.CPU if cpu else KvPlatform.ASCEND,
                                   vllm_ascend=None if cpu else image_version(image),
                                   offload_gib=spec.kv_offload.size_gi_b)]
    problems: list[tuple[str, str]] = []
    for item in inputs:
        for problem in map(_problem, check_kv_transfer(item)):
            if problem not in problems:  # both roles report a shared setting once
                problems.append(problem)
    return problems


def enforce_kv_transfer(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> None:
    """Raise :class:`SpecError` naming each KV transfer setting refused (:func:`kv_problems`)."""
    problems = kv_problems(spec, settings)
    if problems:
        raise SpecError(problems)
