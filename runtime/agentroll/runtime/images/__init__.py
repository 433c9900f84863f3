"""Sandbox image builder: Jinja2 templates from ``containers/`` -> rootfs folders or .sif files.

Backends (``MmdebstrapBuilder``, ``ApptainerBuilder``) are imported lazily by
``build_image``; this module only re-exports the light public surface.
"""

from agentroll.runtime.images.base import BuildJob, ImageBackend
from agentroll.runtime.images.builder import (
    BuiltImage,
    build_image,
    list_templates,
    render_template,
)
from agentroll.runtime.images.cache import CacheMode
from agentroll.runtime.images.cli import add_build_image_arguments, run_build_image
from agentroll.runtime.images.errors import (
    BuilderUnavailable,
    BuildFailed,
    BuildTimeout,
    ImageError,
    TemplateError,
    TemplateNotFound,
)
from agentroll.runtime.images.templates import ImageFormat

__all__ = [
    "BuildFailed",
    "BuildJob",
    "BuildTimeout",
    "BuilderUnavailable",
    "BuiltImage",
    "CacheMode",
    "ImageBackend",
    "ImageError",
    "ImageFormat",
    "TemplateError",
    "TemplateNotFound",
    "add_build_image_arguments",
    "build_image",
    "list_templates",
    "render_template",
    "run_build_image",
]
