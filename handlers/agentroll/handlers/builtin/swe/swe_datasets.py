"""SWE-bench, SWE-Gym, SWE-smith and R2E-Gym rows as `swe` handler instances.

`normalise(row, source=None)` returns the instance a trainer submits; `source` is one of
`SOURCES`, or None to tell the family from the row's fields (an `image_name`: SWE-smith; a
`docker_image`: R2E-Gym; test ids as JSON strings: SWE-bench; as lists: SWE-Gym; give
`source` where an export of one family looks like another). What each family carries:

- swe-bench: FAIL_TO_PASS / PASS_TO_PASS as JSON strings, a `test_patch`; image
  `swebench/sweb.eval.x86_64.<id in lower case, "__" -> "_1776_">:latest`; graded by the
  official eval script's test command and log parser (`swe_official`: the row's
  `eval_script` / `log_parser`, else the installed 4.x package's spec for its repository
  and version), else by pytest on the listed ids.
- swe-gym: lists, a `test_patch`; image
  `xingyaoww/sweb.eval.x86_64.<id in lower case, "__" -> "_s_">:latest`; pytest.
- swe-smith: lists, no test patch (the instance branch's last commit removed the tests);
  image `jyangballin/<image_name, "__" -> "_1776_">:latest`; pytest, with the test files
  restored from `base_commit~1` at EVAL (`eval_setup_cmd`). The row must carry the branch's
  commit as `base_commit`.
- r2e-gym: `expected_output_json` (test -> status), the tests in the image at `/r2e_tests`;
  image: the row's `docker_image`; base commit: `parsed_commit_content`'s
  `old_commit_hash`; pytest on the tests expected to pass, `/r2e_tests` copied in at EVAL.

The images keep the repository at `/testbed`: the instance clones it (`repo_source`) into
the sandbox's writable `/workspace`. `image_ref` is a registry reference; `image` (what
the sandbox runs) is the local `.sif` or root file system of that reference, named by
`local_image_name` under `image_dir` when one is given (see docs/swe-images.md for the
pull).

The command line reads JSON lines and writes instances:
`python -m agentroll.handlers.builtin.swe.swe_datasets [--source S] [--image-dir D] < in > out`
(also `agentroll swe-normalise`).
"""

import argparse
import json
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Any

from agentroll.handlers.builtin.swe import swe_official
from agentroll.handlers.errors import RowError

SOURCES = ("swe-bench", "swe-gym", "swe-smith", "r2e-gym")
IMAGE_REPO = "/testbed"
WORKDIR = "/workspace"
CONDA_PYTHON = "/opt/miniconda3/envs/testbed/bin/python"
PYTEST_ARGS = "-m pytest -rA -p no:cacheprovider --tb=no -q"
START_MARKER, END_MARKER = ">>>>> Start Test Output", ">>>>> End Test Output"
_HEREDOC = re.compile(r"<<-?\s*'?\"?(\w+)'?\"?")
_RUNS_PYTEST = re.compile(r"(^|[\s/])(pytest|py\.test)(\s|$)|-m\s+pytest\b")
_PASSED = ("PASSED", "XFAIL")


def detect_source(row: dict[str, Any]) -> str:
    if "image_name" in row:
        return "swe-smith"
    if "docker_image" in row:
        return "r2e-gym"
    return "swe-bench" if isinstance(row.get("FAIL_TO_PASS"), str) else "swe-gym"


def normalise(
    row: dict[str, Any], source: str | None = None, *, image_dir: str | None = None
) -> dict[str, Any]:
    """The `swe` instance for one dataset row; `RowError` if the row cannot be one."""
    family = source or detect_source(row)
    if family not in SOURCES:
        raise RowError(f"unknown source {family!r}: one of {', '.join(SOURCES)}")
    instance = _BUILDERS[family](row)
    instance.update(dataset=family, repo_source=IMAGE_REPO, workdir=WORKDIR)
    if image_dir is not None:
        instance["image"] = f"{image_dir.rstrip('/')}/{local_image_name(instance['image_ref'])}"
    return instance


def local_image_name(image_ref: str) -> str:
    """The file name a pulled `image_ref` is kept under: `swebench/x:latest` -> `x_latest.sif`."""
    name = image_ref.removeprefix("docker://").rsplit("/", 1)[-1]
    return name.replace(":", "_") + ".sif"


def test_ids(row: dict[str, Any], field: str) -> list[str]:
    """A row's test ids, whether a list or a JSON string of one (SWE-bench)."""
    value = row.get(field, [])
    where = f"row {row.get('instance_id', '?')!r}, field {field}"
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise RowError(f"{where}: not a JSON list of test ids ({exc})") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise RowError(f"{where}: must be a list of test ids (or a JSON string of one)")
    return value


def _required(row: dict[str, Any], field: str) -> Any:
    value = row.get(field)
    if value in (None, ""):
        raise RowError(f"row {row.get('instance_id', '?')!r} has no {field}")
    return value


def _common(row: dict[str, Any]) -> dict[str, Any]:
    """The fields every family shares, the reference patch and version kept for validation."""
    kept: dict[str, Any] = {
        k: row[k] for k in ("patch", "version", "hints_text", "created_at") if k in row
    }
    return {
        **kept,
        "instance_id": _required(row, "instance_id"),
        "repo": _required(row, "repo"),
        "base_commit": _required(row, "base_commit"),
        "problem_statement": _required(row, "problem_statement"),
        "FAIL_TO_PASS": test_ids(row, "FAIL_TO_PASS"),
        "PASS_TO_PASS": test_ids(row, "PASS_TO_PASS"),
        "test_patch": row.get("test_patch", ""),
    }


def _swe_bench(row: dict[str, Any]) -> dict[str, Any]:
    instance = _common(row)
    name = f"sweb.eval.x86_64.{instance['instance_id']}:latest".lower().replace("__", "_1776_")
    instance["image_ref"] = f"docker://swebench/{name}"
    script = swe_official.eval_script_lines(row)
    parser = row.get("log_parser") or (
        swe_official.parser_name_for_repo(instance["repo"]) if swe_official.installed() else None
    )
    if script is None or not parser:  # no official recipe here: the repository's pytest
        instance["test_cmd"] = f"{CONDA_PYTHON} {PYTEST_ARGS}"
        return instance
    instance["test_cmd"] = test_command(script, row)
    instance["log_parser"] = parser
    instance["pytest_report"] = bool(_RUNS_PYTEST.search(instance["test_cmd"].split("\n")[-1]))
    return instance


def _swe_gym(row: dict[str, Any]) -> dict[str, Any]:
    instance = _common(row)
    name = f"sweb.eval.x86_64.{instance['instance_id'].replace('__', '_s_')}:latest".lower()
    return {**instance, "image_ref": f"docker://xingyaoww/{name}", "test_cmd": _conda_pytest()}


def _swe_smith(row: dict[str, Any]) -> dict[str, Any]:
    if not row.get("base_commit"):
        raise RowError(
            f"row {row.get('instance_id', '?')!r} has no base_commit: give the commit of the "
            "instance's branch in the SWE-smith mirror (git rev-parse <instance_id>)"
        )
    instance = _common(row)
    image = str(_required(row, "image_name"))
    ref = image if "/" in image else f"jyangballin/{image.replace('__', '_1776_')}:latest"
    ids = instance["FAIL_TO_PASS"] + instance["PASS_TO_PASS"]
    files = sorted({t.split("::", 1)[0] for t in ids})
    restore = " ".join(shlex.quote(f) for f in files)
    return {
        **instance,
        "image_ref": f"docker://{ref}",
        "test_cmd": _conda_pytest(),
        # The branch's last commit removed the tests; its parent has them.
        "eval_setup_cmd": f"git checkout -q {instance['base_commit']}~1 -- {restore}",
    }


def _r2e_gym(row: dict[str, Any]) -> dict[str, Any]:
    where = f"row {row.get('instance_id') or row.get('commit_hash', '?')!r}"
    try:
        commit = json.loads(_required(row, "parsed_commit_content"))
        expected = json.loads(_required(row, "expected_output_json"))
    except json.JSONDecodeError as exc:
        raise RowError(f"{where}: parsed_commit_content / expected_output_json: {exc}") from None
    if not isinstance(expected, dict):
        raise RowError(f"{where}: expected_output_json must map tests to statuses")
    passing = sorted(t for t, status in expected.items() if status in _PASSED)
    repo = _required(row, "repo_name")
    return {
        "instance_id": row.get("instance_id") or f"{repo}-{row.get('commit_hash', '')[:12]}",
        "repo": repo,
        "base_commit": commit.get("old_commit_hash") or _required(row, "commit_hash"),
        "problem_statement": _required(row, "problem_statement"),
        # R2E-Gym grades the whole expected map; the tests expected to pass must pass.
        "FAIL_TO_PASS": passing,
        "PASS_TO_PASS": [],
        "test_patch": "",
        "image_ref": f"docker://{_required(row, 'docker_image')}",
        "test_cmd": f".venv/bin/python {PYTEST_ARGS}",
        "eval_setup_cmd": "rm -rf r2e_tests && cp -r /r2e_tests r2e_tests",
    }


def _conda_pytest() -> str:
    return f"{CONDA_PYTHON} {PYTEST_ARGS}"


_BUILDERS = {
    "swe-bench": _swe_bench,
    "swe-gym": _swe_gym,
    "swe-smith": _swe_smith,
    "r2e-gym": _r2e_gym,
}


def test_command(script: Sequence[str], row: dict[str, Any]) -> str:
    """The commands of an official eval script that run the tests, as one shell script: the
    environment set-up (conda, exports, the install step) and the test command between the
    output markers. Left out: `cd` (the grader runs in the instance's workdir), git (the
    grader checks out, resets and applies the test patch itself) and heredoc bodies."""
    prelude: list[str] = []
    tests: list[str] = []
    inside, heredoc_end = False, None
    for line in script:
        if heredoc_end is not None:
            heredoc_end = None if line == heredoc_end else heredoc_end
            continue
        if START_MARKER in line:
            inside = True
            continue
        if END_MARKER in line:
            break
        heredoc = _HEREDOC.search(line)
        if heredoc is not None:  # the test patch's `git apply <<'EOF'`: the grader's job
            heredoc_end = heredoc.group(1)
            continue
        words = line.split()
        if not words or words[0] in ("cd", "git", "#!/bin/bash") or line.startswith("set -"):
            continue
        (tests if inside else prelude).append(line)
    if not tests:
        where = f"row {row.get('instance_id', '?')!r}, field eval_script"
        raise RowError(f"{where}: no test command between the '{START_MARKER}' markers")
    return "\n".join([*prelude, *tests])


def main(argv: list[str] | None = None) -> int:
    """JSON lines in (a file or stdin), one instance a line out; exit 1 on the first bad row."""
    parser = argparse.ArgumentParser(
        prog="agentroll swe-normalise",
        description="SWE-bench, SWE-Gym, SWE-smith or R2E-Gym rows (JSON lines) in, `swe` "
        "instances out, one a line.",
    )
    parser.add_argument("input", nargs="?", help="JSON lines (default: stdin)")
    parser.add_argument("--source", choices=SOURCES, help="the dataset family (default: guess)")
    parser.add_argument("--image-dir", help="where the pulled images are (.sif files)")
    args = parser.parse_args(argv)
    stream = open(args.input, encoding="utf-8") if args.input else sys.stdin  # noqa: SIM115
    with stream:
        for number, line in enumerate(stream, 1):
            if not line.strip():
                continue
            try:
                instance = normalise(json.loads(line), args.source, image_dir=args.image_dir)
            except (RowError, json.JSONDecodeError) as exc:
                print(f"line {number}: {exc}", file=sys.stderr)
                return 1
            print(json.dumps(instance))
    return 0


if __name__ == "__main__":
    sys.exit(main())
