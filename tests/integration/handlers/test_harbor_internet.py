"""A Harbor task with `allow_internet = true` (and one with `network_mode = "host"`), run
through the server: the sandbox has a network (a tap device, DNS at the NAT's resolver), yet
the agentroll API and its /metrics, the inference backend and the node's loopback stay out of
reach while the sandbox's own loopback works. The scripted policy solves the task only if all
of that holds, so the reward says it: 1.0 isolated, 0.0 not."""

import shlex
from pathlib import Path

import pytest
from tests.conftest import ServerFactory
from tests.integration.handlers.attacks import POLICY, attack_rules
from tests.integration.handlers.harness import rollout_service, run_jobs, scripted_backend
from tests.integration.handlers.test_harbor_tasks import HELLO, harbor_job, task_copy
from tests.support.images import CACHE
from tests.support.task_images import BUILD_TIMEOUT_S, needs_task_build, task_bases

from agentroll.handlers.builtin.harbor import source
from agentroll.server.schema import Outcome

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(2 * BUILD_TIMEOUT_S),
    *needs_task_build,
]

# Exit 0 only if the sandbox has a network and reaches none of the given ports of the node.
PROBE = """
import socket, sys, threading, urllib.request
assert "tap0" in {name for _, name in socket.if_nameindex()}, "no network"
assert open("/etc/resolv.conf").read().split() == ["nameserver", "10.0.2.3"]
own = socket.create_server(("127.0.0.1", 0))
threading.Thread(target=lambda: own.accept()[0].sendall(b"mine"), daemon=True).start()
assert socket.create_connection(own.getsockname(), timeout=5).recv(4) == b"mine"
for port in sys.argv[1:]:
    for host in ("127.0.0.1", "10.0.2.2"):
        try:
            urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=3)
        except urllib.error.HTTPError:
            sys.exit(f"reached {host}:{port}")  # it answered, if only with an error
        except OSError:
            continue
        sys.exit(f"reached {host}:{port}")
print("isolated")
"""


def networked_task(tmp_path: Path, name: str, setting: str) -> Path:
    root = task_copy(tmp_path, "hello-file", name)
    toml = root / "task.toml"
    toml.write_text(toml.read_text().replace("[environment]\n", f"[environment]\n{setting}\n"))
    return root


@pytest.fixture(scope="module")
def bases() -> None:
    task_bases(CACHE)


async def test_a_task_with_internet_reaches_nothing_of_the_node(
    bases: None, agentroll_server: ServerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(source.CACHE_ENV, str(CACHE))
    settings = {"internet": "allow_internet = true", "host-mode": 'network_mode = "host"'}
    jobs = [harbor_job(n, networked_task(tmp_path, n, s)) for n, s in settings.items()]
    attacks: dict[str, list[str]] = {}  # filled in once the ports are known
    async with (
        scripted_backend(0.0, attack_rules(attacks), policy=POLICY) as backend,
        rollout_service(agentroll_server, tmp_path, backend) as client,
    ):
        ports = [url.rsplit(":", 1)[1].strip("/") for url in (client.base_url, backend.url)]
        probe = f"python3 -c {shlex.quote(PROBE)} {' '.join(ports)}"
        for name in settings:
            attacks[name] = [f"{probe} && {HELLO}"]
        results = await run_jobs(client, jobs, timeout_s=600)
    for name in settings:
        t = results[name]
        assert (name, t.outcome, t.reward) == (name, Outcome.ok, 1.0), (t.error, t.reward_info)
