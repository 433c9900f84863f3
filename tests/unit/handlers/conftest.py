from collections.abc import Callable
from typing import Any

import pytest

from agentroll.handlers import HandlerRegistry
from agentroll.handlers.builtin.harness import harness_job


@pytest.fixture
def validate_harness_job() -> Callable[[dict[str, Any]], None]:
    """What submission checks of a `harness` job: the form, then the evaluator's task."""
    registry = HandlerRegistry()

    def validate(instance: dict[str, Any]) -> None:
        harness_job(instance, registry.get).validate_instance(instance)

    return validate
