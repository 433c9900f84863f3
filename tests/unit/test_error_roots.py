"""Each package's errors have one root, and every error it exports derives from it."""

import importlib

import pytest

ROOTS = {
    "agentroll.handlers": "HandlerError",
    "agentroll.handlers.toolcalls": "agentroll.handlers:HandlerError",
    "agentroll.runtime": "AgentrollRuntimeError",
    "agentroll.runtime.action": "agentroll.runtime:AgentrollRuntimeError",
    "agentroll.runtime.images": "agentroll.runtime:AgentrollRuntimeError",
    "agentroll.trainer_clients": "ClientError",
}


def _root(package: str) -> type[BaseException]:
    module, _, name = ROOTS[package].rpartition(":")
    root = getattr(importlib.import_module(module or package), name)
    assert isinstance(root, type) and issubclass(root, Exception)
    return root


@pytest.mark.parametrize("package", sorted(ROOTS))
def test_every_exported_error_derives_from_the_package_root(package: str) -> None:
    module = importlib.import_module(package)
    root = _root(package)
    errors = [
        getattr(module, name)
        for name in module.__all__
        if isinstance(getattr(module, name), type)
        and issubclass(getattr(module, name), BaseException)
    ]
    assert errors, f"{package} exports no errors"
    strays = [e.__name__ for e in errors if not issubclass(e, root)]
    assert strays == [], f"{package}: not under {root.__name__}: {strays}"
