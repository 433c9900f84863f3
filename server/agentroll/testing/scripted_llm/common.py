"""What both protocol faces share: lenient request models, the app's engine, JSON bodies,
and the weight-version ranges a generation spanned."""

import json
from typing import Any

from fastapi import Request
from pydantic import BaseModel, ConfigDict
from starlette.responses import Response

from agentroll.testing.scripted_llm.engine import Engine, Run


class LenientModel(BaseModel):
    """A request model that ignores unknown fields, as both vLLM and SGLang do."""

    model_config = ConfigDict(extra="ignore")


def engine_of(request: Request) -> Engine:
    """The engine behind the app serving `request`."""
    engine: Engine = request.app.state.engine
    return engine


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(dumps(obj), status_code=status, media_type="application/json")


def version_ranges(engine: Engine, run: Run | None, n: int) -> list[dict[str, Any]]:
    """`n` output tokens split by the weight versions that were live during `run`."""
    marks = run.versions if run else [(engine.weight_version, 0.0)]
    starts = [0] + [min(int(frac * n), n) for _, frac in marks[1:]]
    ends = [*starts[1:], n]
    ranges = [
        {"version": v, "start": a, "end": b}
        for (v, _), a, b in zip(marks, starts, ends, strict=True)
        if b > a
    ]
    return ranges
