"""The ConfigMap holding the engine config the in-pod runtime reads (pure)."""

from __future__ import annotations

from typing import Any

from ascend_runtime.config import CONFIG_FILE_KEY, EngineConfig

from ascend_operator.builders.common import COMPONENT_CONFIG, common_labels, with_spec_hash


def build_configmap(name: str, namespace: str, configmap_name: str, config: EngineConfig) -> dict[str, Any]:
    """ConfigMap ``configmap_name`` with ``engine-config.yaml`` = ``config.to_yaml()``."""
    return with_spec_hash(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": configmap_name,
                "namespace": namespace,
                "labels": common_labels(name, COMPONENT_CONFIG),
            },
            "data": {CONFIG_FILE_KEY: config.to_yaml()},
        }
    )
