"""The verifier's processes frozen the moment its test script exits, before the reward is read.

Code the tests run (the agent's program, its test fixtures) runs with the verifier's rights. A
process it leaves behind could rewrite `reward.txt` after the test script wrote it, in the
moment before the server stops the sandbox's processes; one that kills the test script leaves
no reward at all. So the test script runs under a small bash wrapper, which:

1. closes every descriptor but 0-2 (an exec helper can leave the server's ends of its
   output pipes open there: a frozen process holding one would keep the exec from ending),
   and notes the processes alive before the tests start (after the agent's were killed: the
   action server, the wrapper itself);
2. runs the test script and, as soon as it exits, sends SIGSTOP to every process of the
   sandbox's PID namespace (`kill -STOP -1`: all but the namespace's init, the action server,
   and the wrapper). A stopped process cannot run, catch or ignore it, and a fork in flight is
   undone by the pending signal, so nothing the tests started writes anything afterwards;
3. lists what is still alive (zombies aside) and was not there before: the processes the
   tests left, reported to the server on one line (`MARK`), using shell builtins only.

A process the tests left can also see the test script's exit (polling `/proc`), rewrite the
reward and exit itself in the instant before the freeze: it is then neither frozen nor listed.
The server counts it instead: in the sandbox's PID namespace the action server is init, so
every process that outlives its parent is re-parented to it and reaped by it, even one that
exits a moment later. The verifier reads that count (`Sandbox.orphans_reaped`) right before
the test script starts (after the agent's processes were stopped and reaped) and right after
the freeze; a count that grew, like a process left alive, marks the run `disrupted`. One that
stops the wrapper to widen the window stops the server's `nsenter` with it: the exec never
ends and the run is `verifier_timeout` (reward 0).

The server then reads the reward and kills them all (`stop_agent`). A process left alive, an
orphan counted, or a wrapper that never reported (the tests killed it), marks the run
`disrupted`: the handler blames it with a control (a task whose own tests leave a daemon
behind is not the policy's doing).

The freeze and the count work wherever the sandbox has a PID namespace of its own with the
action server as its init (bubblewrap). Without one (the `local` runtime, Apptainer without
`--pid`), `kill -1` would reach processes outside the sandbox and `/proc` lists the host's, so
the wrapper neither freezes nor lists leftovers (`frozen=0`) and no orphans are counted: the
server's stop after the wrapper returns is what ends them, a short window in which they can
still write, and only a killed wrapper is seen.
Use bubblewrap for untrusted policies. A cgroup freezer would need the server to act from
outside once the test script's exit reached it, a longer window than the wrapper's own
instant; SIGSTOP to the namespace needs no cgroup at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MARK = "agentroll-verifier-done"
ACTION_SERVER = "agentroll.runtime.action"
_REPORT = re.compile(rf"{MARK} status=(\d+) frozen=([01]) left=([0-9 ]*)")


def contained(command: str) -> str:
    """A bash script running `command` (the test script, its redirections included) and then
    freezing and listing what it left (see the module docstring)."""
    return f"""
for fd in /proc/$$/fd/*; do
  fd=${{fd##*/}}
  case "$fd" in 0|1|2) ;; *) eval "exec $fd>&-" 2>/dev/null ;; esac
done
frozen=0
mapfile -d '' init < /proc/1/cmdline 2>/dev/null
case " ${{init[*]}} " in *" {ACTION_SERVER} "*) frozen=1 ;; esac
before=" "
for d in /proc/[0-9]*; do before="$before${{d#/proc/}} "; done
{command}
status=$?
[ "$frozen" = 1 ] && kill -STOP -1 2>/dev/null
left=""
[ "$frozen" = 1 ] && for d in /proc/[0-9]*; do
  p=${{d#/proc/}}
  case "$before" in *" $p "*) continue ;; esac
  stat=""
  read -r stat < "$d/stat" 2>/dev/null
  state=${{stat##*) }}
  case "${{state%% *}}" in ""|Z|X) continue ;; esac
  left="$left $p"
done
echo "{MARK} status=$status frozen=$frozen left=${{left# }}"
"""


@dataclass(frozen=True, slots=True)
class Report:
    """What the wrapper said, or that it said nothing."""

    status: int | None
    """The test script's exit status (None: the wrapper did not report)."""
    frozen: bool
    left: tuple[int, ...]
    """Processes the tests left alive."""
    orphans: int = 0
    """Processes the tests started that outlived their parent and exited before the freeze
    (the action server's count of orphans it reaped meanwhile)."""

    @property
    def disrupted(self) -> str | None:
        """Why this run cannot be trusted (None: it can)."""
        if self.status is None:
            return "the verifier's own shell was killed before the test script's end was seen"
        if self.left:
            shown = ", ".join(map(str, self.left[:20]))
            return (
                f"{len(self.left)} process(es) the tests started outlived the test script: {shown}"
            )
        if self.orphans:
            return (
                f"{self.orphans} process(es) the tests started outlived their parent and exited "
                "before the freeze"
            )
        return None


def read_report(stdout: str, exit_code: int | None, orphans: int = 0) -> Report:
    """The wrapper's report: its last line, and only when it exited by itself (0). Code the
    tests ran can write to the wrapper's output while the tests run, never after its last
    line; and it can kill the wrapper, never make it exit 0. `orphans`: how many orphans the
    server reaped while it ran."""
    lines = stdout.strip().splitlines()
    found = _REPORT.fullmatch(lines[-1]) if lines and exit_code == 0 else None
    if found is None:
        return Report(None, False, (), orphans)
    status, frozen, left = found.groups()
    return Report(int(status), frozen == "1", tuple(int(p) for p in left.split()), orphans)
