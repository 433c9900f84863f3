"""A grading worker process: math-verify's verdicts, one request per line, until stdin closes.

Started by `grading_pool` as `python -I .../grading_worker.py LIMIT PARENT` (isolated: see
`grader_launch`; standard library and math-verify only, no agentroll import: run by path
without `-I`, its own folder, which holds the `math` family's folder `math/`, would come first
on the import path). It takes its reply channel first, then imports math-verify once (slow:
sympy), caps its own address space at LIMIT bytes and serves requests. It never bounds time
itself: math-verify's signal-based timeouts cannot interrupt long arithmetic inside one C
call, so the pool kills a worker that overruns.

Protocol, one JSON object per line (stdin in, stdout out):

    -> {"ready": true}                                  once, when it can grade
    <- {"gold": "...", "predicted": "..."}
    -> {"gold_parsed": true | false}                    (false: nothing follows)
    -> {"equal": bool, "reason": "equal" | "not_equal" | "unparsable_answer", "retire": bool}

`retire` asks the pool to replace this worker: an answer used more than half the memory the
worker had to spare, and whatever it left behind (caches, fragmentation) must not cost the
next one.
"""

import ctypes
import json
import logging
import os
import resource
import signal
import sys
from typing import Any, TextIO

_PR_SET_PDEATHSIG = 1


def _die_with(parent_pid: int) -> None:
    """Have the kernel kill this worker when the server dies, however it dies (Linux).

    Strictly: when the thread that started it ends, which is the server's event loop.
    """
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(0)


def _send(replies: TextIO, message: dict[str, Any]) -> None:
    replies.write(json.dumps(message) + "\n")
    replies.flush()


def _peak_memory_bytes() -> int:
    """This process's own peak resident memory. Not `ru_maxrss`: that survives `execve` and so
    starts at the forking server's size, and a large server would retire every worker."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


GRADER_NICENESS = 10


def main() -> None:
    memory_limit, parent_pid = int(sys.argv[1]), int(sys.argv[2])
    _die_with(parent_pid)
    os.nice(GRADER_NICENESS)  # grading policy output never outranks the server's event loop
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a library prints goes to stderr, never into the replies
    from math_verify import parse, verify  # only once the replies are ours

    def _parse(answer: str) -> list[Any]:
        return list(parse(f"${answer}$", parsing_timeout=None))

    # It warns once that its own timeouts are off; the pool bounds time instead.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    verify(_parse("1"), _parse("1"), timeout_seconds=None)  # sympy's lazy imports, untimed
    resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))
    retire_above = (_peak_memory_bytes() + memory_limit) // 2
    _send(replies, {"ready": True})

    for line in sys.stdin.buffer:
        request = json.loads(line)
        gold = _parse(request["gold"])
        _send(replies, {"gold_parsed": bool(gold)})
        if not gold:
            continue
        predicted = _parse(request["predicted"])
        if not predicted:
            equal, reason = False, "unparsable_answer"
        else:
            equal = bool(verify(gold, predicted, timeout_seconds=None))
            reason = "equal" if equal else "not_equal"
        retire = _peak_memory_bytes() > retire_above
        _send(replies, {"equal": equal, "reason": reason, "retire": retire})


if __name__ == "__main__":
    main()
