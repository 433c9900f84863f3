"""A test double of the ``apptainer`` CLI that really runs containers, through bubblewrap.

Apptainer cannot be installed everywhere the tests run; this fake parses the same command
lines the Singularity runtime emits and executes them for real:

* ``instance start [opts] IMAGE NAME`` -- a detached ``bwrap`` whose namespace init is the
  instance (its pid goes to ``--pid-file``), honouring ``--bind``, ``--env-file``/``--cleanenv``,
  ``--net --network none``, ``--fakeroot`` and ``--containall``. Like real Apptainer's runtime
  parent and FUSE helpers, it also leaves a helper process (``squashfuse_ll``) in its own
  session, outside the launcher's process group, carrying the launcher's environment -- and
  ``instance stop`` does not kill it, so callers must find it by their own markers.
* ``exec [opts] instance://NAME CMD...`` -- ``nsenter`` into the instance's namespaces.
* ``instance stop [-s SIG] [-t SECS] [-F] NAME``, ``instance list --json``, ``version``.

Only directory images are supported (``/`` means the host's system directories); a ``.sif``
is refused with a clear message. ``--writable-tmpfs``/``--overlay`` are accepted, but the image
root stays read-only (bubblewrap 0.8 has no overlay); writes go to binds and /tmp.

Run it as ``python -m agentroll.testing.fake_apptainer``; ``write_shim(dir)`` writes an
executable named ``apptainer`` that does so, to put on PATH or in ``SingularityConfig.binary``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from agentroll.runtime import procs

VERSION = "apptainer version 1.3.4-agentroll-fake"
_HELPER = "import time\nwhile True:\n    time.sleep(3600)\n"


def write_shim(directory: Path) -> Path:
    """An executable ``apptainer`` in ``directory`` that runs this fake."""
    shim = directory / "apptainer"
    shim.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m agentroll.testing.fake_apptainer "$@"\n'
    )
    shim.chmod(0o755)
    return shim


def _state_dir() -> Path:
    root = os.environ.get("FAKE_APPTAINER_DIR") or os.path.join(
        os.environ.get("HOME", "/tmp"), ".fake-apptainer"
    )
    path = Path(root) / "instances"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _parse_env_file(path: str) -> dict[str, str]:
    env = {}
    for line in Path(path).read_text().splitlines():
        for token in shlex.split(line, comments=True):
            key, sep, value = token.partition("=")
            if sep:
                env[key] = value
    return env


def _container_env(args: argparse.Namespace) -> dict[str, str]:
    env = {} if args.cleanenv or getattr(args, "containall", False) else dict(os.environ)
    if args.env_file:
        env.update(_parse_env_file(args.env_file))
    for item in args.env or []:
        key, _, value = item.partition("=")
        env[key] = value
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def _bind_args(spec: str) -> list[str]:
    src, _, rest = spec.partition(":")
    dest, _, opts = rest.partition(":")
    return ["--ro-bind" if opts == "ro" else "--bind", src, dest or src]


def _instance_start(args: argparse.Namespace) -> int:
    from agentroll.runtime.bwrap import root_args

    state = _state_dir() / f"{args.name}.json"
    if state.exists():
        print(f"FATAL:   instance {args.name} already exists", file=sys.stderr)
        return 255
    image = Path(args.image)
    if not image.is_dir():
        print(f"FATAL:   fake apptainer supports directory images only: {image}", file=sys.stderr)
        return 255
    isolated_net = args.net and args.network == "none"
    uid = 0 if args.fakeroot else os.getuid()
    argv = ["bwrap", "--unshare-all", *([] if isolated_net else ["--share-net"])]
    argv += ["--unshare-user", "--uid", str(uid), "--gid", str(uid), "--cap-drop", "ALL"]
    read_fd, write_fd = os.pipe()
    argv += ["--new-session", "--info-fd", str(write_fd)]
    argv += root_args(None if str(image) == "/" else image)
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for spec in args.bind or []:
        argv += _bind_args(spec)
    argv.append("--clearenv")
    for key, value in _container_env(args).items():
        argv += ["--setenv", key, value]
    # The instance process ends on SIGTERM, as Apptainer's does (pid 1 needs a handler).
    argv += [
        "--as-pid-1",
        "--",
        "/bin/sh",
        "-c",
        'trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done',
    ]
    log = open(_state_dir() / f"{args.name}.log", "ab")  # noqa: SIM115 - handed to the daemon
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=[write_fd],
        start_new_session=True,
    )  # fmt: skip
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as f:
        data = f.read()
    if not data:
        proc.wait()
        print(f"FATAL:   container creation failed (bwrap exit {proc.returncode})", file=sys.stderr)
        return 255
    pid = json.loads(data)["child-pid"]
    # The stray helper: its own session, our environment, the instance name on its cmdline.
    helper = subprocess.Popen(
        [sys.executable, "-c", _HELPER, "squashfuse_ll", str(image), args.name],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    record = {"instance": args.name, "pid": pid, "img": str(image), "uid": uid,
              "launcher_pid": proc.pid, "helper_pid": helper.pid, "ip": ""}  # fmt: skip
    state.write_text(json.dumps(record))
    if args.pid_file:
        Path(args.pid_file).write_text(f"{pid}\n")
    print("INFO:    instance started successfully")
    return 0


def _load(name: str) -> dict[str, object] | None:
    path = _state_dir() / f"{name}.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _exec(args: argparse.Namespace) -> int:
    if not args.image.startswith("instance://"):
        print(
            "FATAL:   fake apptainer only executes in instances (instance://NAME)", file=sys.stderr
        )
        return 255
    record = _load(args.image[len("instance://") :])
    if record is None or not procs.is_alive(int(str(record["pid"])), None):
        print(f"FATAL:   no instance found with name {args.image[11:]}", file=sys.stderr)
        return 255
    uid = str(record["uid"])
    cd = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', args.pwd] if args.pwd else []
    argv = [
        "nsenter",
        "-t",
        str(record["pid"]),
        "-a",
        "-S",
        uid,
        "-G",
        uid,
        "--",
        *cd,
        *args.command,
    ]
    os.execvpe("nsenter", argv, _container_env(args))


def _instance_stop(args: argparse.Namespace) -> int:
    record = _load(args.name)
    if record is None:
        print(f"FATAL:   no instance found with name {args.name}", file=sys.stderr)
        return 255
    pid = int(str(record["pid"]))
    sig = signal.SIGKILL if args.force else _signal(args.signal or "TERM")
    procs.kill([pid], sig)
    deadline = time.monotonic() + args.timeout
    while procs.is_alive(pid, None) and time.monotonic() < deadline:
        time.sleep(0.02)
    procs.kill([pid], signal.SIGKILL)  # as real Apptainer does after --timeout
    (_state_dir() / f"{args.name}.json").unlink(missing_ok=True)
    print(f"INFO:    Stopping {args.name} instance of {record['img']} (PID={pid})")
    return 0


def _signal(name: str) -> signal.Signals:
    if name.isdigit():
        return signal.Signals(int(name))
    return signal.Signals[name if name.startswith("SIG") else "SIG" + name]


def _instance_list(args: argparse.Namespace) -> int:
    out = []
    for path in sorted(_state_dir().glob("*.json")):
        rec = json.loads(path.read_text())
        if args.name is None or rec["instance"] == args.name:
            out.append({k: rec[k] for k in ("instance", "pid", "img", "ip")})
    print(
        json.dumps({"instances": out}, indent=4)
        if args.json
        else "\n".join(f"{r['instance']}\t{r['pid']}\t{r['img']}" for r in out)
    )
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="apptainer")
    p.add_argument("--version", action="store_true")
    sub = p.add_subparsers(dest="cmd")
    sub.add_parser("version")
    ex = sub.add_parser("exec")
    _container_opts(ex)
    ex.add_argument("--pwd")
    ex.add_argument("image")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    inst = sub.add_parser("instance").add_subparsers(dest="icmd")
    start = inst.add_parser("start")
    _container_opts(start)
    start.add_argument("--pid-file")
    start.add_argument("image")
    start.add_argument("name")
    stop = inst.add_parser("stop")
    stop.add_argument("-s", "--signal")
    stop.add_argument("-t", "--timeout", type=float, default=10)
    stop.add_argument("-F", "--force", action="store_true")
    stop.add_argument("name")
    ls = inst.add_parser("list")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("name", nargs="?")
    return p


def _container_opts(p: argparse.ArgumentParser) -> None:
    p.add_argument("-C", "--containall", action="store_true")
    p.add_argument("-e", "--cleanenv", action="store_true")
    p.add_argument("--env-file")
    p.add_argument("--env", action="append")
    p.add_argument("--no-mount")
    p.add_argument("-f", "--fakeroot", action="store_true")
    p.add_argument("--net", action="store_true")
    p.add_argument("--network", default="bridge")
    p.add_argument("--writable-tmpfs", action="store_true")
    p.add_argument("-o", "--overlay")
    p.add_argument("-B", "--bind", action="append")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.version or args.cmd == "version":
        print(VERSION)
        return 0
    if args.cmd == "exec":
        return _exec(args)
    if args.cmd == "instance":
        handlers = {"start": _instance_start, "stop": _instance_stop, "list": _instance_list}
        if args.icmd in handlers:
            return handlers[args.icmd](args)
    _parser().print_usage(sys.stderr)
    return 255


if __name__ == "__main__":
    sys.exit(main())
