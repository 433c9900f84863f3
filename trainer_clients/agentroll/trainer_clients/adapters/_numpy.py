"""numpy is optional for agentroll's client: only the adapters need it."""


def require_numpy() -> None:
    try:
        import numpy  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "agentroll.trainer_clients.adapters needs numpy: pip install numpy "
            "(or pip install 'agentroll[train]')"
        ) from exc
