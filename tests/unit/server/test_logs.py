import io
import json
import logging

import pytest

from agentroll.server.logs import ContextFilter, JSONFormatter, TextFormatter, job_id_var, stage_var


def _emit(formatter: logging.Formatter, message: str) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    handler.setFormatter(formatter)
    logger = logging.getLogger("agentroll.test.logs")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.warning(message)
    return stream.getvalue()


@pytest.mark.parametrize("formatter", [TextFormatter(), JSONFormatter()])
def test_job_context_is_on_the_line_and_output_cannot_forge_lines(
    formatter: logging.Formatter,
) -> None:
    job_token, stage_token = job_id_var.set("job-42"), stage_var.set("run")
    try:
        out = _emit(formatter, "tool said: ok\n2026-01-01 ERROR forged \x1b[31mred")
    finally:
        job_id_var.reset(job_token)
        stage_var.reset(stage_token)
    assert out.count("\n") == 1  # one record, one line
    assert "\x1b" not in out and "\\x0a2026" in out and "\\x1b[31m" in out
    if isinstance(formatter, JSONFormatter):
        entry = json.loads(out)
        assert (entry["job_id"], entry["stage"], entry["backend"]) == ("job-42", "run", "-")
    else:
        assert "job=job-42 stage=run backend=-" in out


def test_lines_outside_a_job_say_so() -> None:
    assert "job=- stage=- backend=-" in _emit(TextFormatter(), "starting")
