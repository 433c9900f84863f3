"""A verifiers worker's child (forked for one request the policy's text reaches) and its one
channel: the worker's own pipes to the server, never. Loaded by `worker.py` by file path, in
the environment's interpreter: standard library only.

Why: the code a child runs (a reward function that executes the reply) can do anything its
process can. Were the server's channel open in it, a line it wrote would be read as the reply
to its request (a forged reward, a forged `stage: load`) and its genuine reply as the reply to
the next request on that worker, another rollout's. So, right after the fork, the child's
copies of the server's channel and of stdin point at /dev/null, and it talks only to its
worker over two pipes made for the request, one JSON object per line:

    child -> worker  {"turn": [...]}     a turn, relayed to the server; its answer comes back
                     {"mark": "set_up"}  (a `call`) the toolsets are set up: from here on the
                                         model's arguments reach code
                     {"mark": "turns_over"}  (a rollout) its turns are over: a turn after it
                                         breaks the channel
                     {"final": {...}}    the child's reply, exactly once, last

The worker relays only what the request's kind sends (`turn` for an episode), takes exactly
one `final`, and checks it (`reply_checks.Check`): anything else on the channel is the
request's own code breaking it, answered as that code's failure, never passed on to the server.
"""

import contextlib
import json
import os
import traceback
from collections.abc import Callable
from typing import Any, TextIO

Relay = Callable[[dict[str, Any]], dict[str, Any]]
"""Sends a message to the server and returns its answer (the worker's side of a turn)."""

_to_worker: TextIO | None = None
_from_worker: TextIO | None = None


def ask_worker(message: dict[str, Any]) -> dict[str, Any]:
    """In a child: a turn sent to the worker, and the server's answer (`{}` once the worker
    stopped answering)."""
    tell_worker(message)
    assert _from_worker is not None
    answer: dict[str, Any] = json.loads(_from_worker.readline() or "{}")
    return answer


def tell_worker(message: dict[str, Any]) -> None:
    """In a child: a message to the worker that needs no answer."""
    assert _to_worker is not None, "only a child forked by `in_child` has a worker channel"
    _to_worker.write(json.dumps(message) + "\n")
    _to_worker.flush()


def _cut_off(server_fds: list[int]) -> None:
    """The child's copies of the server's channels now point at /dev/null."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in server_fds:
        os.dup2(null, fd)
    os.close(null)


def in_child(
    respond: Callable[[], dict[str, Any]],
    server_fds: list[int],
    final: Callable[[dict[str, Any], frozenset[str]], dict[str, Any]],
    broken: Callable[[str], dict[str, Any]],
    relay: Relay | None,
) -> dict[str, Any]:
    """`respond()`, run in a child forked for the request, which exits after: whatever its code
    changes dies with it. The server gets `final(its reply, the marks it sent)`, or
    `broken(why)` where its code broke the channel; its turns go to `relay` (None: it has
    none). A child that dies without a reply ends the worker with its status (the server
    sees the worker crash)."""
    global _to_worker, _from_worker
    up_read, up_write = os.pipe()
    down_read, down_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(up_read)
            os.close(down_write)
            _cut_off(server_fds)
            _to_worker, _from_worker = os.fdopen(up_write, "w"), os.fdopen(down_read)
            tell_worker({"final": respond()})
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    os.close(up_write)
    os.close(down_read)
    with os.fdopen(up_read) as up, os.fdopen(down_write, "w") as down:
        said, marks, problem = _listen(up, down, relay)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if problem is not None:
        return broken(problem)
    if said is None:
        os._exit(code if code > 0 else 128 - code)
    return final(said, marks)


def _listen(
    up: TextIO, down: TextIO, relay: Relay | None
) -> tuple[dict[str, Any] | None, frozenset[str], str | None]:
    """The child's messages until it closes its end: (its final reply, the marks it sent,
    what broke the channel)."""
    final: dict[str, Any] | None = None
    marks: set[str] = set()
    problem = None
    for line in up:  # read to the end, so a child never blocks on a full pipe
        if problem is not None:
            continue
        message = _parsed(line)
        if final is not None or message is None:
            problem = "its process wrote to the worker's channel past or beside its reply"
        elif "final" in message and isinstance(message["final"], dict):
            final = message["final"]
        elif isinstance(message.get("mark"), str):
            marks.add(message["mark"])
        elif (
            relay is not None
            and "turns_over" not in marks
            and isinstance(message.get("turn"), list)
        ):
            answer = relay({"turn": message["turn"]})
            with contextlib.suppress(OSError):  # the child is gone: its end says why
                down.write(json.dumps(answer) + "\n")
                down.flush()
        else:
            problem = f"its process sent the worker {line[:200]!r}"
        if problem is not None:
            with contextlib.suppress(OSError):
                down.close()  # a turn it waits on ends; nothing more is relayed
    return final, frozenset(marks), problem


def _parsed(line: str) -> dict[str, Any] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) and len(message) == 1 else None
