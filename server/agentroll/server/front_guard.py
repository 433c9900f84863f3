"""The protocol fronts (`nemo-gym-agent`, `prime-env-server`) hold an agentroll API token and
have no authentication of their own (their upstream clients send none): whoever reaches one
runs jobs, and registers backends, with that token. So they listen on loopback unless told,
in so many words, that the network they listen on is the trainer's alone."""

from urllib.parse import urlsplit

from agentroll.server.schema.auth import is_loopback

ALLOW_FLAG = "--allow-remote"


def zmq_host(address: str) -> str:
    """The host of a ZMQ endpoint (`ipc://` and `inproc://` ones are this machine's)."""
    if not address.startswith("tcp://"):
        return "localhost"
    return address.removeprefix("tcp://").rsplit(":", 1)[0]


def require_loopback(host: str, allowed: bool, what: str) -> None:
    """`ValueError` when `host` is not loopback and the operator did not allow it."""
    if not allowed and not is_loopback(urlsplit(f"//{host}").hostname or host):
        raise ValueError(
            f"{what} would listen on {host}: it has no authentication of its own and acts "
            f"with the agentroll token it holds; pass {ALLOW_FLAG} if only the trainer's "
            "network reaches that address"
        )
