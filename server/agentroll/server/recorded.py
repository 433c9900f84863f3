"""`RecordedTokens`: the token stream a trajectory is built from, whoever recorded it.

A handler's own `TokenSession` records one, and so does a harness's LLM proxy (its main chain,
`proxy.recording.ProxyTrajectory`); `Rollout.trajectory` reads nothing else of either.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from agentroll.server.schema import LogprobsInfo, RoutedExperts, Segment


class RecordedTokens(Protocol):
    """Token fields (`Trajectory` invariants hold over them), the conversation, and timing:
    `llm_s` seconds over `llm_calls` generation calls, one `retries` entry
    (`{"backend", "error"}`) per attempt that failed over to another backend; MoE
    `routed_experts` where every generation call returned them."""

    @property
    def prompt_ids(self) -> Sequence[int]: ...
    @property
    def response_ids(self) -> Sequence[int]: ...
    @property
    def response_mask(self) -> Sequence[int]: ...
    @property
    def response_logprobs(self) -> Sequence[float]: ...
    @property
    def segments(self) -> Sequence[Segment]: ...
    @property
    def num_turns(self) -> int: ...
    @property
    def messages(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def tools(self) -> Sequence[Mapping[str, Any]]: ...
    @property
    def llm_s(self) -> float: ...
    @property
    def llm_calls(self) -> int: ...
    @property
    def retries(self) -> Sequence[Mapping[str, str]]: ...
    @property
    def routed_experts(self) -> RoutedExperts | None: ...


def logprobs_info(segments: Sequence[Segment], sampling: Mapping[str, Any]) -> LogprobsInfo | None:
    """What the logprobs are: the backends' common mode (null if unknown or mixed: each
    segment then says its own) and the job's sampling, which every call was sent."""
    if not segments:
        return None
    modes = {s.logprobs_mode for s in segments}
    return LogprobsInfo(
        mode=modes.pop() if len(modes) == 1 else None,
        temperature=sampling.get("temperature", 1.0),
        top_p=sampling.get("top_p", 1.0),
        top_k=sampling.get("top_k", -1),
    )
