"""The server's exceptions form one tree under `ServerError`, each still the builtin it was."""

import importlib
import inspect
import pkgutil

import pytest

import agentroll.server
from agentroll.server.errors import ServerError


def _public_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(agentroll.server.__path__, "agentroll.server."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
                and not name.startswith("_")
            ):
                found.append(obj)
    return found


def test_every_public_server_exception_derives_from_the_root() -> None:
    exceptions = _public_exceptions()
    assert len(exceptions) > 20  # the walk found them
    assert [e.__qualname__ for e in exceptions if not issubclass(e, ServerError)] == []


@pytest.mark.parametrize(
    ("path", "builtin"),
    [
        ("agentroll.server.errors:StoreError", RuntimeError),
        ("agentroll.server.errors:PauseTimeout", TimeoutError),
        ("agentroll.server.errors:JobConflict", ValueError),
        ("agentroll.server.errors:UnknownJob", LookupError),
        ("agentroll.server.llm.base:BackendError", RuntimeError),
        ("agentroll.server.llm.base:PauseUnsupported", NotImplementedError),
        ("agentroll.server.llm.http:HTTPTransportError", OSError),
        ("agentroll.server.llm.http:HTTPTimeout", TimeoutError),
        ("agentroll.server.llm.registry:UnknownBackendKind", ValueError),
        ("agentroll.server.http_body:BodyTooLarge", ValueError),
        ("agentroll.server.proxy.http11:BadRequest", ValueError),
        ("agentroll.server.settings:UnsafeSettingsError", ValueError),
    ],
)
def test_errors_stay_the_builtin_callers_catch(path: str, builtin: type[Exception]) -> None:
    module, _, name = path.partition(":")
    assert issubclass(getattr(importlib.import_module(module), name), builtin)
