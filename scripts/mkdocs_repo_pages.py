"""mkdocs hook: the repository's own guides (README, CONTRIBUTING, handlers/, deploy/,
containers/) become pages of the docs site, and links between them and docs/ keep working.

Every page is written to be read on GitHub, where a link is a path in the repository. Each
link is resolved to that path, mapped to the page the site builds from it, and written
relative to the page it sits in; a link to anything that is not a site page is left as it
is, so `mkdocs build --strict` reports it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
# repository path -> where it sits in the site
REPO_PAGES = {
    "README.md": "overview.md",
    "CONTRIBUTING.md": "contributing.md",
    "handlers/README.md": "guides/handlers.md",
    "deploy/README.md": "guides/deploy.md",
    "containers/README.md": "guides/containers.md",
}
_SITE_TO_REPO = {site: repo for repo, site in REPO_PAGES.items()}
_LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def on_files(files: Files, config: Any) -> Files:
    for repo_path, site_path in REPO_PAGES.items():
        files.append(File.generated(config, site_path, abs_src_path=str(ROOT / repo_path)))
    return files


def _repo_path(site_path: str) -> str:
    return _SITE_TO_REPO.get(site_path, f"docs/{site_path}")


def _site_path(repo_path: str) -> str | None:
    if repo_path in REPO_PAGES:
        return REPO_PAGES[repo_path]
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    return None


def relink(markdown: str, page_site_path: str) -> str:
    """`markdown` of the page at `page_site_path`, its repository links made site links."""
    here = posixpath.dirname(_repo_path(page_site_path))

    def one(match: re.Match[str]) -> str:
        target = match.group(2)
        if "://" in target or target.startswith(("#", "mailto:")):
            return match.group(0)
        path, hash_, anchor = target.partition("#")
        site = _site_path(posixpath.normpath(posixpath.join(here, path)))
        if site is None:
            return match.group(0)
        rel = posixpath.relpath(site, posixpath.dirname(page_site_path) or ".")
        return f"{match.group(1)}{rel}{hash_}{anchor}{match.group(3)}"

    return _LINK.sub(one, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return relink(markdown, page.file.src_uri)
