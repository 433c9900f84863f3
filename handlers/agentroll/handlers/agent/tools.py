"""The agent's tools: `bash`, `python`, `str_replace_editor` and `submit`.

Each tool has an OpenAI function schema (what the chat template shows the model) and runs in
the rollout's sandbox through its action server. What the agent gets wrong -- a failing
command, a Python exception, an edit that does not apply, bad arguments -- comes back as an
observation; only a broken sandbox raises (an `ActionError`/`SandboxError`: `infra_error`).
"""

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from agentroll.runtime import Sandbox
from agentroll.server.schema.messages import ToolSpec

JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def check_arguments(parameters: Mapping[str, Any], args: Mapping[str, Any]) -> list[str]:
    """Readable problems with `args` against a JSON-schema object (the subset tools use)."""
    properties: Mapping[str, Any] = parameters.get("properties", {})
    problems = [
        f"missing required argument {k!r}" for k in parameters.get("required", ()) if k not in args
    ]
    for key, value in args.items():
        spec = properties.get(key)
        if spec is None:
            known = ", ".join(properties) or "none"
            problems.append(f"unknown argument {key!r} (arguments: {known})")
            continue
        kinds = JSON_TYPES.get(spec.get("type", ""), (object,))
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            problems.append(f"argument {key!r} must be of type {spec['type']}")
        elif "enum" in spec and value not in spec["enum"]:
            problems.append(f"argument {key!r} must be one of {spec['enum']}, not {value!r}")
    return problems


class Tool:
    """One tool: a name, a description, a JSON schema for its arguments, and `call`."""

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: dict[str, Any]
    ends_episode: ClassVar[bool] = False

    def episode_over(self) -> bool:
        """After a successful call: does it end the episode? (`submit` always; a tool that
        acts in an outside environment, once that environment says it is done.)"""
        return self.ends_episode

    def schema(self) -> ToolSpec:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    async def call(
        self,
        sandbox: Sandbox | None,
        args: dict[str, Any],
        *,
        limit_s: float,
        max_chars: int,
    ) -> str:
        raise NotImplementedError


def _need(sandbox: Sandbox | None, tool: str) -> Sandbox:
    if sandbox is None:  # a handler bug (tools without a sandbox), never the policy's fault
        raise RuntimeError(f"the {tool} tool needs a sandbox; open one in init()")
    return sandbox


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a command in a persistent bash shell (state such as the working directory is "
        "kept between calls). Returns its output and, if non-zero, the exit code."
    )

    def __init__(self) -> None:
        self.parameters = {
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The command to run."}},
            "required": ["command"],
        }

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        result = await _need(sandbox, self.name).tools.bash(
            args["command"], timeout=limit_s, max_output_chars=max_chars
        )
        text = result.output.rstrip("\n")
        if result.exit_code not in (0, None):
            text += f"\n[exit code {result.exit_code}]"
        if result.session_restarted:
            text += "\n[the shell was restarted: working directory and variables were reset]"
        return text or "(no output)"


class PythonTool(Tool):
    name = "python"
    description = (
        "Execute Python code in a persistent IPython kernel (variables are kept between "
        "calls). Returns printed output, the value of the last expression, or the traceback."
    )

    def __init__(self) -> None:
        self.parameters = {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python code to run."}},
            "required": ["code"],
        }

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        result = await _need(sandbox, self.name).tools.python(
            args["code"], timeout=limit_s, max_output_chars=max_chars
        )
        parts = [result.output.rstrip("\n")] if result.output.strip() else []
        if result.error:
            parts.append(result.error.rstrip("\n"))
        if result.timed_out:
            parts.append(f"[execution timed out after {limit_s:g} s and was interrupted]")
        if result.kernel_restarted:
            parts.append("[the Python kernel was restarted: variables were lost]")
        return "\n".join(parts) or "(no output)"


class EditorTool(Tool):
    name = "str_replace_editor"
    description = (
        "View, create and edit files. `view` shows a file with line numbers (or lists a "
        "directory); `create` writes a new file; `str_replace` replaces `old_str`, which must "
        "occur exactly once, with `new_str`; `insert` adds `new_str` after line `insert_line`; "
        "`undo_edit` reverts the last edit of a file."
    )
    COMMANDS = ("view", "create", "str_replace", "insert", "undo_edit")
    PASSED = ("file_text", "old_str", "new_str", "insert_line", "view_range")

    def __init__(self) -> None:
        self.parameters = {
            "type": "object",
            "properties": {
                "command": {"type": "string", "enum": list(self.COMMANDS)},
                "path": {"type": "string", "description": "Absolute or workdir-relative path."},
                "file_text": {"type": "string", "description": "Content for `create`."},
                "old_str": {"type": "string", "description": "Exact text to replace."},
                "new_str": {"type": "string", "description": "Replacement or inserted text."},
                "insert_line": {"type": "integer", "description": "Insert after this line."},
                "view_range": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "description": "[start, end] lines for `view` (end -1: to the end).",
                },
            },
            "required": ["command", "path"],
        }

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        extra = {k: args[k] for k in self.PASSED if k in args}
        if args["command"] == "str_replace":
            extra.setdefault("new_str", "")
        if args["command"] == "view":
            extra["max_output_chars"] = max_chars
        result = await _need(sandbox, self.name).tools.editor(
            args["command"], args["path"], **extra
        )
        return result.output if result.ok else f"Error: {result.output}"


class SubmitTool(Tool):
    """Ends the episode; its arguments are the submission (the handler decides their shape)."""

    name = "submit"
    ends_episode = True

    def __init__(
        self,
        description: str = "Submit your work and end the task. Call it once, when you are done.",
        properties: Mapping[str, Any] | None = None,
        required: Sequence[str] = (),
    ) -> None:
        self.description = description  # type: ignore[misc]
        self.parameters = {
            "type": "object",
            "properties": dict(properties or {}),
            "required": list(required),
        }

    async def call(
        self, sandbox: Sandbox | None, args: dict[str, Any], *, limit_s: float, max_chars: int
    ) -> str:
        return "Submitted."


def build_tools(names: Sequence[str], submit: SubmitTool | None = None) -> list[Tool]:
    """Tool objects for `names` (see `AgentConfig.tool_names`), in that order."""
    makers = {"bash": BashTool, "python": PythonTool, "str_replace_editor": EditorTool}
    return [(submit or SubmitTool()) if n == "submit" else makers[n]() for n in names]
