"""ChainBook: which chain a call extends, what it appends, and why chains break."""

from agentroll.server.proxy.chains import ChainBook, Expectation, Piece

CLOSE = [90, 91]  # e.g. `<|im_end|>`, `\n`


def piece(ids: list[int], version: int = 0, finish: str = "stop") -> Piece:
    return Piece(ids, [-0.5] * len(ids), "b0", version, finish)


def start(book: ChainBook, call: int, prompt: list[int], sampled: list[int]) -> None:
    placement = book.place(call, prompt, [], {})
    book.commit(call, placement, [piece(sampled)], [{"role": "user", "content": str(call)}])


def test_a_continuation_appends_glue_and_new_tokens_and_keeps_sampled_ids() -> None:
    book = ChainBook()
    start(book, 0, [1, 2, 3], [40, 41, 90])  # the model sampled its own `<|im_end|>`
    # Canonically the reply renders differently ([44, 45]), as re-tokenized text does.
    exp = Expectation(ids=[1, 2, 3, 44, 45, 90, 91], closing=CLOSE, prompt_len=3)
    canonical = [*exp.ids, 7, 8, 9]
    placement = book.place(1, canonical, [], {book.chains[0].index: exp})
    assert not placement.new
    assert placement.observation == [91, 7, 8, 9]  # the rest of the glue, then the news
    assert placement.prompt == [1, 2, 3, 40, 41, 90, 91, 7, 8, 9]
    book.commit(1, placement, [piece([50, 51])], [])
    chain = book.chains[0]
    assert chain.response_ids == [40, 41, 90, 91, 7, 8, 9, 50, 51]
    assert chain.response_mask == [1, 1, 1, 0, 0, 0, 0, 1, 1]
    assert chain.response_logprobs == [-0.5] * 3 + [0.0] * 4 + [-0.5] * 2
    assert [(s.start, s.end) for s in chain.segments] == [(0, 3), (7, 9)]
    assert (book.loop_counts(), chain.calls) == ((1, 0), [0, 1])


def test_glue_is_added_whole_when_the_model_did_not_sample_it() -> None:
    book = ChainBook()
    start(book, 0, [1], [40])
    exp = Expectation(ids=[1, 44, 90, 91], closing=CLOSE, prompt_len=1)
    placement = book.place(1, [*exp.ids, 5], [], {book.chains[0].index: exp})
    assert placement.observation == [90, 91, 5]


def test_a_token_prompt_extends_a_chain_literally() -> None:
    book = ChainBook()
    start(book, 0, [1, 2], [3, 4])
    placement = book.place(1, [1, 2, 3, 4, 5], [], None)
    assert not placement.new and placement.observation == [5]


def test_rewritten_history_starts_a_chain_and_records_where_it_diverged() -> None:
    book = ChainBook()
    start(book, 0, [1, 2, 3], [40])
    exp = Expectation(ids=[1, 2, 3, 44, 90, 91], closing=CLOSE, prompt_len=3)
    placement = book.place(1, [1, 2, 9, 9, 9, 9, 9], [], {book.chains[0].index: exp})
    assert placement.new and placement.prompt == [1, 2, 9, 9, 9, 9, 9]
    first = book.chains[0]
    assert first.broken is not None
    assert (first.broken.by_call, first.broken.reason, first.broken.at_token) == (
        1,
        "history_rewritten",
        2,
    )
    assert book.loop_counts() == (0, 1)


def test_an_edited_reply_and_a_repeated_request_have_their_own_reasons() -> None:
    exp = Expectation(ids=[1, 2, 3, 44, 90, 91], closing=CLOSE, prompt_len=3)
    book = ChainBook()
    start(book, 0, [1, 2, 3], [40])
    book.place(1, [1, 2, 3, 45, 90, 91, 6], [], {book.chains[0].index: exp})
    broken = book.chains[0].broken
    assert broken is not None and (broken.reason, broken.at_token) == ("reply_rewritten", 3)

    book = ChainBook()
    start(book, 0, [1, 2, 3], [40])
    book.place(1, list(exp.ids), [], {book.chains[0].index: exp})
    broken = book.chains[0].broken
    assert broken is not None and broken.reason == "no_new_messages"


def test_a_call_while_the_chain_is_sampling_is_a_concurrent_fork() -> None:
    book = ChainBook()
    first = book.place(0, [1, 2], [], {})
    second = book.place(1, [1, 2], [], {})
    assert second.new and second.chain is not first.chain
    assert first.chain.broken is not None and first.chain.broken.reason == "concurrent_call"


def test_returning_to_an_older_chain_marks_the_one_left() -> None:
    book = ChainBook()
    start(book, 0, [1, 2], [3])
    start(book, 1, [7, 7], [8])  # a side call: new chain
    placement = book.place(2, [1, 2, 3, 4], [], None)
    assert placement.chain is book.chains[0]
    side = book.chains[1]
    assert side.broken is not None and side.broken.reason == "left_for_another_chain"


def test_a_failed_return_to_a_chain_keeps_the_break_it_had() -> None:
    book = ChainBook()
    start(book, 0, [1, 2], [3])
    start(book, 1, [7, 7], [8])
    before = book.chains[0].broken
    placement = book.place(2, [1, 2, 3, 4], [], None)
    assert book.chains[0].broken is None  # taken up again: the side call was a detour
    book.abandon(placement)
    assert book.chains[0].broken is before is not None
    assert book.chains[1].broken is None


def test_a_failed_call_leaves_the_book_as_it_was() -> None:
    book = ChainBook()
    start(book, 0, [1, 2], [3])
    placement = book.place(1, [5, 5], [], None)
    book.abandon(placement)
    assert len(book.chains) == 1 and book.chains[0].broken is None
    assert not book.chains[0].busy
    assert not book.place(2, [1, 2, 3, 4], [], None).new  # still extendable


def test_the_main_chain_has_the_most_sampled_tokens_ties_going_to_the_earliest() -> None:
    book = ChainBook()
    start(book, 0, [1], [2, 3])
    start(book, 1, [9], [8, 7, 6])
    assert book.main() is book.chains[1]
    start(book, 2, [5], [4, 4, 4])
    assert book.main() is book.chains[1]


def test_a_paused_call_records_one_segment_per_piece() -> None:
    book = ChainBook()
    placement = book.place(0, [1], [], {})
    book.commit(0, placement, [piece([2, 3], 0, "abort"), piece([4], 1)], [])
    chain = book.chains[0]
    assert [(s.start, s.end, s.policy_version, s.finish_reason) for s in chain.segments] == [
        (0, 2, 0, "abort"),
        (2, 3, 1, "stop"),
    ]
    assert chain.last_sampled == [2, 3, 4]


# A harness's loop (prompt 1..), a title call beside it (prompt 7..), then a compaction: the
# loop asks for a summary in its own conversation and goes on from the summary (prompt 5..).
def compacting_run() -> ChainBook:
    book = ChainBook()
    steps = [
        ([1, 2], [3]),  # the loop's first turn
        ([7, 7], [8]),  # the title, beside it
        ([1, 2, 3, 4], [5]),  # the loop again
        ([1, 2, 3, 4, 5, 6], [60, 61]),  # "summarise": still the loop's chain
        ([5, 5, 60, 61], [9, 9, 9, 9, 9]),  # history replaced by the summary
        ([5, 5, 60, 61, 9, 9, 9, 9, 9, 4], [10]),
    ]
    for call, (prompt, sampled) in enumerate(steps):
        placement = book.place(call, prompt, [], None)  # token prompts: literal matching
        book.commit(call, placement, [piece(sampled)], [])
    return book


def test_a_compacted_loop_is_main_plus_continuation_and_the_title_is_a_side_chain() -> None:
    book = compacting_run()
    loop, title, after = book.chains
    assert book.main() is after  # six sampled tokens against four
    assert book.kinds() == {loop.index: "continuation", title.index: "side", after.index: "main"}
    assert book.loop() == [loop, after]
    # The break is where the loop left its chain for good, not where the title interrupted.
    assert loop.broken is not None and (loop.broken.by_call, loop.broken.reason) == (
        4,
        "history_rewritten",
    )
    assert title.broken is not None and title.broken.reason == "left_for_another_chain"


def test_prefix_counters_count_the_loop_only() -> None:
    # Today's count of every new chain would say 2 breaks and 4 extensions: the title is none.
    assert compacting_run().loop_counts() == (3, 1)
    book = ChainBook()
    start(book, 0, [1, 2], [3, 3])
    start(book, 1, [7, 7], [8])  # a side call
    start(book, 2, [1, 2, 3, 3, 4], [5])
    start(book, 3, [9, 9], [8])  # another: the loop is back on its chain in between
    start(book, 4, [1, 2, 3, 3, 4, 5, 6], [7])
    assert book.loop_counts() == (2, 0)
    assert [book.kinds()[c.index] for c in book.chains] == ["main", "side", "side"]


def test_a_call_made_while_another_is_sampled_is_a_parallel_chain() -> None:
    book = ChainBook()
    first = book.place(0, [1, 2], [], {})
    second = book.place(1, [7, 7], [], {})
    book.commit(1, second, [piece([8])], [])
    book.commit(0, first, [piece([3, 3])], [])
    assert book.kinds() == {first.chain.index: "main", second.chain.index: "parallel"}
    assert book.loop_counts() == (0, 0)


def called(book: ChainBook, call: int, prompt: list[int], sampled: list[int],
           system: str, tools: list[dict[str, str]]) -> None:  # fmt: skip
    placement = book.place(call, prompt, tools, None)
    book.commit(call, placement, [piece(sampled)], [{"role": "system", "content": system}])


def test_a_side_call_before_the_loop_is_a_side_chain_by_its_own_system_prompt_or_tools() -> None:
    bash = [{"name": "bash"}]
    # A title first, in a conversation of its own (no tools), then the loop: not a break.
    book = ChainBook()
    called(book, 0, [7, 7], [8], "You name tasks.", [])
    called(book, 1, [1, 2], [3, 3], "You are an agent.", bash)
    assert [book.kinds()[c.index] for c in book.chains] == ["side", "main"]
    assert book.loop_counts() == (0, 0)
    # A router with the loop's system prompt but no tools: the same.
    book = ChainBook()
    called(book, 0, [7, 7], [8], "You are an agent.", [])
    called(book, 1, [1, 2], [3, 3], "You are an agent.", bash)
    assert [book.kinds()[c.index] for c in book.chains] == ["side", "main"]
    # Documented limit: a call with the loop's tools and system prompt that the loop never
    # returns to reads as the loop's start.
    book = ChainBook()
    called(book, 0, [7, 7], [8], "You are an agent.", bash)
    called(book, 1, [1, 2], [3, 3], "You are an agent.", bash)
    assert [book.kinds()[c.index] for c in book.chains] == ["continuation", "main"]
