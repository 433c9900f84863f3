"""Gauges read from the live server at scrape time (see `metrics.ServerMetrics.watch`)."""

from collections import Counter
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from agentroll.server.jobs import JobService
from agentroll.server.metrics import gauge
from agentroll.server.state import ServerState


def live_gauges(state: ServerState, jobs: JobService) -> Iterator[Metric]:
    p = jobs.pipeline
    queue = gauge("agentroll_stage_queue_depth", "Jobs waiting for a stage worker.", ["stage"])
    busy = gauge("agentroll_stage_busy_workers", "Stage workers holding a job.", ["stage"])
    workers = gauge("agentroll_stage_workers", "Configured stage workers.", ["stage"])
    waiting_init = p.ready.queued + p.init.queued
    for stage, limiter, waiting in (
        ("init", p.init, waiting_init),
        ("run", p.run, p.run.queued),
        ("eval", p.eval, p.eval.queued),
    ):
        queue.add_metric([stage], waiting)
        busy.add_metric([stage], limiter.busy)
        workers.add_metric([stage], limiter.capacity)
    yield from (queue, busy, workers)

    states = Counter(j.state.value for j in jobs.live.values())
    live = gauge("agentroll_jobs_live", "Unfinished jobs by state.", ["state"])
    for job_state, count in sorted(states.items()):
        live.add_metric([job_state], count)
    yield live

    in_flight = gauge("agentroll_backend_in_flight", "Calls in flight per backend.", ["backend"])
    healthy = gauge(
        "agentroll_backend_healthy", "1 if the backend passes health checks.", ["backend"]
    )
    for backend in state.backends.all():
        in_flight.add_metric([backend.id], backend.in_flight)
        healthy.add_metric([backend.id], 1.0 if backend.routable else 0.0)
    yield from (in_flight, healthy)

    version = gauge("agentroll_policy_version", "Policy version now stamped on new tokens.")
    gate = state.policies.default.gate
    version.add_metric([], gate.policy_version)
    paused = gauge("agentroll_generation_paused", "1 while generation is paused.")
    paused.add_metric([], 1.0 if gate.paused else 0.0)
    accepting = gauge("agentroll_accepting_jobs", "1 while submissions are admitted.")
    accepting.add_metric([], 1.0 if jobs.accepting else 0.0)
    yield from (version, paused, accepting)
    yield from _per_policy(state)

    held = gauge("agentroll_admission_waiting", "Jobs held back from INIT, by reason.", ["reason"])
    for reason in ("memory", "pids", "cpu"):
        held.add_metric([reason], state.admission.waiting.get(reason, 0))
    node = state.admission.reading
    pressure = gauge("agentroll_node_cpu_pressure", "% of the time tasks waited for a CPU.")
    pressure.add_metric([], state.admission.cpu_pressure)
    available = gauge("agentroll_node_memory_available_bytes", "Memory available on the node.")
    available.add_metric([], node.memory_available)
    live = gauge("agentroll_admission_live", "Jobs admitted to INIT and not yet finished.")
    live.add_metric([], p.live)
    limit = gauge("agentroll_admission_live_limit", "Live jobs the node has room for (measured).")
    limit.add_metric([], state.admission.live_limit)
    yield from (held, pressure, available, live, limit)

    sandboxes = gauge("agentroll_sandboxes_active", "Sandboxes this server owns now.")
    sandboxes.add_metric([], len(getattr(state.runtime, "live", ())))
    yield sandboxes


def _per_policy(state: ServerState) -> Iterator[Metric]:
    """Each policy's pool, so that the agent whose backends are the bottleneck shows."""
    labels = ["policy"]
    in_flight = gauge("agentroll_policy_in_flight", "Generation calls in flight.", labels)
    queued = gauge("agentroll_policy_queued", "Generation calls held back by a pause.", labels)
    paused = gauge("agentroll_policy_paused", "1 while the policy's generation is paused.", labels)
    version = gauge("agentroll_policy_current_version", "The policy's version now.", labels)
    tokens = CounterMetricFamily(
        "agentroll_policy_tokens",
        "Tokens sent to and sampled from its backends.",
        labels=[*labels, "kind"],
    )
    for name, policy in state.policies.statuses(state.backends.all()).items():
        in_flight.add_metric([name], policy.in_flight)
        queued.add_metric([name], policy.queued)
        paused.add_metric([name], 1.0 if policy.paused else 0.0)
        version.add_metric([name], policy.policy_version)
        tokens.add_metric([name, "prompt"], policy.prompt_tokens)
        tokens.add_metric([name, "completion"], policy.completion_tokens)
    yield from (in_flight, queued, paused, version, tokens)
