"""Rows of each SWE-bench-family dataset, hand-written in their published shapes, become `swe`
instances the handler accepts: test ids as JSON strings or lists, each family's image
naming, the official eval script's test command, and clear errors for rows that cannot."""

import json
from pathlib import Path
from typing import Any

import pytest

from agentroll.handlers.builtin.swe import SweInstance, swe_official
from agentroll.handlers.builtin.swe.swe_datasets import (
    CONDA_PYTHON,
    RowError,
    detect_source,
    local_image_name,
    main,
    normalise,
)
from agentroll.server.cli import main as agentroll_cli

PATCH = "diff --git a/src/x.py b/src/x.py\n--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n"
TEST_PATCH = PATCH.replace("src/x.py", "tests/test_x.py")
# SWE-bench (as the 5.x datasets publish it): ids as JSON strings, its own eval script.
EVAL_SCRIPT = f"""#!/bin/bash
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
export LANG=en_US.UTF-8
git config --global --add safe.directory /testbed
cd /testbed
git status
git -c core.fileMode=false diff 0123456789abcdef0123456789abcdef01234567
python -m pip install -e .
git checkout 0123456789abcdef0123456789abcdef01234567 tests/test_x.py
git apply -v - <<'EOF_114329324912'
{TEST_PATCH}
EOF_114329324912
: '>>>>> Start Test Output'
pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_x.py
: '>>>>> End Test Output'
git checkout 0123456789abcdef0123456789abcdef01234567 tests/test_x.py
"""
SWE_BENCH = {
    "repo": "Owner/Proj",
    "instance_id": "Owner__Proj-1234",
    "base_commit": "0123456789abcdef0123456789abcdef01234567",
    "patch": PATCH,
    "test_patch": TEST_PATCH,
    "problem_statement": "x() returns a",
    "hints_text": "",
    "created_at": "2023-01-01T00:00:00Z",
    "version": "1.2",
    "FAIL_TO_PASS": '["tests/test_x.py::test_b"]',
    "PASS_TO_PASS": '["tests/test_x.py::test_kept", "tests/test_x.py::test_p[1-2]"]',
    "environment_setup_commit": "0123456789abcdef0123456789abcdef01234567",
    "eval_script": EVAL_SCRIPT,
    "log_parser": "parse_log_pytest",
    "eval_type": "pass_and_fail",
}
SWE_GYM = {
    **{k: SWE_BENCH[k] for k in ("base_commit", "patch", "test_patch", "problem_statement")},
    "repo": "Project-MONAI/MONAI",
    "instance_id": "Project-MONAI__MONAI-6975",
    "version": "1.3",
    "hints_text": "",
    "created_at": "2023-09-01T00:00:00Z",
    "environment_setup_commit": SWE_BENCH["base_commit"],
    "FAIL_TO_PASS": ["tests/test_x.py::test_b"],
    "PASS_TO_PASS": [],
}
SWE_SMITH = {
    "instance_id": "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc",
    "repo": "swesmith/oauthlib__oauthlib.1fd52536",
    "patch": PATCH,
    "FAIL_TO_PASS": ["tests/test_a.py::TestA::test_one", "tests/sub/test_b.py::test_two"],
    "PASS_TO_PASS": ["tests/test_a.py::TestA::test_kept"],
    "created_at": "2025-03-14T00:00:00",
    "image_name": "swesmith.x86_64.oauthlib__oauthlib.1fd52536",
    "base_commit": "89abcdef0123456789abcdef0123456789abcdef",
    "problem_statement": "Token requests fail",
}
R2E_GYM = {
    "repo_name": "orange3",
    "docker_image": "namanjain12/orange3_final:a95245e37f35446f9870feb68f5ebb97d1c279ce",
    "commit_hash": "a95245e37f35446f9870feb68f5ebb97d1c279ce",
    "parsed_commit_content": json.dumps(
        {
            "old_commit_hash": "7f1c1a0b2c3d4e5f60718293a4b5c6d7e8f90123",
            "new_commit_hash": "a95245e37f35446f9870feb68f5ebb97d1c279ce",
            "commit_message": "Fix",
            "commit_date": "2020-01-01T00:00:00",
            "file_diffs": [],
        }
    ),
    "problem_statement": "[ISSUE]Table.from_numpy loses the domain[/ISSUE]",
    "expected_output_json": json.dumps(
        {
            "r2e_tests/test_1.py::TestTable::test_domain": "PASSED",
            "r2e_tests/test_1.py::TestTable::test_kept": "PASSED",
            "r2e_tests/test_1.py::TestTable::test_known_broken": "FAILED",
        }
    ),
    "modified_files": ["Orange/data/table.py"],
}


def test_the_family_is_told_from_the_row() -> None:
    assert detect_source(SWE_BENCH) == "swe-bench"
    assert detect_source(SWE_GYM) == "swe-gym"
    assert detect_source(SWE_SMITH) == "swe-smith"
    assert detect_source(R2E_GYM) == "r2e-gym"


@pytest.mark.skipif(not swe_official.installed(), reason="dev installs agentroll[swebench]")
def test_swe_bench_row_runs_its_eval_scripts_test_command_under_the_official_parser() -> None:
    instance = normalise(SWE_BENCH)
    assert instance["FAIL_TO_PASS"] == ["tests/test_x.py::test_b"]
    assert instance["PASS_TO_PASS"] == [
        "tests/test_x.py::test_kept",
        "tests/test_x.py::test_p[1-2]",
    ]
    assert instance["image_ref"] == "docker://swebench/sweb.eval.x86_64.owner_1776_proj-1234:latest"
    # Set-up and the test command stay; cd, git and the test patch's heredoc are the grader's.
    assert instance["test_cmd"] == (
        "source /opt/miniconda3/bin/activate\nconda activate testbed\n"
        "export LANG=en_US.UTF-8\npython -m pip install -e .\n"
        "pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_x.py"
    )
    assert (instance["log_parser"], instance["pytest_report"]) == ("parse_log_pytest", True)
    assert (instance["repo_source"], instance["workdir"]) == ("/testbed", "/workspace")
    assert (instance["patch"], instance["version"]) == (PATCH, "1.2")  # kept for validation
    task = SweInstance.model_validate(instance)
    assert task.test_patch == TEST_PATCH and task.eval_mode == "fresh"


@pytest.mark.skipif(not swe_official.installed(), reason="dev installs agentroll[swebench]")
def test_a_runner_other_than_pytest_is_graded_without_the_pytest_report() -> None:
    script = EVAL_SCRIPT.replace(
        "pytest --no-header -rA --tb=no -p no:cacheprovider tests/test_x.py",
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 x_tests",
    )
    row = {**SWE_BENCH, "eval_script": script, "log_parser": "parse_log_django"}
    instance = normalise(row)
    assert instance["test_cmd"].endswith(
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 x_tests"
    )
    assert (instance["log_parser"], instance["pytest_report"]) == ("parse_log_django", False)
    SweInstance.model_validate(instance)


def test_swe_bench_row_without_an_official_recipe_falls_back_to_pytest() -> None:
    row = {k: v for k, v in SWE_BENCH.items() if k not in ("eval_script", "log_parser")}
    instance = normalise(row, "swe-bench")
    assert instance["test_cmd"] == f"{CONDA_PYTHON} -m pytest -rA -p no:cacheprovider --tb=no -q"
    assert "log_parser" not in instance
    SweInstance.model_validate(instance)


def test_swe_gym_row_keeps_list_ids_and_names_its_image_the_swe_gym_way() -> None:
    instance = normalise(SWE_GYM)
    assert instance["dataset"] == "swe-gym"
    assert instance["FAIL_TO_PASS"] == ["tests/test_x.py::test_b"]
    assert instance["image_ref"] == (
        "docker://xingyaoww/sweb.eval.x86_64.project-monai_s_monai-6975:latest"
    )
    assert instance["test_cmd"].startswith(f"{CONDA_PYTHON} -m pytest")
    SweInstance.model_validate(instance)


def test_swe_smith_row_restores_its_hidden_tests_from_the_branchs_parent() -> None:
    instance = normalise(SWE_SMITH)
    assert instance["image_ref"] == (
        "docker://jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536:latest"
    )
    assert instance["eval_setup_cmd"] == (
        "git checkout -q 89abcdef0123456789abcdef0123456789abcdef~1 -- "
        "tests/sub/test_b.py tests/test_a.py"
    )
    assert instance["test_patch"] == ""
    SweInstance.model_validate(instance)
    with pytest.raises(
        RowError,
        match=r"'oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc'.*"
        r"no base_commit.*git rev-parse",
    ):
        normalise({k: v for k, v in SWE_SMITH.items() if k != "base_commit"})


def test_r2e_gym_row_needs_its_passing_tests_and_brings_them_in_from_the_image() -> None:
    instance = normalise(R2E_GYM)
    assert instance["base_commit"] == "7f1c1a0b2c3d4e5f60718293a4b5c6d7e8f90123"
    assert instance["FAIL_TO_PASS"] == [
        "r2e_tests/test_1.py::TestTable::test_domain",
        "r2e_tests/test_1.py::TestTable::test_kept",
    ]
    assert instance["image_ref"] == f"docker://{R2E_GYM['docker_image']}"
    assert instance["eval_setup_cmd"] == "rm -rf r2e_tests && cp -r /r2e_tests r2e_tests"
    assert instance["repo"] == "orange3" and instance["instance_id"] == "orange3-a95245e37f35"
    SweInstance.model_validate(instance)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("tests/test_x.py::test_b", "not a JSON list of test ids"),
        ('{"a": 1}', "must be a list of test ids"),
        (["ok", 3], "must be a list of test ids"),
    ],
)
def test_malformed_test_ids_name_the_row_and_the_field(value: Any, message: str) -> None:
    with pytest.raises(RowError, match=rf"row 'Owner__Proj-1234', field FAIL_TO_PASS: {message}"):
        normalise({**SWE_BENCH, "FAIL_TO_PASS": value}, "swe-bench")


def test_a_missing_field_and_an_unknown_source_are_refused() -> None:
    with pytest.raises(RowError, match="row 'Owner__Proj-1234' has no problem_statement"):
        normalise({**SWE_GYM, "instance_id": "Owner__Proj-1234", "problem_statement": ""})
    with pytest.raises(RowError, match="unknown source 'swe-bench-pro'"):
        normalise(SWE_GYM, "swe-bench-pro")


def test_an_image_dir_names_the_local_image_of_each_reference() -> None:
    instance = normalise(SWE_GYM, image_dir="/scratch/images/")
    assert instance["image"] == (
        "/scratch/images/sweb.eval.x86_64.project-monai_s_monai-6975_latest.sif"
    )
    assert local_image_name("docker://namanjain12/orange3_final:a9") == "orange3_final_a9.sif"


def test_the_command_line_writes_one_instance_a_row_and_stops_at_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text(f"{json.dumps(SWE_GYM)}\n\n{json.dumps(SWE_SMITH)}\n")
    assert agentroll_cli(["swe-normalise", str(rows)]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [i["dataset"] for i in out] == ["swe-gym", "swe-smith"]
    rows.write_text(f"{json.dumps(SWE_GYM)}\n{json.dumps({**SWE_GYM, 'PASS_TO_PASS': 'x'})}\n")
    assert main([str(rows), "--source", "swe-gym"]) == 1
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 1
    assert "line 2: row 'Project-MONAI__MONAI-6975', field PASS_TO_PASS" in captured.err
