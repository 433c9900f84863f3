"""Per-job agent configuration, instance validation, answer extraction, test patch paths."""

from typing import Any

import pytest

from agentroll.handlers.agent import AgentConfig, check_arguments
from agentroll.handlers.builtin.code import CodeHandler, load_code_tasks
from agentroll.handlers.builtin.math import MathHandler
from agentroll.handlers.builtin.stem import StemHandler, load_stem_tasks
from agentroll.handlers.builtin.stem.choices import extract_choice
from agentroll.handlers.builtin.swe import SweHandler, load_swe_tasks
from agentroll.handlers.builtin.swe.swe_repo import as_list, patched_files


def test_job_overrides_merge_onto_handler_defaults() -> None:
    config = AgentConfig(tool_timeout_s=30).merged({"max_turns": 8, "parser": "qwen3_coder"})
    assert (config.max_turns, config.parser, config.tool_timeout_s) == (8, "qwen3_coder", 30)
    assert config.tool_names(("bash", "submit")) == ("bash", "submit")
    assert AgentConfig(tools=("python",)).tool_names(()) == ("python", "submit")  # always submit
    with pytest.raises(ValueError, match="unknown tool"):
        AgentConfig(tools=("browser",)).tool_names(())


@pytest.mark.parametrize(
    ("handler", "instance", "message"),
    [
        (MathHandler(), {"question": "q", "answer": "1", "agent": {"max_turns": 0}}, "max_turns"),
        (MathHandler(), {"question": "q", "answer": "1", "agent": {"parser": "nope"}}, "nope"),
        (MathHandler(), {"question": "q", "answer": "1", "agent": {"tool": ["x"]}}, "tool"),
        (StemHandler(), {**load_stem_tasks()[0].instance(), "answer": "E"}, "not one of"),
        (CodeHandler(), {**load_code_tasks()[0].instance(), "tests": []}, "tests"),
        (
            CodeHandler(),
            {**load_code_tasks()[0].instance(), "solution_file": "../x.py"},
            "solution_file",
        ),
        (SweHandler(), {**load_swe_tasks()[0].instance, "repo": "me/other"}, "not bundled"),
        (SweHandler(), {**load_swe_tasks()[0].instance, "base_commit": "abcdef1"}, "bundled"),
        (
            SweHandler(),
            {**load_swe_tasks()[0].instance, "allow_test_infra_changes": "yes"},
            "allow_test_infra_changes",
        ),
        (
            SweHandler(),
            {**load_swe_tasks()[0].instance, "allow_test_infra_changes": ["/etc/x"]},
            "allow_test_infra_changes",
        ),
    ],
)
def test_unusable_instances_are_refused_with_a_reason(
    handler: Any, instance: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        handler.validate_instance(instance)


def test_swe_bench_rows_with_json_string_test_lists_are_accepted() -> None:
    row = dict(load_swe_tasks()[0].instance)
    row["FAIL_TO_PASS"] = '["tests/test_slug.py::test_a"]'
    row["hints_text"] = "extra SWE-bench fields are ignored"
    SweHandler().validate_instance(row)
    assert as_list(row["FAIL_TO_PASS"]) == ["tests/test_slug.py::test_a"]
    for allowed in (True, ["src/_pytest/*", "tests/conftest.py"]):
        SweHandler().validate_instance({**row, "allow_test_infra_changes": allowed})


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("so the answer is \\boxed{C}", "C"),
        ("\\boxed{\\text{B}}", "B"),
        ("Answer: D", "D"),
        ("**Answer:** B", "B"),
        ("(A) looks tempting, but the correct option is (C).", "C"),
        ("B", "B"),
        ("the answer is a bit subtle", None),
        ("Answer: E", None),  # not among the choices
    ],
)
def test_choice_extraction(text: str, letter: str | None) -> None:
    assert extract_choice(text, "ABCD") == letter


def test_test_patch_paths() -> None:
    assert patched_files(load_swe_tasks()[0].instance["test_patch"]) == ["tests/test_slug.py"]


def test_argument_checking() -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "mode": {"type": "string", "enum": ["a", "b"]}},
        "required": ["n"],
    }
    assert check_arguments(schema, {"n": 1, "mode": "a"}) == []
    assert check_arguments(schema, {"n": True}) == ["argument 'n' must be of type integer"]
    assert check_arguments(schema, {"mode": "c", "x": 1}) == [
        "missing required argument 'n'",
        "argument 'mode' must be one of ['a', 'b'], not 'c'",
        "unknown argument 'x' (arguments: n, mode)",
    ]
