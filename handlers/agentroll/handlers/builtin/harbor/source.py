"""Where a job's task folder comes from: a path, a bundled example, or an uploaded archive.

An uploaded archive (a base64 `.tar.gz` or `.tar` of the task folder) is unpacked once, under
the server's task cache, into a folder named by the archive's hash: the same upload in a
thousand jobs is one folder, and a job can never see another upload's files. Unpacking refuses
anything a task does not need and an attacker would: links of any kind, device files, absolute
or `..` paths, names over `MAX_NAME_CHARS`, more than `MAX_MEMBERS` entries or
`MAX_UNPACKED_BYTES` in all; it is decompressed with that bound before tar reads a header, so
no header (a long name, a pax record) can be larger than the bound either.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import zlib
from importlib import resources
from pathlib import Path

from agentroll.handlers.builtin.harbor.task import TaskFormatError
from agentroll.runtime.settings import CacheSettings, cache_settings

MAX_ARCHIVE_BYTES = 16 << 20
MAX_UNPACKED_BYTES = 64 << 20
MAX_MEMBERS = 10_000
MAX_NAME_CHARS = 1024
CACHE_ENV = CacheSettings.env_name("images_dir")
"""The image cache (task images, their bases, unpacked uploads): `CacheSettings.images_dir`."""


def cache_dir() -> Path:
    return cache_settings().images_dir


def bundled_tasks() -> dict[str, Path]:
    """The example tasks shipped with agentroll, by folder name."""
    root = Path(str(resources.files("agentroll.handlers.builtin").joinpath("data/harbor")))
    return {p.name: p for p in sorted(root.iterdir()) if p.is_dir()}


def bundled_task(name: str) -> Path:
    tasks = bundled_tasks()
    if name not in tasks:
        raise TaskFormatError(f"no bundled task {name!r}; bundled: {', '.join(tasks)}")
    return tasks[name]


def task_path(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise TaskFormatError(f"task path must be absolute (on the server's machine): {text!r}")
    return path


def unpacked_archive(encoded: str, *, into: Path | None = None) -> Path:
    """The task folder an uploaded archive holds (unpacked on first use)."""
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise TaskFormatError(f"archive is not valid base64: {exc}") from exc
    if len(data) > MAX_ARCHIVE_BYTES:
        raise TaskFormatError(f"archive is {len(data)} bytes, over {MAX_ARCHIVE_BYTES}")
    root = (into or cache_dir()) / "harbor-tasks"
    target = root / hashlib.sha256(data).hexdigest()[:32]
    if target.is_dir():
        return _task_root(target)
    try:
        root.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=".unpack-", dir=root))
    except OSError as exc:
        raise TaskFormatError(f"cannot unpack the archive under {root}: {exc}") from exc
    try:
        _extract(data, work)
        try:
            os.rename(work, target)
        except OSError:  # unpacked by a concurrent job first: theirs is the same bytes
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _task_root(target)


def _extract(data: bytes, dest: Path) -> None:
    raw = _decompressed(data)
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            members = tar.getmembers()
            if len(members) > MAX_MEMBERS:
                raise TaskFormatError(f"archive holds over {MAX_MEMBERS} entries")
            for member in members:
                _check_member(member)
            if sum(m.size for m in members) > MAX_UNPACKED_BYTES:
                raise TaskFormatError(f"archive unpacks to over {MAX_UNPACKED_BYTES} bytes")
            # "data" as well: no absolute or `..` paths, sane modes.
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise TaskFormatError(f"archive could not be unpacked: {str(exc)[:300]}") from exc


def _decompressed(data: bytes) -> bytes:
    """The tar bytes (gunzipped when gzip), refused past `MAX_UNPACKED_BYTES`."""
    if not data.startswith(b"\x1f\x8b"):
        raw = data
    else:
        inflate = zlib.decompressobj(wbits=31)
        try:
            raw = inflate.decompress(data, MAX_UNPACKED_BYTES + 1)
        except zlib.error as exc:
            raise TaskFormatError(f"archive could not be unpacked: {exc}") from exc
    if len(raw) > MAX_UNPACKED_BYTES:
        raise TaskFormatError(f"archive unpacks to over {MAX_UNPACKED_BYTES} bytes")
    return raw


def _check_member(member: tarfile.TarInfo) -> None:
    shown = member.name[:100]
    if len(member.name) > MAX_NAME_CHARS or len(member.linkname) > MAX_NAME_CHARS:
        raise TaskFormatError(f"archive entry name over {MAX_NAME_CHARS} characters: {shown}...")
    if not (member.isfile() or member.isdir()):
        raise TaskFormatError(f"archive entry {shown!r} is not a file or folder (links refused)")
    parts = member.name.split("/")
    if member.name.startswith("/") or ".." in parts:
        raise TaskFormatError(f"archive entry {shown!r} leaves the task folder")


def _task_root(folder: Path) -> Path:
    """The folder itself, or its only subfolder (archives of `task/` hold `task/...`)."""
    if (folder / "task.toml").exists() or (folder / "task.yaml").exists():
        return folder
    entries = [e for e in folder.iterdir() if not e.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        return entries[0]
    return folder
