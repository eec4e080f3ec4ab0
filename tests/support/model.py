"""Running the suite's hypothesis state machines (``tests/integration/test_index_model.py``, ``test_landings.py``)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings


def run_model(machine: Any, examples: int, steps: int) -> None:
    """Run the state machine class ``machine`` (which counts its steps in ``machine.steps``): ``examples`` runs of
    up to ``steps`` steps, the same ones every time unless SMARTSENSOR_MODEL_RANDOM is set. Fails when fewer than
    half the steps ran (rules that never apply)."""
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=os.environ.get("SMARTSENSOR_MODEL_RANDOM") is None,
    )
    machine.TestCase().runTest()
    assert machine.steps >= examples * steps // 2, f"only {machine.steps} steps ran"
    print(f"{machine.__name__}: {machine.steps} steps")
