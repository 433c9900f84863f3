"""A trainer that crashed resubmits its jobs stamped with a newer policy version: the server
must find the same jobs (idempotent), not refuse them as conflicts."""

import pytest
from tests.conftest import ServerFactory
from tests.integration.server.scripted_handlers import Gates, job, make_registry

from agentroll.server.fingerprint import request_fingerprint
from agentroll.server.schema import JobRequest
from agentroll.trainer_clients import Conflict

pytestmark = pytest.mark.integration


async def test_a_resubmission_under_a_newer_version_is_the_same_job(
    agentroll_server: ServerFactory,
) -> None:
    async with agentroll_server(registry=make_registry(Gates())) as (_, client):
        first = await client.submit([{**job("a", reward=1.0), "policy_version": 0}])
        assert first[0].created
        await client.wait_for(["a"], 10)
        again = await client.submit([{**job("a", reward=1.0), "policy_version": 3}])
        assert again[0].created is False and again[0].state.value == "completed"
        result = await client.result("a")
        assert result is not None and result.reward == 1.0
        # the version does not excuse a different request: that is still a conflict
        with pytest.raises(Conflict):
            await client.submit([{**job("a", reward=0.0), "policy_version": 3}])


def test_an_agents_version_stamp_is_not_part_of_the_identity_either() -> None:
    base = {"job_id": "m", "handler": "h", "instance": {}}
    one = JobRequest.model_validate({**base, "agents": {"a": {"policy_version": 1}}})
    two = JobRequest.model_validate({**base, "agents": {"a": {"policy_version": 7}}})
    other = JobRequest.model_validate({**base, "agents": {"a": {"trainable": False}}})
    assert request_fingerprint(one) == request_fingerprint(two)
    assert request_fingerprint(one) != request_fingerprint(other)
