"""`agentroll view DB_PATH|URL`: open the rollout viewer."""

import argparse
import secrets
import sys
from pathlib import Path

import httpx


def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="a result database (SQLite file) or a server's URL")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (127.0.0.1)")
    parser.add_argument("--port", type=int, default=8701, help="listen port (8701; 0 = any)")
    parser.add_argument("--url-file", type=Path, help="write the viewer's address here")
    parser.add_argument("--log-level", default="warning", choices=["info", "warning", "error"])


def login_url(base_url: str, token: str) -> str:
    """The address that logs a browser in to a viewer (the token becomes a cookie)."""
    return f"{base_url.rstrip('/')}/ui?token={token}"


def run_view(args: argparse.Namespace) -> int:
    if args.source.startswith(("http://", "https://")):
        return _print_server_viewer(args.source)
    from agentroll.server.serving import serve_forever
    from agentroll.server.ui.app import create_view_app
    from agentroll.server.ui.source import ViewerUnavailable

    token = secrets.token_urlsafe(24)  # this run's only: the pages are not open to all
    try:
        app = create_view_app(Path(args.source), token)
    except ViewerUnavailable as exc:
        print(f"agentroll: error: {exc}", file=sys.stderr)
        return 2

    def announce(url: str) -> None:
        print(f"agentroll viewer (read-only) over {args.source}: {login_url(url, token)}")
        print("Ctrl-C to stop", flush=True)

    serve_forever(
        app,
        args.host,
        args.port,
        log_level=args.log_level,
        url_file=args.url_file,
        announce=announce,
    )
    return 0


def _print_server_viewer(url: str) -> int:
    """A live server serves its own viewer: say where, with the token a client here uses."""
    from agentroll.trainer_clients.auth import resolve_token

    try:
        httpx.get(f"{url.rstrip('/')}/healthz", timeout=10).raise_for_status()
    except httpx.HTTPError as exc:
        print(f"agentroll: error: no agentroll server answers at {url}: {exc}", file=sys.stderr)
        return 2
    token = resolve_token(url)
    if token is None:
        print(
            f"the server's viewer: {url.rstrip('/')}/ui (its API token opens it: "
            "set AGENTROLL_API_TOKEN or AGENTROLL_TOKEN_FILE to have the link made)"
        )
    else:
        print(f"the server's viewer: {login_url(url, token)}")
    return 0
