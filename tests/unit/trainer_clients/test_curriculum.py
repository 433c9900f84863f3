"""Per-task pass rates persisted across restarts, and a seeded sampler weighting tasks by
difficulty band."""

import json
from collections import Counter
from pathlib import Path

import pytest

from agentroll.server.schema import JobRequest, Outcome, Trajectory
from agentroll.trainer_clients import Band, CurriculumSampler, Group, PassRates

TASKS = ["never", "learning", "always", "unseen"]


def recorded(path: Path) -> PassRates:
    rates = PassRates(path)
    rates.record("never", [0.0, 0.0, 0.0, 0.0])
    rates.record("learning", [1.0, 0.0, 0.0, 1.0])
    rates.record("always", [1.0, 1.0])
    rates.record("always", [1.0, 1.0])
    return rates


def test_pass_rates_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "run" / "pass_rates.json"
    recorded(path)
    again = PassRates(path)  # a new trainer process reads what the last one wrote
    assert again.get("learning") is not None and again.get("learning").pass_rate == 0.5
    assert again.get("always").samples == 4 and again.get("always").pass_rate == 1.0
    assert again.get("never").pass_rate == 0.0 and again.get("unseen") is None
    assert [p.name for p in path.parent.iterdir()] == ["pass_rates.json"]  # no temp file left
    assert json.loads(path.read_text())["format"] == "agentroll.pass_rates.v1"


def test_a_file_recorded_under_other_settings_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "rates.json"
    recorded(path)
    with pytest.raises(ValueError, match="recorded with"):
        PassRates(path, pass_threshold=0.5)
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a pass-rate file"):
        PassRates(tmp_path / "other.json")


def test_decay_lets_the_rate_follow_an_improving_policy(tmp_path: Path) -> None:
    rates = PassRates(tmp_path / "rates.json", decay=0.5)
    rates.record("t", [0.0] * 8)
    rates.record("t", [1.0] * 8)  # old counts halved: 8 passed of 12
    assert rates.get("t").pass_rate == pytest.approx(8 / 12)


def test_partial_rewards_pass_only_at_the_threshold(tmp_path: Path) -> None:
    rates = PassRates(tmp_path / "rates.json", pass_threshold=0.8)
    rates.record("t", [0.79, 0.8, 1.0, 0.0])
    assert rates.get("t").pass_rate == 0.5


def group(group_id: str, rewards: list[float], *, valid: bool = True, task: str | None = "t"):
    trajectories = [
        Trajectory(
            job_id=f"{group_id}-s{k}", handler="h", outcome=Outcome.ok, status="completed", reward=r
        )
        for k, r in enumerate(rewards)
    ]
    return Group(group_id, len(rewards), valid, trajectories, task_id=task)


def test_only_valid_groups_are_recorded_and_each_needs_a_task_id(tmp_path: Path) -> None:
    rates = PassRates(tmp_path / "rates.json")
    count = rates.record_groups([group("a", [1, 0]), group("b", [1], valid=False)])
    assert count == 1 and rates.get("t").samples == 2  # the invalid group's finisher left out
    with pytest.raises(ValueError, match="group c has no task_id"):
        rates.record_groups([group("c", [1, 0], task=None)])


def test_the_sampler_weights_tasks_by_band_and_unseen_ones_neutrally(tmp_path: Path) -> None:
    curriculum = CurriculumSampler(recorded(tmp_path / "rates.json"), TASKS, seed=1)
    assert [curriculum.weight(t) for t in TASKS] == [0.25, 1.0, 0.1, 1.0]
    drawn = Counter(curriculum.sample(23_500))
    total = 0.25 + 1.0 + 0.1 + 1.0
    for task, weight in zip(TASKS, [0.25, 1.0, 0.1, 1.0], strict=True):
        assert drawn[task] / 23_500 == pytest.approx(weight / total, abs=0.015), drawn


def test_the_same_seed_over_the_same_records_draws_the_same_tasks(tmp_path: Path) -> None:
    rates = recorded(tmp_path / "rates.json")
    one, two = (CurriculumSampler(rates, TASKS, seed=7).sample(50) for _ in range(2))
    other = CurriculumSampler(rates, TASKS, seed=8).sample(50)
    assert one == two and one != other


def test_custom_bands_and_the_samples_a_task_needs_before_it_is_judged(tmp_path: Path) -> None:
    rates = recorded(tmp_path / "rates.json")
    only_hard = [Band(0.0, 0.6, 1.0), Band(0.6, 1.0, 0.0)]
    curriculum = CurriculumSampler(rates, TASKS, bands=only_hard, min_samples=4, seed=0)
    assert set(curriculum.sample(200)) == {"never", "learning", "unseen"}  # never "always"
    assert CurriculumSampler(rates, TASKS, min_samples=5).weight("never") == 1.0  # 4 < 5
    gap = CurriculumSampler(rates, TASKS, bands=[Band(0.0, 0.4, 1.0)])
    with pytest.raises(ValueError, match=r"pass rate 0\.500 is in no band"):
        gap.weight("learning")
    with pytest.raises(ValueError, match="distinct"):
        CurriculumSampler(rates, ["a", "a"])


def test_the_stream_draws_with_the_weights_of_the_moment(tmp_path: Path) -> None:
    rates = PassRates(tmp_path / "rates.json")
    curriculum = CurriculumSampler(rates, ["x", "y"], bands=[Band(0, 0.5, 1.0), Band(0.5, 1, 0)])
    template = JobRequest(handler="h", instance={})
    stream = curriculum.stream(
        lambda task: template.model_copy(update={"metadata": {"t": task}}), n=4, id_prefix="step0-"
    )
    first = next(stream)
    assert first.group_id == "step0-0" and first.n == 4 and first.task_id in ("x", "y")
    assert first.request.metadata == {"t": first.task_id}
    rates.record("x", [1.0])  # x is solved now: weight 0 from the next draw on
    assert {next(stream).task_id for _ in range(30)} == {"y"}
