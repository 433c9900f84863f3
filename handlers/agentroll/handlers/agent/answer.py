"""The `answer` agent: the policy answers in text, without tools (answer tasks' default).

If its reply holds no answer the task can read (its `final_answer`), it is asked once more
with that answer's `follow_up`, within the job's `max_turns`.
"""

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentroll.handlers.agents import Agent, AgentResult
from agentroll.handlers.context import RolloutContext

if TYPE_CHECKING:
    from agentroll.handlers.agent.handler import ToolAgentHandler

STATE_KEY = "answer"
MAX_FOLLOW_UPS = 1


class AnswerAgent(Agent):
    uses_sandbox = False

    @classmethod
    def from_config(cls, kind: str, config: Mapping[str, Any]) -> "AnswerAgent":
        if config:
            raise ValueError(f"the answer agent takes no settings, got {sorted(config)}")
        return cls()

    async def run(self, ctx: RolloutContext, task: "ToolAgentHandler") -> AgentResult:
        answer = task.final_answer
        await ctx.llm.start(task.plain_messages(ctx))
        turn = await ctx.llm.generate()
        follow_ups = 0
        while (
            answer is not None
            and answer.follow_up is not None
            and answer.read(ctx, turn.text, False) is None
            and turn.finish_reason != "length"
            and follow_ups < MAX_FOLLOW_UPS
            and ctx.llm.num_turns < ctx.limits.max_turns
        ):
            follow_ups += 1
            await ctx.llm.add_messages([{"role": "user", "content": answer.follow_up}])
            turn = await ctx.llm.generate()
        ctx.state[STATE_KEY] = result = AgentResult(turn.text, None, turn.finish_reason)
        return result

    def result(self, ctx: RolloutContext) -> AgentResult:
        result = ctx.state.get(STATE_KEY)
        return result if isinstance(result, AgentResult) else AgentResult()
