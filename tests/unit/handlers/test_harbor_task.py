"""Harbor and Terminal-Bench 1 task folders: what is read, and what is refused at submission."""

import base64
import dataclasses
import io
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from agentroll.handlers import HandlerRegistry
from agentroll.handlers.builtin.harbor import source
from agentroll.handlers.builtin.harbor.task import TaskFormatError, load_task

BUNDLED = source.bundled_tasks()


def harbor_task(tmp_path: Path, toml: str = "", **files: str) -> Path:
    root = tmp_path / "task"
    (root / "environment").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("Do the thing.\n")
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm\n")
    (root / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    for name, text in files.items():
        path = root / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_three_bundled_tasks_are_valid_harbor_tasks() -> None:
    assert set(BUNDLED) == {"hello-file", "fix-script", "word-stats"}
    for name, root in BUNDLED.items():
        task = load_task(root)
        assert task.format == "harbor" and task.name == name
        assert task.environment.dockerfile == root / "environment" / "Dockerfile"
        assert task.test_script == root / "tests" / "test.sh"
        assert task.verifier_timeout_s == 60 and task.environment.memory_mb == 1024
        assert task.instruction and "/app" in task.instruction


def test_task_toml_sections_are_read(tmp_path: Path) -> None:
    root = harbor_task(
        tmp_path,
        """
        [verifier]
        timeout_sec = 120
        env = { MODE = "strict", LEVEL = 3 }
        [agent]
        timeout_sec = 900
        [environment]
        build_timeout_sec = 1200
        cpus = 2
        memory_mb = 4096
        storage_mb = 2048
        allow_internet = true
        env = { LANG = "C.UTF-8" }
        workdir = "/srv/work"
        """,
    )
    task = load_task(root)
    assert task.verifier_timeout_s == 120 and task.verifier_env == {"MODE": "strict", "LEVEL": "3"}
    assert task.agent_timeout_s == 900
    env = task.environment
    assert (env.build_timeout_s, env.cpus, env.memory_mb, env.storage_mb) == (1200, 2, 4096, 2048)
    assert env.network and env.env == {"LANG": "C.UTF-8"} and env.workdir == "/srv/work"


def test_defaults_when_sections_are_missing(tmp_path: Path) -> None:
    task = load_task(harbor_task(tmp_path))
    assert task.verifier_timeout_s == 600 and task.agent_timeout_s is None
    assert not task.environment.network and task.environment.memory_mb is None


@pytest.mark.parametrize(
    ("toml", "files", "removed", "message"),
    [
        ("[verifier]\ntimeout_sec = -1\n", {}, None, "must be positive"),
        ("[verifier]\ntimeout_sec = 'soon'\n", {}, None, "must be a number"),
        ("[environment]\nnetwork_mode = 'overlay'\n", {}, None, "network_mode"),
        ("[environment]\nworkdir = 'relative'\n", {}, None, "absolute path"),
        ("[environment]\nenv = ['A=1']\n", {}, None, "must map names"),
        ("[verifier\n", {}, None, "task.toml"),
        ("", {}, "tests/test.sh", "missing tests/test.sh"),
        ("", {}, "instruction.md", "missing instruction.md"),
        ("", {}, "environment/Dockerfile", "no environment/Dockerfile"),
        ("", {"instruction.md": "  \n"}, None, "is empty"),
    ],
)
def test_broken_tasks_are_refused_with_the_reason(
    tmp_path: Path, toml: str, files: dict[str, str], removed: str | None, message: str
) -> None:
    root = harbor_task(tmp_path, toml, **files)
    if removed:
        (root / removed).unlink()
    with pytest.raises(TaskFormatError, match=message):
        load_task(root)


def test_a_prebuilt_image_stands_in_for_the_dockerfile(tmp_path: Path) -> None:
    root = harbor_task(tmp_path, '[environment]\ndocker_image = "ghcr.io/acme/task:1"\n')
    (root / "environment" / "Dockerfile").unlink()
    env = load_task(root).environment
    assert env.dockerfile is None and env.docker_image == "ghcr.io/acme/task:1"


def test_terminal_bench_1_tasks_map_onto_the_same_model(tmp_path: Path) -> None:
    root = tmp_path / "tb1"
    (root / "tests").mkdir(parents=True)
    (root / "task.yaml").write_text(
        "instruction: |\n  Make hello.txt say hi.\nmax_agent_timeout_sec: 360\n"
        "max_test_timeout_sec: 90\ndifficulty: easy\nparser_name: pytest\n"
    )
    (root / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (root / "run-tests.sh").write_text("pytest $TEST_DIR/test_outputs.py -rA\n")
    (root / "tests" / "test_outputs.py").write_text("def test_x(): pass\n")
    task = load_task(root)
    assert task.format == "terminal-bench-1"
    assert task.instruction.startswith("Make hello.txt say hi.")
    assert task.environment.context == root and task.environment.dockerfile == root / "Dockerfile"
    assert task.tests == root / "tests" and task.test_script == root / "run-tests.sh"
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (360, 90)
    assert task.metadata == {"difficulty": "easy"}
    (root / "run-tests.sh").unlink()
    with pytest.raises(TaskFormatError, match=re.escape("run-tests.sh")):
        load_task(root)


def test_a_folder_without_a_task_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match=re.escape("neither task.toml")):
        load_task(tmp_path)


def _archive(members: dict[str, bytes], symlinks: dict[str, str] | None = None) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (symlinks or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return base64.b64encode(buf.getvalue()).decode()


def _folder_archive(root: Path, prefix: str) -> str:
    return _archive(
        {f"{prefix}{p.relative_to(root)}": p.read_bytes() for p in root.rglob("*") if p.is_file()}
    )


def test_an_uploaded_archive_is_unpacked_once_by_content(tmp_path: Path) -> None:
    encoded = _folder_archive(BUNDLED["hello-file"], "hello-file/")
    first = source.unpacked_archive(encoded, into=tmp_path)
    again = source.unpacked_archive(encoded, into=tmp_path)
    assert first == again and first.name == "hello-file"
    assert load_task(first).instruction == load_task(BUNDLED["hello-file"]).instruction
    flat = source.unpacked_archive(_folder_archive(BUNDLED["hello-file"], ""), into=tmp_path)
    assert (flat / "task.toml").is_file() and flat != first


@pytest.mark.parametrize(
    ("members", "symlinks", "message"),
    [
        ({"../escape.txt": b"x"}, None, "leaves the task folder"),
        ({"/etc/evil": b"x"}, None, "leaves the task folder"),
        ({"x" * 2000: b"x"}, None, "name over 1024 characters"),
        ({"task.toml": b""}, {"tests": "/etc"}, "links refused"),
        ({"task.toml": b""}, {"inside": "task.toml"}, "links refused"),
    ],
)
def test_hostile_archives_are_refused(
    tmp_path: Path, members: dict[str, bytes], symlinks: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(TaskFormatError, match=message):
        source.unpacked_archive(_archive(members, symlinks), into=tmp_path)
    assert not (tmp_path / "escape.txt").exists()
    leftovers = list((tmp_path / "harbor-tasks").iterdir())
    assert leftovers == [], "a refused archive leaves nothing behind"


def test_device_files_are_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("tty")
        info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 5, 0
        tar.addfile(info)
    with pytest.raises(TaskFormatError, match="not a file or folder"):
        source.unpacked_archive(base64.b64encode(buf.getvalue()).decode(), into=tmp_path)


def test_oversized_and_garbage_archives_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(TaskFormatError, match="base64"):
        source.unpacked_archive("not base64 at all!", into=tmp_path)
    with pytest.raises(TaskFormatError, match="could not be unpacked"):
        source.unpacked_archive(base64.b64encode(b"plain bytes").decode(), into=tmp_path)
    monkeypatch.setattr(source, "MAX_UNPACKED_BYTES", 10)
    with pytest.raises(TaskFormatError, match="unpacks to over 10 bytes"):
        source.unpacked_archive(_archive({"big": b"x" * 11}), into=tmp_path)


def test_the_handler_checks_instances_at_submission(tmp_path: Path) -> None:
    handler = HandlerRegistry().get("harbor")
    handler.validate_instance({"bundled": "hello-file"})
    handler.validate_instance({"path": str(BUNDLED["fix-script"])})
    copy = tmp_path / "copy"
    shutil.copytree(BUNDLED["word-stats"], copy)
    (copy / "tests" / "test.sh").unlink()
    cases = [
        ({}, "exactly one of path, bundled, archive"),
        ({"bundled": "hello-file", "path": "/x"}, "exactly one"),
        ({"bundled": "nope"}, "no bundled task 'nope'"),
        ({"path": "relative/task"}, "must be absolute"),
        ({"path": str(copy)}, "missing tests/test.sh"),
        ({"bundled": "hello-file", "unknown": 1}, "unknown"),
        ({"bundled": "hello-file", "agent": {"tools": ["teleport"]}}, "unknown tool"),
    ]
    for instance, message in cases:
        with pytest.raises(ValueError, match=message):
            handler.validate_instance(instance)


def test_a_prebuilt_image_must_come_from_the_image_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any other folder would become the sandbox's root (`/` would show the host's files)."""
    monkeypatch.setenv(source.CACHE_ENV, str(tmp_path / "cache"))
    built = tmp_path / "cache" / "task-0123456789ab"
    built.mkdir(parents=True)
    handler = HandlerRegistry().get("harbor")
    handler.validate_instance({"bundled": "hello-file", "image": str(built)})
    for bad in ("/", str(tmp_path), str(tmp_path / "cache"), str(built / ".." / "..")):
        with pytest.raises(ValueError, match="under the image cache"):
            handler.validate_instance({"bundled": "hello-file", "image": bad})


def test_oversized_task_files_are_refused_before_parsing(tmp_path: Path) -> None:
    root = harbor_task(tmp_path, "# padding\n" * 200_000)
    with pytest.raises(TaskFormatError, match="is over 1048576 bytes"):
        load_task(root)


def test_task_limits_leave_the_verifier_room() -> None:
    from agentroll.handlers.builtin.harbor.handler import HarborHandler

    env = load_task(BUNDLED["hello-file"]).environment
    small = load_task(BUNDLED["hello-file"])
    limits = HarborHandler._limits(small)
    assert env.memory_mb is not None
    assert limits.max_total_memory_bytes == env.memory_mb * 2**20
    assert limits.workspace_bytes == 256 * 2**20  # storage_mb fits: kept
    # memory_mb bounds the sandbox as a whole, not each process's address space.
    assert limits.max_memory_bytes == 2048 * 2**20
    huge = dataclasses.replace(small, environment=dataclasses.replace(env, storage_mb=10240))
    capped = HarborHandler._limits(huge)
    tmpfs = 3 * capped.tmp_bytes  # /tmp, /tests, /logs
    assert capped.workspace_bytes is not None and capped.max_total_memory_bytes is not None
    assert capped.workspace_bytes + tmpfs < capped.max_total_memory_bytes


def test_harbor_image_cli_names_the_task_it_cannot_build(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentroll.server.cli import main

    broken = harbor_task(tmp_path)
    (broken / "tests" / "test.sh").unlink()
    assert main(["harbor-image", "--images-dir", str(tmp_path), "nope", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "nope: no bundled task 'nope'; bundled: fix-script, hello-file, word-stats" in err
    assert f"{broken}: {broken}: missing tests/test.sh" in err


@dataclasses.dataclass
class _Limits:
    deadline_s: float
    eval_timeout_s: float = 600.0


@dataclasses.dataclass
class _Clock:
    """The two clocks `verifier_time` reads: the job's limits and the agent's own time."""

    limits: _Limits
    agent_s: float
    left_s: float

    def agent_time(self) -> float:
        return self.agent_s

    def time_left(self) -> float:
        return self.left_s


@pytest.mark.parametrize(
    ("limits", "agent_s", "left_s", "expected"),
    [
        # The server's queues took the job's slack: the verifier still gets all 60 s (were the
        # deadline to end it, that is `timed_out`, never a 0 for tests that would have passed).
        (_Limits(deadline_s=200), 5.0, 20.0, 60.0),
        # The agent spent the time itself: the verifier gets what is left beside the margin.
        (_Limits(deadline_s=200), 80.0, 115.0, 30.0),
        (_Limits(deadline_s=200), 150.0, 45.0, 1.0),
        # The EVAL stage's own limit always bounds it.
        (_Limits(deadline_s=7200, eval_timeout_s=120), 0.0, 7000.0, 30.0),
        (_Limits(deadline_s=7200), 0.0, 7000.0, 60.0),
    ],
)
def test_only_the_agents_own_time_shortens_the_verifier(
    limits: _Limits, agent_s: float, left_s: float, expected: float
) -> None:
    from agentroll.handlers.builtin.harbor.handler import EVAL_MARGIN_S, verifier_time

    assert EVAL_MARGIN_S == 90
    task = load_task(BUNDLED["hello-file"])  # verifier timeout_sec = 60
    ctx = _Clock(limits, agent_s, left_s)
    assert verifier_time(ctx, task) == expected  # type: ignore[arg-type]
