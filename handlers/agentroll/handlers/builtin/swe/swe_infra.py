"""Which of the agent's changes touch the test setup, so that the `swe` grader refuses them.

A diff that adds, changes or deletes any of these is refused (reward 0, reason
`test_infrastructure_modified`, the paths in `reward_info`), before anything of it runs:

- `conftest.py` anywhere (hooks that rewrite outcomes, fixtures, `pytest_plugins`);
- `pytest.ini`, `.pytest.ini`, `pytest.toml` and `.pytest.toml` anywhere (pytest reads one
  from the tests' folders upwards);
- `tox.ini` and `setup.cfg` anywhere whose old or new text has a `[pytest]` /
  `[tool:pytest]` section header. The whole file, not just the section: pytest's own INI
  reader decides where a section ends, and a line-by-line comparison could be fooled;
- `pyproject.toml` anywhere whose `[tool.pytest]` tables (`ini_options` included) differ
  between old and new as TOML reads them (exactly what pytest reads), or that is not valid
  TOML on either side;
- pytest plugins and pytest itself: a Python file whose old or new text mentions
  `pytest_plugins` (test modules register plugins with it), a path through a module or
  package named `pytest_*`, `pytest` or `_pytest`;
- interpreter start-up hooks: `sitecustomize.py`, `usercustomize.py`, `*.pth`;
- installed-package records (`*.dist-info/`, `*.egg-info/`, `*.egg-link`): with the
  repository on `sys.path`, pytest loads the `pytest11` entry points they declare;
- git's own behaviour: `.gitattributes`, `.gitconfig`, `.gitmodules` (filters and drivers
  that run commands while the grader checks files out);
- a symbolic link in place of any of the configuration files above (what it points to is
  not what we would read).

An instance allows such changes with `allow_test_infra_changes`: true, or a list of
shell-style patterns (`*` also crosses "/") for the paths it allows, e.g. a repository whose
fixes live in `src/_pytest/*`.

The paths are git's own reading of the patch (applied to a private index of the base
commit), and the contents come from that index's objects, never from the agent's working
tree and never unpacked into files.
"""

import re
import tomllib
from collections.abc import Sequence
from fnmatch import fnmatchcase

from agentroll.handlers.builtin.sandbox_files import UnreadableFile
from agentroll.handlers.builtin.swe.swe_repo import Change, PrivateIndex

REFUSED_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "sitecustomize.py",
        "usercustomize.py",
        ".gitattributes",
        ".gitconfig",
        ".gitmodules",
    }
)
PACKAGE_RECORDS = (".dist-info", ".egg-info")
PYTEST_MODULES = frozenset({"pytest", "pytest.py", "_pytest", "_pytest.py"})
INI_FILES = frozenset({"tox.ini", "setup.cfg"})
PYPROJECT = "pyproject.toml"
PLUGIN_DECLARATION = "pytest_plugins"
MAX_CONFIG_BYTES = 1 << 20
# Lenient on purpose (spaces, case, anywhere in the text): reading more headers as pytest's
# than pytest does only refuses more.
_INI_PYTEST_SECTION = re.compile(r"\[\s*(tool\s*:\s*)?pytest\s*\]", re.IGNORECASE)
_UNREADABLE = object()


def refused_by_name(path: str) -> bool:
    parts = path.split("/")
    return (
        parts[-1] in REFUSED_NAMES
        or parts[-1].endswith((".pth", ".egg-link"))
        or any(p in PYTEST_MODULES or p.startswith("pytest_") for p in parts)
        or any(p.endswith(PACKAGE_RECORDS) for p in parts[:-1])
    )


def is_allowed(path: str, allowed: bool | Sequence[str]) -> bool:
    if isinstance(allowed, bool):
        return allowed
    return any(fnmatchcase(path, pattern) for pattern in allowed)


def config_changed(name: str, old: str | None, new: str | None) -> bool:
    """Whether pytest's configuration in a changed `tox.ini`, `setup.cfg` or `pyproject.toml`
    (text None: absent) may differ between `old` and `new`."""
    if name == PYPROJECT:
        old_table, new_table = _pytest_table(old), _pytest_table(new)
        return _UNREADABLE in (old_table, new_table) or old_table != new_table
    return any(text is not None and _INI_PYTEST_SECTION.search(text) for text in (old, new))


def _pytest_table(text: str | None) -> object:
    if text is None:
        return None
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return _UNREADABLE
    tool = data.get("tool")
    return tool.get("pytest") if isinstance(tool, dict) else None


async def refused_changes(
    index: PrivateIndex, name: str, changes: Sequence[Change], allowed: bool | Sequence[str]
) -> list[str]:
    """The paths among `changes` (index `name` of `index` against its base) that touch the
    test setup and that `allowed` does not allow, sorted."""
    candidates = [c for c in changes if not is_allowed(c.path, allowed)]
    refused = {c.path for c in candidates if refused_by_name(c.path)}
    configs = [
        c
        for c in candidates
        if c.path.rsplit("/", 1)[-1] in {*INI_FILES, PYPROJECT} and c.path not in refused
    ]
    refused.update(c.path for c in configs if c.symlink)
    configs = [c for c in configs if not c.symlink]
    python = [c.path for c in candidates if c.path.endswith(".py") and c.path not in refused]
    for change in configs:
        if await _config_changed(index, name, change.path):
            refused.add(change.path)
    for index_name in ("base", name):
        refused |= await index.grep(index_name, python, PLUGIN_DECLARATION)
    return sorted(refused)


async def _config_changed(index: PrivateIndex, name: str, path: str) -> bool:
    try:
        old = await index.read("base", path, max_bytes=MAX_CONFIG_BYTES)
        new = await index.read(name, path, max_bytes=MAX_CONFIG_BYTES)
    except UnreadableFile:  # too large to judge: refuse rather than guess
        return True
    return config_changed(path.rsplit("/", 1)[-1], old, new)
