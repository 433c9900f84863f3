"""Typing raw-text argument values with the tools' JSON schemas (formats without JSON values).

Only the top-level `type` of each parameter is used: a string or a list of JSON type names.
A parameter without one (or with `anyOf`/`oneOf`) is untyped: its value is JSON-decoded when it
is valid JSON, else kept as text.
"""

from collections.abc import Mapping, Sequence
from typing import Any

from agentroll.handlers.toolcalls._scan import decode_json
from agentroll.handlers.toolcalls.base import ToolSchema

ParamTypes = dict[str, frozenset[str] | None]  # parameter -> declared JSON types (None: any)

_EXPECTED = {
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "object": "a JSON object",
    "array": "a JSON array",
    "null": "null",
}


def param_types(tools: Sequence[ToolSchema]) -> dict[str, ParamTypes]:
    """{tool name: {parameter: types}} from OpenAI-style or bare function schemas."""
    table: dict[str, ParamTypes] = {}
    for tool in tools:
        fn = tool.get("function")
        spec: Mapping[str, Any] = fn if isinstance(fn, Mapping) else tool
        name = spec.get("name")
        params = spec.get("parameters")
        if not isinstance(name, str) or not isinstance(params, Mapping):
            continue
        props = params.get("properties")
        if not isinstance(props, Mapping):
            continue
        types: ParamTypes = {}
        for pname, pschema in props.items():
            declared = pschema.get("type") if isinstance(pschema, Mapping) else None
            if isinstance(declared, str):
                types[pname] = frozenset({declared})
            elif isinstance(declared, list) and all(isinstance(t, str) for t in declared):
                types[pname] = frozenset(declared)
            else:
                types[pname] = None
        table[name] = types
    return table


def _matches(value: Any, declared: str) -> tuple[bool, Any]:
    if declared == "integer":
        if isinstance(value, float) and value.is_integer():
            return True, int(value)
        return isinstance(value, int) and not isinstance(value, bool), value
    if declared == "number":
        return isinstance(value, int | float) and not isinstance(value, bool), value
    checks = {"boolean": bool, "object": dict, "array": list, "null": type(None)}
    kind = checks.get(declared)
    return (kind is not None and isinstance(value, kind)), value


def convert_value(raw: str, types: frozenset[str] | None) -> tuple[Any, str | None]:
    """(value, None) or (raw, why it does not fit) — the reason reads after the parameter name."""
    if types is None:
        value, reason = decode_json(raw)
        return (raw, None) if reason is not None else (value, None)
    if "string" in types:
        return raw, None
    text = raw.strip()
    if "boolean" in types and text in ("True", "False"):  # Python spelling, intent is clear
        text = text.lower()
    value, reason = decode_json(text)
    if reason is None:
        for declared in sorted(types):
            ok, converted = _matches(value, declared)
            if ok:
                return converted, None
    known = [_EXPECTED[t] for t in sorted(types) if t in _EXPECTED]
    if not known:  # only types we do not check (e.g. a typo in the schema): keep the text
        return raw, None
    shown = raw if len(raw) <= 60 else raw[:57] + "..."
    return raw, f"must be {' or '.join(known)}, got {shown!r}"
