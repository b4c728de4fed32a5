"""The administrator's policies on what a resource may ask for (pure).

The CRD's schema and CEL rules say what a spec may be on any cluster; these say what this
cluster's administrator allows (operator settings, Helm values): host path prefixes for
``model.hostPath`` and LoRA adapters' ``hostPath``, cache prefixes for ``model.cache.hostPath``,
image prefixes, priority classes, scheduler names and toleration keys. A
spec outside them is refused like an invalid spec (condition ``InvalidSpec``, nothing built):
:func:`enforce_policy` raises :class:`ascend_operator.api.SpecError` whose problems name the
field and the setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from ascend_operator.api import AscendLLMDeploymentSpec, SpecError
from ascend_operator.settings import ANY, ENV_PREFIX, OperatorSettings


@dataclass(frozen=True)
class Violation:
    """A spec field outside one policy."""

    field: str
    setting: str
    message: str

    def problem(self) -> tuple[str, str]:
        return self.field, f"{self.message} (operator setting {ENV_PREFIX}{self.setting})"


def _allowed(value: str, allowed: list[str], *, prefix: bool = False) -> bool:
    if ANY in allowed:
        return True
    return any(value.startswith(item) if prefix else value == item for item in allowed)


def _shown(allowed: list[str]) -> str:
    return ", ".join(allowed) if allowed else "none"


def _under(path: str, prefix: str) -> bool:
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def cache_prefix(path: str, settings: OperatorSettings) -> str | None:
    """The administrator's cache prefix ``path`` lies under (None: none)."""
    return next((p for p in settings.cache_host_path_prefixes if _under(path, p)), None)


def violations(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> list[Violation]:
    """Every field of ``spec`` that the policies in ``settings`` do not allow."""
    found: list[Violation] = []
    host_path = spec.model.host_path
    if host_path is not None and not any(_under(host_path.path, p) for p in settings.host_path_prefixes):
        found.append(Violation(
            "spec.model.hostPath.path", "HOST_PATH_PREFIXES",
            f"host path {host_path.path} is not under an allowed prefix "
            f"({_shown(settings.host_path_prefixes)}); use a pvc, or ask the administrator to allow the directory",
        ))
    cache = spec.model.cache
    if cache is not None and cache.host_path is not None and cache_prefix(cache.host_path, settings) is None:
        found.append(Violation(
            "spec.model.cache.hostPath", "CACHE_HOST_PATH_PREFIXES",
            f"host path {cache.host_path} is not under an allowed cache prefix "
            f"({_shown(settings.cache_host_path_prefixes)}); use create or claimName, or ask the administrator "
            "to allow a node cache directory",
        ))
    shared = spec.disaggregation.shared_storage_path if spec.disaggregation is not None else None
    if shared is not None and cache_prefix(shared, settings) is None:
        # A writable node directory, like a node cache: the same prefixes, namespaced the same way.
        found.append(Violation(
            "spec.disaggregation.sharedStoragePath", "CACHE_HOST_PATH_PREFIXES",
            f"host path {shared} is not under an allowed cache prefix "
            f"({_shown(settings.cache_host_path_prefixes)}); use connector NixlConnector, or ask the "
            "administrator to allow a node cache directory",
        ))
    for index, adapter in enumerate(spec.lora.adapters if spec.lora is not None else ()):
        node = adapter.source.host_path
        if node is not None and not any(_under(node.path, p) for p in settings.host_path_prefixes):
            found.append(Violation(
                f"spec.lora.adapters[{index}].source.hostPath.path", "HOST_PATH_PREFIXES",
                f"host path {node.path} is not under an allowed prefix "
                f"({_shown(settings.host_path_prefixes)}); use a pvc, or ask the administrator to allow the directory",
            ))
    if spec.image is not None and not _allowed(spec.image, settings.allowed_image_prefixes, prefix=True):
        found.append(Violation(
            "spec.image", "ALLOWED_IMAGE_PREFIXES",
            f"image {spec.image} does not start with an allowed prefix "
            f"({_shown(settings.allowed_image_prefixes)}); leave spec.image out for the operator's image "
            "or use an allowed registry",
        ))
    npu = spec.npu
    if npu.priority_class_name is not None and not _allowed(npu.priority_class_name,
                                                              settings.allowed_priority_classes):
        found.append(Violation(
            "spec.npu.priorityClassName", "ALLOWED_PRIORITY_CLASSES",
            f"priority class {npu.priority_class_name} is not allowed "
            f"({_shown(settings.allowed_priority_classes)}); leave it out or pick an allowed one",
        ))
    if npu.scheduler_name is not None and not _allowed(npu.scheduler_name, settings.allowed_scheduler_names):
        found.append(Violation(
            "spec.npu.schedulerName", "ALLOWED_SCHEDULER_NAMES",
            f"scheduler {npu.scheduler_name} is not allowed ({_shown(settings.allowed_scheduler_names)}); "
            "leave it out or pick an allowed one",
        ))
    for index, toleration in enumerate(npu.tolerations):
        key = toleration.key or ""
        if ANY in settings.allowed_toleration_keys or (key and key in settings.allowed_toleration_keys):
            continue
        what = f"taint key {key}" if key else "a toleration without a key (it tolerates every taint)"
        found.append(Violation(
            f"spec.npu.tolerations[{index}].key", "ALLOWED_TOLERATION_KEYS",
            f"{what} is not allowed ({_shown(settings.allowed_toleration_keys)}); remove the toleration",
        ))
    return found


def enforce_policy(spec: AscendLLMDeploymentSpec, settings: OperatorSettings) -> None:
    """Raise :class:`SpecError` naming each field outside the policies; return when all hold."""
    found = violations(spec, settings)
    if found:
        raise SpecError([violation.problem() for violation in found])
