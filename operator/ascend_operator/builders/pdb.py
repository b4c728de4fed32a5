"""The PodDisruptionBudget of the engine pods (pure).

``maxUnavailable: 1`` for every replica count: voluntary disruptions (drains) take one replica at
a time, and a single-replica deployment can still be drained (``minAvailable: 1`` would block a
node drain forever). ``unhealthyPodEvictionPolicy: AlwaysAllow`` lets a drain evict pods that
never became ready (for example a failing start), which a PDB would otherwise protect.
"""

from __future__ import annotations

from typing import Any

from ascend_operator.builders.common import common_labels, selector_labels, with_spec_hash


def build_pdb(name: str, namespace: str, pdb_name: str) -> dict[str, Any]:
    """PodDisruptionBudget ``pdb_name`` over the engine pods of resource ``name``."""
    return with_spec_hash(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": pdb_name, "namespace": namespace, "labels": common_labels(name)},
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": selector_labels(name)},
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
            },
        }
    )
