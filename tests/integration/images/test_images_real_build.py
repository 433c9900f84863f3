"""Real images: mmdebstrap builds a rootfs, bubblewrap runs Python from it.

The images are cached in a stable folder (``AGENTROLL_IMAGES_CACHE``, default
/var/tmp/agentroll-images-cache) in ``versioned`` mode, so only the first run on a machine
(or after an agentroll version or template change) pays for the build (~40 s each here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.images import CACHE, needs_real_build

from agentroll.runtime.images import (
    BuiltImage,
    add_build_image_arguments,
    build_image,
    run_build_image,
)

BUILD_TIMEOUT_S = 900

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2 * BUILD_TIMEOUT_S), *needs_real_build]

PROBE = """
import importlib.metadata as md, json, os, socket, sys
import ipykernel, jupyter_client, ptyprocess
try:
    socket.create_connection(("deb.debian.org", 80), timeout=2)
    net = True
except OSError:
    net = False
print(json.dumps({
    "python": "%d.%d" % sys.version_info[:2], "prefix": sys.prefix,
    "agentroll": md.version("agentroll"), "jupyter_client": jupyter_client.__version__,
    "net": net, "image": json.load(open("/etc/agentroll/image.json")),
}))
"""


def build(template: str) -> BuiltImage:
    return asyncio.run(
        build_image(
            template, fmt="rootfs", cache="versioned", images_dir=CACHE, timeout_s=BUILD_TIMEOUT_S
        )
    )


@pytest.fixture(scope="module")
def python_base() -> Iterator[BuiltImage]:
    yield build("python-base")


@pytest.fixture(scope="module")
def swe_task() -> Iterator[BuiltImage]:
    yield build("swe-task")


async def bwrap(root: Path, *argv: str, extra: tuple[str, ...] = ()) -> tuple[int, str]:
    cmd = [
        "bwrap",
        "--ro-bind",
        str(root),
        "/",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
        *extra,
        "--unshare-all",
        "--die-with-parent",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/local/bin:/usr/bin:/bin",
        "--setenv",
        "HOME",
        "/tmp",
        "--",
        *argv,
    ]
    proc = await asyncio.create_subprocess_exec(
        *cmd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
    except TimeoutError:
        os.killpg(proc.pid, 9)
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace")


async def test_python_base_runs_the_sandbox_extra_under_bwrap(python_base: BuiltImage) -> None:
    rc, out = await bwrap(python_base.path, "/opt/agentroll/bin/python", "-c", PROBE)
    assert rc == 0, out
    facts = json.loads(out.strip().splitlines()[-1])
    assert facts["python"] == "3.11" and facts["prefix"] == "/opt/agentroll"
    assert facts["jupyter_client"].startswith("8.")
    assert facts["net"] is False  # --unshare-all: no network inside
    assert facts["image"]["image"] == "python-base"
    assert facts["image"]["env"]["PATH"].startswith("/opt/agentroll/bin:")
    meta = json.loads(python_base.metadata_path.read_text())
    assert facts["agentroll"] == meta["agentroll_version"]
    assert not (python_base.path / "opt/agentroll-build").exists()  # build context removed


async def test_second_build_reuses_the_cached_image(python_base: BuiltImage) -> None:
    again = await build_image(
        "python-base", fmt="rootfs", cache="versioned", images_dir=CACHE, timeout_s=60
    )
    assert again.reused and again.path == python_base.path and again.name == python_base.name


async def test_swe_task_has_git_and_pytest(swe_task: BuiltImage, tmp_path: Path) -> None:
    script = (
        "cd /testbed && git init -q && printf 'def test_ok():\\n    assert 1 + 1 == 2\\n'"
        " > test_x.py && git add . && git commit -qm init && python3 -m pytest -q 2>&1"
        " && /opt/agentroll/bin/python -c 'import jupyter_client, ptyprocess; print(\"tools ok\")'"
    )
    rc, out = await bwrap(
        swe_task.path, "/bin/sh", "-c", script, extra=("--bind", str(tmp_path), "/testbed")
    )
    assert rc == 0, out
    assert "1 passed" in out and "tools ok" in out
    assert (tmp_path / ".git").is_dir()


def test_prune_removes_an_older_copy_of_a_real_image(
    python_base: BuiltImage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real rootfs (device nodes, read-only modes) as an older copy: --prune deletes it whole.
    The copies are hard links of the cached image, so the test costs no build and no space."""
    images = tmp_path / "images"
    images.mkdir()
    meta = json.loads(python_base.metadata_path.read_text())
    for name, built_at in ((python_base.name, meta["built_at"]), ("python-base-000000000000", 0)):
        try:
            shutil.copytree(python_base.path, images / name, symlinks=True, copy_function=os.link)
        except (OSError, shutil.Error) as exc:
            pytest.skip(f"cannot hard-link the cached image here: {exc}")
        (images / f"{name}.json").write_text(
            json.dumps(meta | {"name": name, "built_at": built_at})
        )
    parser = argparse.ArgumentParser()
    add_build_image_arguments(parser)
    args = parser.parse_args(["--prune", "--keep", "1", "--output-dir", str(images)])
    assert run_build_image(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("removed python-base-000000000000: ")
    assert int(out[0].split(": ")[1].split()[0]) > 50_000_000  # a whole rootfs
    assert sorted(p.name for p in images.iterdir()) == [
        ".locks",
        python_base.name,
        f"{python_base.name}.json",
    ]
    assert (images / python_base.name / "opt/agentroll/bin/python").exists()


@pytest.mark.skipif(
    shutil.which("apptainer") is None and shutil.which("singularity") is None,
    reason="neither apptainer nor singularity is on PATH",
)
async def test_singularity_build(tmp_path: Path) -> None:
    image = await build_image(
        "python-base",
        fmt="singularity",
        cache="scratch",
        images_dir=tmp_path,
        timeout_s=BUILD_TIMEOUT_S,
    )
    exe = shutil.which("apptainer") or shutil.which("singularity")
    assert exe is not None
    proc = await asyncio.create_subprocess_exec(
        exe,
        "exec",
        str(image.path),
        "/opt/agentroll/bin/python",
        "-c",
        "import jupyter_client, ptyprocess; print('ok')",
        stdout=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0 and out.decode().strip() == "ok"
