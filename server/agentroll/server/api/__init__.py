"""The v1 HTTP API (FastAPI): app factory, routes, error envelope."""

from agentroll.server.api.app import create_app

__all__ = ["create_app"]
