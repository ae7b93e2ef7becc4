"""What a call's tools cost in the window, and the room a tool result is given: counted as the
model reads them, so a small local window is neither overfilled nor left idle."""

from __future__ import annotations

from services.agent.config import LoopSettings
from services.agent.conversation import MIN_RESULT_CHARS, Conversation
from services.agent.messages import ToolCall, assistant, tool_result, user
from services.agent.prompt import system_prompt
from services.agent.run import RunRequest
from services.agent.tools import DEFAULT_TOOLS
from services.common.tool_text import instruction

TOOLS = DEFAULT_TOOLS.offered(frozenset())
SEARCH = next(t for t in TOOLS if t.name == "search")
ANSWER = DEFAULT_TOOLS.answer_tool


def _conversation(*, window: int, forced: bool) -> Conversation:
    conversation = Conversation(
        RunRequest(collection="docs", query="temporary directory"),
        system_prompt(TOOLS),
        LoopSettings(),
        tools=TOOLS,
    )
    conversation.window = window
    conversation.calls_forced = forced
    return conversation


def test_where_calls_are_forced_every_turn_counts_the_instruction_of_all_the_runs_tools() -> None:
    """The gateway lists every tool of the run on every turn (only the closing directive names
    the turn's choice): the answer-only turn costs what a search turn costs, the instruction."""
    conversation = _conversation(window=4_096, forced=True)
    told = len(instruction([t.spec for t in TOOLS], forced=True))

    assert len(TOOLS) == 5
    assert conversation.tools_chars((ANSWER,)) == told
    assert conversation.tools_chars((SEARCH,)) == told
    assert told > ANSWER.schema_chars, "the answer's schema alone under-counts the instruction"
    assert told < sum(t.schema_chars for t in TOOLS), "the schemas over-count the signatures"


def test_where_calls_are_not_forced_a_turn_counts_the_schemas_of_the_tools_it_offers() -> None:
    conversation = _conversation(window=4_096, forced=False)

    assert conversation.tools_chars((ANSWER,)) == ANSWER.schema_chars
    assert conversation.tools_chars(TOOLS) == sum(t.schema_chars for t in TOOLS)


def test_a_tool_result_takes_its_budget_where_the_window_has_room_for_it() -> None:
    conversation = _conversation(window=32_000, forced=True)

    assert conversation.result_room_chars((ANSWER,)) == conversation.budget_chars


def test_a_tool_result_takes_only_the_room_the_answer_call_has_in_a_small_window() -> None:
    conversation = _conversation(window=4_096, forced=True)
    room = conversation.room_chars((ANSWER,))

    assert MIN_RESULT_CHARS < room < conversation.budget_chars
    assert conversation.result_room_chars((ANSWER,)) == room


def test_a_tool_result_gets_a_few_previews_however_full_the_window() -> None:
    """With no room left the result still shows something; pruning or compaction makes room."""
    conversation = _conversation(window=4_096, forced=True)
    conversation.append(assistant("looking"))
    conversation.append(user("x" * 20_000))

    assert conversation.room_chars((ANSWER,)) == 0
    assert conversation.result_room_chars((ANSWER,)) == MIN_RESULT_CHARS


def test_older_results_count_as_cleared_in_the_room_of_a_new_one() -> None:
    """Layer 2 clears older results before the next call (never the newest), so a new result's
    room does not shrink by the results it will replace."""
    conversation = _conversation(window=4_096, forced=True)
    before = conversation.result_room_chars((ANSWER,))
    conversation.append(assistant("", (ToolCall("c1", "search", "{}"),)))
    conversation.append(tool_result("c1", "y" * 6_000))

    assert conversation.room_chars((ANSWER,)) == 0
    assert conversation.result_room_chars((ANSWER,)) > before - 500
