"""Several servers as one: sharding, barrier fan-out, and failover when a server dies."""

import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from tests.integration.trainer_clients.conftest import Servers
from tests.integration.trainer_clients.handlers import HANDLER_PATH

from agentroll.server.launch import agentroll_process
from agentroll.server.schema import JobRequest
from agentroll.trainer_clients import (
    AsyncGroupCollector,
    AsyncServerPool,
    FanOutError,
    GroupCollector,
    GroupSpec,
    ServerPool,
)

pytestmark = pytest.mark.integration
FAST = {"poll_wait_s": 0.5, "health_interval_s": 0.5, "dead_after_s": 1.0}


async def test_groups_are_sharded_whole_across_servers(servers: Servers) -> None:
    async with (
        servers(2) as running,
        AsyncServerPool([s.url for s in running], **FAST) as pool,  # type: ignore[arg-type]
    ):
        async with AsyncGroupCollector(pool) as collector:
            template = JobRequest(handler="steered", instance={"sleep": {"0": 0.2}})
            specs = [GroupSpec(f"g{i}", template, 3) for i in range(8)]
            groups = await collector.collect(specs, timeout_s=30)
        by_server = {s.url: (await pool.members[i].client.status()) for i, s in enumerate(running)}

    assert all(g.valid for g in groups) and len(groups) == 8
    # load-based placement splits the groups, and a group never straddles two servers
    finished = {url: st.results_cursor for url, st in by_server.items()}
    assert sorted(finished.values()) == [12, 12]
    for g in groups:
        assert len({t.group_id for t in g.trajectories}) == 1


async def test_backend_registration_and_pause_resume_fan_out_as_one_barrier(
    servers: Servers,
) -> None:
    async with (
        servers(3) as running,
        AsyncServerPool([s.url for s in running], **FAST) as pool,  # type: ignore[arg-type]
    ):
        views = await pool.add_backend({"id": "vllm-0", "base_url": "http://127.0.0.1:9"})
        assert sorted(views) == sorted(s.url for s in running)
        assert {v.id for v in views.values()} == {"vllm-0"}

        paused = await pool.pause("wait", timeout_s=5)
        assert all(p.paused for p in paused.values()) and len(paused) == 3
        statuses = await pool.statuses()
        assert all(s.paused for s in statuses.values())

        resumed = await pool.resume(4, max_policy_lag=1)
        assert {p.policy_version for p in resumed.values()} == {4}
        statuses = await pool.statuses()
        assert {(s.paused, s.policy_version, s.max_policy_lag) for s in statuses.values()} == {
            (False, 4, 1)
        }
        assert pool.policy_version == 4

        # one server refuses (its version is ahead): the barrier fails and says where
        await pool.members[0].client.resume(9)
        with pytest.raises(FanOutError) as caught:
            await pool.resume(5)
        assert list(caught.value.failed) == [running[0].url]
        assert sorted(caught.value.succeeded) == sorted(s.url for s in running[1:])
        assert "409 conflict" in str(caught.value)


def test_a_server_killed_mid_batch_still_yields_every_group(tmp_path: Path) -> None:
    env = {
        "AGENTROLL_POOLS__RUN": "8",
        "AGENTROLL_POOLS__INIT": "8",
        "AGENTROLL_LOG_LEVEL": "warning",
    }
    with ExitStack() as stack:
        procs = [
            stack.enter_context(
                agentroll_process(
                    ["serve", "--port", "0", "--db", str(tmp_path / f"s{i}.db")],
                    tmp_path,
                    f"server{i}",
                    env=env,
                )
            )
            for i in range(3)
        ]
        server_list = tmp_path / "servers.txt"
        server_list.write_text("# written by the launcher\n" + "".join(f"{p.url}\n" for p in procs))
        pool = stack.enter_context(ServerPool(server_list, **FAST))
        collector = stack.enter_context(GroupCollector(pool, max_retries=2))
        template = JobRequest(
            handler=HANDLER_PATH, instance={"sleep": {str(k): 0.4 for k in range(4)}}
        )
        collector.submit_groups(GroupSpec(f"q{i}", template, 4) for i in range(15))

        groups = []
        victim = procs[1]
        for group in collector.groups(timeout_s=60):
            groups.append(group)
            if len(groups) == 2:
                # Read before the kill: the pool may notice the death while `kill` still reaps.
                killed_at = time.monotonic()
                victim.kill()  # SIGKILL mid-batch: its queued and running jobs are lost with it

        failovers = pool.failovers
        stats = collector.stats.as_dict()

    assert len(groups) == 15 and all(g.valid for g in groups)
    assert sorted(g.group_id for g in groups) == sorted(f"q{i}" for i in range(15))
    assert all(len(g.trajectories) == 4 for g in groups)
    assert [f.url for f in failovers] == [victim.url]
    assert failovers[0].jobs > 0 and failovers[0].resubmitted_at is not None
    assert failovers[0].noticed_at >= killed_at
    assert stats["groups_valid"] == 15 and stats["groups_invalid"] == 0
