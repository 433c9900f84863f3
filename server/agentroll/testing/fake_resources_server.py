"""A test double of a NeMo Gym resources server: the seed / verify / close protocol, cookie
included, with every way a real one can fail on demand.

    POST /seed_session   a dataset row -> `{}` and a signed session cookie
    POST /verify         row + "response" (an OpenAI Responses object), with the cookie
    POST /close_session  with the cookie (absent with `close_route=False`, as in NeMo Gym's
                         base server, so clients see 404)
    GET  /fake/log       test-double extension: every session and refused call

The cookie is `<session id>.<HMAC-SHA256 of it>` under a secret made at start-up; `/verify`
and `/close_session` answer 401 without a valid cookie of a seeded, open session, and
`/verify` answers 422 unless the body carries `responses_create_params` and a
well-formed `response`. A verified answer echoes its request, as NeMo Gym's does.

Grading: reward 1.0 when the text of the response's last message, stripped, equals the row's
`expected_answer`, else 0.0. The row's `fake` field picks a behaviour instead:

| `fake` | `/verify` answers |
|---|---|
| (absent) | the grade |
| `mask` | the grade, `mask_sample: true` |
| `policy_failure` | 0.0, `failure_kind: "format_error"`, a `failure_reason` |
| `judge_failed` | 0.0, `_ng_failure_class: "judge_failed"` (NeMo Gym's failed-judge row) |
| `infra_kind` | 0.0, `failure_kind: "environment_error"` |
| `gold_error` | 0.0, `failure_reason: "gold_execution_error"` |
| `nan` / `no_reward` / `string_reward` | reward NaN / no reward / `"1.0"` |
| `not_json` / `status_500` / `huge` | an HTML page / HTTP 500 / an 8 MiB JSON answer |
| `hang` / `drip` | nothing, / one byte every 0.2 s, until the client gives up |
| `seed_500` | (`/seed_session` answers HTTP 500) |

`hang` and `drip` end when the server begins to shut down.

An answer whose last message is `fake:<behaviour>` (one of `ANSWER_BEHAVIOURS`) plays it on
`/verify` instead, for that answer only: the policy's work hanging or crashing a verifier that
grades every other answer.
"""

import asyncio
import hashlib
import hmac
import json
import math
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

from fastapi import FastAPI, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

COOKIE = "FakeResourcesServer___fake"
OUTPUT_TYPES = frozenset({"message", "function_call", "function_call_output"})
DRIP_BYTES = 3000
BROKEN = ("hang", "drip", "not_json", "status_500", "huge")
ANSWER_BEHAVIOURS = frozenset({*BROKEN, "nan", "no_reward", "judge_failed"})


@dataclass
class Session:
    id: str
    row: dict[str, Any]
    verified: bool = False
    closed: bool = False


class FakeResourcesServer:
    def __init__(self, *, close_route: bool = True) -> None:
        self.secret = secrets.token_bytes(32)
        self.close_route = close_route
        self.sessions: dict[str, Session] = {}
        self.refused: list[str] = []
        """`path: why` for every call refused for its cookie or its body."""
        self.released = asyncio.Event()

    def sign(self, session_id: str) -> str:
        mac = hmac.new(self.secret, session_id.encode(), hashlib.sha256).hexdigest()
        return f"{session_id}.{mac}"

    def session_of(self, request: Request) -> Session | None:
        session_id, _, mac = request.cookies.get(COOKIE, "").partition(".")
        if not hmac.compare_digest(self.sign(session_id), f"{session_id}.{mac}"):
            return None
        session = self.sessions.get(session_id)
        return session if session is not None and not session.closed else None

    def refuse(self, path: str, status: int, why: str) -> Response:
        self.refused.append(f"{path}: {why}")
        return JSONResponse({"detail": why}, status_code=status)

    def log(self) -> dict[str, Any]:
        return {"sessions": [asdict(s) for s in self.sessions.values()], "refused": self.refused}


def _response_problem(response: Any) -> str | None:
    """Why `response` is not a Responses object NeMo Gym would accept (None: it is)."""
    if not isinstance(response, dict) or response.get("object") != "response":
        return "response is not a Responses object"
    for field in ("id", "created_at", "model", "output", "tool_choice", "tools"):
        if field not in response:
            return f"response.{field} is missing"
    for item in response["output"]:
        if not isinstance(item, dict) or item.get("type") not in OUTPUT_TYPES:
            return f"unknown output item {item!r:.80}"
        if item["type"] == "message" and not all(
            part.get("type") == "output_text" and isinstance(part.get("text"), str)
            for part in item.get("content", [])
        ):
            return "a message part is not output_text"
    return None


def last_message_text(response: dict[str, Any]) -> str | None:
    messages = [i for i in response["output"] if i["type"] == "message"]
    if not messages:
        return None
    return "".join(part["text"] for part in messages[-1]["content"])


def graded(body: dict[str, Any]) -> dict[str, Any]:
    row_answer = body.get("expected_answer")
    said = last_message_text(body["response"])
    right = said is not None and row_answer is not None and said.strip() == str(row_answer)
    return {**body, "reward": 1.0 if right else 0.0, "extracted_answer": said}


def misbehaviour(fake: str, body: dict[str, Any]) -> dict[str, Any] | None:
    """A `/verify` answer the row asked for, as JSON; None for the ones that are not JSON."""
    grade = graded(body)
    answers: dict[str, dict[str, Any]] = {
        "mask": {**grade, "mask_sample": True},
        "policy_failure": {
            **body,
            "reward": 0.0,
            "failure_kind": "format_error",
            "failure_reason": "no final answer in the expected format",
        },
        "judge_failed": {
            **body,
            "reward": 0.0,
            "_ng_failure_class": "judge_failed",
            "_ng_failure_judge_error": "ConnectionError: judge unreachable",
        },
        "infra_kind": {**body, "reward": 0.0, "failure_kind": "environment_error"},
        "gold_error": {**body, "reward": 0.0, "failure_reason": "gold_execution_error"},
        "nan": {**body, "reward": math.nan},
        "no_reward": dict(body),
        "string_reward": {**body, "reward": "1.0"},
    }
    return answers.get(fake, grade)


def create_app(fake: FakeResourcesServer | None = None) -> FastAPI:
    fake = fake or FakeResourcesServer()
    app = FastAPI()
    app.state.fake = fake
    app.state.begin_shutdown = fake.released.set

    @app.post("/seed_session")
    async def seed_session(request: Request) -> Response:
        row = json.loads(await request.body())
        if not isinstance(row, dict) or "responses_create_params" not in row:
            return fake.refuse("/seed_session", 422, "the row has no responses_create_params")
        if row.get("fake") == "seed_500":
            return JSONResponse({"detail": "seeding failed"}, status_code=500)
        session = Session(uuid.uuid4().hex, row)
        fake.sessions[session.id] = session
        answer = JSONResponse({})
        answer.set_cookie(COOKIE, fake.sign(session.id), httponly=True, samesite="lax")
        return answer

    @app.post("/verify")
    async def verify(request: Request) -> Response:
        session = fake.session_of(request)
        if session is None:
            return fake.refuse("/verify", 401, "no valid session cookie")
        body = json.loads(await request.body())
        if not isinstance(body, dict) or "responses_create_params" not in body:
            return fake.refuse("/verify", 422, "no responses_create_params")
        problem = _response_problem(body.get("response"))
        if problem is not None:
            return fake.refuse("/verify", 422, problem)
        session.verified = True
        behaviour = str(session.row.get("fake", ""))
        said = (last_message_text(body["response"]) or "").strip()
        if said.startswith("fake:") and said[5:] in ANSWER_BEHAVIOURS:
            behaviour = said[5:]
        if behaviour in BROKEN:
            return await _broken(fake, behaviour)
        return Response(json.dumps(misbehaviour(behaviour, body)), media_type="application/json")

    if fake.close_route:

        @app.post("/close_session")
        async def close_session(request: Request) -> Response:
            session = fake.session_of(request)
            if session is None:
                return fake.refuse("/close_session", 401, "no valid session cookie")
            session.closed = True
            return JSONResponse({})

    @app.get("/fake/log")
    async def log() -> Response:
        return JSONResponse(fake.log())

    return app


async def _broken(fake: FakeResourcesServer, behaviour: str) -> Response:
    if behaviour == "hang":
        await fake.released.wait()
        return JSONResponse({"reward": 1.0})
    if behaviour == "not_json":
        return Response("<html>502 Bad Gateway</html>", media_type="text/html")
    if behaviour == "status_500":
        return JSONResponse({"detail": "verifier crashed"}, status_code=500)
    if behaviour == "huge":
        return Response(b'{"reward": 1.0, "pad": "' + b"x" * (8 << 20) + b'"}')

    async def drip() -> AsyncIterator[bytes]:
        for _ in range(DRIP_BYTES):
            if fake.released.is_set():
                return
            yield b" "
            await asyncio.sleep(0.2)

    return StreamingResponse(drip(), media_type="application/json")
