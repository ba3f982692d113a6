"""Running a model-based test's state machine on one backend (this module holds no tests)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test


def run_model(
    machine: type[Any], backend: str, examples: int, steps: int, derandomize: bool = False
) -> None:
    """Run ``machine`` (a ``RuleBasedStateMachine`` with a ``backend`` attribute) on
    ``backend``: ``examples`` runs of up to ``steps`` rules each, without deadlines;
    ``derandomize``: the same runs every time."""
    on_backend = type(f"{machine.__name__}_{backend}", (machine,), {"backend": backend})
    run_state_machine_as_test(
        on_backend,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            derandomize=derandomize,
            suppress_health_check=list(HealthCheck),
        ),
    )
