"""One object per running event loop: worker pools that belong to the loop they serve.

A pool's processes and pipes are bound to the event loop that started them, and a process may
run several loops over its life (tests, `asyncio.run` per command), so a process-wide
singleton would hand one loop another's dead pipes. The map is weak: a loop that is gone
takes its entry with it.
"""

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopLocal(Generic[T]):
    """`get()` gives the running loop's object, made by `factory` on first use; `pop()` takes it
    out (to be shut down), so the next `get()` makes a fresh one."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        found = self._by_loop.get(loop)
        if found is None:
            found = self._by_loop[loop] = self._factory()
        return found

    def pop(self) -> T | None:
        return self._by_loop.pop(asyncio.get_running_loop(), None)
