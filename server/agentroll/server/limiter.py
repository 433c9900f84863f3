"""A FIFO concurrency limit whose capacity can change while jobs hold and await it."""

import asyncio
from collections import deque


class StageLimiter:
    """Like a semaphore, but resizable at run time without dropping or reordering waiters.

    Shrinking never interrupts holders: the stage simply admits no one new until the
    number of holders falls below the new capacity.
    """

    def __init__(self, name: str, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"{name} capacity must be at least 1")
        self.name = name
        self.capacity = capacity
        self.busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def queued(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self) -> None:
        if self.busy < self.capacity and not self._waiters:
            self.busy += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # granted just as we were cancelled: hand the slot on
            raise

    def release(self) -> None:
        self.busy -= 1
        self._wake()

    def resize(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"{self.name} capacity must be at least 1")
        self.capacity = capacity
        self._wake()

    def _wake(self) -> None:
        while self.busy < self.capacity and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.busy += 1
                waiter.set_result(None)
