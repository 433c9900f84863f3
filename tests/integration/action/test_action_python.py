"""IPython through the real action server: state, errors, timeouts, interrupts, kernel death."""

import asyncio
import json
import os
import signal
import tempfile
from pathlib import Path

import pytest
from action_servers import ServerProcess, frozen, needs_freezer, start_server

from agentroll.runtime.action import ActionClient, ActionRequestError

pytestmark = pytest.mark.integration


async def test_state_persists_and_results_are_shown(
    client: ActionClient, shared_server: ServerProcess
) -> None:
    first = await client.python("import os\nx = 41\nprint(os.getcwd())")
    assert (first.output, first.error) == (f"{shared_server.workdir}\n", None)
    second = await client.python("x += 1\nx")
    assert (second.output, second.error, second.timed_out) == ("42\n", None, False)


async def test_stdout_stderr_and_display_in_order(client: ActionClient) -> None:
    result = await client.python(
        "import sys\nfrom IPython.display import display\n"
        "print('out')\nsys.stdout.flush()\nprint('err', file=sys.stderr)\nsys.stderr.flush()\n"
        "display({'a': 1})\n'value'"
    )
    assert result.output == "out\nerr\n{'a': 1}\n'value'\n"


async def test_exception_is_a_result_with_a_plain_traceback(client: ActionClient) -> None:
    result = await client.python("def f():\n    return 1 / 0\nprint('before')\nf()")
    assert result.output == "before\n"
    assert result.error is not None and "ZeroDivisionError: division by zero" in result.error
    assert "\x1b[" not in result.error  # no terminal colour codes
    assert (await client.python("'alive'")).output == "'alive'\n"


async def test_timeout_interrupts_and_keeps_state(client: ActionClient) -> None:
    await client.python("kept = 'yes'")
    result = await client.python(
        "import time\nprint('start', flush=True)\ntime.sleep(30)", timeout=1
    )
    assert result.timed_out and not result.kernel_restarted
    assert result.output.startswith("start\n")
    assert "[execution timed out after 1 s and was interrupted]" in result.output
    assert result.error is not None and "KeyboardInterrupt" in result.error
    assert (await client.python("kept")).output == "'yes'\n"


async def test_interrupt_from_another_task(client: ActionClient) -> None:
    running = asyncio.create_task(client.python("import time\ntime.sleep(30)", timeout=60))
    await asyncio.sleep(1.0)
    await client.interrupt_python()
    result = await asyncio.wait_for(running, 30)
    assert result.interrupted and not result.timed_out
    assert result.error is not None and "KeyboardInterrupt" in result.error


async def test_huge_output_is_truncated(client: ActionClient) -> None:
    result = await client.python("for i in range(100_000): print(i)", max_output_chars=500)
    assert result.truncated and result.output.startswith("0\n1\n")
    assert result.output.endswith("99999\n") and "characters truncated ...]" in result.output


async def test_kernel_files_live_in_the_private_directory(shared_server: ServerProcess) -> None:
    state_dirs = list(shared_server.socket.parent.glob(".agentroll-action-*"))
    assert len(state_dirs) == 1 and oct(state_dirs[0].stat().st_mode & 0o777) == "0o700"
    connection = json.loads((state_dirs[0] / "kernel.json").read_text())
    assert connection["transport"] == "ipc"
    assert Path(connection["ip"]).parent == state_dirs[0]


async def test_kernel_that_ignores_sigint_is_restarted(server: ServerProcess) -> None:
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        await client.python("lost = 1")
        result = await client.python(
            "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
            timeout=1,
        )
        assert result.timed_out and result.kernel_restarted
        assert "restarted and state was lost" in result.output
        after = await client.python("'lost' in globals()")
        assert after.output == "False\n"
    finally:
        await client.close()


async def test_kernel_death_is_reported_and_recovered(server: ServerProcess) -> None:
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        result = await client.python("import os\nos._exit(1)", timeout=30)
        assert result.kernel_restarted and not result.timed_out
        assert "kernel died" in result.output
        assert (await client.python("1 + 1")).output == "2\n"
    finally:
        await client.close()


@needs_freezer
async def test_code_sent_to_a_kernel_killed_a_moment_ago_runs_in_a_new_one(
    server: ServerProcess,
) -> None:
    """`kill -9 -1` from bash: on a busy node the kernel may not have run to its death when
    the next python call comes. Held frozen with the SIGKILL pending, it is found doomed, and
    a new kernel runs the code instead of the dying one losing it."""
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        kernel_pid = int((await client.python("import os\nos.getpid()")).output)
        with frozen(kernel_pid):
            os.kill(kernel_pid, signal.SIGKILL)
            call = asyncio.create_task(client.python("print('ran')", timeout=30))
            await asyncio.sleep(0.5)  # the call meets the doomed kernel (thawed only after)
        result = await asyncio.wait_for(call, 60)
        assert result.output.startswith("ran\n"), result.output
        assert result.kernel_restarted
        assert "died after the previous call: it was killed by signal 9" in result.output
    finally:
        await client.close()


async def test_kernel_leaves_no_files_in_home() -> None:
    # In a sandbox $HOME is often the task's repository: IPython must not litter it.
    with tempfile.TemporaryDirectory(prefix="act-") as base:
        home = Path(base) / "work"
        home.mkdir()
        server = start_server(Path(base), env={"HOME": str(home)})
        client = ActionClient(server.socket)
        try:
            await client.connect(20)
            result = await client.python("import os\nos.path.expanduser('~')")
            assert result.output == f"{str(home)!r}\n"
        finally:
            await client.close()
            server.stop()
        assert [p.name for p in home.iterdir()] == []


async def test_warm_starts_the_kernel_before_the_first_cell(server: ServerProcess) -> None:
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        assert (await client.alive())["python"] is False
        first = await client.warm(["python", "bash"])
        assert first["python"] > 0 and set(first) == {"python", "bash"}
        assert (await client.alive())["python"] is True
        again = await client.warm(["python"])
        assert again["python"] < first["python"]  # already running: nothing to start
        with pytest.raises(ActionRequestError, match="cannot warm"):
            await client.warm(["emacs"])
    finally:
        await client.close()


async def test_warming_runs_a_cell_the_agent_never_sees(server: ServerProcess) -> None:
    """Warm-up pays the kernel's first execution, which leaves no count, history or output:
    the agent's first cell sees what it sees on a kernel its own call starts (IPython has
    already counted and stored that cell when it runs)."""
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        await client.warm(["python"])
        seen = await client.python(
            "ip = get_ipython()\nprint(ip.execution_count, len(In), [i for i in In if i], Out)"
        )
    finally:
        await client.close()
    assert seen.error is None
    assert seen.output.split(" ", 2)[:2] == ["2", "2"] and seen.output.endswith("{}\n")
