"""``agentroll harbor-image TASK...``: build (or find cached) the images of Harbor task folders
ahead of a run, so no rollout's INIT waits for a build. A TASK is a folder or a bundled name."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agentroll.handlers.builtin.harbor import source
from agentroll.handlers.builtin.harbor.handler import build_environment
from agentroll.handlers.builtin.harbor.task import TaskFormatError, load_task
from agentroll.runtime.images.errors import ImageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("tasks", nargs="+", metavar="TASK", help="task folder or bundled name")
    parser.add_argument(
        "--images-dir",
        type=Path,
        default=source.cache_dir(),
        help=f"image cache (default ${source.CACHE_ENV} or {source.cache_dir()})",
    )
    parser.add_argument("--pull", action="store_true", help="pull FROM images missing locally")


def run(args: argparse.Namespace) -> int:
    images_dir = args.images_dir.expanduser()
    status = 0
    for name in args.tasks:
        try:
            root = Path(name) if Path(name).is_dir() else source.bundled_task(name)
            env = load_task(root.resolve()).environment
            image = asyncio.run(
                build_environment(
                    env, images_dir=images_dir, timeout_s=env.build_timeout_s, pull=args.pull
                )
            )
        except (TaskFormatError, ImageError) as exc:
            print(f"agentroll harbor-image: {name}: {exc}", file=sys.stderr)
            status = 1
            continue
        state = "reused" if image.reused else f"built in {image.build_seconds:.0f} s"
        print(f"{name}: {image.name} ({state}, {image.size_bytes / 1e6:.0f} MB): {image.path}")
    return status
