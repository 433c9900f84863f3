"""What tests that build real images share: the stable cache and the conditions to build.

Real builds are cached in ``AGENTROLL_IMAGES_CACHE`` (default /var/tmp/agentroll-images-cache)
in ``versioned`` mode, so only the first run on a machine pays for each image. Each build
evicts older copies of its image beyond ``AGENTROLL_IMAGES_KEEP`` (default 2, by last use;
never one a sandbox runs from), so a cache kept between CI runs stays bounded; machines where
several source trees share the cache want a larger value (each tree's code is its own copy).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("AGENTROLL_IMAGES_CACHE", "/var/tmp/agentroll-images-cache"))

# mmdebstrap builds the rootfs, bubblewrap runs it.
needs_real_build = [
    pytest.mark.skipif(
        shutil.which("mmdebstrap") is None,
        reason="mmdebstrap is not installed (Debian: apt-get install mmdebstrap)",
    ),
    pytest.mark.skipif(
        shutil.which("bwrap") is None,
        reason="bubblewrap is not installed (Debian: apt-get install bubblewrap)",
    ),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="mmdebstrap needs root here (unprivileged needs /etc/subuid)"
    ),
]
