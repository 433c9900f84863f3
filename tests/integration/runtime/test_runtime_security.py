"""Attacks from inside a bubblewrap sandbox: each is contained and the server stays healthy."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
from rt_support import HAVE_BWRAP, HAVE_NAT, marked_pids

from agentroll.runtime import Limits, SandboxSpec
from agentroll.runtime.action.errors import ActionRequestError
from agentroll.runtime.bwrap import BwrapRuntime

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing"),
]
MiB = 1 << 20


async def healthy(rt: BwrapRuntime) -> None:
    """A fresh sandbox still starts and answers: the server was not harmed."""
    sb = await rt.start(SandboxSpec(), timeout=30)
    assert (await sb.tools.bash("echo ok", timeout=10)).output.strip() == "ok"
    await sb.stop()


async def test_host_files_outside_binds_are_invisible(bwrap: BwrapRuntime, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    sb = await bwrap.start(SandboxSpec(), timeout=30)
    out = await sb.exec(
        ["sh", "-c", f"cat {secret}; ls /root /home /work/main/pyproject.toml; cat /etc/shadow"],
        timeout=10,
    )
    assert "host secret" not in out.stdout
    assert "No such file" in out.stderr
    assert "root:" not in out.stdout.replace("/root:", "")  # /etc/shadow is masked
    assert out.exit_code != 0
    await sb.stop()


async def test_no_capabilities_and_no_nested_user_namespaces(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(), timeout=30)
    caps = await sb.exec(["grep", "^CapEff", "/proc/self/status"], timeout=10)
    assert caps.stdout.split() == ["CapEff:", "0000000000000000"]
    nested = await sb.exec(["unshare", "-U", "true"], timeout=10)
    assert nested.exit_code != 0
    await sb.stop()


async def test_writes_outside_the_workspace_fail(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(), timeout=30)
    res = await sb.tools.bash("touch /usr/evil /etc/evil /evil; echo done", timeout=10)
    assert res.output.count("Read-only file system") + res.output.count("Permission denied") == 3
    assert not await asyncio.to_thread(
        lambda: os.path.exists("/usr/evil") or os.path.exists("/etc/evil")
    )
    await sb.stop()


async def test_network_is_unreachable(bwrap: BwrapRuntime) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        sb = await bwrap.start(SandboxSpec(), timeout=30)
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        out = await sb.exec(["python3", "-c", code], timeout=10)
        assert out.exit_code != 0 and "ConnectionRefusedError" in out.stderr
        out = await sb.exec(
            [
                "python3",
                "-c",
                "import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)",
            ],
            timeout=10,
        )
        assert out.exit_code != 0 and "unreachable" in out.stderr.lower()
        await sb.stop()


@pytest.mark.skipif(not HAVE_NAT, reason="slirp4netns or a usable /dev/net/tun missing")
async def test_network_on_gives_an_own_loopback(bwrap: BwrapRuntime) -> None:
    """Sandboxes with network each have their own namespace: the same port, no collision."""
    a = await bwrap.start(SandboxSpec(network=True), timeout=30)
    b = await bwrap.start(SandboxSpec(network=True), timeout=30)
    assert a.address is None and b.address is None  # no shared loopback to divide up
    serve = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 8000)); print('bound')"
    for sb in (a, b):
        out = await sb.exec(["python3", "-c", serve], timeout=10)
        assert out.stdout.strip() == "bound", out.stderr
    await asyncio.gather(a.stop(), b.stop())


async def test_another_sandboxs_socket_is_unreachable(bwrap: BwrapRuntime) -> None:
    a = await bwrap.start(SandboxSpec(), timeout=30)
    b = await bwrap.start(SandboxSpec(), timeout=30)
    code = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX)\n"
        "try:\n    s.connect(sys.argv[1]); print('CONNECTED')\n"
        "except OSError as e:\n    print(type(e).__name__)\n"
    )
    out = await a.exec(["python3", "-c", code, str(b.socket_path)], timeout=10)
    assert out.stdout.strip() == "FileNotFoundError"
    listing = await a.exec(["ls", "/run/agentroll"], timeout=10)
    assert listing.stdout.split() == []  # not even its own: gone once the host connected
    await asyncio.gather(a.stop(), b.stop())


async def test_fork_bomb_is_contained(bwrap: BwrapRuntime) -> None:
    limits = Limits(max_processes=64)
    sb = await bwrap.start(SandboxSpec(limits=limits), timeout=30)
    res = await sb.tools.bash("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout=20)
    assert res.timed_out or "survived" in res.output or "fork" in res.output.lower()
    if sb.cgroup is not None:
        assert len(sb.cgroup.pids()) <= 64
    else:
        assert len(marked_pids(sb.id)) <= 64 + 4
    await sb.stop()
    assert marked_pids(sb.id) == []
    await healthy(bwrap)


async def test_memory_hog_gets_memory_error(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(limits=Limits(max_memory_bytes=2048 * MiB)), timeout=30)
    res = await sb.exec(["python3", "-c", "x = bytearray(8 << 30)"], timeout=20)
    assert res.exit_code != 0 and "MemoryError" in res.stderr
    assert (await sb.tools.bash("echo alive", timeout=10)).output.strip() == "alive"
    await sb.stop()


async def test_disk_fill_stops_at_the_workspace_limit(bwrap: BwrapRuntime) -> None:
    spec = SandboxSpec(limits=Limits(workspace_bytes=8 * MiB, max_file_size_bytes=64 * MiB))
    sb = await bwrap.start(spec, timeout=30)
    assert sb.workdir is None  # a size-limited tmpfs inside the sandbox
    res = await sb.tools.bash("dd if=/dev/zero of=big bs=1M count=32 2>&1; du -sm .", timeout=20)
    assert "No space left on device" in res.output
    tmp = await sb.tools.bash(
        "for i in 1 2 3 4 5; do dd if=/dev/zero of=/tmp/f$i bs=1M count=60 2>&1; done",
        timeout=20,
    )
    assert "No space left on device" in tmp.output  # /tmp is bounded too
    await sb.stop()


async def test_file_size_limit(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(limits=Limits(max_file_size_bytes=1 * MiB)), timeout=30)
    out = await sb.exec(["sh", "-c", "dd if=/dev/zero of=f bs=1M count=4"], timeout=10)
    assert out.exit_code != 0
    assert sb.workdir is not None and (sb.workdir / "f").stat().st_size <= 1 * MiB
    await sb.stop()


async def test_path_traversal_through_file_tools(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(), timeout=30)
    for path in ("../../etc/shadow", "/root/.bashrc", "../run/agentroll/action.sock"):
        with pytest.raises(ActionRequestError):
            await sb.download(path)
    with pytest.raises(ActionRequestError):
        await sb.upload("../../usr/evil", b"x")
    assert not await asyncio.to_thread(os.path.exists, "/usr/evil")
    await sb.stop()


async def test_cpu_time_limit_kills_a_spinner(bwrap: BwrapRuntime) -> None:
    sb = await bwrap.start(SandboxSpec(limits=Limits(cpu_time_s=1)), timeout=30)
    out = await sb.exec(["python3", "-c", "while True: pass"], timeout=20)
    assert not out.timed_out and out.exit_code != 0
    paths = sb.cgroup.paths if sb.cgroup is not None else []
    await sb.stop()
    assert not any(p.exists() for p in paths)
