"""What the viewer's tests share: a handler whose turns the scripted echo policy writes, the
scripted backend with its tokenizer on disk, and a small reader of the pages' HTML."""

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from agentroll.handlers import AgentHandler, HandlerRegistry, Reward, RolloutContext
from agentroll.server.serving import RunningServer, start_in_loop
from agentroll.testing.scripted_llm import ScriptedLLMConfig
from agentroll.testing.scripted_llm import create_app as create_scripted_app
from agentroll.testing.scripted_llm.export import export_tokenizer

MARKUP = (
    '</pre></div><script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
    '<svg onload="window.pwned=3"></svg><a href="javascript:window.pwned=4">x</a>'
)
"""What an adversarial policy writes hoping a trainer's browser runs it."""


class EchoTurns(AgentHandler):
    """`turns` turns of the echo policy repeating `say`, each reply described as a tool call
    and answered by a tool output (mask 0); with `hold`, its RUN waits after the first turn
    until the test releases it (a rollout seen mid-run). Its reward is the instance's."""

    name: ClassVar[str] = "echo_turns"
    held: ClassVar[dict[str, asyncio.Event]] = defaultdict(asyncio.Event)

    async def run(self, ctx: RolloutContext) -> None:
        say = str(ctx.instance["say"])
        await ctx.llm.start([{"role": "user", "content": f"Repeat after me: {say}"}])
        for turn_index in range(int(ctx.instance.get("turns", 2))):
            turn = await ctx.llm.generate()
            function = {"name": "shell", "arguments": f'{{"command": "echo {turn.text}"}}'}
            call = {"id": f"c{turn_index}", "type": "function", "function": function}
            ctx.llm.describe_last_reply(
                {"role": "assistant", "content": turn.text, "tool_calls": [call]}
            )
            output = {"role": "tool", "tool_call_id": f"c{turn_index}", "content": turn.text}
            await ctx.llm.add_messages([output])
            if ctx.instance.get("hold") and turn_index == 0:
                await asyncio.wait_for(EchoTurns.held[ctx.job_id].wait(), 120)
                del EchoTurns.held[ctx.job_id]  # released once: a later test's job holds anew

    async def eval(self, ctx: RolloutContext) -> Reward:
        reply = ctx.llm.messages[-2].get("content") if len(ctx.llm.messages) > 1 else ""
        return Reward(float(ctx.instance.get("reward", 1.0)), info={"reply": reply})


def echo_registry() -> HandlerRegistry:
    registry = HandlerRegistry()
    registry.register(EchoTurns)
    return registry


def echo_job(job_id: str, say: str, *, group: str = "g", **instance: Any) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "handler": "echo_turns",
        "group_id": group,
        "instance": {"say": say, **instance},
    }


@asynccontextmanager
async def echo_backend(tokenizer_dir: Path) -> AsyncIterator[tuple[RunningServer, dict[str, Any]]]:
    """The scripted backend (echo policy) and the spec that registers it with its tokenizer."""
    server = await start_in_loop(create_scripted_app(ScriptedLLMConfig(policy=["echo"])))
    spec = {
        "id": "scripted-0",
        "base_url": server.url,
        "tokenizer_path": str(export_tokenizer(tokenizer_dir)),
    }
    try:
        yield server, spec
    finally:
        await server.stop()


class Elements(HTMLParser):
    """Every element of a page: its tag, attributes and the text inside it (nested text
    included), in document order."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.all: list[tuple[str, dict[str, str], list[str]]] = []
        self._open: list[list[str]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        text: list[str] = []
        self.all.append((tag, {k: v or "" for k, v in attrs}, text))
        if tag not in ("meta", "link", "input", "br", "img", "rect"):
            self._open.append(text)

    def handle_endtag(self, tag: str) -> None:
        if self._open and tag not in ("meta", "link", "input", "br", "img", "rect"):
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for text in self._open:
            text.append(data)

    def find(self, tag: str, **attrs: str) -> list[tuple[dict[str, str], str]]:
        """(attributes, text) of each `tag` element whose attributes include `attrs`
        (`class_` matches one of its classes)."""
        wanted_class = attrs.pop("class_", None)
        found = []
        for t, a, text in self.all:
            if t != tag or any(a.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            if wanted_class is not None and wanted_class not in a.get("class", "").split():
                continue
            found.append((a, "".join(text)))
        return found
