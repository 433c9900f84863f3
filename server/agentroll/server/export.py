"""`agentroll export`: stored trajectories out of a server's store: as ATIF, as verifiers
episodes (the task's instance from the stored request) or as stored.

Reads the SQLite store read-only (a running server keeps writing beside it undisturbed) and
writes one document per job: to `--out DIR/<job_id>.<format>.json`, or as JSON lines on
standard output.
"""

import argparse
import json
import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from agentroll.server.schema import Trajectory
from agentroll.server.schema.auth import DEFAULT_DB_PATH
from agentroll.server.store import strict_json
from agentroll.trainer_clients.exports import to_atif
from agentroll.trainer_clients.exports.verifiers_episode import to_episode


def _verifiers(raw: str, request: str) -> str:
    trajectory = Trajectory.model_validate_json(raw)
    task = {"type": trajectory.handler, "data": json.loads(request).get("instance", {})}
    return strict_json(to_episode(trajectory, task))


FORMATS: dict[str, Callable[[str, str], str]] = {
    "json": lambda raw, _: raw,  # exactly as stored (and as `GET /v1/results` serves it)
    "atif": lambda raw, _: strict_json(to_atif(Trajectory.model_validate_json(raw))),
    "verifiers": _verifiers,
}

SELECT = "SELECT r.job_id, r.result_json, j.request_json FROM results r JOIN jobs j USING (job_id)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_ids", nargs="*", metavar="JOB_ID", help="jobs to export")
    parser.add_argument("--group", help="every finished job of this group")
    parser.add_argument("--all", action="store_true", help="every stored result")
    parser.add_argument("--format", choices=sorted(FORMATS), default="atif")
    parser.add_argument(
        "--db", type=Path, default=DEFAULT_DB_PATH, help=f"the store (default {DEFAULT_DB_PATH})"
    )
    parser.add_argument(
        "--out", type=Path, help="write DIR/<job_id>.<format>.json (default: JSON lines on stdout)"
    )


def stored_results(
    db_path: Path, job_ids: list[str], group: str | None = None
) -> Iterator[tuple[str, str, str]]:
    """(job_id, result JSON, request JSON) in completion order: the given jobs, a group's, or
    all of them. `ValueError` names any job without a stored result."""
    if not db_path.is_file():
        raise FileNotFoundError(f"no store at {db_path}")
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        if job_ids:
            marks = ",".join("?" * len(job_ids))
            query = f"{SELECT} WHERE r.job_id IN ({marks})"
            rows = db.execute(query + " ORDER BY r.cursor", job_ids).fetchall()
            missing = sorted(set(job_ids) - {job_id for job_id, _, _ in rows})
            if missing:
                raise ValueError(f"no stored result for job(s) {', '.join(missing)}")
        elif group is not None:
            query = f"{SELECT} WHERE j.group_id = ? ORDER BY r.cursor"
            rows = db.execute(query, (group,)).fetchall()
        else:
            rows = db.execute(f"{SELECT} ORDER BY r.cursor").fetchall()
    finally:
        db.close()
    yield from ((str(job_id), str(raw), str(request)) for job_id, raw, request in rows)


def run(args: argparse.Namespace) -> int:
    chosen = sum((bool(args.job_ids), args.group is not None, args.all))
    if chosen != 1:
        raise ValueError("name the jobs to export: JOB_ID..., --group GROUP or --all")
    convert = FORMATS[args.format]
    count = 0
    for job_id, raw, request in stored_results(args.db, args.job_ids, args.group):
        document = convert(raw, request)
        if args.out is None:
            sys.stdout.write(document + "\n")
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{job_id}.{args.format}.json").write_text(document + "\n")
        count += 1
    if count == 0:
        raise ValueError(
            f"no stored results in {args.db}" + (f" for group {args.group}" if args.group else "")
        )
    if args.out is not None:
        print(f"{count} {args.format} document(s) in {args.out}", file=sys.stderr)
    return 0
