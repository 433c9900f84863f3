"""bash through the real action server: exit codes, state, timeouts, interrupts, truncation."""

import asyncio

import pytest
from action_servers import ServerProcess

from agentroll.runtime.action import ActionClient

pytestmark = pytest.mark.integration


async def test_exit_codes_and_output(client: ActionClient) -> None:
    ok = await client.bash("echo hello; echo oops >&2")
    assert (ok.output, ok.exit_code, ok.timed_out) == ("hello\noops\n", 0, False)
    assert (await client.bash("false")).exit_code == 1
    assert (await client.bash("(exit 42)")).exit_code == 42
    missing = await client.bash("definitely-not-a-command")
    assert missing.exit_code == 127 and "command not found" in missing.output


async def test_cwd_env_and_functions_persist_across_calls(
    client: ActionClient, shared_server: ServerProcess
) -> None:
    await client.bash("mkdir -p sub && cd sub && export GREETING=hi && shout() { echo LOUD; }")
    result = await client.bash("pwd; echo $GREETING; shout")
    assert result.output == f"{shared_server.workdir}/sub\nhi\nLOUD\n"
    await client.bash(f"cd {shared_server.workdir}")


async def test_quoting_multiline_unicode_and_missing_newline(client: ActionClient) -> None:
    result = await client.bash("printf '%s|' \"it's\" 'say \"hi\"' 'back\\slash'; echo")
    assert result.output == 'it\'s|say "hi"|back\\slash|\n'
    loop = await client.bash("for i in 1 2 3; do\n  echo n$i\ndone")
    assert loop.output == "n1\nn2\nn3\n"
    heredoc = await client.bash("cat <<'EOF'\n$not_expanded ✓ héllo\nEOF")
    assert heredoc.output == "$not_expanded ✓ héllo\n"
    assert (await client.bash("printf 'no newline'")).output == "no newline"


async def test_syntax_error_is_reported_not_hung(client: ActionClient) -> None:
    result = await client.bash('echo "unterminated', timeout=30)
    assert result.exit_code == 2 and not result.timed_out
    assert "unexpected EOF" in result.output
    assert (await client.bash("echo fine")).output == "fine\n"


async def test_commands_longer_than_a_tty_line(client: ActionClient) -> None:
    long_arg = "x" * 10_000
    result = await client.bash(f"echo {long_arg} | wc -c")
    assert result.output.strip() == "10001" and result.exit_code == 0


async def test_long_commands_run_in_a_shell_with_errexit_set(server: ServerProcess) -> None:
    """`set -e` is the agent's to set; staging a long command must not trip it."""
    client = ActionClient(server.socket)
    await client.connect(20)
    try:
        await client.bash("set -euo pipefail")
        long_arg = "x" * 10_000
        result = await client.bash(f"echo {long_arg} | wc -c")
        assert (result.output, result.exit_code) == ("10001\n", 0)
        assert not result.session_restarted
        assert (await client.bash("echo $-")).output.count("e") == 1  # still set
    finally:
        await client.close()


async def test_non_interactive_environment(client: ActionClient) -> None:
    result = await client.bash("echo $TERM $PAGER $GIT_PAGER; set -o | grep -w history")
    lines = result.output.splitlines()
    assert lines[0] == "dumb cat cat"
    assert lines[1].split() == ["history", "off"]


async def test_hard_timeout_interrupts_and_keeps_the_session(client: ActionClient) -> None:
    await client.bash("export KEEP=still-here")
    result = await client.bash("echo started; sleep 30", timeout=1)
    assert result.timed_out and result.exit_code is None and not result.session_restarted
    assert result.output.startswith("started\n")
    assert "[command timed out after 1 s and was interrupted]" in result.output
    after = await client.bash("echo $KEEP")
    assert (after.output, after.exit_code) == ("still-here\n", 0)


async def test_command_waiting_on_stdin_is_bounded(client: ActionClient) -> None:
    result = await client.bash("cat", timeout=1)
    assert result.timed_out and result.exit_code is None
    assert (await client.bash("echo next")).output == "next\n"


async def test_job_ignoring_sigint_is_killed(client: ActionClient) -> None:
    result = await client.bash("bash -c \"trap '' INT; sleep 30\"", timeout=1)
    assert result.timed_out and "timed out" in result.output
    assert (await client.bash("echo recovered")).output == "recovered\n"


async def test_busy_builtin_loop_is_interrupted(client: ActionClient) -> None:
    result = await client.bash("while :; do :; done", timeout=1)
    assert result.timed_out and not result.session_restarted
    assert (await client.bash("echo ok")).exit_code == 0


async def test_no_output_timeout(client: ActionClient) -> None:
    result = await client.bash("echo begin; sleep 30", timeout=60, no_output_timeout=1)
    assert result.timed_out and result.exit_code is None
    assert result.output.startswith("begin\n")
    assert "[no output for 1 s; the command was interrupted]" in result.output


async def test_output_keeps_the_command_alive_past_the_no_output_timeout(
    client: ActionClient,
) -> None:
    result = await client.bash(
        "for i in 1 2 3 4; do echo tick$i; sleep 0.4; done", timeout=30, no_output_timeout=1.5
    )
    assert not result.timed_out and result.exit_code == 0
    assert result.output.split() == ["tick1", "tick2", "tick3", "tick4"]


async def test_interrupt_from_another_task(client: ActionClient) -> None:
    running = asyncio.create_task(client.bash("echo waiting; sleep 30", timeout=60))
    await asyncio.sleep(0.5)
    await client.interrupt_bash()
    result = await asyncio.wait_for(running, 20)
    assert result.interrupted and not result.timed_out and result.exit_code is None
    assert result.output.startswith("waiting\n") and "[command interrupted]" in result.output
    assert (await client.bash("echo after")).output == "after\n"


async def test_huge_output_is_truncated_with_a_marker(client: ActionClient) -> None:
    n = 200_000
    result = await client.bash(f"seq 1 {n}", max_output_chars=1000)
    total = sum(len(str(i)) + 1 for i in range(1, n + 1))
    assert result.truncated and result.exit_code == 0
    assert result.output.startswith("1\n2\n3\n") and result.output.endswith(f"\n{n}\n")
    assert f"[... {total - 1000} characters truncated ...]" in result.output


async def test_exit_restarts_the_shell_in_the_workdir(
    client: ActionClient, shared_server: ServerProcess
) -> None:
    await client.bash("cd / && export GONE=1")
    result = await client.bash("exit 3")
    assert result.exit_code == 3 and result.session_restarted
    assert "a new bash session was started" in result.output
    after = await client.bash("pwd; echo ${GONE:-unset}")
    assert after.output == f"{shared_server.workdir}\nunset\n"


async def test_calls_on_one_session_serialize(client: ActionClient) -> None:
    first, second = await asyncio.gather(
        client.bash("sleep 0.3; echo first"), client.bash("echo second")
    )
    assert first.output == "first\n" and second.output == "second\n"


async def test_terminal_modes_left_behind_by_a_program_are_reset(client: ActionClient) -> None:
    await client.bash("stty echo icrnl")
    result = await client.bash("echo clean")
    assert result.output == "clean\n"  # the command line itself is not echoed back


async def test_job_killed_by_a_signal_and_crlf_output_end_the_command(client: ActionClient) -> None:
    # bash restores its saved terminal modes after a job dies of a signal, and the agent may
    # switch CR insertion on itself: neither may hide the end of the command.
    killed = await client.bash('python3 -c "import os; os.kill(os.getpid(), 9)"; echo after')
    assert (killed.output, killed.timed_out) == ("Killed\nafter\n", False)
    crlf = await client.bash("stty onlcr; echo crlf", timeout=30)
    assert (crlf.output, crlf.exit_code, crlf.timed_out) == ("crlf\n", 0, False)
