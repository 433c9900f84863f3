"""Helpers of the handler base module."""

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from agentroll.handlers.base import parsed_instance
from agentroll.handlers.builtin.math import MathInstance


def test_parsed_instance_is_validated_once_per_rollout() -> None:
    ctx = SimpleNamespace(instance={"question": "1+1?", "answer": "2"}, state={})
    first = parsed_instance(ctx, MathInstance, "math_instance")  # type: ignore[arg-type]
    assert first.answer == "2" and ctx.state["math_instance"] is first
    assert parsed_instance(ctx, MathInstance, "math_instance") is first  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="answer"):
        parsed_instance(SimpleNamespace(instance={"question": "?"}, state={}), MathInstance, "k")  # type: ignore[arg-type]
