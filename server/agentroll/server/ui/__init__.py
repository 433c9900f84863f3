"""The rollout viewer: server-rendered pages under `/ui` over the result database, inside a
live server or over a stored database (`agentroll view`)."""

from agentroll.server.ui.routes import router
from agentroll.server.ui.viewer import Viewer

__all__ = ["Viewer", "router"]
