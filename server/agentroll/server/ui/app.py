"""`agentroll view DB`: the viewer's pages alone, read-only over a stored result database.

The pages are guarded like a server's: by a token (given, or generated for this run and
printed in the address to open), and the app has no route that writes.
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from agentroll.server.api.errors import install_error_handlers
from agentroll.server.api.middleware import GuardMiddleware
from agentroll.server.ui import Viewer, router
from agentroll.server.ui.source import open_read_only

MAX_BODY_BYTES = 1024
"""Every route is a GET: no request needs a body."""


def create_view_app(db_path: Path, token: str) -> FastAPI:
    """The viewer over `db_path`; refuses at once if it is not a readable result database."""
    open_read_only(db_path).close()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        viewer = Viewer.over(db_path)
        app.state.viewer = viewer
        try:
            yield
        finally:
            await viewer.reader.close()

    app = FastAPI(
        title="agentroll viewer", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.request_exit = lambda: None
    app.add_middleware(GuardMiddleware, max_body_bytes=MAX_BODY_BYTES, api_token=token)
    install_error_handlers(app)
    app.include_router(router)

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui", status_code=303)

    return app
