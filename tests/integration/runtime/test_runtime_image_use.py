"""Every door a sandbox starts from a cached image by goes through its use lock: an image that
eviction is deleting right now refuses the start cleanly, whichever runtime and however the
image is named (a spec's path or text, Apptainer's default image). The running case, a real
image held while its sandbox lives, is test_runtime_built_image.py."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from rt_support import HAVE_BWRAP

from agentroll.runtime import BwrapConfig, SandboxSpec, SingularityConfig
from agentroll.runtime.core import BaseRuntime
from agentroll.runtime.errors import SandboxStartError
from agentroll.runtime.images.cache import ImageSlot
from agentroll.runtime.imageuse import use_file
from agentroll.testing.fake_apptainer import write_shim

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing")]


def cached(images: Path, fmt: str) -> Path:
    """A complete image in an image cache, as build-image leaves it."""
    slot = ImageSlot(images, "python-base-0123456789ab", fmt)
    slot.lock.parent.mkdir(parents=True)
    if fmt == "singularity":
        slot.image.write_bytes(b"SIF")
    else:
        (slot.image / "etc").mkdir(parents=True)
    slot.metadata.write_text(json.dumps({"name": slot.name, "template": "python-base"}))
    return slot.image


def lock_exclusively(image: Path) -> int:
    """Hold the image's use lock as eviction does while it deletes the image."""
    fd = os.open(use_file(image), os.O_RDONLY | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


async def refused_cleanly(runtime: BaseRuntime, spec: SandboxSpec) -> None:
    with pytest.raises(SandboxStartError, match="being evicted from the image cache"):
        await runtime.start(spec, timeout=30)
    assert runtime.live == [] and list(runtime.leases.dir.iterdir()) == []
    await runtime.close()


@pytest.mark.parametrize("as_text", [False, True])
async def test_bwrap_refuses_an_image_being_evicted(state_dir: Path, as_text: bool) -> None:
    image = cached(state_dir / "images", "rootfs")
    fd = lock_exclusively(image)
    try:
        spec = SandboxSpec(image=str(image) if as_text else image)  # type: ignore[arg-type]
        await refused_cleanly(BwrapConfig(state_dir=state_dir / "state").build(), spec)
    finally:
        os.close(fd)


async def test_apptainer_refuses_a_default_image_being_evicted(state_dir: Path) -> None:
    image = cached(state_dir / "images", "singularity")
    (state_dir / "bin").mkdir()
    config = SingularityConfig(
        state_dir=state_dir / "state",
        binary=str(write_shim(state_dir / "bin")),
        default_image=image,
        cli_env={"FAKE_APPTAINER_DIR": str(state_dir / "fake")},
    )
    fd = lock_exclusively(image)
    try:
        await refused_cleanly(config.build(), SandboxSpec())  # no image: the default one
    finally:
        os.close(fd)
