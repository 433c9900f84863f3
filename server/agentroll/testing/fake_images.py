"""A rootfs backend that needs neither mmdebstrap nor network, for unit tests of the cache.

``FakeRootfsBuilder`` reads the same rendered recipe the real builder reads and writes a
small but honest tree from it: the package list, /etc/agentroll/image.json and the shell
steps it would run, so tests can tell which recipe produced which image. ``delay_s`` keeps
a build in flight long enough for concurrency tests; ``builds`` counts real builds.
"""

from __future__ import annotations

import asyncio
import json
import shutil

from agentroll.runtime.images.base import BuildJob
from agentroll.runtime.images.errors import BuildFailed
from agentroll.runtime.images.recipe import RootfsRecipe, parse_rootfs_recipe


class FakeRootfsBuilder:
    fmt = "rootfs"

    def __init__(self, *, delay_s: float = 0.0, fail: bool = False) -> None:
        self.delay_s = delay_s
        self.fail = fail
        self.builds = 0

    def base_image(self, recipe_text: str) -> str:
        return parse_rootfs_recipe(recipe_text).base_image

    async def build(self, job: BuildJob) -> dict[str, str]:
        recipe = parse_rootfs_recipe(await asyncio.to_thread(job.recipe_path.read_text))
        await asyncio.to_thread(self._log, job, f"{len(recipe.debian.packages)} packages")
        await asyncio.sleep(self.delay_s)
        if self.fail:
            raise BuildFailed("fake build failed as asked", log_path=job.log_path)
        self.builds += 1
        await asyncio.to_thread(self._write_tree, recipe, job)
        return {"fake": "1"}

    @staticmethod
    def _log(job: BuildJob, text: str) -> None:
        with job.log_path.open("a") as log:
            log.write(f"fake build of {job.name}: {text}\n")

    @staticmethod
    def _write_tree(recipe: RootfsRecipe, job: BuildJob) -> None:
        root = job.output
        for sub in ("etc/agentroll", "var/lib/agentroll-fake", "tmp"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        suite = recipe.debian.suite
        (root / "etc/os-release").write_text(f'ID=debian\nVERSION_CODENAME="{suite}"\n')
        meta = {
            "image": recipe.image,
            "env": recipe.env,
            "venv": recipe.python.venv if recipe.python else None,
        }
        (root / "etc/agentroll/image.json").write_text(json.dumps(meta))
        fake = root / "var/lib/agentroll-fake"
        (fake / "packages").write_text("\n".join(recipe.debian.packages) + "\n")
        (fake / "run.sh").write_text("\n".join(recipe.run) + "\n")
        if job.lock_file is not None:
            shutil.copyfile(job.lock_file, fake / "lock.txt")
