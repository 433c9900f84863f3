"""The official `swebench` package, an optional dependency (`pip install 'agentroll[swebench]'`):
its log parsers and, where it has them, its repository specs. Nothing here is rewritten from it.

Two generations of the package are understood:

- 4.x: `MAP_REPO_TO_PARSER` (a parser per repository) and `MAP_REPO_VERSION_TO_SPECS` (per
  repository and version the test command, install steps...), from which
  `make_eval_script_list` writes an instance's eval script;
- 5.x: dataset rows carry their own `eval_script` and the name of their `log_parser`; the
  package keeps the parsers, by name, and per-language maps from repository to parser.

In both, a parser is a module-level `parse_log_*` function of `swebench.harness.log_parsers.*`
that takes (log text, test spec) and returns {test id: "PASSED" | "FAILED" | "SKIPPED" |
"ERROR" | "XFAIL"}. Importing the package is slow (it pulls in `datasets`, `docker`,
`modal`): the grader does it in a worker process (`swe_log_parse`), never in the server.
"""

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

from agentroll.handlers.errors import OfficialPackageMissing

PACKAGE = "swebench"
INSTALL_HINT = "pip install 'agentroll[swebench]'"
_LANGUAGES = ("python", "javascript", "c", "go", "java", "php", "ruby", "rust")
Parser = Callable[[str, Any], dict[str, str]]


def installed() -> bool:
    """Whether `swebench` can be imported (cheap: nothing is imported)."""
    return importlib.util.find_spec(PACKAGE) is not None


def _parser_modules() -> list[ModuleType]:
    if not installed():
        raise OfficialPackageMissing(f"the official swebench package is missing: {INSTALL_HINT}")
    modules = []
    for language in _LANGUAGES:
        try:
            modules.append(importlib.import_module(f"{PACKAGE}.harness.log_parsers.{language}"))
        except ImportError:  # a language this release does not have
            continue
    return modules


def parser(name: str) -> Parser:
    """The official parser called `name` (e.g. "parse_log_pytest"); `KeyError` if no release
    installed here has it."""
    if not name.startswith("parse_log_"):
        raise KeyError(name)
    for module in _parser_modules():
        found = getattr(module, name, None)
        if callable(found):
            return found
    raise KeyError(name)


def parser_name_for_repo(repo: str) -> str | None:
    """The name of the parser the package assigns to `repo` ("owner/name"), if any."""
    for module in _parser_modules():
        for attribute in dir(module):
            if attribute.startswith("MAP_REPO_TO_PARSER"):
                found = getattr(module, attribute).get(repo)
                if found is not None:
                    return str(found.__name__)
    return None


def parse_log(
    parse: Parser, log: str, *, instance_id: str, repo: str, version: str
) -> dict[str, str]:
    """Test statuses in `log` by an official parser. The parsers read only these fields of
    their test spec (a few JavaScript ones: the version or the instance id)."""
    spec = SimpleNamespace(instance_id=instance_id, repo=repo, version=version)
    return {str(k): str(v) for k, v in parse(log, spec).items()}


def eval_script_lines(row: dict[str, Any]) -> list[str] | None:
    """The official eval script of a SWE-bench row, one command a line: the row's own
    (`eval_script`, 5.x datasets) or the one the installed 4.x package writes from its spec
    for the row's repository and version; None if neither exists (or the package is
    missing)."""
    script = row.get("eval_script")
    if isinstance(script, str) and script.strip():
        return script.strip().split("\n")
    if not installed():
        return None
    try:
        constants = importlib.import_module(f"{PACKAGE}.harness.constants")
        scripts = importlib.import_module(f"{PACKAGE}.harness.test_spec.create_scripts")
    except ImportError:  # 5.x: no specs in the package
        return None
    specs = getattr(constants, "MAP_REPO_VERSION_TO_SPECS", {}).get(row.get("repo"), {})
    spec = specs.get(str(row.get("version")))
    if spec is None:
        return None
    lines = scripts.make_eval_script_list(
        row, spec, "testbed", "/testbed", row["base_commit"], row.get("test_patch", "")
    )
    return [line for command in lines for line in str(command).split("\n")]
