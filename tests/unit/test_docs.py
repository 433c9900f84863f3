"""The documentation a user reads: every link lands, the README stays a page, the settings
reference is the settings' own descriptions, and the docs site builds with warnings as errors."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "handlers/README.md",
        ROOT / "deploy/README.md",
        ROOT / "containers/README.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6}) +(.+?) *#*$")


def _prose(path: Path) -> list[str]:
    """The lines of `path` outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (the docs site is configured to make the same)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _prose(path):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for line in _prose(path):
        for target in LINK.findall(line):
            if "://" in target or target.startswith("mailto:"):
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.exists():
                broken.append(f"{target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{target}: no heading with that anchor in {dest.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_lands(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_sees_a_broken_file_and_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## A section\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#a-section) [gone](missing.md) [bad](a.md#no-such) [self](#here)\n"
        "## Here\n```\n[in code](nowhere.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "a.md#no-such: no heading with that anchor in a.md",
    ]


def test_the_readme_stays_a_page() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def _settings_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "settings_reference", ROOT / "scripts/settings_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_configuration_page_is_the_settings_own_descriptions() -> None:
    reference = _settings_reference()
    page = (ROOT / "docs/configuration.md").read_text()
    assert reference.updated(page) == page, "run: python scripts/settings_reference.py"
    assert "| `pools.run` | `256` | RUN workers (agent loops). |" in page
    assert "| `images_dir` |" in page and "AGENTROLL_IMAGES_DIR" in page


def test_a_setting_without_a_description_cannot_reach_the_page() -> None:
    from pydantic import BaseModel, Field

    class Documented(BaseModel):
        limit: int = Field(3, description="How many.")
        forgotten: int = 4

    with pytest.raises(ValueError, match="forgotten has no description"):
        list(_settings_reference().rows(Documented))


def test_the_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    page = (ROOT / "docs/configuration.md").read_text()
    stale.write_text(page.replace("RUN workers (agent loops).", "RUN workers."))
    out = subprocess.run(
        [sys.executable, "-c", _CHECK, str(stale)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 1
    assert "is out of date" in out.stdout


_CHECK = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("s", "scripts/settings_reference.py")
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
module.PAGE = Path(sys.argv[1])
sys.exit(module.main(["--check"]))
"""
