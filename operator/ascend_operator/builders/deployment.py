"""The Deployment of single-node engine replicas (pure).

The pod template comes from :mod:`ascend_operator.builders.pod` (container, NPU wiring, probes,
readiness-first drain). This module adds the rollout:

- ``Recreate`` (the default) stops every old pod before starting new ones: a spec change means a
  short outage (the whole start-up time), but it never needs NPUs beyond the replicas' own.
- ``RollingUpdate`` with ``maxSurge: 0, maxUnavailable: 1`` replaces one replica at a time: no
  outage with two or more replicas (capacity drops by one for a start-up time), still no spare
  NPU needed. ``maxSurge`` above 0 is never used: on clusters without a free NPU the surge pod
  stays Pending and the rollout waits forever (ascend-vllm-facts.md section 6).
  docs/rollouts.md has the trade-off in full.
- ``progressDeadlineSeconds`` covers the start-up budget so the Deployment's own Progressing
  condition does not report a normal slow start as stuck.

``spec.replicas`` is copied from the resource's ``spec.replicas``. With autoscaling on, the
HPA or KEDA writes that field through the resource's scale subresource, so the Deployment still
follows one source and nothing fights: the autoscaler owns ``AscendLLMDeployment.spec.replicas``,
the operator owns ``Deployment.spec.replicas`` (and never targets the Deployment with an
autoscaler, which would make two writers of the same field).
"""

from __future__ import annotations

from typing import Any

from ascend_operator.api import RolloutStrategy
from ascend_operator.builders.common import common_labels, selector_labels, with_spec_hash
from ascend_operator.builders.inputs import BuildInputs
from ascend_operator.builders.pod import (  # noqa: F401  (re-exported for callers of the old module)
    CONFIG_DIR,
    DRIVER_HOST_PATHS,
    ENGINE_COMMAND,
    build_pod_template,
    termination_grace_seconds,
)

#: Extra seconds of progressDeadlineSeconds beyond the start-up budget (image pull, scheduling).
PROGRESS_DEADLINE_MARGIN_S = 600


def build_deployment(inputs: BuildInputs) -> dict[str, Any]:
    """The engine Deployment of the resource (see the module docstring)."""
    name, spec = inputs.name, inputs.spec
    template = build_pod_template(inputs)
    if spec.rollout.strategy == RolloutStrategy.ROLLING_UPDATE:
        strategy: dict[str, Any] = {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        }
    else:
        strategy = {"type": "Recreate"}
    budget = inputs.budget
    return with_spec_hash(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": inputs.names.deployment, "namespace": inputs.namespace,
                         "labels": common_labels(name)},
            "spec": {
                "replicas": spec.replicas,
                "selector": {"matchLabels": selector_labels(name)},
                "strategy": strategy,
                "revisionHistoryLimit": 3,
                "progressDeadlineSeconds": budget.total_s + PROGRESS_DEADLINE_MARGIN_S,
                "template": template,
            },
        }
    )
