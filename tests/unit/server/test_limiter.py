import asyncio

import pytest

from agentroll.server.limiter import StageLimiter


async def test_admits_up_to_capacity_then_queues_in_order() -> None:
    limiter = StageLimiter("run", 2)
    order: list[int] = []
    await limiter.acquire()
    await limiter.acquire()

    async def waiter(i: int) -> None:
        await limiter.acquire()
        order.append(i)

    tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
    await asyncio.sleep(0)
    assert (limiter.busy, limiter.queued) == (2, 3)
    limiter.release()
    limiter.release()
    await asyncio.sleep(0)
    assert order == [0, 1]
    limiter.release()
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]


async def test_growing_admits_waiters_and_shrinking_never_evicts_holders() -> None:
    limiter = StageLimiter("init", 1)
    await limiter.acquire()
    waiting = [asyncio.create_task(limiter.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    limiter.resize(3)
    await asyncio.sleep(0)
    assert limiter.busy == 3 and limiter.queued == 1
    limiter.resize(1)
    assert limiter.busy == 3  # holders keep their slots
    for _ in range(2):
        limiter.release()
    await asyncio.sleep(0)
    assert not waiting[2].done()  # still at capacity 1 with one holder
    limiter.release()
    await asyncio.sleep(0)
    assert waiting[2].done() and limiter.busy == 1


async def test_cancelled_waiter_leaves_no_leaked_slot() -> None:
    limiter = StageLimiter("eval", 1)
    await limiter.acquire()
    task = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    limiter.release()  # grants the slot to `task` ...
    task.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await task
    assert limiter.busy == 0
    await asyncio.wait_for(limiter.acquire(), 1)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        StageLimiter("run", 0)
