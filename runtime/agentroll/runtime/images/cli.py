"""``agentroll build-image``: argparse wiring the CLI calls.

parser = subparsers.add_parser("build-image", help="build a sandbox image")
add_build_image_arguments(parser)
...
return run_build_image(args)   # exit status: 0 built/reused, 2 bad input, 1 build failed
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agentroll.runtime.images.builder import CACHE_MODES, DEFAULT_TIMEOUT_S, build_image
from agentroll.runtime.images.errors import BuildFailed, BuildTimeout, ImageError, TemplateError
from agentroll.runtime.images.ocistore import OciStore, normalise_image_name, tag_rootfs
from agentroll.runtime.images.templates import TEMPLATE_FILES
from agentroll.runtime.settings import CacheSettings, cache_settings


def _param(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_build_image_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("template", help="template name in containers/, or a template folder")
    parser.add_argument(
        "--format",
        dest="fmt",
        choices=sorted(TEMPLATE_FILES),
        default="rootfs",
        help="rootfs (bubblewrap, via mmdebstrap) or singularity (.sif)",
    )
    parser.add_argument(
        "--cache",
        choices=CACHE_MODES,
        default="versioned",
        help="scratch: always rebuild; versioned: reuse while base image and "
        "agentroll version match; lock: reuse while the lock file matches",
    )
    parser.add_argument(
        "--param",
        action="append",
        type=_param,
        default=[],
        metavar="K=V",
        help="template parameter (repeatable); see containers/README.md",
    )
    parser.add_argument(
        "--lock-file",
        type=Path,
        default=None,
        help="pip constraints file pinning the image's Python packages",
    )
    images_dir = cache_settings().images_dir  # where the server and harbor-image look too
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=images_dir,
        help=f"image cache folder (default ${CacheSettings.env_name('images_dir')} or "
        f"{images_dir})",
    )
    parser.add_argument(
        "--templates-dir",
        type=Path,
        default=None,
        help="folder of templates (default: containers/ of the source tree)",
    )
    parser.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="NAME",
        help="also import the rootfs into the image cache's OCI store as NAME (repeatable), "
        "e.g. python:3.11-slim, so task Dockerfiles build FROM it offline",
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="SECONDS")


async def _build_and_tag(args: argparse.Namespace) -> int:
    if args.tag and args.fmt != "rootfs":
        raise TemplateError("--tag imports a rootfs: use it with --format rootfs")
    tags = [normalise_image_name(name) for name in args.tag]  # bad names fail before building
    images_dir = args.output_dir.expanduser()
    image = await build_image(
        args.template,
        fmt=args.fmt,
        cache=args.cache,
        params=dict(args.param),
        images_dir=images_dir,
        lock_file=args.lock_file,
        timeout_s=args.timeout,
        templates_dir=args.templates_dir,
    )
    state = "reused" if image.reused else "built"
    print(f"{state} {image.name}: {image.path}")
    if tags:
        store = OciStore(images_dir.resolve())
        imported = await tag_rootfs(
            store, image.path, tags, source=image.name, timeout_s=args.timeout
        )
        for name in tags:
            print(f"{'tagged' if name in imported else 'already tagged'} {name}")
    return 0


def run_build_image(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_build_and_tag(args))
    except (BuildFailed, BuildTimeout) as exc:
        print(f"agentroll build-image: build failed: {exc}", file=sys.stderr)
        return 1
    except ImageError as exc:
        print(f"agentroll build-image: {exc}", file=sys.stderr)
        return 2
