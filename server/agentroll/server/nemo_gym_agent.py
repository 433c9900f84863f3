"""agentroll as one of NeMo Gym's agents: `POST /run` takes a dataset row, runs it as an
agentroll job and answers the verify response NeMo RL trains on.

A small front of its own (`agentroll nemo-gym-agent`), listed in NeMo Gym's config as an
agent server: NeMo Gym's client sends no agentroll token and calls `/run` at the root of the
agent's address, so the front holds the token and speaks to agentroll's API as any trainer
client does. The row's fields other than `agent_ref` and `responses_create_params` are the
job's instance; its `responses_create_params` give the sampling.

Outcomes become what NeMo RL's retry policy reads from the HTTP status
(`nemo_rl/experience/failures.py`, `http_status_is_infra`: 5xx is infrastructure, retried;
another 4xx is the row's own fault): a scored rollout is 200 with its reward, an
`infra_error` 502, a `timed_out` 504 and a `cancelled` 503, never a 200 with reward 0; a
row agentroll refuses is 422, as is a scored rollout with no generation turn (NeMo RL has
nothing to train on in it). Mapping: docs/trainers_out.md.
"""

import argparse
import uuid
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from agentroll.server.front_guard import ALLOW_FLAG, require_loopback
from agentroll.server.schema import Outcome, Trajectory
from agentroll.trainer_clients import AsyncRolloutClient
from agentroll.trainer_clients.errors import ApiError, InvalidRequest
from agentroll.trainer_clients.exports.nemo_gym import (
    instance_from,
    sampling_from,
    verify_response,
)
from agentroll.trainer_clients.exports.turns import token_turns

UNSCORED_STATUS = {Outcome.infra_error: 502, Outcome.timed_out: 504, Outcome.cancelled: 503}


def _error(status: int, kind: str, message: str, job_id: str | None = None) -> JSONResponse:
    body = {"error": {"type": kind, "message": message}, "job_id": job_id}
    return JSONResponse(body, status_code=status)


def _answer(trajectory: Trajectory, row: dict[str, Any], model: str) -> JSONResponse:
    job_id = trajectory.job_id
    if trajectory.outcome in UNSCORED_STATUS:
        cause = trajectory.error.type if trajectory.error else trajectory.outcome.value
        message = trajectory.error.message if trajectory.error else "no reward"
        return _error(UNSCORED_STATUS[trajectory.outcome], cause, message, job_id)
    if not token_turns(trajectory):
        why = f"the rollout ended {trajectory.outcome.value} before any generation"
        return _error(422, "no_generation", why, job_id)
    return JSONResponse(verify_response(trajectory, row, model))


def create_agent_app(
    client: AsyncRolloutClient,
    *,
    handler: str,
    model: str = "policy",
    timeout_s: float = 3600.0,
    job_prefix: str = "nemo-gym",
) -> FastAPI:
    """The front's app; `client` is its agentroll server's (closed by the caller)."""
    app = FastAPI(title="agentroll as a NeMo Gym agent")

    @app.post("/run")
    async def run(row: dict[str, Any]) -> JSONResponse:
        params = row.get("responses_create_params")
        if not isinstance(params, dict):
            return _error(422, "invalid_row", "the row has no responses_create_params object")
        job_id = f"{job_prefix}-{uuid.uuid4().hex}"
        try:
            job = {
                "job_id": job_id,
                "handler": handler,
                "instance": instance_from(row),
                "sampling": sampling_from(params).model_dump(),
            }
            await client.submit([job])
        except (InvalidRequest, ValueError) as exc:
            return _error(422, "invalid_row", str(exc), job_id)
        except (ApiError, ConnectionError) as exc:
            return _error(502, "agentroll_unavailable", str(exc), job_id)
        try:
            done = await client.wait_for([job_id], timeout_s)
        except TimeoutError:
            await client.cancel(job_id)
            return _error(504, "timed_out", f"no result within {timeout_s:.0f} s", job_id)
        except (ApiError, ConnectionError) as exc:
            return _error(502, "agentroll_unavailable", str(exc), job_id)
        return _answer(done[job_id], row, model)

    return app


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--server", required=True, help="the agentroll server's URL")
    parser.add_argument("--token-file", type=Path, help="its API token (default: as clients do)")
    parser.add_argument("--handler", required=True, help="the handler every row runs under")
    parser.add_argument("--model", default="policy", help="the model name answers carry")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait per row")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8010)
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    parser.add_argument("--url-file", type=Path, help="write the agent's URL here once bound")
    parser.add_argument(
        ALLOW_FLAG, action="store_true", help="listen beyond loopback (no authentication)"
    )


def run_cli(args: argparse.Namespace) -> int:
    from agentroll.server.serving import serve_forever

    require_loopback(args.host, args.allow_remote, "nemo-gym-agent")
    client = AsyncRolloutClient(args.server, token_file=args.token_file)
    app = create_agent_app(client, handler=args.handler, model=args.model, timeout_s=args.timeout)
    serve_forever(app, args.host, args.port, log_level=args.log_level, url_file=args.url_file)
    return 0
