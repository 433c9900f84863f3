"""Fixtures for the runtime contract suite (runtimes and kinds come from rt_support)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from rt_support import KINDS, make_config

from agentroll.runtime.bwrap import BwrapRuntime
from agentroll.runtime.core import BaseRuntime


@pytest.fixture
def state_dir() -> Iterator[Path]:
    # Short on purpose: Unix socket paths must stay under 108 bytes.
    path = Path(tempfile.mkdtemp(prefix="ar-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def runtime(kind: str, state_dir: Path) -> AsyncIterator[BaseRuntime]:
    rt = make_config(kind, state_dir).build()
    try:
        yield rt
    finally:
        await rt.close()
        assert not rt.live


@pytest.fixture
async def bwrap(state_dir: Path) -> AsyncIterator[BwrapRuntime]:
    """A bubblewrap runtime of its own, for tests that need that runtime's specifics."""
    rt = make_config("bwrap", state_dir).build()
    assert isinstance(rt, BwrapRuntime)
    yield rt
    await rt.close()
