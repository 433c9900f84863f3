"""Editor commands, undo, upload/download, and confinement to the allowed roots."""

import os
from pathlib import Path

import pytest

from agentroll.runtime.action.errors import ActionRequestError
from agentroll.runtime.action.files import FileTools


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    return root


@pytest.fixture
def tools(work: Path) -> FileTools:
    return FileTools([str(work)], str(work))


def test_create_then_view_numbers_every_line(tools: FileTools, work: Path) -> None:
    ok, message = tools.editor("create", "pkg/mod.py", {"file_text": "a = 1\nb = 2\n"})
    assert ok and message == f"File created successfully at: {work}/pkg/mod.py"
    assert (work / "pkg/mod.py").read_text() == "a = 1\nb = 2\n"
    ok, view = tools.editor("view", "pkg/mod.py", {})
    assert ok and view.endswith("     1\ta = 1\n     2\tb = 2\n")


def test_create_refuses_to_overwrite_unless_told(tools: FileTools, work: Path) -> None:
    (work / "f.txt").write_text("keep me")
    ok, message = tools.editor("create", "f.txt", {"file_text": "new"})
    assert not ok and "already exists" in message
    assert (work / "f.txt").read_text() == "keep me"
    ok, _ = tools.editor("create", "f.txt", {"file_text": "new", "overwrite": True})
    assert ok and (work / "f.txt").read_text() == "new"


def test_view_range_and_its_validation(tools: FileTools, work: Path) -> None:
    (work / "f.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    ok, view = tools.editor("view", "f.txt", {"view_range": [3, 4]})
    assert ok and view.endswith("     3\tline3\n     4\tline4\n") and "line5" not in view
    ok, view = tools.editor("view", "f.txt", {"view_range": [9, -1]})
    assert ok and view.endswith("     9\tline9\n    10\tline10\n")
    ok, message = tools.editor("view", "f.txt", {"view_range": [11, 12]})
    assert not ok and "start must be between 1 and 10" in message
    ok, message = tools.editor("view", "f.txt", {"view_range": [5, 2]})
    assert not ok and "end must be -1 or >= start" in message


def test_view_of_a_directory_lists_two_levels_without_hidden(tools: FileTools, work: Path) -> None:
    (work / "a/b/c").mkdir(parents=True)
    (work / "a/b/c/deep.txt").write_text("")
    (work / "a/top.txt").write_text("")
    (work / ".git").mkdir()
    ok, listing = tools.editor("view", ".", {})
    assert ok
    assert f"{work}/a/\n" in listing and f"{work}/a/top.txt" in listing
    assert f"{work}/a/b/" in listing and "deep.txt" not in listing and ".git" not in listing


def test_str_replace_requires_exactly_one_match(tools: FileTools, work: Path) -> None:
    target = work / "f.py"
    target.write_text("x = 1\ny = 1\nx = 1\n")
    ok, message = tools.editor("str_replace", "f.py", {"old_str": "x = 1", "new_str": "x = 2"})
    assert not ok and "occurs 2 times" in message and "lines 1, 3" in message
    ok, message = tools.editor("str_replace", "f.py", {"old_str": "z = 1", "new_str": ""})
    assert not ok and "did not appear verbatim" in message
    assert target.read_text() == "x = 1\ny = 1\nx = 1\n"
    ok, message = tools.editor("str_replace", "f.py", {"old_str": "y = 1", "new_str": "y = 5"})
    assert ok and "     2\ty = 5" in message
    assert target.read_text() == "x = 1\ny = 5\nx = 1\n"


def test_insert_after_a_line_and_bounds(tools: FileTools, work: Path) -> None:
    target = work / "f.txt"
    target.write_text("one\nthree\n")
    ok, _ = tools.editor("insert", "f.txt", {"insert_line": 1, "new_str": "two"})
    assert ok and target.read_text() == "one\ntwo\nthree\n"
    ok, _ = tools.editor("insert", "f.txt", {"insert_line": 0, "new_str": "zero\n"})
    assert ok and target.read_text() == "zero\none\ntwo\nthree\n"
    ok, _ = tools.editor("insert", "f.txt", {"insert_line": 4, "new_str": "four"})
    assert ok and target.read_text() == "zero\none\ntwo\nthree\nfour\n"
    ok, message = tools.editor("insert", "f.txt", {"insert_line": 9, "new_str": "x"})
    assert not ok and "between 0 and 5" in message


def test_undo_walks_back_through_edits_and_removes_created_files(
    tools: FileTools, work: Path
) -> None:
    tools.editor("create", "f.txt", {"file_text": "v1\n"})
    tools.editor("str_replace", "f.txt", {"old_str": "v1", "new_str": "v2"})
    tools.editor("insert", "f.txt", {"insert_line": 1, "new_str": "extra"})
    assert (work / "f.txt").read_text() == "v2\nextra\n"
    assert tools.editor("undo_edit", "f.txt", {})[0]
    assert (work / "f.txt").read_text() == "v2\n"
    assert tools.editor("undo_edit", "f.txt", {})[0]
    assert (work / "f.txt").read_text() == "v1\n"
    ok, message = tools.editor("undo_edit", "f.txt", {})
    assert ok and "removed" in message and not (work / "f.txt").exists()
    ok, message = tools.editor("undo_edit", "f.txt", {})
    assert not ok and "No edit history" in message


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "sub/../../outside.txt"])
def test_traversal_is_refused_readably(tools: FileTools, path: str) -> None:
    for command, args in [("view", {}), ("create", {"file_text": "x"})]:
        ok, message = tools.editor(command, path, args)
        assert not ok and message.startswith("Access denied") and "outside the allowed" in message


def test_symlink_escapes_are_refused_but_inner_links_work(
    tools: FileTools, work: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (work / "escape").symlink_to(secret)
    (work / "dir_escape").symlink_to(tmp_path)
    (work / "real.txt").write_text("inside")
    (work / "inner").symlink_to(work / "real.txt")
    ok, message = tools.editor("view", "escape", {})
    assert not ok and "Access denied" in message and "top secret" not in message
    ok, message = tools.editor("create", "dir_escape/new.txt", {"file_text": "x"})
    assert not ok and not (tmp_path / "new.txt").exists()
    ok, message = tools.editor("str_replace", "inner", {"old_str": "inside", "new_str": "edited"})
    assert ok and (work / "real.txt").read_text() == "edited"
    with pytest.raises(ActionRequestError, match="outside the allowed"):
        tools.download("escape")
    with pytest.raises(ActionRequestError, match="outside the allowed"):
        tools.upload("dir_escape/dropped.bin", b"x")
    assert not (tmp_path / "dropped.bin").exists()


def test_extra_roots_are_allowed(work: Path, tmp_path: Path) -> None:
    other = tmp_path / "data"
    other.mkdir()
    tools = FileTools([str(work), str(other)], str(work))
    ok, _ = tools.editor("create", str(other / "x.txt"), {"file_text": "x"})
    assert ok and (other / "x.txt").read_text() == "x"


def test_binary_and_missing_files_give_readable_failures(tools: FileTools, work: Path) -> None:
    (work / "blob.bin").write_bytes(b"\x00\xff\xfe")
    ok, message = tools.editor("view", "blob.bin", {})
    assert not ok and "not UTF-8" in message
    ok, message = tools.editor("view", "missing.txt", {})
    assert not ok and "does not exist" in message
    ok, message = tools.editor("frobnicate", "x", {})
    assert not ok and "Unknown editor command" in message


def test_upload_download_round_trip_binary(tools: FileTools, work: Path) -> None:
    payload = bytes(range(256)) * 100
    assert tools.upload("deep/dir/blob.bin", payload) == f"{work}/deep/dir/blob.bin"
    assert tools.download("deep/dir/blob.bin") == payload
    with pytest.raises(ActionRequestError, match="No such file"):
        tools.download("nope.bin")
    with pytest.raises(ActionRequestError, match="not a regular file"):
        tools.download(".")


def test_created_files_follow_the_umask(tools: FileTools, work: Path) -> None:
    old = os.umask(0o022)
    try:
        tools.editor("create", "f.txt", {"file_text": "x"})
    finally:
        os.umask(old)
    assert (work / "f.txt").stat().st_mode & 0o777 == 0o644
