"""The `compaction` rule: the title and the summary the compacting scripted harness asks for."""

import random

from agentroll.testing.scripted_llm import Conversation, RuleContext
from agentroll.testing.scripted_llm.rules.compaction import (
    SUMMARY_REQUEST,
    TITLE,
    TITLE_REQUEST,
    compaction_rule,
)
from agentroll.testing.scripted_llm.template import ChatMessage

CTX = RuleContext(random.Random(0), 0.0)


def conv(*turns: tuple[str, str]) -> Conversation:
    return Conversation(tuple(ChatMessage(role, text) for role, text in turns), "")


def test_a_summary_request_is_answered_with_every_earlier_reply_in_order() -> None:
    history = conv(
        ("system", "You repeat things."),
        ("user", "Repeat after me: one"),
        ("assistant", "one"),
        ("user", "Repeat after me: two"),
        ("assistant", "two"),
        ("user", SUMMARY_REQUEST),
    )
    reply = compaction_rule(history, CTX)
    assert reply is not None and reply.text == "I repeated: one two" and reply.ends_turn


def test_a_title_request_gets_the_title_and_anything_else_is_left_to_other_rules() -> None:
    reply = compaction_rule(conv(("user", f"{TITLE_REQUEST} sum 1..20")), CTX)
    assert reply is not None and reply.text == TITLE
    assert compaction_rule(conv(("user", "Repeat after me: one")), CTX) is None
    assert compaction_rule(conv(), CTX) is None
