"""The errors of the image builder, re-exported from `agentroll.runtime.errors` (their one home,
where the module docstring draws the whole tree)."""

from __future__ import annotations

from agentroll.runtime.errors import (
    BaseImageMissing,  # noqa: F401 (re-exported: its old import path)
    BuilderUnavailable,  # noqa: F401 (re-exported: its old import path)
    BuildFailed,  # noqa: F401 (re-exported: its old import path)
    BuildTimeout,  # noqa: F401 (re-exported: its old import path)
    ImageError,  # noqa: F401 (re-exported: its old import path)
    TemplateError,  # noqa: F401 (re-exported: its old import path)
    TemplateNotFound,  # noqa: F401 (re-exported: its old import path)
)
