"""The `swe` grader's isolation, as pure functions: which `test_cmd` runs from the grader's
launcher (and how), which files of a diff shadow the interpreter's own modules, which files
are test files (reset to base_commit before grading), where an image's repository is."""

from pathlib import Path

import pytest

from agentroll.handlers.builtin.swe.swe_mirror import image_repository
from agentroll.handlers.builtin.swe.swe_pytest import interpreter, launch_command
from agentroll.handlers.builtin.swe.swe_repo import is_test_file, listed_test_files
from agentroll.handlers.builtin.swe.swe_shadow import shadowing_paths, top_level_modules
from agentroll.handlers.errors import InfraError

LAUNCHER = "/agentroll-grader/grade-1/agentroll_report_2.py"
PROVIDED = frozenset({"json", "secrets", "tempfile", "pluggy", "google", "_pytest"})
BASE = ["README.md", "textkit/__init__.py", "textkit/slug.py", "tests/__init__.py", "tests/t.py"]
FILE, LINK = "100644", "120000"


def tree(paths: list[str], links: tuple[str, ...] = ()) -> dict[str, str]:
    """A tree as the index lists it: {path: git mode}."""
    return {**dict.fromkeys(paths, FILE), **dict.fromkeys(links, LINK)}


@pytest.mark.parametrize(
    ("test_cmd", "launched"),
    [
        (
            "python -m pytest -rA -q",
            f"python -I {LAUNCHER} -rA -q tests/a.py::t",
        ),
        (
            "/opt/miniconda3/envs/testbed/bin/python -m pytest -p no:cacheprovider",
            f"/opt/miniconda3/envs/testbed/bin/python -I {LAUNCHER} -p no:cacheprovider "
            "tests/a.py::t",
        ),
        (  # options of the interpreter stay, variables and quotes keep their shell text
            'PYTHONPATH="$PWD/src" .venv/bin/python3.11 -W error -B -m pytest -k "a or b"',
            f'PYTHONPATH="$PWD/src" .venv/bin/python3.11 -W error -B -I {LAUNCHER} '
            '-k "a or b" tests/a.py::t',
        ),
    ],
)
def test_a_python_m_pytest_command_runs_the_grader_launcher(test_cmd: str, launched: str) -> None:
    assert launch_command(test_cmd, LAUNCHER, ["tests/a.py::t"]) == launched


@pytest.mark.parametrize(
    "test_cmd",
    [
        "python -m no_such_runner",
        "true",
        "pytest -rA",  # the interpreter is not named
        "python runtests.py",
        "python -c 'import pytest; pytest.main()' -m pytest",
        "tox -e py311 -- -m pytest",
        "python -m pytest_xdist",
        "python -m 'unclosed",
    ],
)
def test_any_other_test_cmd_has_no_launcher(test_cmd: str) -> None:
    assert launch_command(test_cmd, LAUNCHER, []) is None
    assert interpreter(test_cmd) is None


def test_the_interpreter_is_the_one_the_command_names() -> None:
    assert interpreter("A=1 .venv/bin/python -X dev -m pytest -q") == ".venv/bin/python"


@pytest.mark.parametrize(
    ("added", "refused"),
    [
        (["json.py"], ["json.py"]),  # the standard library, at the root
        (["pluggy/__init__.py", "pluggy/_hooks.py"], ["pluggy/__init__.py"]),  # pytest's own
        (["tools/tempfile.py"], ["tools/tempfile.py"]),  # a folder pytest may put on the path
        (["secrets.cpython-311-x86_64-linux-gnu.so"], ["secrets.cpython-311-x86_64-linux-gnu.so"]),
        (["google/__init__.py"], ["google/__init__.py"]),  # over a namespace package
        (["textkit/json.py"], []),  # textkit.json: inside a package, it shadows nothing
        (["tests/secrets.py"], []),  # tests.secrets, likewise
        (["jsonish.py", "docs/conf.py"], []),  # names the interpreter does not have
        (["__pycache__/json.cpython-311.pyc"], []),  # never imported as a top-level module
    ],
)
def test_a_diff_that_adds_a_module_named_like_the_interpreters_own_is_refused(
    added: list[str], refused: list[str]
) -> None:
    assert shadowing_paths(tree(BASE), tree([*BASE, *added]), PROVIDED) == refused


@pytest.mark.parametrize(
    ("link", "refused"),
    [("pluggy", ["pluggy"]), ("tools/json", ["tools/json"]), ("textkit/json", []), ("docs", [])],
)
def test_a_symbolic_link_counts_under_its_own_name(link: str, refused: list[str]) -> None:
    """`pluggy -> textkit` makes `import pluggy` the repository's package."""
    assert shadowing_paths(tree(BASE), tree(BASE, (link,)), PROVIDED) == refused


def test_removing_an_init_that_uncovers_a_shadowing_module_is_refused() -> None:
    """`textkit/json.py` was `textkit.json`; without `textkit/__init__.py` it is `json`."""
    base = [*BASE, "textkit/json.py"]
    after = [p for p in base if p != "textkit/__init__.py"]
    assert shadowing_paths(tree(base), tree(after), PROVIDED) == ["textkit/json.py"]


def test_a_shadowing_module_the_repository_already_had_is_not_the_diffs() -> None:
    base = tree([*BASE, "json.py"])
    assert shadowing_paths(base, base, PROVIDED) == []


def test_top_level_modules_names_what_each_file_provides() -> None:
    tops = top_level_modules(tree(["a.py", "pkg/__init__.py", "pkg/b.py", "loose/c.py", "x.txt"]))
    assert {p: (t.folder, t.name) for p, t in tops.items()} == {
        "a.py": ("", "a"),
        "pkg/__init__.py": ("", "pkg"),
        "loose/c.py": ("loose", "c"),
    }


@pytest.mark.parametrize(
    ("path", "test_like"),
    [
        ("tests/test_slug.py", True),
        ("tests/data/fixture.json", True),
        ("pkg/tests/helpers.py", True),
        ("test_x.py", True),
        ("pkg/x_test.py", True),
        ("conftest.py", True),
        ("pkg/sub/conftest.py", True),
        ("textkit/slug.py", False),
        ("pkg/testing.py", False),
        ("django/test/utils.py", False),  # a package named `test` is source, not tests
        ("tests.txt", False),
    ],
)
def test_test_files_are_those_reset_to_base_commit(path: str, test_like: bool) -> None:
    assert is_test_file(path) is test_like


def test_the_images_repository_is_found_only_inside_a_root_file_system(tmp_path: Path) -> None:
    rootfs = tmp_path / "rootfs"
    (rootfs / "testbed" / ".git").mkdir(parents=True)
    (rootfs / "plain").mkdir()
    (rootfs / "escape").symlink_to(tmp_path)  # `/escape -> /` would reach the host's folders
    (tmp_path / ".git").mkdir()
    sif = tmp_path / "image.sif"
    sif.write_bytes(b"")
    assert image_repository(rootfs, "/testbed") == (rootfs / "testbed").resolve()
    assert image_repository(rootfs, "/plain") is None  # no git work tree there
    assert image_repository(rootfs, "/escape") is None
    assert image_repository(rootfs, "/testbed/../../") is None
    assert image_repository(sif, "/testbed") is None  # not a folder of this host
    assert image_repository(None, "/testbed") is None
    assert image_repository(rootfs, None) is None


def test_an_images_repository_whose_git_is_a_gitdir_link_is_refused(tmp_path: Path) -> None:
    """A linked worktree (or a submodule) has a `.git` file naming the real git directory,
    full history and all: no bare copy would be shown over it, so the image is refused."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "store" / "testbed.git").mkdir(parents=True)
    (rootfs / "testbed").mkdir()
    (rootfs / "testbed" / ".git").write_text("gitdir: /store/testbed.git\n")
    with pytest.raises(InfraError, match="is a file") as info:
        image_repository(rootfs, "/testbed")
    assert info.value.cause == "repo_setup_failed"


def test_the_files_holding_listed_tests_are_reset_whatever_their_names() -> None:
    """pytest's own repository keeps tests in `testing/python/collect.py`, Django apps in
    `tests.py`: not test files by name, but the graded tests live there."""
    ids = [
        "testing/python/collect.py::TestFunction::test_function_equality",
        "testing/python/approx.py::test_approx[1.5-2.0]",  # a dot in the parameters only
        "app/tests.py::SlugTests::test_slug",
        "docs/usage.rst::usage.rst",  # a doctest file: nothing else lives there
        "src/textkit/slug.py::textkit.slug.slugify",  # a module's doctest: source, kept
        "tests/test_slug.py",  # a whole module
    ]
    assert listed_test_files(ids) == {
        "testing/python/collect.py",
        "testing/python/approx.py",
        "app/tests.py",
        "docs/usage.rst",
        "tests/test_slug.py",
    }
    assert not is_test_file("testing/python/collect.py")  # what the name rule alone misses
