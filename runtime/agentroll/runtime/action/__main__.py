"""Entry point of the action server.

    python -m agentroll.runtime.action --socket PATH [--listen-fd FD] [--root DIR ...]
        [--workdir DIR] [--single-client] [--rlimit NAME=VALUE ...] [--agent-cgroup-fd FD ...]

Serves until a ``shutdown`` request (or SIGTERM/SIGINT, unless ``--single-client``). Prints
nothing on stdout; a caller knows the server is ready when the socket answers ``alive``
(``ActionClient.connect`` retries). The server guards itself before anything else runs
(guard.py); ``--rlimit`` and ``--agent-cgroup-fd`` are what it puts its tools under.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from agentroll.runtime.action.guard import Confinement, harden, parse_rlimit


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m agentroll.runtime.action",
        description="In-sandbox action server (bash, IPython, files) on a Unix domain socket.",
    )
    parser.add_argument("--socket", required=True, help="path of the Unix socket to create (0600)")
    parser.add_argument(
        "--listen-fd",
        type=int,
        default=None,
        metavar="FD",
        help="serve on this inherited, already listening socket (the host's, bound at --socket) "
        "instead of creating one",
    )
    parser.add_argument(
        "--root",
        action="append",
        default=[],
        help="directory the file tools may touch (repeatable; default: the workdir)",
    )
    parser.add_argument("--workdir", default=None, help="initial directory (default: cwd)")
    parser.add_argument(
        "--state-dir",
        default=None,
        help="private directory for kernel connection files (default: new, beside the socket)",
    )
    parser.add_argument(
        "--single-client",
        action="store_true",
        help="serve only the first connection (a sandbox's host), then stop listening and "
        "unlink the socket; stop when it closes; termination signals do not stop the server",
    )
    parser.add_argument(
        "--rlimit",
        action="append",
        default=[],
        type=parse_rlimit,
        metavar="NAME=VALUE",
        help="an rlimit for the tools (nproc, as, fsize, cpu, nofile; repeatable)",
    )
    parser.add_argument(
        "--agent-cgroup-fd",
        action="append",
        default=[],
        type=int,
        metavar="FD",
        help="an open cgroup.procs the tools are moved into (repeatable)",
    )
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    from agentroll.runtime.action.server import ActionServer

    server = ActionServer(
        args.socket,
        roots=args.root,
        workdir=args.workdir,
        state_dir=args.state_dir,
        single_client=args.single_client,
        confinement=Confinement(args.rlimit, args.agent_cgroup_fd),
        listen_fd=args.listen_fd,
    )
    await server.start()
    await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    harden(single_client=args.single_client)
    if args.workdir and not os.path.isdir(args.workdir):
        print(f"action server: workdir {args.workdir} is not a directory", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args))
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"action server: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
