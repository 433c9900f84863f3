"""Entry point of the action server.

    python -m agentroll.runtime.action --socket PATH [--root DIR ...] [--workdir DIR]


Serves until SIGTERM/SIGINT or a ``shutdown`` request. Prints nothing on stdout; a caller knows
the server is ready when the socket answers ``alive`` (``ActionClient.connect`` retries).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m agentroll.runtime.action",
        description="In-sandbox action server (bash, IPython, files) on a Unix domain socket.",
    )
    parser.add_argument("--socket", required=True, help="path of the Unix socket to create (0600)")
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
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> None:
    from agentroll.runtime.action.server import ActionServer

    server = ActionServer(
        args.socket, roots=args.root, workdir=args.workdir, state_dir=args.state_dir
    )
    await server.start()
    await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
