"""Cache modes, content-hash names, atomic publication and concurrent builds (fake backend)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from agentroll.runtime.images import (
    BuildFailed,
    BuildTimeout,
    BuiltImage,
    CacheMode,
    TemplateError,
    build_image,
)
from agentroll.runtime.images.cache import ImageSlot, held
from agentroll.runtime.images.context import agentroll_version
from agentroll.testing.fake_images import FakeRootfsBuilder


async def build(
    images: Path, backend: FakeRootfsBuilder, cache: CacheMode = "versioned", **kw: Any
) -> BuiltImage:
    return await build_image(
        "python-base",
        fmt="rootfs",
        cache=cache,
        images_dir=images,
        backend=backend,
        timeout_s=30,
        **kw,
    )


def image_dirs(images: Path) -> list[str]:
    return sorted(p.name for p in images.iterdir() if p.is_dir() and not p.name.startswith("."))


async def test_versioned_builds_once_then_reuses(tmp_path: Path) -> None:
    fake = FakeRootfsBuilder()
    first = await build(tmp_path, fake)
    second = await build(tmp_path, fake)
    assert re.fullmatch(r"python-base-[0-9a-f]{12}", first.name)
    assert (first.reused, second.reused, fake.builds) == (False, True, 1)
    assert first.path == second.path == tmp_path / first.name  # tmp_path is already resolved
    assert (
        (first.path / "var/lib/agentroll-fake/packages").read_text().startswith("ca-certificates")
    )
    meta = json.loads(first.metadata_path.read_text())
    assert meta["key"] == first.key and meta["cache_mode"] == "versioned"
    assert meta["key_inputs"]["agentroll_version"] == agentroll_version()
    assert meta["key_inputs"]["base_image"].startswith("debian:bookworm/apt deb http://deb.debian")
    assert meta["tools"] == {"fake": "1"}
    assert meta["params"]["suite"] == "bookworm"
    assert first.recipe_path.read_text().startswith("# Rendered rootfs recipe")
    assert list((tmp_path / ".tmp").iterdir()) == []  # private build folders are cleaned


async def test_params_change_the_name(tmp_path: Path) -> None:
    fake = FakeRootfsBuilder()
    a = await build(tmp_path, fake)
    b = await build(tmp_path, fake, params={"extra_packages": "curl"})
    assert a.name != b.name and fake.builds == 2
    assert "curl" in (b.path / "var/lib/agentroll-fake/packages").read_text().split()


async def test_agentroll_version_is_part_of_the_versioned_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeRootfsBuilder()
    a = await build(tmp_path, fake)
    monkeypatch.setattr("agentroll.runtime.images.builder.agentroll_version", lambda: "9.9.9")
    b = await build(tmp_path, fake)
    assert a.name != b.name and not b.reused


async def test_a_changed_source_tree_is_part_of_the_versioned_key(tmp_path: Path) -> None:
    """Code edited without a version bump must not reuse an image holding the old code."""
    tree = tmp_path / "src"
    (tree / "runtime" / "agentroll" / "runtime").mkdir(parents=True)
    (tree / "pyproject.toml").write_text("[project]\nname = 'agentroll'\n")
    module = tree / "runtime" / "agentroll" / "runtime" / "action.py"
    module.write_text("OLD = 1\n")
    fake, images = FakeRootfsBuilder(), tmp_path / "images"
    a = await build(images, fake, source_root=tree)
    same = await build(images, fake, source_root=tree)
    module.write_text("NEW = 2\n")
    b = await build(images, fake, source_root=tree)
    assert same.reused and same.name == a.name
    assert b.name != a.name and not b.reused


async def test_scratch_always_rebuilds_in_place(tmp_path: Path) -> None:
    fake = FakeRootfsBuilder()
    first = await build(tmp_path, fake, cache="scratch")
    (first.path / "stale-marker").write_text("from the old build")
    second = await build(tmp_path, fake, cache="scratch")
    assert (second.name, second.reused, fake.builds) == (first.name, False, 2)
    assert not (second.path / "stale-marker").exists()
    assert image_dirs(tmp_path) == [first.name]


async def test_lock_mode_keys_on_the_lock_contents(tmp_path: Path) -> None:
    fake = FakeRootfsBuilder()
    lock = tmp_path / "requirements.lock"
    lock.write_text("pyzmq==26.2.0\n")
    images = tmp_path / "images"
    a = await build(images, fake, cache="lock", lock_file=lock)
    again = await build(images, fake, cache="lock", lock_file=lock)
    lock.write_text("pyzmq==27.0.0\n")
    b = await build(images, fake, cache="lock", lock_file=lock)
    assert again.reused and again.name == a.name
    assert b.name != a.name and fake.builds == 2
    assert (b.path / "var/lib/agentroll-fake/lock.txt").read_text() == "pyzmq==27.0.0\n"
    meta = json.loads(b.metadata_path.read_text())
    assert set(meta["key_inputs"]) == {"recipe", "lock"}


async def test_lock_mode_needs_a_lock_and_versioned_refuses_one(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="needs a dependency lock file"):
        await build(tmp_path, FakeRootfsBuilder(), cache="lock")
    lock = tmp_path / "lock.txt"
    lock.write_text("x==1\n")
    with pytest.raises(TemplateError, match="not 'versioned'"):
        await build(tmp_path, FakeRootfsBuilder(), lock_file=lock)


async def test_concurrent_builds_of_one_image_build_once(tmp_path: Path) -> None:
    fake = FakeRootfsBuilder(delay_s=0.5)
    results = await asyncio.gather(*(build(tmp_path, fake) for _ in range(3)))
    assert fake.builds == 1
    assert sorted(r.reused for r in results) == [False, True, True]
    assert len({r.path for r in results}) == 1


CHILD = """
import asyncio, sys
from pathlib import Path
from typing import Any
from agentroll.runtime.images import build_image
from agentroll.testing.fake_images import FakeRootfsBuilder
img = asyncio.run(build_image("python-base", fmt="rootfs", cache="versioned",
    images_dir=Path(sys.argv[1]), backend=FakeRootfsBuilder(delay_s=0.8), timeout_s=30))
print("reused" if img.reused else "built", img.name)
"""


async def test_concurrent_builds_across_processes_do_not_collide(tmp_path: Path) -> None:
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            str(tmp_path),
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    outs = [(await asyncio.wait_for(p.communicate(), 30))[0].decode().split() for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert sorted(o[0] for o in outs) == ["built", "reused"]
    assert outs[0][1] == outs[1][1]


async def test_failed_build_publishes_nothing_and_keeps_the_log(tmp_path: Path) -> None:
    with pytest.raises(BuildFailed, match="fake build failed") as err:
        await build(tmp_path, FakeRootfsBuilder(fail=True))
    assert err.value.log_path is not None
    assert err.value.log_path.parent == tmp_path  # the slot's log, not the deleted work folder
    assert "fake build of python-base-" in err.value.log_path.read_text()
    assert image_dirs(tmp_path) == []
    assert not err.value.log_path.with_name(
        err.value.log_path.name.split(".")[0] + ".json"
    ).exists()
    assert list((tmp_path / ".tmp").iterdir()) == []


async def test_leftover_image_without_metadata_is_rebuilt(tmp_path: Path) -> None:
    fake = FakeRootfsBuilder()
    first = await build(tmp_path, fake)
    first.metadata_path.unlink()  # as if the build died between rename and metadata
    second = await build(tmp_path, fake)
    assert not second.reused and fake.builds == 2 and second.metadata_path.exists()


async def test_waiting_for_a_stuck_build_times_out(tmp_path: Path) -> None:
    fake = FakeRootfsBuilder()
    name = (await build(tmp_path, fake, cache="scratch")).name
    slot = ImageSlot(tmp_path, name, "rootfs")
    async with held(slot.lock, timeout_s=1, what=name):
        with pytest.raises(BuildTimeout, match=f"another build of {name}"):
            await build_image(
                "python-base",
                fmt="rootfs",
                cache="versioned",
                images_dir=tmp_path,
                backend=fake,
                timeout_s=0.3,
            )
