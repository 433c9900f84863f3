"""``agentroll build-image``: argparse wiring the CLI calls.

parser = subparsers.add_parser("build-image", help="build a sandbox image")
add_build_image_arguments(parser)
...
return run_build_image(args)   # exit status: 0 built/reused/pruned, 2 bad input, 1 build failed

``--prune`` builds nothing: it applies the cache's eviction rule (evict.py) to every template's
images now (or to TEMPLATE's, if given) and prints what it removed and the bytes freed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from agentroll.runtime.images.builder import CACHE_MODES, DEFAULT_TIMEOUT_S, build_image
from agentroll.runtime.images.errors import BuildFailed, BuildTimeout, ImageError, TemplateError
from agentroll.runtime.images.evict import PruneReport, prune
from agentroll.runtime.images.ocistore import OciStore, normalise_image_name, tag_rootfs
from agentroll.runtime.images.templates import TEMPLATE_FILES, find_template
from agentroll.runtime.settings import CacheSettings, cache_settings


def _param(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_build_image_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "template",
        nargs="?",
        help="template name in containers/, or a template folder (optional with --prune)",
    )
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
    parser.add_argument(
        "--prune",
        action="store_true",
        help="build nothing: delete older copies of every image (or of TEMPLATE's) beyond the "
        "newest --keep, except those a sandbox uses, and print the bytes freed",
    )
    parser.add_argument(
        "--keep",
        type=_keep,
        default=None,
        metavar="N",
        help="copies of each image to keep, newest first by last use; 0 keeps all "
        f"(default ${CacheSettings.env_name('images_keep')} or "
        f"{CacheSettings.model_fields['images_keep'].default})",
    )


def _keep(text: str) -> int:
    try:
        keep = int(text)
    except ValueError:
        keep = -1
    if keep < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return keep


def _size(n: int) -> str:
    return f"{n} bytes ({n / 2**30:.2f} GiB)"


def _print_report(report: PruneReport) -> None:
    for name, size in report.removed:
        print(f"removed {name}: {_size(size)}")
    for name, why in report.skipped:
        print(f"kept {name}: {why}")
    print(f"freed {_size(report.freed_bytes)} ({len(report.removed)} images removed)")


def _prune(args: argparse.Namespace) -> int:
    # A template named is looked up: a typo is an error, not a prune of nothing.
    name = None if args.template is None else find_template(args.template, args.templates_dir).name
    keep = cache_settings().images_keep if args.keep is None else args.keep
    if keep == 0:
        print("keep is 0: every copy is kept, nothing pruned")
        return 0
    images_dir = args.output_dir.expanduser().resolve()
    _print_report(prune(images_dir, keep, template=name))
    return 0


async def _build_and_tag(args: argparse.Namespace) -> int:
    if args.tag and args.fmt != "rootfs":
        raise TemplateError("--tag imports a rootfs: use it with --format rootfs")
    tags = [normalise_image_name(name) for name in args.tag]  # bad names fail before building
    images_dir = args.output_dir.expanduser()
    if args.template is None:
        raise TemplateError("name a template to build (or prune the cache with --prune)")
    image = await build_image(
        args.template,
        fmt=args.fmt,
        cache=args.cache,
        params=dict(args.param),
        images_dir=images_dir,
        lock_file=args.lock_file,
        timeout_s=args.timeout,
        templates_dir=args.templates_dir,
        keep=args.keep,
    )
    state = "reused" if image.reused else "built"
    print(f"{state} {image.name}: {image.path}")
    for name, size in image.evicted:
        print(f"evicted {name}: {_size(size)}")
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
        if args.prune:
            return _prune(args)
        return asyncio.run(_build_and_tag(args))
    except (BuildFailed, BuildTimeout) as exc:
        print(f"agentroll build-image: build failed: {exc}", file=sys.stderr)
        return 1
    except ImageError as exc:
        print(f"agentroll build-image: {exc}", file=sys.stderr)
        return 2
