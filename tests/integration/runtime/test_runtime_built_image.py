"""A sandbox in a root filesystem made by `agentroll build-image`, tools and all."""

import fcntl
import os
import shutil
from pathlib import Path

import pytest

from agentroll.runtime import BwrapConfig, SandboxSpec
from agentroll.runtime.images import build_image
from agentroll.runtime.imageuse import use_file

pytestmark = pytest.mark.integration

CACHE = Path(os.environ.get("AGENTROLL_IMAGES_CACHE", "/var/tmp/agentroll-images-cache"))


@pytest.mark.skipif(
    shutil.which("mmdebstrap") is None or os.geteuid() != 0,
    reason="building a rootfs needs mmdebstrap and root (make test installs mmdebstrap)",
)
async def test_action_server_runs_from_the_images_own_venv(tmp_path: Path) -> None:
    image = await build_image("python-base", fmt="rootfs", cache="versioned", images_dir=CACHE)
    runtime = BwrapConfig(state_dir=tmp_path / "state").build()
    sandbox = await runtime.start(SandboxSpec(image=str(image.path)), timeout=60)
    try:
        which = await sandbox.tools.bash(
            "command -v python; python -c 'import sys; print(sys.prefix)'"
        )
        assert which.exit_code == 0
        assert which.output.split() == ["/opt/agentroll/bin/python", "/opt/agentroll"]
        result = await sandbox.tools.python("import ptyprocess, jupyter_client; 6 * 7")
        assert result.error is None and "42" in result.output
        hostname = await sandbox.tools.bash("cat /etc/os-release | head -1")
        assert "Debian" in hostname.output
        assert not can_evict(image.path)  # the running sandbox holds its image in use
    finally:
        await sandbox.stop()
        await runtime.close()
    assert can_evict(image.path)  # and lets go of it once torn down


def can_evict(image: Path) -> bool:
    """Whether eviction could take the image's use lock now (it takes it the same way)."""
    fd = os.open(use_file(image), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
