"""`RecordedTokens`: the token stream a trajectory is built from, whoever recorded it.

A handler's own `TokenSession` records one, and so does a harness's LLM proxy (its main chain,
`proxy.recording.ProxyTrajectory`); `results.build_trajectory` reads nothing else of either.
"""

from collections.abc import Mapping, Sequence
from typing import Protocol

from agentroll.handlers import Message
from agentroll.server.schema import RoutedExperts, Segment


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
    def messages(self) -> Sequence[Message]: ...
    @property
    def tools(self) -> Sequence[Message]: ...
    @property
    def llm_s(self) -> float: ...
    @property
    def llm_calls(self) -> int: ...
    @property
    def retries(self) -> Sequence[Mapping[str, str]]: ...
    @property
    def routed_experts(self) -> RoutedExperts | None: ...
