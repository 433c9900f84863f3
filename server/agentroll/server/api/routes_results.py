"""Finished results in completion order: the trainer's pull loop, paged or streamed."""

import asyncio
from collections.abc import AsyncIterator

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import StreamingResponse

from agentroll.server.api.deps import Service
from agentroll.server.api.disconnect import ClientGone, unless_disconnected
from agentroll.server.schema import ResultsPage

router = APIRouter(prefix="/v1", tags=["results"])

HEARTBEAT_S = 15.0


@router.get("/results", response_model=ResultsPage)
async def list_results(
    request: Request,
    service: Service,
    after: int = Query(0, ge=0, description="Cursor of the last result already consumed."),
    limit: int = Query(100, ge=1, le=1000),
    wait: float = Query(0.0, ge=0.0, le=600.0, description="Long-poll while nothing is new."),
) -> Response:
    try:
        page = await unless_disconnected(request, service.results_after(after, limit, wait))
    except ClientGone:
        return Response(status_code=499)  # nobody is listening any more
    next_cursor = page[-1][0] if page else after
    # Results are stored as JSON: splice them rather than parse and re-serialise.
    body = '{"results":[' + ",".join(raw for _, raw in page) + f'],"next_cursor":{next_cursor}}}'
    return Response(body, media_type="application/json")


@router.get(
    "/results/stream",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def stream_results(
    request: Request,
    service: Service,
    after: int = Query(0, ge=0),
    last_event_id: str | None = Header(None),
) -> StreamingResponse:
    """Server-sent events, one `result` event per trajectory; the event id is its cursor."""
    cursor = int(last_event_id) if last_event_id and last_event_id.isdigit() else after

    async def events() -> AsyncIterator[str]:
        nonlocal cursor
        while not await request.is_disconnected():
            page = await service.results_after(cursor, 100, HEARTBEAT_S)
            if not page:
                yield ": keep-alive\n\n"
                continue
            for position, raw in page:
                cursor = position
                yield f"id: {position}\nevent: result\ndata: {raw}\n\n"
            await asyncio.sleep(0)

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
