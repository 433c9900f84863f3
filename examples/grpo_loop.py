"""A minimal asynchronous GRPO loop against agentroll (runnable without a GPU).

    python examples/grpo_loop.py                       # starts a scripted vLLM stand-in and
                                                       # two agentroll servers by itself
    python examples/grpo_loop.py --server-list servers.txt --backend http://gpu1:8001

Each step: keep `--in-flight` groups generating, take `--batch-groups` finished groups,
turn them into a padded batch with GRPO advantages, "train" (your optimizer step goes in
`train_step`), then pause generation on every server, push the new weights (`push_weights`:
your NCCL broadcast / checkpoint reload goes there) and resume with the next policy version.
Groups still in flight keep running across the update; a group with a sample more than
`--max-lag` versions behind the live one when it is handed out is sampled again, whole.

The collector's defaults keep the data unbiased: a group is samples 0..n-1, fixed at
submission, never whichever finished first (in agent tasks slow usually means failing).
`--oversample k` adds k spares that stand in only for samples lost to infra errors (up to k
more rollouts per group, most cancelled); `timed_out` samples are not retried, their group
comes back invalid. What could not be kept is counted in `collector.stats` (`unused_*`).
"""

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from agentroll.server.schema import JobRequest
from agentroll.trainer_clients import Group, GroupCollector, GroupSpec, ServerPool


def math_tasks() -> Iterator[dict[str, Any]]:
    """The bundled math tasks, forever. Replace with your dataset."""
    from agentroll.handlers.builtin.math import load_math_tasks

    return itertools.cycle([t.instance() for t in load_math_tasks()])


def train_step(groups: list[Group], version: int) -> dict[str, float]:
    """Your optimizer step. Here: build the batch and report what a trainer would log."""
    try:
        from agentroll.trainer_clients.adapters import pad_batch
    except ImportError as exc:  # numpy missing: still show the loop
        print(f"  (no batch: {exc})")
        return {"mean_reward": statistics.fmean(r for g in groups for r in g.rewards)}
    batch = pad_batch(groups)
    return {
        "samples": float(batch.input_ids.shape[0]),
        "tokens": float(batch.attention_mask.sum()),
        "trained_tokens": float(batch.loss_mask.sum()),
        "mean_reward": float(batch.rewards.mean()),
        "mean_abs_advantage": float(abs(batch.advantages).mean()),
    }


def push_weights(version: int) -> None:
    """Your weight sync (NCCL broadcast, or a checkpoint the vLLM servers reload)."""
    time.sleep(0.2)
    print(f"  pushed weights for policy version {version}")


def start_local_stack(
    stack: ExitStack, workdir: Path, servers: int
) -> tuple[list[str], str, str | None]:
    """A scripted vLLM stand-in and `servers` agentroll servers as owned subprocesses; their
    URLs, the stand-in's, and the servers' token (one state dir: they share the token)."""
    from agentroll.server.launch import agentroll_process

    llm = stack.enter_context(
        agentroll_process(["scripted-llm", "--port", "0", "--latency-s", "0.05"], workdir, "llm")
    )
    urls, token = [], None
    for i in range(servers):
        db = str(workdir / f"server{i}.db")
        proc = stack.enter_context(
            agentroll_process(["serve", "--port", "0", "--db", db], workdir, f"server{i}")
        )
        urls.append(proc.url)
        token = proc.token
    return urls, llm.url, token


def run(args: argparse.Namespace, urls: list[str] | Path, backends: list[str]) -> int:
    tasks = math_tasks()
    sampling = {"temperature": 1.0, "max_tokens": 256}
    with ServerPool(urls, token=args.token) as pool:
        for i, url in enumerate(backends):
            pool.add_backend({"id": f"vllm-{i}", "base_url": url, "model": args.model})
        print(f"{len(pool.urls)} rollout server(s), {len(backends)} backend(s) registered")
        version = 0
        pool.resume(version, max_policy_lag=args.max_lag)
        with GroupCollector(
            pool, oversample=args.oversample, max_policy_lag=args.max_lag, max_retries=2
        ) as collector:  # selection="by_index" (the default): unbiased groups
            serial = itertools.count()

            def top_up() -> None:
                missing = args.in_flight - collector.pending
                specs = []
                for _ in range(max(0, missing)):
                    request = JobRequest(handler="math", instance=next(tasks), sampling=sampling)
                    specs.append(GroupSpec(f"v{version}-q{next(serial)}", request, args.group_size))
                collector.submit_groups(specs)

            for step in range(args.steps):
                top_up()
                groups: list[Group] = []
                while len(groups) < args.batch_groups:
                    group = collector.next_group(timeout_s=120)
                    if group is None:
                        raise TimeoutError("no group finished in 120 s")
                    if group.valid and not group.zero_variance:
                        groups.append(group)  # zero-variance groups carry no GRPO signal
                    top_up()
                logged = train_step(groups, version)
                print(f"step {step} (policy v{version}): " + ", ".join(
                    f"{k}={v:.3g}" for k, v in logged.items()
                ))  # fmt: skip
                pool.pause("wait", timeout_s=120)  # every server, as one barrier
                version += 1
                push_weights(version)
                pool.resume(version, max_policy_lag=args.max_lag)
                print(f"  collector: {collector.stats.as_dict()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", nargs="*", default=[], help="agentroll server URLs")
    parser.add_argument("--server-list", type=Path, help="file with one server URL per line")
    parser.add_argument("--backend", action="append", default=[], help="vLLM URL to register")
    parser.add_argument("--model", default="policy", help="served model name")
    parser.add_argument("--token", help="agentroll API token")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--batch-groups", type=int, default=4)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument(
        "--oversample", type=int, default=0, help="spares per group, for infra failures only"
    )
    parser.add_argument("--max-lag", type=int, default=1)
    args = parser.parse_args(argv)
    if args.server_list or args.servers:
        return run(args, args.server_list or args.servers, args.backend)
    with tempfile.TemporaryDirectory(prefix="agentroll-grpo-") as tmp, ExitStack() as stack:
        urls, llm_url, args.token = start_local_stack(stack, Path(tmp), servers=2)
        print(f"started a scripted vLLM stand-in at {llm_url} and servers {urls}")
        return run(args, urls, [llm_url, *args.backend])


if __name__ == "__main__":
    sys.exit(main())
