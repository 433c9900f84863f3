"""File tools: an editor (view/create/str_replace/insert/undo_edit) and upload/download.

Every path is resolved with ``realpath`` and must land inside one of the configured roots;
``../..`` and symlinks pointing outside are refused with a readable message. The resolved path
is what gets opened (with ``O_NOFOLLOW`` on the last component), so a symlink inside a root is
followed only to the target that was checked. These are synchronous functions; the server runs
them in a worker thread, one at a time.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence
from typing import Any

from agentroll.runtime.action.errors import ActionRequestError
from agentroll.runtime.action.protocol import MAX_TRANSFER_BYTES
from agentroll.runtime.action.regular import open_regular
from agentroll.runtime.action.truncate import truncate_text
from agentroll.runtime.errors import PathRefused

MAX_EDIT_BYTES = 16 * 1024 * 1024
HISTORY_DEPTH = 16
SNIPPET_CONTEXT = 4
MAX_LISTING = 1000


class _EditFailed(Exception):
    """An editor command the agent got wrong; becomes an ``ok=False`` result."""


def _number(lines: Sequence[str], first: int) -> str:
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, start=first))


def _lines(content: str) -> list[str]:
    lines = content.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a trailing newline ends the last line; it does not start a new one
    return lines


class FileTools:
    def __init__(self, roots: Sequence[str], workdir: str) -> None:
        self.workdir = os.path.realpath(workdir)
        self.roots = tuple(os.path.realpath(r) for r in (roots or [workdir]))
        self._history: dict[str, list[str | None]] = {}
        self._lock = threading.Lock()

    # -- paths ---------------------------------------------------------------------------------

    def resolve(self, path: str) -> tuple[str, str]:
        """``(shown, real)``: the absolute path as the caller wrote it, and its checked realpath."""
        if not isinstance(path, str) or not path or "\x00" in path:
            raise PathRefused("path must be a non-empty string without NUL bytes")
        shown = os.path.normpath(os.path.join(self.workdir, os.path.expanduser(path)))
        real = os.path.realpath(shown)
        if not any(
            real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in self.roots
        ):
            raise PathRefused(
                f"Access denied: {path} resolves to {real}, which is outside the allowed "
                f"directories ({', '.join(self.roots)})."
            )
        return shown, real

    # -- editor --------------------------------------------------------------------------------

    def editor(self, command: str, path: str, args: dict[str, Any]) -> tuple[bool, str]:
        """Run one editor command; ``(ok, message)``. Agent mistakes give ``ok=False``."""
        handler = {
            "view": self._view,
            "create": self._create,
            "str_replace": self._str_replace,
            "insert": self._insert,
            "undo_edit": self._undo,
        }.get(command)
        if handler is None:
            return False, (
                f"Unknown editor command {command!r}; use one of view, create, str_replace, "
                "insert, undo_edit."
            )
        try:
            shown, real = self.resolve(path)
            with self._lock:
                return True, handler(shown, real, args)
        except (PathRefused, _EditFailed) as exc:
            return False, str(exc)
        except OSError as exc:
            return False, f"{path}: {exc.strerror or exc}"

    def _read_text(self, shown: str, real: str) -> str:
        try:
            st = os.stat(real)
        except FileNotFoundError:
            raise _EditFailed(f"The path {shown} does not exist.") from None
        if stat.S_ISDIR(st.st_mode):
            raise _EditFailed(f"The path {shown} is a directory; this command needs a file.")
        if st.st_size > MAX_EDIT_BYTES:
            raise _EditFailed(
                f"{shown} is {st.st_size} bytes, over the {MAX_EDIT_BYTES}-byte limit."
            )
        try:
            fd = open_regular(real, os.O_RDONLY)
        except OSError as exc:
            raise _EditFailed(f"cannot read {shown}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_EDIT_BYTES + 1)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise _EditFailed(f"{shown} is not UTF-8 text (binary file?).") from None

    def _write_text(self, real: str, content: str) -> None:
        try:
            fd = open_regular(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        except OSError as exc:
            raise _EditFailed(f"cannot write {real}: {exc.strerror}") from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8", errors="surrogateescape"))

    def _remember(self, real: str, previous: str | None) -> None:
        history = self._history.setdefault(real, [])
        history.append(previous)
        del history[:-HISTORY_DEPTH]

    def _snippet(self, shown: str, content: str, first_line: int, last_line: int) -> str:
        lines = _lines(content)
        start = max(first_line - SNIPPET_CONTEXT, 1)
        end = min(last_line + SNIPPET_CONTEXT, len(lines))
        body = _number(lines[start - 1 : end], start)
        return f"Here's the result of running `cat -n` on a snippet of {shown}:\n{body}\n"

    def _view(self, shown: str, real: str, args: dict[str, Any]) -> str:
        limit = args.get("max_output_chars", 30_000)
        if not isinstance(limit, int):
            raise _EditFailed("max_output_chars must be an integer.")
        view_range = args.get("view_range")
        if os.path.isdir(real):
            if view_range is not None:
                raise _EditFailed("view_range is not allowed when path is a directory.")
            return self._listing(shown, real, limit)
        lines = _lines(self._read_text(shown, real))
        first = 1
        if view_range is not None:
            if (
                not isinstance(view_range, list | tuple)
                or len(view_range) != 2
                or not all(isinstance(v, int) for v in view_range)
            ):
                raise _EditFailed("view_range must be a list of two integers: [start, end].")
            start, end = view_range
            if not 1 <= start <= max(len(lines), 1):
                raise _EditFailed(
                    f"Invalid view_range {list(view_range)}: start must be between 1 and "
                    f"{len(lines)}."
                )
            if end != -1 and end < start:
                raise _EditFailed(
                    f"Invalid view_range {list(view_range)}: end must be -1 or >= start."
                )
            end = len(lines) if end == -1 else min(end, len(lines))
            lines, first = lines[start - 1 : end], start
        if not lines:
            return f"{shown} is empty."
        text, _ = truncate_text(_number(lines, first), limit)
        return f"Here's the result of running `cat -n` on {shown}:\n{text}\n"

    def _listing(self, shown: str, real: str, limit: int) -> str:
        entries: list[str] = []
        for dirpath, dirnames, filenames in os.walk(real):
            depth = dirpath[len(real) :].count(os.sep)
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            rel = os.path.relpath(dirpath, real)
            prefix = shown if rel == "." else os.path.join(shown, rel)
            entries += [os.path.join(prefix, d) + "/" for d in dirnames]
            if depth >= 1:
                dirnames[:] = []  # two levels: the directory's children and grandchildren
            entries += [os.path.join(prefix, f) for f in sorted(filenames) if not f.startswith(".")]
            if len(entries) > MAX_LISTING:
                break
        more = (
            f"\n[... listing stopped after {MAX_LISTING} entries ...]"
            if len(entries) > MAX_LISTING
            else ""
        )
        text, _ = truncate_text("\n".join(sorted(entries[:MAX_LISTING])), limit)
        return (
            f"Here are the files and directories up to 2 levels deep in {shown}, excluding "
            f"hidden items:\n{text}{more}\n"
        )

    def _create(self, shown: str, real: str, args: dict[str, Any]) -> str:
        text = args.get("file_text")
        if not isinstance(text, str):
            raise _EditFailed("Parameter `file_text` (a string) is required for command: create.")
        existed = os.path.lexists(real)
        if os.path.isdir(real):
            raise _EditFailed(f"The path {shown} is a directory; cannot create a file there.")
        previous = None
        if existed:
            if not args.get("overwrite", False):
                raise _EditFailed(
                    f"File already exists at: {shown}. Cannot overwrite it with `create` "
                    "(pass overwrite=true, or edit it with str_replace)."
                )
            previous = self._read_text(shown, real)
        parent = os.path.dirname(real)
        os.makedirs(parent, exist_ok=True)
        self.resolve(parent)  # the parents just made must still be inside a root
        self._write_text(real, text)
        self._remember(real, previous)
        return f"File created successfully at: {shown}"

    def _str_replace(self, shown: str, real: str, args: dict[str, Any]) -> str:
        old, new = args.get("old_str"), args.get("new_str", "")
        if not isinstance(old, str) or not old:
            raise _EditFailed(
                "Parameter `old_str` (a non-empty string) is required for str_replace."
            )
        if not isinstance(new, str):
            raise _EditFailed("Parameter `new_str` must be a string.")
        content = self._read_text(shown, real)
        count = content.count(old)
        if count == 0:
            raise _EditFailed(
                f"No replacement was performed: old_str `{old}` did not appear verbatim in {shown}."
            )
        if count > 1:
            starts, at = [], content.find(old)
            while at != -1:
                starts.append(content.count("\n", 0, at) + 1)
                at = content.find(old, at + 1)
            raise _EditFailed(
                f"No replacement was performed: old_str `{old}` occurs {count} times in {shown} "
                f"(lines {', '.join(map(str, starts))}). Include more context so it is unique."
            )
        at = content.index(old)
        updated = content[:at] + new + content[at + len(old) :]
        self._write_text(real, updated)
        self._remember(real, content)
        first = content.count("\n", 0, at) + 1
        last = first + new.count("\n")
        return f"The file {shown} has been edited. " + self._snippet(shown, updated, first, last)

    def _insert(self, shown: str, real: str, args: dict[str, Any]) -> str:
        line, new = args.get("insert_line"), args.get("new_str")
        if not isinstance(line, int) or isinstance(line, bool):
            raise _EditFailed("Parameter `insert_line` (an integer) is required for insert.")
        if not isinstance(new, str):
            raise _EditFailed("Parameter `new_str` (a string) is required for insert.")
        content = self._read_text(shown, real)
        lines = content.split("\n")
        n_lines = len(_lines(content))
        if not 0 <= line <= n_lines:
            raise _EditFailed(
                f"Invalid insert_line {line}: it must be between 0 and {n_lines} (the number "
                f"of lines in {shown})."
            )
        new_lines = new.split("\n")
        if new.endswith("\n"):
            new_lines.pop()
        updated = "\n".join(lines[:line] + new_lines + lines[line:])
        self._write_text(real, updated)
        self._remember(real, content)
        return f"The file {shown} has been edited. " + self._snippet(
            shown, updated, line + 1, line + len(new_lines)
        )

    def _undo(self, shown: str, real: str, args: dict[str, Any]) -> str:
        history = self._history.get(real)
        if not history:
            raise _EditFailed(f"No edit history found for {shown}.")
        previous = history.pop()
        if previous is None:
            os.unlink(real)
            return f"Last edit to {shown} undone: the file did not exist before, so it was removed."
        self._write_text(real, previous)
        return f"Last edit to {shown} undone successfully."

    # -- upload / download ---------------------------------------------------------------------

    def upload(self, path: str, data: bytes) -> str:
        shown, real = self.resolve(path)
        if len(data) > MAX_TRANSFER_BYTES:
            raise ActionRequestError(f"upload of {len(data)} bytes exceeds {MAX_TRANSFER_BYTES}")
        if os.path.isdir(real):
            raise ActionRequestError(f"cannot upload to {shown}: it is a directory")
        with self._lock:
            os.makedirs(os.path.dirname(real), exist_ok=True)
            self.resolve(os.path.dirname(real))
            try:
                fd = open_regular(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            except OSError as exc:
                raise ActionRequestError(f"cannot upload to {shown}: {exc.strerror}") from exc
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
        return shown

    def download(self, path: str) -> bytes:
        shown, real = self.resolve(path)
        try:
            fd = open_regular(real, os.O_RDONLY)
        except OSError as exc:
            raise ActionRequestError(f"cannot download {shown}: {exc.strerror}") from exc
        st = os.fstat(fd)
        with os.fdopen(fd, "rb") as fh:
            if st.st_size > MAX_TRANSFER_BYTES:
                raise ActionRequestError(
                    f"cannot download {shown}: {st.st_size} bytes exceeds {MAX_TRANSFER_BYTES}"
                )
            return fh.read(MAX_TRANSFER_BYTES + 1)[:MAX_TRANSFER_BYTES]
