"""A verifiers tool call, in the worker (`worker_env.call_tool`): once the task's toolsets are
set up, whatever fails is the call's (the model's arguments reached that code), answered to
the model as a tool error; only toolsets that cannot set up are the environment's (raised,
which the worker reports as `load`: infra_error `verifiers_load_failed`). The toolsets are
stubbed here (`served_tools`): verifiers lives only in the environment's venv."""

import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from agentroll.handlers.builtin.verifiers_env import worker_env


class Calculator:
    """An in-process MCP server's `call_tool`, as `served_tools` dispatches to it."""

    def __init__(self, content: list[Any] | None = None) -> None:
        self.content = content

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        total = arguments["a"] + arguments["b"]
        content = self.content or [SimpleNamespace(type="text", text=str(total))]
        return SimpleNamespace(content=content, is_error=False)


def toolsets(server: Any, *, setup_fails: bool = False, teardown_fails: bool = False) -> Any:
    @contextlib.asynccontextmanager
    async def served(task: Any, where: str | None) -> AsyncIterator[dict[str, Any]]:
        if setup_fails:
            raise RuntimeError("the toolset's setup failed")
        yield {"calculator_add": worker_env.Served(server, "add", "worker")}
        if teardown_fails:
            raise RuntimeError(f"teardown choked on the call's leftovers ({task})")

    return served


ADD = {"a": 2, "b": 3}


async def test_a_teardown_that_fails_after_the_models_call_is_the_calls_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_env, "served_tools", toolsets(Calculator(), teardown_fails=True))
    answer = await worker_env.call_tool("task", "calculator_add", ADD)
    assert answer == {
        "ok": True,
        "text": "RuntimeError: teardown choked on the call's leftovers (task)",
        "is_error": True,
    }


async def test_a_result_that_cannot_be_read_is_the_calls_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unreadable = Calculator(content=[SimpleNamespace(kind="no type")])
    monkeypatch.setattr(worker_env, "served_tools", toolsets(unreadable))
    answer = await worker_env.call_tool("task", "calculator_add", ADD)
    assert answer["ok"] is True and answer["is_error"] is True
    assert answer["text"].startswith("AttributeError:")


async def test_a_call_of_working_toolsets_answers_the_tools_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_env, "served_tools", toolsets(Calculator()))
    answer = await worker_env.call_tool("task", "calculator_add", ADD)
    assert answer == {"ok": True, "text": "5", "is_error": False}


async def test_toolsets_that_cannot_set_up_are_the_environments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_env, "served_tools", toolsets(Calculator(), setup_fails=True))
    with pytest.raises(RuntimeError, match="the toolset's setup failed"):
        await worker_env.call_tool("task", "calculator_add", ADD)
