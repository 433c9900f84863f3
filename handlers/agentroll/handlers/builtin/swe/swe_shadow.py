"""Modules of the agent's diff that would stand in for the interpreter's own: `shadows_module`.

Python imports a top-level name from the first folder on `sys.path` that has it, and pytest
puts the repository's folders in front of the interpreter's (the working directory, and the
folder of each test module that is not inside a package). A `json.py`, `secrets.py` or
`pluggy/__init__.py` the diff adds in such a folder would run inside the grading process the
first time anything asks for that name: pytest itself, a plugin, the standard library. The
grader's launcher (`swe_pytest_report`) takes its report channel and imports pytest before
any such folder is on the path, but a module imported later still runs in pytest's process.

So a diff is refused (reward 0, reason `shadows_module`, before anything of it runs) if, in
the tree it leaves, a module or regular package sits in a folder that can be on the path and
has a top-level name that the sandbox's interpreter already provides (its built-in and
standard-library modules, and every module and package installed on its path), where the
tree at `base_commit` had no such module. A folder can be on the path if it is the
repository's root or has no `__init__.py`; a module inside a package (`pkg/json.py`) is
`pkg.json` and shadows nothing. A symbolic link there counts under its name whatever it
points to (`pluggy -> textkit` is a package `pluggy`).

The names come from the sandbox's own interpreter (`module_names`), asked before the agent's
diff is anywhere near it, never from the server's: its standard library and packages are the
ones that can be shadowed.
"""

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from agentroll.handlers.builtin.swe import swe_pytest
from agentroll.handlers.builtin.swe.swe_repo import SYMLINK_MODE, PrivateIndex, sh
from agentroll.handlers.errors import InfraError
from agentroll.runtime import Sandbox

MODULE_SUFFIXES = (".py", ".pyc", ".pyw", ".so", ".pyd")
NAMES_TIMEOUT_S = 120.0
# Run with `-I`: neither the working directory nor $PYTHONPATH is on the path, so the names
# are the interpreter's own. Folders without `__init__.py` count too: a namespace package of
# an installed distribution (`google/`) is shadowed by a regular package of the same name.
_NAMES_SCRIPT = """import json, os, pkgutil, sys
here = os.path.realpath(os.getcwd())
names = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
for entry in sys.path:
    if not entry or not os.path.isdir(entry) or os.path.realpath(entry) == here:
        continue
    names.update(info[1] for info in pkgutil.iter_modules([entry]))
    names.update(n for n in os.listdir(entry)
                 if n.isidentifier() and os.path.isdir(os.path.join(entry, n)))
print(json.dumps(sorted(names)))
"""


# A test script names no interpreter: every Python 3 of the sandbox counts (on $PATH, and the
# conda environments SWE-bench-style images run their tests in). One JSON list per line.
_EVERY_PYTHON = """found=1
for py in python3 python /opt/miniconda3/envs/*/bin/python /opt/conda/envs/*/bin/python; do
  command -v "$py" >/dev/null 2>&1 || continue
  "$py" -I -c "$1" 2>/dev/null && found=0
done
exit $found
"""


async def module_names(sandbox: Sandbox, test_cmd: str) -> frozenset[str]:
    """Every top-level module name the interpreter of `test_cmd` provides in `sandbox` (its
    `python -m pytest` interpreter; for a test script, every Python 3 there); `InfraError`
    if it cannot tell."""
    python = swe_pytest.interpreter(test_cmd)
    if python is not None:
        script, args = '"$1" -I -c "$2"', [python, _NAMES_SCRIPT]
    else:
        script, args = _EVERY_PYTHON, [_NAMES_SCRIPT]
    done = await sh(sandbox, script, args=args, timeout=NAMES_TIMEOUT_S)
    names: set[str] = set()
    try:
        for line in done.stdout.splitlines() if done.exit_code == 0 else ():
            listed = json.loads(line)
            if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
                raise ValueError("not a list of names")
            names.update(listed)
    except ValueError:
        names.clear()
    if not names:
        detail = (done.stderr or done.stdout).strip()[-500:]
        raise InfraError(
            f"cannot list the modules of the sandbox's {python or 'Python'} (exit "
            f"{done.exit_code}): {detail}",
            cause="test_runner_failed",
        )
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class TopLevel:
    """A module or package a tree provides under `name` when `folder` is on the path."""

    folder: str
    name: str


def top_level_modules(tree: Mapping[str, str]) -> dict[str, TopLevel]:
    """{path: what it provides} for the entries of a tree ({path: git mode}, paths relative to
    its root) that are a top-level module, a regular package's `__init__`, or a symbolic link
    (to a module or a package folder: it counts under its name), in a folder that can be on
    the path (the root, or one without `__init__.py`)."""
    files = {p: m for p, m in tree.items() if "__pycache__" not in p.split("/")}
    packages = {_parent(p) for p in files if _is_module(p) and _base(p).startswith("__init__.")}
    out = {}
    for path, mode in files.items():
        if _base(path).startswith("__init__.") and _is_module(path):
            package = _parent(path)
            if not package:
                continue
            folder, name = _parent(package), _base(package)
        elif _is_module(path) or mode == SYMLINK_MODE:
            folder, name = _parent(path), _base(path).split(".", 1)[0]
        else:
            continue
        if name.isidentifier() and (folder == "" or folder not in packages):
            out[path] = TopLevel(folder, name)
    return out


def shadowing_paths(
    base: Mapping[str, str], changed: Mapping[str, str], provided: Collection[str]
) -> list[str]:
    """The paths of tree `changed` that provide a name in `provided` on the path where tree
    `base` provided none at that place, sorted (trees as `top_level_modules` reads them)."""
    before = set(top_level_modules(base).values())
    return sorted(
        path
        for path, top in top_level_modules(changed).items()
        if top.name in provided and top not in before
    )


async def shadowing_changes(index: PrivateIndex, name: str, provided: Collection[str]) -> list[str]:
    """`shadowing_paths` between the base commit and index `name` of `index`."""
    return shadowing_paths(await index.entries("base"), await index.entries(name), provided)


def _is_module(path: str) -> bool:
    return _base(path).endswith(MODULE_SUFFIXES)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ""


def _base(path: str) -> str:
    return path.rsplit("/", 1)[-1]
