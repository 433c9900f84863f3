"""The bounded image cache: older copies go, with their side files; one in use stays.

Real files and real flocks throughout; a sandbox's hold on an image is taken by a child
process, as a server holds it, so its death is a real death.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentroll.runtime.errors import SandboxStartError
from agentroll.runtime.images import BuiltImage, add_build_image_arguments, build_image
from agentroll.runtime.images import evict as evict_module
from agentroll.runtime.images.cache import ImageSlot, held
from agentroll.runtime.images.evict import prune
from agentroll.runtime.imageuse import hold_image, use_file
from agentroll.testing.fake_images import FakeRootfsBuilder

GONE = "is being evicted from the image cache, or no longer in it"
HOLDER = """
import sys, time
from pathlib import Path
from agentroll.runtime.imageuse import hold_image
use = hold_image(Path(sys.argv[1]))
print("held" if use is not None else "not in a cache", flush=True)
time.sleep(600)
"""


async def build_version(
    images: Path, version: str, monkeypatch: pytest.MonkeyPatch, **kw: Any
) -> BuiltImage:
    """python-base as agentroll ``version`` would build it: a new copy of the same image."""
    monkeypatch.setattr("agentroll.runtime.images.builder.agentroll_version", lambda: version)
    kw.setdefault("cache", "versioned")
    return await build_image(
        "python-base",
        fmt="rootfs",
        images_dir=images,
        backend=FakeRootfsBuilder(),
        timeout_s=30,
        **kw,
    )


def side_files(image: BuiltImage) -> list[Path]:
    slot = ImageSlot(image.path.parent, image.name, "rootfs")
    return [slot.metadata, slot.recipe, slot.log, slot.lock, slot.use_lock]


@pytest.fixture
def holder() -> Iterator[list[subprocess.Popen[str]]]:
    """Child processes holding an image in use; killed (by pid) if a test leaves one."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def hold_in_child(image: Path, started: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(image)], stdout=subprocess.PIPE, text=True
    )
    started.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "held"
    return proc


async def test_a_build_keeps_the_newest_copies_and_removes_older_ones_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1 = await build_version(tmp_path, "1.0", monkeypatch, keep=2)
    v1.path.joinpath("payload").write_bytes(b"x" * 100_000)
    use_file(v1.path).touch()  # a sandbox ran from it once
    v2 = await build_version(tmp_path, "2.0", monkeypatch, keep=2)
    assert v2.evicted == () and v1.path.is_dir()
    v3 = await build_version(tmp_path, "3.0", monkeypatch, keep=2)
    assert [name for name, _ in v3.evicted] == [v1.name]
    assert v3.evicted[0][1] >= 100_000
    assert not v1.path.exists()
    assert [p.name for p in side_files(v1) if p.exists()] == []
    for kept in (v2, v3):
        assert kept.path.is_dir() and kept.metadata_path.exists() and kept.recipe_path.exists()
    # The cache still reuses what it kept.
    again = await build_version(tmp_path, "2.0", monkeypatch, keep=2)
    assert again.reused and again.name == v2.name


async def test_copies_are_ranked_by_last_use_not_by_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1 = await build_version(tmp_path, "1.0", monkeypatch, keep=2)
    v2 = await build_version(tmp_path, "2.0", monkeypatch, keep=2)
    used = hold_image(v1.path)  # a sandbox started from the older copy after v2 was built
    assert used is not None
    used.release()
    meta = json.loads(v2.metadata_path.read_text())
    assert meta["built_at"] < os.stat(use_file(v1.path)).st_mtime
    v3 = await build_version(tmp_path, "3.0", monkeypatch, keep=2)
    assert [name for name, _ in v3.evicted] == [v2.name]
    assert v1.path.is_dir() and not v2.path.exists()


async def test_a_copy_used_after_the_ranking_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ranking is read before the locks are taken (deleting a rootfs takes a while): a
    copy a sandbox started from, or a build republished, after it is newer than ranked."""
    v1 = await build_version(tmp_path, "1.0", monkeypatch, keep=0)
    v2 = await build_version(tmp_path, "2.0", monkeypatch, keep=0)
    ranked = evict_module.cached_images(tmp_path)
    used = hold_image(v1.path)  # a sandbox starts from the older copy meanwhile
    assert used is not None
    used.release()
    report = evict_module.prune_entries(ranked, keep=1)
    assert report.removed == []
    assert report.skipped == [(v1.name, "used or rebuilt since the ranking")]
    assert v1.path.is_dir() and v2.path.is_dir()
    # Ranked afresh, the copy that now has the older last use goes.
    assert [name for name, _ in prune(tmp_path, keep=1).removed] == [v2.name]


def test_an_entry_that_does_not_name_a_plain_copy_deletes_nothing(tmp_path: Path) -> None:
    """A metadata file named `..json` (its stem `.`) would make the copy the cache itself."""
    (tmp_path / "keep-me").write_text("an operator's file")
    for n, name in enumerate((".", ".hidden")):
        (tmp_path / f"{name}.json").write_text(
            json.dumps({"name": name, "template": "t", "format": "rootfs", "built_at": n})
        )
    (tmp_path / ".hidden").mkdir()
    report = prune(tmp_path, keep=1)
    assert report.removed == []
    assert sorted(report.skipped) == [(".", "not a plain copy name")]
    assert (tmp_path / "keep-me").exists() and (tmp_path / ".hidden").is_dir()


async def test_other_parameters_lock_mode_and_task_images(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Other parameters make another image; a lock-mode build is a copy like any other;
    a task image (no template) is never a copy of anything."""
    curl = await build_version(tmp_path, "1.0", monkeypatch, keep=1, params={"extra_packages": "x"})
    lock = tmp_path / "requirements.lock"
    lock.write_text("pyzmq==26.2.0\n")
    locked = await build_version(tmp_path, "1.0", monkeypatch, keep=1, cache="lock", lock_file=lock)
    task = ImageSlot(tmp_path, "python-base-0123456789ab", "rootfs")  # named like a copy
    task.image.mkdir()
    task.metadata.write_text(json.dumps({"name": task.name, "key": "k", "format": "rootfs"}))
    newest = await build_version(tmp_path, "2.0", monkeypatch, keep=1)
    assert [name for name, _ in newest.evicted] == [locked.name]
    assert curl.path.is_dir() and task.image.is_dir() and task.metadata.exists()


async def test_an_image_in_use_is_kept_until_its_holder_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holder: list[subprocess.Popen[str]]
) -> None:
    v1 = await build_version(tmp_path, "1.0", monkeypatch, keep=1)
    proc = hold_in_child(v1.path, holder)
    v2 = await build_version(tmp_path, "2.0", monkeypatch, keep=1)
    assert v2.evicted == () and v1.path.is_dir() and v1.metadata_path.exists()
    report = prune(tmp_path, 1)
    assert report.removed == [] and report.skipped == [(v1.name, "in use by a sandbox")]
    # A holder that dies (a crashed server) protects nothing: the kernel dropped its lock.
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    report = prune(tmp_path, 1)
    assert [name for name, _ in report.removed] == [v1.name] and report.skipped == []
    assert not v1.path.exists() and v2.path.is_dir()


async def test_an_image_whose_build_lock_is_held_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1 = await build_version(tmp_path, "1.0", monkeypatch, keep=0)
    v2 = await build_version(tmp_path, "2.0", monkeypatch, keep=0)
    assert v1.path.is_dir() and v2.path.is_dir()  # keep 0: nothing is evicted
    async with held(ImageSlot(tmp_path, v1.name, "rootfs").lock, timeout_s=5, what=v1.name):
        assert prune(tmp_path, 1).skipped == [(v1.name, "a build holds it")]
    assert [name for name, _ in prune(tmp_path, 1).removed] == [v1.name]


async def test_a_failed_eviction_is_logged_and_the_build_still_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    v1 = await build_version(tmp_path, "1.0", monkeypatch, keep=1)

    def refuse(slot: ImageSlot) -> int:
        raise PermissionError(f"cannot delete {slot.image}")

    monkeypatch.setattr(evict_module, "_delete_image", refuse)
    with caplog.at_level(logging.INFO, logger="agentroll.runtime.images.evict"):
        v2 = await build_version(tmp_path, "2.0", monkeypatch, keep=1)
    assert not v2.reused and v2.path.is_dir() and v2.evicted == ()
    assert v1.path.is_dir()
    assert f"cache: could not evict {v1.name}: cannot delete" in caplog.text


async def test_starting_from_an_image_being_evicted_fails_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1 = await build_version(tmp_path, "1.0", monkeypatch, keep=0)
    fd = os.open(use_file(v1.path), os.O_RDONLY | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what eviction holds while it deletes
        with pytest.raises(SandboxStartError, match=GONE):
            hold_image(v1.path)
    finally:
        os.close(fd)
    await build_version(tmp_path, "2.0", monkeypatch, keep=1)
    with pytest.raises(SandboxStartError, match=GONE):
        hold_image(v1.path)
    assert not use_file(v1.path).exists()  # a failed start leaves nothing behind
    outside = tmp_path / "elsewhere" / "rootfs"
    outside.mkdir(parents=True)
    assert hold_image(outside) is None  # not in an image cache: nothing evicts it


def cli(argv: list[str]) -> int:
    from agentroll.runtime.images import run_build_image

    parser = argparse.ArgumentParser(prog="agentroll build-image")
    add_build_image_arguments(parser)
    return run_build_image(parser.parse_args(argv))


async def test_prune_command_prints_what_it_removed_and_the_bytes_freed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    holder: list[subprocess.Popen[str]],
) -> None:
    copies = [await build_version(tmp_path, f"{n}.0", monkeypatch, keep=0) for n in range(2)]
    copies[0].path.joinpath("payload").write_bytes(b"x" * 300_000)
    hold_in_child(copies[1].path, holder)  # then two newer copies: it is not among the newest
    copies += [await build_version(tmp_path, f"{n}.0", monkeypatch, keep=0) for n in (2, 3)]
    assert cli(["swe-task", "--prune", "--keep", "1", "--output-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "freed 0 bytes (0.00 GiB) (0 images removed)\n"
    assert cli(["--prune", "--keep", "2", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    removed = [line for line in out if line.startswith("removed ")]
    assert len(removed) == 1 and removed[0].startswith(f"removed {copies[0].name}: ")
    size = int(removed[0].split(": ")[1].split()[0])
    assert size >= 300_000
    assert f"kept {copies[1].name}: in use by a sandbox" in out
    assert out[-1] == f"freed {size} bytes ({size / 2**30:.2f} GiB) (1 images removed)"
    assert not copies[0].path.exists()
    assert all(c.path.is_dir() for c in copies[1:])


def test_prune_command_keep_zero_and_a_missing_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["--prune", "--keep", "0", "--output-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "keep is 0: every copy is kept, nothing pruned\n"
    assert cli(["--output-dir", str(tmp_path)]) == 2
    assert "name a template to build (or prune the cache with --prune)" in capsys.readouterr().err
    assert cli(["python-bsae", "--prune", "--output-dir", str(tmp_path)]) == 2
    assert "no template 'python-bsae'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli(["--prune", "--keep", "-1"])
    assert "expected a whole number >= 0, got '-1'" in capsys.readouterr().err


def test_the_keep_setting_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentroll.runtime.settings import CacheSettings, cache_settings

    monkeypatch.delenv("AGENTROLL_IMAGES_KEEP", raising=False)
    assert cache_settings().images_keep == 2
    monkeypatch.setenv(CacheSettings.env_name("images_keep"), "5")
    assert cache_settings().images_keep == 5
    monkeypatch.setenv(CacheSettings.env_name("images_keep"), "-1")
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        cache_settings()


def test_singularity_copies_go_with_their_sif_and_definition(tmp_path: Path) -> None:
    params = {"base_image": "python:3.11-slim"}
    slots = []
    for n in range(3):
        slot = ImageSlot(tmp_path, f"hpc-{n:012x}", "singularity")
        slot.image.write_bytes(b"S" * 1000 * (n + 1))
        slot.recipe.write_text("Bootstrap: docker\n")
        slot.log.write_text("built\n")
        meta = {"name": slot.name, "template": "hpc", "format": "singularity", "params": params}
        slot.metadata.write_text(json.dumps(meta | {"key": str(n), "built_at": 100.0 + n}))
        slots.append(slot)
    report = prune(tmp_path, 1)
    assert report.removed == [(slots[1].name, 2000), (slots[0].name, 1000)]
    assert report.freed_bytes == 3000
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == sorted(
        [slots[2].image.name, slots[2].metadata.name, slots[2].recipe.name, slots[2].log.name]
    )
    assert sorted(p.name for p in (tmp_path / ".locks").iterdir()) == []


async def test_a_build_lock_unlinked_while_waited_on_still_excludes(tmp_path: Path) -> None:
    """Eviction unlinks an image's build lock with the image: a build that was waiting on the
    old file must not then share the lock with one that opened the path afresh."""
    lock = tmp_path / ".locks" / "python-base-0123456789ab.lock"
    entered: list[str] = []

    async def waiter() -> None:
        async with held(lock, timeout_s=30, what="x"):
            entered.append("waiter")

    async with contextlib.AsyncExitStack() as evictor:
        await evictor.enter_async_context(held(lock, timeout_s=5, what="x"))
        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.3)  # the waiter polls the old file's lock
        lock.unlink()
        async with contextlib.AsyncExitStack() as newcomer:
            await newcomer.enter_async_context(held(lock, timeout_s=5, what="x"))
            await evictor.aclose()  # the old file's lock is free now
            await asyncio.sleep(0.5)
            assert entered == []  # the newcomer holds the path's lock: the waiter waits
        await asyncio.wait_for(task, 30)
    assert entered == ["waiter"]
