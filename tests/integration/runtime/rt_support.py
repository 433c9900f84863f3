"""Helpers for the runtime contract suite: which runtimes run here and how to build them.

``bwrap`` and ``local`` always run here; ``fake-apptainer`` is the Singularity runtime driving
the in-package CLI double (through bubblewrap); ``apptainer`` is the real CLI, used whenever it
is on PATH and ``AGENTROLL_TEST_APPTAINER_IMAGE`` names an image with agentroll installed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from agentroll.runtime import procs
from agentroll.runtime.config import BwrapConfig, LocalConfig, SingularityConfig

HAVE_BWRAP = shutil.which("bwrap") is not None and shutil.which("nsenter") is not None
# Sandboxes with network: slirp4netns and the launcher's tools, and a tun device it may open
# (root always may; stock Debian makes /dev/net/tun usable by everyone).
HAVE_NAT = (
    HAVE_BWRAP
    and all(shutil.which(tool) for tool in ("slirp4netns", "unshare", "ip", "bash"))
    and (os.geteuid() == 0 or os.access("/dev/net/tun", os.R_OK | os.W_OK))
)
REAL_APPTAINER = shutil.which("apptainer") or shutil.which("singularity")
REAL_IMAGE = os.environ.get("AGENTROLL_TEST_APPTAINER_IMAGE")

KINDS = [
    pytest.param("bwrap", marks=pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing")),
    pytest.param(
        "fake-apptainer", marks=pytest.mark.skipif(not HAVE_BWRAP, reason="bwrap missing")
    ),
    "local",
    pytest.param(
        "apptainer",
        marks=pytest.mark.skipif(
            not (REAL_APPTAINER and REAL_IMAGE),
            reason="no apptainer + AGENTROLL_TEST_APPTAINER_IMAGE",
        ),
    ),
]
ISOLATED = {"bwrap", "fake-apptainer", "apptainer"}


def make_config(kind: str, state_dir: Path) -> BwrapConfig | SingularityConfig | LocalConfig:
    if kind == "bwrap":
        return BwrapConfig(state_dir=state_dir)
    if kind == "local":
        return LocalConfig(state_dir=state_dir, enabled=True)
    if kind == "fake-apptainer":
        from agentroll.testing.fake_apptainer import write_shim

        (state_dir / "bin").mkdir(exist_ok=True)
        return SingularityConfig(
            state_dir=state_dir,
            binary=str(write_shim(state_dir / "bin")),
            default_image=Path("/"),
            host_python=True,
            cli_env={"FAKE_APPTAINER_DIR": str(state_dir / "fake")},
        )
    return SingularityConfig(state_dir=state_dir, default_image=Path(str(REAL_IMAGE)))


def marked_pids(sandbox_id: str) -> list[int]:
    """Every live process on the machine carrying this sandbox's environment marker."""
    return procs.select(procs.scan(), sandbox_id)
