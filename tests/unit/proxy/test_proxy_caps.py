"""A rollout's request rate: a token bucket on a fake clock (burst, refill, retry hint)."""

from agentroll.server.proxy.caps import RequestRate


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_goes_through_then_the_sustained_rate_applies() -> None:
    clock = Clock()
    rate = RequestRate(burst=3, per_s=2.0, clock=clock)
    assert [rate.wait_s() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert rate.wait_s() == 0.5  # one token comes back every 1/2 s
    clock.now += 0.25
    assert rate.wait_s() == 0.25  # a refused request spends nothing
    clock.now += 0.25
    assert rate.wait_s() == 0.0
    assert rate.wait_s() == 0.5


def test_idle_time_refills_at_most_the_burst() -> None:
    clock = Clock()
    rate = RequestRate(burst=2, per_s=10.0, clock=clock)
    assert rate.wait_s() == 0.0
    clock.now += 3600
    assert [rate.wait_s() == 0.0 for _ in range(3)] == [True, True, False]
