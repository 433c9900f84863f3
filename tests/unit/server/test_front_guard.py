"""The protocol fronts hold an agentroll token and answer anyone: loopback unless allowed."""

import pytest

from agentroll.server.cli import main
from agentroll.server.front_guard import require_loopback, zmq_host


def _front(command: str, *where: str) -> list[str]:
    return [command, "--server", "http://127.0.0.1:1", "--handler", "h", *where]


@pytest.mark.parametrize(
    "argv",
    [
        _front("nemo-gym-agent", "--host", "0.0.0.0"),
        _front("nemo-gym-agent", "--host", "10.1.2.3"),
        _front("prime-env-server", "--address", "tcp://*:5000"),
        _front("prime-env-server", "--address", "tcp://[::]:5000"),
    ],
)
def test_a_front_beyond_loopback_is_refused_unless_allowed(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no authentication of its own" in err and "--allow-remote" in err


def test_loopback_or_an_explicit_allowance_passes() -> None:
    for host in ("127.0.0.1", "localhost", "::1", zmq_host("tcp://127.0.0.1:0")):
        require_loopback(host, False, "front")
    require_loopback(zmq_host("ipc:///tmp/env.sock"), False, "front")  # this machine's
    require_loopback("0.0.0.0", True, "front")
