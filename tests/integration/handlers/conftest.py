"""Fixtures the handler integration tests share."""

import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentroll.runtime.bwrap import BwrapRuntime
from agentroll.runtime.config import BwrapConfig


@pytest.fixture
async def bwrap() -> AsyncIterator[BwrapRuntime]:
    """A bubblewrap runtime with its own state folder (short: sandbox socket paths)."""
    state = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    runtime = BwrapConfig(state_dir=state).build()
    assert isinstance(runtime, BwrapRuntime)
    try:
        yield runtime
    finally:
        await runtime.close()
        shutil.rmtree(state, ignore_errors=True)
