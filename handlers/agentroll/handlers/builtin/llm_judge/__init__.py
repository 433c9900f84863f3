"""The `llm_judge` task family: free-form answers scored by a judge model (`handler`),
asked and read by `judge_prompt`."""

from agentroll.handlers.builtin.llm_judge.handler import LLMJudgeHandler, LLMJudgeInstance

HANDLERS = {"llm_judge": "LLMJudgeHandler"}
"""The handler names this family serves (read by `agentroll.handlers.families`)."""

__all__ = ["LLMJudgeHandler", "LLMJudgeInstance"]
