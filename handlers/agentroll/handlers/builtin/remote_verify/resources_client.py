"""One verification on a NeMo Gym-style resources server: seed, verify, close.

    POST /seed_session   the dataset row              -> a session cookie (Set-Cookie)
    POST /verify         row + "response", the cookie -> {"reward": ..., ...}
    POST /close_session  {}, the cookie               -> best effort

NeMo Gym's servers keep per-rollout state in a signed session cookie that `/seed_session`
sets; it must come back on every later call, so the cookies the seed answer set are sent
back verbatim as a `Cookie` header. Its base resources server has no `/close_session` route:
a 404 or 405 there is "not supported", and closing never changes the verdict.

Everything is bounded: each call by `timeout_s` as a whole (a server that drips bytes
cannot stretch it), each answer body by `MAX_ANSWER_BYTES` plus twice the request (NeMo
Gym's `/verify` echoes its request). Proxy settings from the
environment are ignored. A server that is down, slow, answers an error status, too much or
no JSON object raises `VerifierFailure` (an `InfraError`); `SeedFailure` when it happened
before the server saw the policy's work (the handler then needs no control to blame it).
"""

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httpx

from agentroll.handlers.errors import SeedFailure, VerifierFailure

MAX_ANSWER_BYTES = 1 << 20
CLOSE_TIMEOUT_S = 10.0
MAX_EXCERPT_CHARS = 500


@dataclass(frozen=True, slots=True)
class Verification:
    answer: dict[str, Any]
    """The `/verify` answer, a JSON object."""
    seconds: float
    """Seed to verify answer."""
    session: str
    """How closing went: `closed`, `not_supported`, or `failed: ...`."""


def excerpt(data: bytes | str) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text[:MAX_EXCERPT_CHARS] + ("..." if len(text) > MAX_EXCERPT_CHARS else "")


async def _read_bounded(response: httpx.Response, path: str, limit: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise VerifierFailure(
                f"{path} answered more than {limit} bytes", cause="verifier_answer_too_large"
            )
    return bytes(body)


async def _post(
    http: httpx.AsyncClient, path: str, body: bytes, cookie: str | None, timeout_s: float
) -> tuple[int, bytes, httpx.Cookies]:
    headers = {"Content-Type": "application/json"}
    if cookie:
        headers["Cookie"] = cookie
    limit = MAX_ANSWER_BYTES + 2 * len(body)
    try:
        async with asyncio.timeout(timeout_s) as timer:
            async with http.stream("POST", path, content=body, headers=headers) as response:
                data = await _read_bounded(response, path, limit)
    except TimeoutError as exc:
        if not timer.expired():
            raise
        raise VerifierFailure(
            f"{path} did not answer within {timeout_s:g} s", cause="verifier_timeout"
        ) from exc
    except httpx.TimeoutException as exc:
        raise VerifierFailure(f"{path} timed out: {exc!r}", cause="verifier_timeout") from exc
    except httpx.HTTPError as exc:
        raise VerifierFailure(
            f"{path} could not be reached: {exc!r}", cause="verifier_unreachable"
        ) from exc
    return response.status_code, data, response.cookies


def _ok(status: int, data: bytes, path: str) -> None:
    if not 200 <= status < 300:
        raise VerifierFailure(
            f"{path} answered HTTP {status}: {excerpt(data)}", cause="verifier_http_error"
        )


def _cookie_header(cookies: httpx.Cookies) -> str | None:
    pairs = [f"{cookie.name}={cookie.value}" for cookie in cookies.jar]
    return "; ".join(pairs) or None


async def _close(http: httpx.AsyncClient, cookie: str | None, timeout_s: float) -> str:
    try:
        status, _, _ = await _post(http, "/close_session", b"{}", cookie, timeout_s)
    except VerifierFailure as exc:
        return f"failed: {exc}"
    if status in (404, 405):
        return "not_supported"
    return "closed" if 200 <= status < 300 else f"failed: HTTP {status}"


def encoded(body: Any) -> bytes:
    """A request body, as it is sent. ASCII JSON: text the policy sampled may hold lone
    surrogates, which escaped are still valid JSON and could not be UTF-8 encoded."""
    return json.dumps(body, separators=(",", ":")).encode()


async def verify_remotely(
    url: str, row: dict[str, Any], verify_body: bytes, timeout_s: float
) -> Verification:
    """Seed a session with `row`, post `verify_body` (the row + the policy's `response`,
    `encoded`) to `/verify` in it, close it; the `/verify` answer."""
    started = time.monotonic()
    async with httpx.AsyncClient(
        base_url=url, follow_redirects=False, trust_env=False, timeout=timeout_s
    ) as http:
        try:
            status, data, cookies = await _post(
                http, "/seed_session", encoded(row), None, timeout_s
            )
            _ok(status, data, "/seed_session")
        except VerifierFailure as exc:
            raise SeedFailure(str(exc), cause=exc.cause) from exc
        cookie = _cookie_header(cookies)
        close_timeout = min(timeout_s, CLOSE_TIMEOUT_S)
        try:
            status, data, _ = await _post(http, "/verify", verify_body, cookie, timeout_s)
        except VerifierFailure:  # the server's failure; a cancelled rollout does not wait
            await _close(http, cookie, close_timeout)
            raise
        seconds = time.monotonic() - started
        session = await _close(http, cookie, close_timeout)
    _ok(status, data, "/verify")
    try:
        answer = json.loads(data)
    except ValueError as exc:
        raise VerifierFailure(
            f"/verify answered no JSON: {excerpt(data)}", cause="verifier_bad_answer"
        ) from exc
    if not isinstance(answer, dict):
        raise VerifierFailure(
            f"/verify answered no JSON object: {excerpt(data)}", cause="verifier_bad_answer"
        )
    return Verification(answer, seconds, session)
