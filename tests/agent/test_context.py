"""Layer 2 pruning and the Layer 3 split: assistant text untouched, calls and results paired."""

from __future__ import annotations

from services.agent.context import (
    CLEARED,
    ConversationSummary,
    prune_tool_results,
    split_for_compaction,
    summary_prompt,
)
from services.agent.messages import (
    Message,
    Role,
    ToolCall,
    assistant,
    tool_result,
    total_chars,
    unpaired_calls,
    user,
)

WINDOW = 10_000  # tokens -> 40 000 characters


def _exchange(n: int, result_chars: int) -> list[Message]:
    call = ToolCall(f"c{n}", "search", '{"query": {"primary": "q"}}')
    reasoning = f"Reasoning {n}: " + "r" * 300
    body = f"HEAD{n}" + "x" * result_chars + f"TAIL{n}"
    return [assistant(reasoning, [call]), tool_result(call.id, body)]


def _conversation(sizes: list[int]) -> list[Message]:
    messages = [user("## Query\nq")]
    for n, size in enumerate(sizes):
        messages += _exchange(n, size)
    return messages


def test_below_sixty_percent_nothing_changes() -> None:
    messages = _conversation([5_000, 5_000])
    assert total_chars(messages) < WINDOW * 4 * 0.6
    assert prune_tool_results(messages, WINDOW) == messages


def test_above_sixty_percent_old_results_are_soft_trimmed_to_head_and_tail() -> None:
    messages = _conversation([9_000, 9_000, 9_000])
    assert WINDOW * 4 * 0.6 < total_chars(messages) < WINDOW * 4 * 0.8
    pruned = prune_tool_results(messages, WINDOW)

    first = pruned[2].text
    assert first.startswith("HEAD0")
    assert first.endswith("TAIL0")
    assert "characters of older results trimmed" in first
    assert len(first) < 2_600
    assert total_chars(pruned) < WINDOW * 4 * 0.6
    assert pruned[-1] == messages[-1]


def test_above_eighty_percent_old_results_become_a_placeholder() -> None:
    messages = _conversation([2_400, 2_400, 2_400, 2_400, 2_400, 2_400, 2_400, 2_400, 2_400, 2_400])
    fixed = 24_000
    pruned = prune_tool_results(messages, WINDOW, fixed_chars=fixed)
    results = [m for m in pruned if m.role is Role.TOOL]
    assert results[0].text == CLEARED
    assert results[-1] == messages[-1]
    assert fixed + total_chars(pruned) <= WINDOW * 4 * 0.8


def test_assistant_text_and_pairs_survive_pruning() -> None:
    messages = _conversation([20_000, 20_000, 20_000])
    pruned = prune_tool_results(messages, WINDOW, fixed_chars=10_000)
    before = [m for m in messages if m.role is not Role.TOOL]
    after = [m for m in pruned if m.role is not Role.TOOL]
    assert after == before
    assert [m.tool_call_id for m in pruned if m.role is Role.TOOL] == ["c0", "c1", "c2"]
    assert unpaired_calls(pruned) == []
    assert any(m.text == CLEARED for m in pruned)


def test_the_newest_tool_result_is_never_touched_even_when_alone() -> None:
    messages = _conversation([200_000])
    assert prune_tool_results(messages, WINDOW) == messages


def test_errors_keep_their_flag_when_trimmed() -> None:
    messages = _conversation([30_000, 100])
    messages[2] = tool_result("c0", "E" * 30_000, is_error=True)
    pruned = prune_tool_results(messages, WINDOW)
    assert pruned[2].is_error
    assert pruned[2].tool_call_id == "c0"


def test_split_keeps_the_last_exchanges_starting_at_an_assistant_message() -> None:
    exchanges = _conversation([10, 10, 10, 10])[1:]
    split = split_for_compaction(exchanges, keep_last=2)
    assert split is not None
    assert split.recent[0].role is Role.ASSISTANT
    assert [m.tool_call_id for m in split.recent if m.role is Role.TOOL] == ["c2", "c3"]
    assert unpaired_calls(split.old) == []
    assert unpaired_calls(split.recent) == []


def test_split_keeps_fewer_exchanges_when_needed_and_none_when_nothing_is_old() -> None:
    two = _conversation([10, 10])[1:]
    split = split_for_compaction(two, keep_last=2)
    assert split is not None
    assert len(split.old) == 2
    assert split_for_compaction(_conversation([10])[1:], keep_last=2) is None


def test_summary_prompt_shortens_tool_results_and_respects_its_budget() -> None:
    old = _conversation([50_000])[1:]
    prompt = summary_prompt("## Query\nq", "earlier", old, max_chars=5_000)
    assert "# Earlier summary\nearlier" in prompt
    assert "[call search" in prompt
    assert len(prompt) < 5_100


def test_summary_renders_every_part() -> None:
    summary = ConversationSummary(
        summary="Found tempfile.",
        queries_tried=["a", "b"],
        relevant_result_ids=["x__chunk_0"],
        still_missing="nothing",
    )
    assert summary.render() == (
        "Found tempfile.\nQueries tried: a; b\nRelevant result ids: x__chunk_0\n"
        "Still missing: nothing"
    )
