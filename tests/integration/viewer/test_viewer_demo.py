"""`agentroll demo` ends by printing the viewer's address; `--keep-serving` keeps its servers
up for it until Ctrl-C (even when started in the background, where SIGINT comes ignored), and
the demo's own status is still its exit code. Run without bubblewrap on PATH: the sandbox-free
families, fast."""

import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import httpx
import pytest
from tests.integration.viewer.viewer_support import Elements

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]


def _demo(*flags: str, stderr: IO[str] | None = None) -> subprocess.Popen[str]:
    # Started as a shell starts a background job (`demo &`): with SIGINT ignored.
    command = ["/bin/sh", "-c", 'trap \'\' INT; exec "$0" "$@"', sys.executable]
    command += ["-m", "agentroll.server.cli", "demo", "--groups", "2"]
    command += ["--group-size", "2", "--latency", "0", *flags]
    no_bwrap = {"PATH": str(Path(sys.executable).parent)}
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=stderr or subprocess.DEVNULL,
        text=True,
        env=no_bwrap,
    )


def _viewer_line(demo: subprocess.Popen[str]) -> str:
    assert demo.stdout is not None
    for line in demo.stdout:
        if line.startswith("viewer: "):
            return line.split(" ", 1)[1].strip()
    raise AssertionError("the demo printed no viewer address")


def test_the_demo_keeps_serving_its_viewer_until_ctrl_c(tmp_path: Path) -> None:
    stderr = (tmp_path / "stderr.txt").open("w")
    demo = _demo("--keep-serving", stderr=stderr)
    try:
        login = _viewer_line(demo)
        assert "/ui?token=" in login
        with httpx.Client(timeout=30) as http:
            page = http.get(login, follow_redirects=True)  # the address logs a browser in
            assert page.status_code == 200 and "policy version" in page.text
            results = Elements(http.get(login.split("?")[0] + "/results").text)
            assert len(results.find("tr", class_="row")) == 4  # 2 groups of 2
        assert demo.poll() is None  # still serving
        demo.send_signal(signal.SIGINT)
        # The demo's own status: every rollout ok. A shutdown that hung past the demo's
        # bound is exit 1, with every thread's stack in its stderr.
        code = demo.wait(300)
        assert code == 0, (tmp_path / "stderr.txt").read_text()[-6000:]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait(30)
        stderr.close()


def test_without_keep_serving_the_demo_prints_the_address_and_ends() -> None:
    demo = _demo()
    assert "/ui?token=" in _viewer_line(demo)
    assert demo.stdout is not None
    assert "--keep-serving" in demo.stdout.read()
    assert demo.wait(300) == 0
