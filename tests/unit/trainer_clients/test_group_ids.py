"""Deterministic sample ids and the launcher's server-list file."""

from pathlib import Path

import pytest

from agentroll.server.schema import JobRequest
from agentroll.trainer_clients import GroupSpec, read_server_list, sample_job_id


def test_sample_ids_are_deterministic_and_stay_valid_identifiers() -> None:
    assert sample_job_id("q17", 3, 1) == "q17-s3-r1"
    long_id = "x" * 128
    made = sample_job_id(long_id, 12, 2)
    assert len(made) == 128 and made.endswith("-s12-r2")
    assert made == sample_job_id(long_id, 12, 2) != sample_job_id("y" * 128, 12, 2)
    JobRequest(job_id=made, handler="h", instance={})  # accepted by the server's pattern


def test_each_sample_gets_its_own_seed_and_a_retry_keeps_it() -> None:
    spec = GroupSpec("g", JobRequest(handler="h", instance={}, sampling={"seed": 100}), 4)
    first, retry = spec.sample(2, 0), spec.sample(2, 1)
    assert (first.job_id, first.group_id, first.sampling.seed) == ("g-s2-r0", "g", 102)
    assert (retry.job_id, retry.sampling.seed) == ("g-s2-r1", 102)
    unseeded = GroupSpec("g", JobRequest(handler="h", instance={}), 2)
    assert unseeded.sample(1, 0).sampling.seed is None


def test_server_list_file_skips_comments_blanks_and_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "servers.txt"
    path.write_text("# job 42\nhttp://n1:8700/\n\nhttp://n2:8700  # node 2\nhttp://n1:8700\n")
    assert read_server_list(path) == ["http://n1:8700", "http://n2:8700"]
    path.write_text("# nothing yet\n")
    with pytest.raises(ValueError, match="no server URL"):
        read_server_list(path)
