"""The built-in task families, found by what each folder declares, not by a central list.

A family is a folder under `agentroll.handlers.builtin` (`swe/`, `math/`, ...) whose
`__init__.py` names the handlers it serves:

    HANDLERS = {"swe": "SweHandler"}  # the name a job gives -> a class the package exports

so adding a family is adding its folder. The declaration is read from the source, not
imported: a process imports only the families its jobs name, and one whose optional
dependencies are missing fails only when a job names it. It must therefore be a literal
dict of strings. A module directly under `builtin/` may declare one the same way.
"""

import ast
import importlib
from pathlib import Path

from agentroll.handlers.errors import DuplicateHandlerError, RegistryError

DECLARATION = "HANDLERS"
BUILTIN_PACKAGE = "agentroll.handlers.builtin"


def declared_handlers(source: str, origin: str) -> dict[str, str]:
    """The `HANDLERS` literal a module's source assigns ({} if none); `RegistryError` if it
    is not a dict of strings."""
    if DECLARATION not in source:  # most modules declare nothing: skip parsing them
        return {}
    for node in ast.parse(source, origin).body:
        if isinstance(node, ast.Assign):
            targets, expression = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, expression = [node.target], node.value
        else:
            continue
        if not any(isinstance(t, ast.Name) and t.id == DECLARATION for t in targets):
            continue
        try:
            value = ast.literal_eval(expression)
        except ValueError as exc:
            raise RegistryError(f"{origin}: {DECLARATION} must be a literal dict") from exc
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in value.items()
        ):
            raise RegistryError(
                f"{origin}: {DECLARATION} must map handler names to class names, got {value!r}"
            )
        return value
    return {}


def _family_sources(folder: Path) -> list[tuple[Path, str]]:
    """Each family source in `folder` with its module's name relative to the package."""
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.is_dir() and (entry / "__init__.py").is_file():
            found.append((entry / "__init__.py", entry.name))
        elif entry.suffix == ".py" and entry.stem != "__init__":
            found.append((entry, entry.stem))
    return found


def builtin_families(package: str = BUILTIN_PACKAGE) -> dict[str, str]:
    """Handler name -> `module:Class` for every family `package` holds (in every folder of
    its `__path__`); `DuplicateHandlerError` for a name two families declare."""
    found: dict[str, str] = {}
    for folder in importlib.import_module(package).__path__:
        for source, module in _family_sources(Path(folder)):
            declared = declared_handlers(source.read_text("utf-8"), str(source))
            for name, attr in declared.items():
                path = f"{package}.{module}:{attr}"
                if name in found:
                    raise DuplicateHandlerError(
                        f"handler {name!r} is declared twice: {found[name]} and {path}"
                    )
                found[name] = path
    return found
