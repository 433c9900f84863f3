"""The `llm_judge` task family: free-form answers scored by a judge model (`handler`),
asked and read by `judge_prompt`."""

from agentroll.handlers.builtin.llm_judge.handler import LLMJudgeHandler, LLMJudgeInstance

__all__ = ["LLMJudgeHandler", "LLMJudgeInstance"]
