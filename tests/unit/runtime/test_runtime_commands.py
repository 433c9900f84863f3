"""Exact command lines: bwrap flags, Apptainer CLI (checked against its documented options)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agentroll.runtime import Bind, Limits, SandboxSpec
from agentroll.runtime.bwrap import bwrap_argv
from agentroll.runtime.config import SingularityConfig
from agentroll.runtime.errors import RuntimeUnavailable
from agentroll.runtime.limits import join_cgroup_argv, prlimit_argv, rlimit_args
from agentroll.runtime.sandbox_inside import action_server_argv, sandbox_env
from agentroll.runtime.singularity import (
    detect_binary,
    env_file_text,
    exec_argv,
    instance_start_argv,
    instance_stop_argv,
)


def _bwrap(spec: SandboxSpec, **kw: object) -> list[str]:
    args: dict[str, object] = dict(
        bwrap="bwrap", socket_dir=Path("/s/sock"), workspace=Path("/s/work"),
        env={"A": "1"}, command=["cmd"], info_fd=7, uid=65534,
    )  # fmt: skip
    args.update(kw)
    return bwrap_argv(spec, **args)  # type: ignore[arg-type]


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_bwrap_default_isolates_everything() -> None:
    argv = _bwrap(SandboxSpec())
    for flag in ("--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                 "--new-session", "--as-pid-1", "--clearenv"):  # fmt: skip
        assert flag in argv
    assert "--share-net" not in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[argv.index("--uid") + 1] == "65534"
    assert ("/s/work", "/workspace") in _pairs(argv, "--bind")
    assert ("/s/sock", "/run/agentroll") in _pairs(argv, "--ro-bind")  # the host makes its sockets
    assert argv[argv.index("--remount-ro") + 1] == "/"
    assert argv[-2:] == ["--", "cmd"] and argv[argv.index("--chdir") + 1] == "/workspace"
    # Host root: system directories only, never / itself nor home directories.
    ro = [src for src, _ in _pairs(argv, "--ro-bind")]
    assert "/" not in ro and "/root" not in ro and "/home" not in ro
    assert ("/dev/null", "/etc/shadow") in _pairs(argv, "--ro-bind")


def test_bwrap_network_binds_and_workspace_limit() -> None:
    spec = SandboxSpec(
        network=True,
        binds=(
            Bind(host=Path("/data"), dest="/data"),
            Bind(host=Path("/out"), dest="/o", ro=False),
        ),
        limits=Limits(workspace_bytes=8 << 20, tmp_bytes=16 << 20),
    )
    argv = _bwrap(spec, workspace=None)
    assert argv[argv.index("--unshare-all") + 1] == "--share-net"
    assert ("/data", "/data") in _pairs(argv, "--ro-bind")
    assert ("/out", "/o") in _pairs(argv, "--bind")
    sizes = [(argv[i + 1], argv[i + 3]) for i, a in enumerate(argv) if a == "--size"]
    assert sizes == [(str(16 << 20), "/tmp"), (str(8 << 20), "/workspace")]


def test_bwrap_image_root_binds_its_top_level(tmp_path: Path) -> None:
    (tmp_path / "usr").mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "bin").symlink_to("usr/bin")
    argv = _bwrap(SandboxSpec(image=tmp_path))
    assert (str(tmp_path / "usr"), "/usr") in _pairs(argv, "--ro-bind")
    assert ("usr/bin", "/bin") in _pairs(argv, "--symlink")
    assert (str(tmp_path / "proc"), "/proc") not in _pairs(argv, "--ro-bind")


def test_sandbox_env_is_explicit_and_marked() -> None:
    env = sandbox_env(SandboxSpec(env={"X": "y"}), "abc", "srv", "127.1.0.5")
    assert env["X"] == "y" and env["AGENTROLL_SANDBOX_ID"] == "abc"
    assert env["AGENTROLL_OWNER"] == "srv" and env["AGENTROLL_SANDBOX_ADDR"] == "127.1.0.5"
    assert env["HOME"] == "/workspace" and "SSH_AUTH_SOCK" not in env


def test_prlimit_and_rlimit_options() -> None:
    limits = Limits(max_processes=64, max_memory_bytes=1 << 30, max_file_size_bytes=1 << 20,
                    cpu_time_s=5, max_open_files=128)  # fmt: skip
    assert prlimit_argv(limits) == [
        "prlimit", "--nproc=64", f"--as={1 << 30}", f"--fsize={1 << 20}", "--cpu=5",
        "--nofile=128", "--",
    ]  # fmt: skip
    assert rlimit_args(limits) == [
        "--rlimit", "nproc=64", "--rlimit", f"as={1 << 30}", "--rlimit", f"fsize={1 << 20}",
        "--rlimit", "cpu=5", "--rlimit", "nofile=128",
    ]  # fmt: skip
    none = Limits(max_processes=None, max_memory_bytes=None, max_file_size_bytes=None,
                  max_open_files=None)  # fmt: skip
    assert prlimit_argv(none) == [] and rlimit_args(none) == []


def test_join_cgroups_moves_the_shell_then_runs_the_command(tmp_path: Path) -> None:
    assert join_cgroup_argv([]) == []
    files = [tmp_path / "a" / "cgroup.procs", tmp_path / "b" / "cgroup.procs"]
    for f in files:
        f.parent.mkdir()
    argv = join_cgroup_argv(files)
    out = subprocess.run(
        [*argv, "sh", "-c", "echo $$ -- ran"], capture_output=True, text=True, check=True
    )
    pid, marker, ran = out.stdout.split()
    assert (marker, ran) == ("--", "ran")  # a "--" in the command is the command's own
    assert [f.read_text().strip() for f in files] == [pid, pid]  # exec keeps the pid
    broken = join_cgroup_argv([tmp_path / "missing" / "cgroup.procs"])
    assert subprocess.run([*broken, "true"], capture_output=True, check=False).returncode == 125


def test_action_server_command() -> None:
    assert action_server_argv("py", "/w", Limits(max_processes=64), cgroup_fds=[5, 6]) == [
        "py", "-m", "agentroll.runtime.action", "--socket", "/run/agentroll/action.sock",
        "--single-client", "--workdir", "/w", "--root", "/w", "--root", "/tmp",
        "--rlimit", "nproc=64", "--rlimit", f"as={8 << 30}", "--rlimit", f"fsize={1 << 30}",
        "--rlimit", "nofile=4096", "--agent-cgroup-fd", "5", "--agent-cgroup-fd", "6",
    ]  # fmt: skip


def test_local_action_server_uses_the_host_socket_and_only_its_workspace() -> None:
    argv = action_server_argv(
        "py", "/s/work", Limits(max_processes=64), socket="/s/sock/action.sock", roots=("/s/work",)
    )
    assert argv[:10] == [
        "py", "-m", "agentroll.runtime.action", "--socket", "/s/sock/action.sock",
        "--single-client", "--workdir", "/s/work", "--root", "/s/work",
    ]  # fmt: skip
    assert argv[10:12] == ["--rlimit", "nproc=64"] and "/tmp" not in argv


def test_local_sandbox_env_points_home_at_the_host_workspace() -> None:
    env = sandbox_env(SandboxSpec(env={"HOME": "/h"}), "abc", "srv", None, home="/s/work")
    assert env["HOME"] == "/h"  # the spec still wins
    env = sandbox_env(SandboxSpec(), "abc", "srv", None, home="/s/work")
    assert env["HOME"] == "/s/work" and "AGENTROLL_SANDBOX_ADDR" not in env


def test_apptainer_instance_start_command_line() -> None:
    spec = SandboxSpec(binds=(Bind(host=Path("/d"), dest="/data"),))
    argv = instance_start_argv(
        "apptainer", SingularityConfig(fakeroot=True), spec, image=Path("/img.sif"),
        name="agentroll-x", socket_dir=Path("/s/sock"), workspace=Path("/s/work"),
        env_file=Path("/s/env"), pid_file=Path("/s/pid"),
    )  # fmt: skip
    assert argv == [
        "apptainer", "instance", "start", "--containall",
        "--no-mount", "home,cwd,bind-paths,hostfs",
        "--cleanenv", "--env-file", "/s/env", "--pid-file", "/s/pid",
        "--fakeroot", "--net", "--network", "none", "--writable-tmpfs",
        "--bind", "/s/sock:/run/agentroll:rw", "--bind", "/s/work:/workspace:rw",
        "--bind", "/d:/data:ro", "/img.sif", "agentroll-x",
    ]  # fmt: skip


def test_apptainer_network_overlay_and_no_isolation() -> None:
    cfg = SingularityConfig(overlay=Path("/ov.img"))
    argv = instance_start_argv(
        "singularity", cfg, SandboxSpec(network=True), image=Path("/i"), name="n",
        socket_dir=Path("/s"), workspace=Path("/w"), env_file=Path("/e"), pid_file=Path("/p"),
    )  # fmt: skip
    assert "--net" not in argv and "--writable-tmpfs" not in argv
    assert argv[argv.index("--overlay") + 1] == "/ov.img"


def test_apptainer_exec_and_stop_command_lines() -> None:
    assert exec_argv("apptainer", name="agentroll-x", env_file=Path("/e"), workdir="/w",
                     argv=["ls", "-l"]) == [
        "apptainer", "exec", "--cleanenv", "--env-file", "/e", "--pwd", "/w",
        "instance://agentroll-x", "ls", "-l",
    ]  # fmt: skip
    assert instance_stop_argv("apptainer", "n", timeout_s=2.5) == [
        "apptainer", "instance", "stop", "--timeout", "2", "n"]  # fmt: skip
    assert instance_stop_argv("apptainer", "n", timeout_s=0, force=True) == [
        "apptainer", "instance", "stop", "--force", "n"]  # fmt: skip


def test_env_file_quotes_values_for_the_shell() -> None:
    text = env_file_text({"A": "plain", "B": "it's $HOME; rm -rf /"})
    assert text == "A=plain\nB='it'\"'\"'s $HOME; rm -rf /'\n"


def test_missing_cli_is_a_clear_error() -> None:
    with pytest.raises(RuntimeUnavailable, match="not found"):
        detect_binary("/nonexistent/apptainer")


def test_interpreter_under_tmp_is_mounted_after_the_private_tmp() -> None:
    # bwrap applies mounts in order: a venv in /tmp/... bound before the sandbox's own /tmp
    # tmpfs would be hidden by it (a checkout under /tmp could then start no sandbox).
    argv = _bwrap(SandboxSpec(), python_dirs=("/tmp/checkout/.venv",))
    tmpfs = next(i for i, a in enumerate(argv) if a == "--tmpfs" and argv[i + 1] == "/tmp")
    bind = next(
        i for i, a in enumerate(argv) if a == "--ro-bind" and argv[i + 1] == "/tmp/checkout/.venv"
    )
    assert bind > tmpfs


def test_scratch_directories_are_private_size_limited_tmpfs() -> None:
    spec = SandboxSpec(scratch=("/tests", "/logs"), limits=Limits(tmp_bytes=32 << 20))
    argv = _bwrap(spec)
    tmpfs = [argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"]
    assert tmpfs[-3:] == ["/tmp", "/tests", "/logs"]
    for d in ("/tests", "/logs"):
        at = argv.index(d)
        assert argv[at - 3 : at] == ["--size", str(32 << 20), "--tmpfs"]
        assert at < argv.index("--remount-ro"), "mounted before the root turns read-only"
    apptainer = instance_start_argv(
        "apptainer", SingularityConfig(), spec, image=Path("/i.sif"), name="n",
        socket_dir=Path("/s"), workspace=Path("/w"), env_file=Path("/e"), pid_file=Path("/p"),
    )  # fmt: skip
    assert [apptainer[i + 1] for i, a in enumerate(apptainer) if a == "--scratch"] == [
        "/tests",
        "/logs",
    ]


@pytest.mark.parametrize("bad", ["relative", "/a/../b", "/"])
def test_scratch_directories_must_be_absolute(bad: str) -> None:
    with pytest.raises(ValueError, match="scratch directory"):
        SandboxSpec(scratch=(bad,))
