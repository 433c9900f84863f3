"""Saturation: offered load at 1x, 2x and 4x what the node can serve, sandboxed rollouts.

First a closed-loop calibration measures what this node serves (rollouts/min with the mix of
`rollout_mix.py`: swe, code, math with a Python tool, stem). Then, per level, jobs arrive
open-loop at that rate times the level for `--seconds`, and the run drains. Per level:
rollouts/min, the share of `infra_error` (target 0: a saturated node queues, it never fails
rollouts), p50/p99 rollout time (submission to result), the time jobs waited at admission
(INIT queue time), and the first python call in RUN against a later one of the same rollout
under the same load (target <= 2x: the kernel started during INIT, its start-up reported
apart). Those come from probe rollouts (`python_probe.py`, one arrival in `PROBE_EVERY`): a
sandbox warmed like the tool-using handlers', then python calls a simulated LLM turn apart.
The math rollouts' one python call is reported beside them.
"""

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import report
from rollout_mix import jobs

from agentroll.server.launch import agentroll_process
from agentroll.server.schema import Outcome, Trajectory
from agentroll.trainer_clients import RolloutClient

CALIBRATION_ROLLOUTS = 48
PROBE_EVERY = 8
PROBE_HANDLER = "python_probe:PythonProbe"
BENCHMARKS = Path(__file__).resolve().parent


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def _pct(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100)[q - 1]


def drain(client: RolloutClient, expected: int, cursor: int) -> tuple[list[Trajectory], int]:
    results: list[Trajectory] = []
    while len(results) < expected:
        page = client.results(after=cursor, limit=1000, wait=5)
        results += page.results
        cursor = page.next_cursor
    return results, cursor


def calibrate(client: RolloutClient) -> float:
    """Rollouts per second this node serves with every job offered at once."""
    began = time.perf_counter()
    client.submit(jobs(CALIBRATION_ROLLOUTS, "calibrate"))
    drain(client, CALIBRATION_ROLLOUTS, 0)
    return CALIBRATION_ROLLOUTS / (time.perf_counter() - began)


def offer(client: RolloutClient, rate: float, seconds: float, tag: str) -> dict[str, float]:
    """Open-loop arrivals at `rate` per second for `seconds`, then drain; its figures."""
    cursor = client.status().results_cursor
    began = time.perf_counter()
    batch = jobs(int(rate * seconds) + 1, tag)
    for i in range(0, len(batch), PROBE_EVERY):
        batch[i] = {"job_id": f"{tag}-probe-{i}", "handler": PROBE_HANDLER, "instance": {}}
    for i, job in enumerate(batch):
        time.sleep(max(0.0, began + i / rate - time.perf_counter()))
        client.submit([job])
    results, _ = drain(client, len(batch), cursor)
    elapsed = time.perf_counter() - began
    return figures(results, elapsed)


def figures(results: list[Trajectory], elapsed: float) -> dict[str, float]:
    outcomes = Counter(t.outcome for t in results)
    totals = [t.timing.total_s for t in results]
    admission = [t.timing.init.queue_s for t in results if t.timing.init is not None]
    # A math rollout makes one python call, then `submit`, which answers in-process in
    # microseconds: its tool time is its python call's.
    math_python = [
        1000 * t.timing.tool_s for t in results if t.handler == "math" and t.timing.tool_calls
    ]
    probes = [t.reward_info["python_ms"] for t in results if t.handler == PROBE_HANDLER]
    first = [calls[0] for calls in probes]
    later = [ms for calls in probes for ms in calls[1:]]
    startup = [
        1000 * t.timing.tool_startup_s
        for t in results
        if t.handler in ("math", PROBE_HANDLER) and t.timing.tool_startup_s
    ]
    return {
        "kernel_startup_ms": _median(startup),
        "rollouts_per_min": 60 * len(results) / elapsed,
        "infra_error_share": outcomes.get(Outcome.infra_error, 0) / max(len(results), 1),
        "infra_errors": outcomes.get(Outcome.infra_error, 0),
        "rollouts": len(results),
        "p50_s": _pct(totals, 50),
        "p99_s": _pct(totals, 99),
        "admission_p50_s": _pct(admission, 50),
        "admission_p99_s": _pct(admission, 99),
        "math_python_ms": _median(math_python),
        "first_python_ms": _median(first),
        "later_python_ms": _median(later),
        "probes": len(probes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="arrivals per level")
    parser.add_argument("--levels", default="1,2,4", help="offered load, times capacity")
    parser.add_argument("--latency-s", type=float, default=0.2, help="per generation call")
    args = parser.parse_args()
    levels = [float(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory(prefix="agentroll-saturation-") as tmp:
        work = Path(tmp)
        llm_args = ["scripted-llm", "--port", "0", "--latency-s", str(args.latency_s)]
        serve_args = ["serve", "--port", "0", "--db", str(work / "agentroll.db")]
        env = {
            "AGENTROLL_POOLS__RUN": "512",
            "AGENTROLL_POOLS__INIT": "64",
            "PYTHONPATH": str(BENCHMARKS),  # where the server finds the probe handler
        }
        with (
            agentroll_process(llm_args, work, "llm", nice=10) as llm,
            agentroll_process(serve_args, work, "server", env=env) as server,
        ):
            client = RolloutClient(server.url, token=server.token, timeout_s=120)
            client.add_backend({"id": "scripted", "base_url": llm.url})
            capacity = calibrate(client)
            print(f"node capacity: {60 * capacity:.0f} rollouts/min (closed loop)")
            for level in levels:
                got = offer(client, capacity * level, args.seconds, f"x{level:g}")
                print(f"\noffered {level:g}x ({60 * capacity * level:.0f}/min):")
                report("rollouts/min", got["rollouts_per_min"], "/min", "-", True)
                report(
                    "infra_error share", 100 * got["infra_error_share"], "%", "0",
                    got["infra_errors"] == 0,
                )  # fmt: skip
                report("rollouts", got["rollouts"], "", "-", True)
                report("p50 rollout time", got["p50_s"], "s", "-", True)
                report("p99 rollout time", got["p99_s"], "s", "-", True)
                report("admission wait p50", got["admission_p50_s"], "s", "-", True)
                report("admission wait p99", got["admission_p99_s"], "s", "-", True)
                report("python kernel start-up, in INIT (median)", got["kernel_startup_ms"],
                       "ms", "-", True)  # fmt: skip
                report("math rollouts' python call (median)", got["math_python_ms"], "ms",
                       "-", True)  # fmt: skip
                first, later = got["first_python_ms"], got["later_python_ms"]
                print(f"  probe rollouts: {got['probes']:g}")
                report("later python calls, probes (median)", later, "ms", "-", True)
                report(
                    "first python call, probes (median)", first, "ms", f"<= {2 * later:.1f} ms",
                    first <= 2 * later,
                )  # fmt: skip
            client.close()


if __name__ == "__main__":
    main()
