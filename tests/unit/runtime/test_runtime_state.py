"""Specs, configs, leases, loopback addresses, marker selection, the public surface."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

import agentroll.runtime as rt
from agentroll.runtime import procs
from agentroll.runtime.config import BwrapConfig, LocalConfig, RuntimeConfig, SingularityConfig
from agentroll.runtime.errors import AddressExhausted, RuntimeUnavailable
from agentroll.runtime.lease import Lease, LeaseStore, reap
from agentroll.runtime.netaddr import LoopbackAllocator
from agentroll.runtime.state import StateDir


def test_public_surface_is_sorted_and_importable() -> None:
    assert rt.__all__ == sorted(rt.__all__)
    for name in rt.__all__:
        assert getattr(rt, name) is not None
    with pytest.raises(AttributeError):
        rt.Nope  # noqa: B018


def test_importing_the_package_is_light() -> None:
    code = "import sys, agentroll.runtime; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_spec_validation_and_pool_key() -> None:
    spec = rt.SandboxSpec(env={"B": "2", "A": "1"}, label="job")
    assert spec.env == (("A", "1"), ("B", "2"))
    assert spec.pool_key() == rt.SandboxSpec(env={"A": "1", "B": "2"})
    assert hash(spec.pool_key()) == hash(rt.SandboxSpec(env={"A": "1", "B": "2"}))
    with pytest.raises(ValidationError, match="workdir"):
        rt.SandboxSpec(workdir="relative")
    with pytest.raises(ValidationError, match="destination"):
        rt.Bind(host=Path("/x"), dest="/a/../etc")
    with pytest.raises(ValidationError):
        rt.SandboxSpec(unknown=1)  # type: ignore[call-arg]


def test_config_union_dispatches_on_type() -> None:
    adapter: TypeAdapter[RuntimeConfig] = TypeAdapter(RuntimeConfig)
    assert isinstance(adapter.validate_python({"type": "bwrap"}), BwrapConfig)
    sing = adapter.validate_python({"type": "singularity", "fakeroot": True})
    assert isinstance(sing, SingularityConfig) and sing.fakeroot
    with pytest.raises(ValidationError):
        adapter.validate_python({"type": "bwrap", "fakeroot": True})
    with pytest.raises(ValidationError):
        adapter.validate_python({"type": "docker"})


def test_local_runtime_must_be_enabled(tmp_path: Path) -> None:
    with pytest.raises(RuntimeUnavailable, match="no isolation"):
        LocalConfig(state_dir=tmp_path).build()


def test_state_dir_refuses_foreign_or_symlinked_roots(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(rt.SandboxError, match="not a directory owned"):
        StateDir(link)
    state = StateDir(tmp_path / "ok")
    assert (state.root.stat().st_mode & 0o777) == 0o700


def test_loopback_allocator_is_exclusive_and_releases(tmp_path: Path) -> None:
    a = LoopbackAllocator(tmp_path, "127.1.0.0/29")
    b = LoopbackAllocator(tmp_path, "127.1.0.0/29")  # another server sharing the state dir
    got = [a.allocate("s1"), b.allocate("s2"), a.allocate("s3"), b.allocate("s4")]
    assert len(set(got)) == 4 and all(x.startswith("127.1.0.") for x in got)
    assert a.owner(got[1]) == "s2"
    a.release(got[1], owner="someone-else")  # not the owner: kept
    assert a.owner(got[1]) == "s2"
    a.release(got[1], owner="s2")
    assert a.owner(got[1]) is None
    with pytest.raises(ValueError, match=r"127\.0\.0\.0/8"):
        LoopbackAllocator(tmp_path, "10.0.0.0/8")


def test_loopback_allocator_exhaustion(tmp_path: Path) -> None:
    a = LoopbackAllocator(tmp_path, "127.2.0.0/30")
    a.allocate("x")
    a.allocate("y")
    with pytest.raises(AddressExhausted):
        a.allocate("z")


def test_loopback_allocator_skips_localhost_subnet(tmp_path: Path) -> None:
    a = LoopbackAllocator(tmp_path, "127.0.0.0/23")
    assert a.allocate("x").startswith("127.0.1.")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


async def test_reap_removes_only_leases_of_dead_owners(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    store = LeaseStore(state)
    me, started = os.getpid(), procs.start_time(os.getpid())
    for sid, pid, start in (("dead1", _dead_pid(), 1), ("live1", me, started), ("reused", me, 1)):
        state.make_sandbox_dirs(sid, workspace=True)
        store.write(Lease(sandbox_id=sid, runtime="bwrap", owner_instance="x", owner_pid=pid,
                          owner_start=start))  # fmt: skip
    store.write(Lease(sandbox_id="other", runtime="local", owner_instance="x",
                      owner_pid=_dead_pid(), owner_start=1))  # fmt: skip
    # "reused": our pid, but a different start time: the owner is gone, the pid recycled.
    assert await reap(state, procs.ProcScanner(), runtime="bwrap") == 2
    assert sorted(lease.sandbox_id for lease in store.all()) == ["live1", "other"]
    assert not state.sandbox_dir("dead1").exists() and state.sandbox_dir("live1").exists()


def test_a_lease_from_a_newer_server_is_read_without_its_new_fields(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    path = LeaseStore(state).path("newer")
    path.write_text(
        '{"sandbox_id": "newer", "runtime": "bwrap", "owner_instance": "x", "owner_pid": 1,'
        ' "owner_start": 1, "pidns": 5, "a_marker_from_the_future": "?"}'
    )
    (lease,) = LeaseStore(state).all()
    assert (lease.sandbox_id, lease.pidns, lease.namespace()) == ("newer", 5, None)
    LeaseStore(state).path("junk").write_text("[1, 2]")
    assert [lease.sandbox_id for lease in LeaseStore(state).all()] == ["newer"]


def test_marker_selection() -> None:
    ps = [
        procs.ProcInfo(10, 1, "abc", b"x"),
        procs.ProcInfo(11, 77, None, b"y"),
        procs.ProcInfo(12, 1, None, b"squashfuse_ll img agentroll-abc"),
        procs.ProcInfo(13, 1, "abcd", b"z"),
    ]
    assert procs.select(ps, "abc") == [10]
    assert procs.select(ps, "abc", pidns=77) == [10, 11]
    assert procs.select(ps, "abc", cmdline_marker=b"agentroll-abc") == [10, 12]


def test_start_time_and_liveness() -> None:
    me = os.getpid()
    assert procs.is_alive(me, procs.start_time(me))
    assert not procs.is_alive(me, (procs.start_time(me) or 0) + 1)
    assert not procs.is_alive(_dead_pid(), None)


def test_interpreter_path_is_normalised_for_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentroll.runtime import hostroot

    monkeypatch.setattr(hostroot.sys, "executable", "/work/repo/benchmarks/../.venv/bin/python")
    assert hostroot.python_executable() == "/work/repo/.venv/bin/python"
