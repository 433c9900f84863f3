"""Structured logs: every line carries the job, stage and backend it concerns.

The fields come from context variables set where a job's task enters a stage or calls a
backend (each job runs in its own asyncio task, so they never bleed between jobs). Text
and JSON formats; control characters are escaped in both, so output that came from a
sandbox cannot forge or break log lines.
"""

import json
import logging
import time
from contextvars import ContextVar
from typing import Literal

job_id_var: ContextVar[str] = ContextVar("agentroll_job_id", default="-")
stage_var: ContextVar[str] = ContextVar("agentroll_stage", default="-")
backend_var: ContextVar[str] = ContextVar("agentroll_backend", default="-")

LogFormat = Literal["text", "json"]
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(32), 127]}


def escape(text: str) -> str:
    """Control characters (newlines, ANSI escapes, ...) as visible `\\xNN` sequences."""
    return text.translate(_CONTROL)


class ContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.job_id = job_id_var.get()
        record.stage = stage_var.get()
        record.backend = backend_var.get()
        return True


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)s %(name)s job=%(job_id)s stage=%(stage)s "
            "backend=%(backend)s %(message)s"
        )

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:
        # Tracebacks keep their lines (they come from our code), but nothing else does.
        return super().formatException(ei)  # type: ignore[arg-type]


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "job_id": getattr(record, "job_id", "-"),
            "stage": getattr(record, "stage", "-"),
            "backend": getattr(record, "backend", "-"),
            "message": escape(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(level: str, fmt: LogFormat = "text") -> None:
    """Install one stderr handler on the root logger (replacing earlier ones)."""
    handler = logging.StreamHandler()
    handler.addFilter(ContextFilter())
    handler.setFormatter(JSONFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.Formatter.converter = time.gmtime
