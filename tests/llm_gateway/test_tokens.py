"""One token estimate: the chain skips the providers it cannot fit, and the Anthropic `max_tokens`
clamp leaves room for exactly the same input."""

from __future__ import annotations

import json

from quarry.llmgateway.v1 import llm_gateway_pb2 as pb

from services.llm_gateway.attempts import AttemptOutcome
from services.llm_gateway.config import ProviderSettings
from services.llm_gateway.convert import chat_request
from services.llm_gateway.model import ChatRequest, Message, Role, Tool, ToolCall
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.providers.factory import build_provider
from services.llm_gateway.testing import FakeOpenAIServer, Reply
from services.llm_gateway.tokens import estimate_input_tokens, estimate_request_tokens
from services.llm_gateway.translate.anthropic import max_output_tokens
from tests.llm_gateway.gateway_fixtures import ProgrammableProvider, chain_of, link, reply

SEARCH = Tool(
    "search",
    "Search the collection.",
    {"type": "object", "properties": {"query": {"type": "string", "maxLength": 200}}},
)
AGENT_TURN = ChatRequest(
    messages=(
        Message(Role.SYSTEM, "You answer questions by searching."),
        Message(Role.USER, "When was the Royal Society founded?"),
        Message(Role.ASSISTANT, tool_calls=(ToolCall("c1", "search", '{"query": "founded"}'),)),
        Message(Role.TOOL, "The Royal Society was founded in 1660. " * 20, tool_call_id="c1"),
    ),
    tools=(SEARCH,),
)


async def _kept_by_the_chain(window: int) -> bool:
    small = ProgrammableProvider(name="small/m", context_window_tokens=window, default=reply())
    large = ProgrammableProvider(name="large/m", context_window_tokens=10**6, default=reply())
    result = await chain_of(link(small), link(large)).generate(AGENT_TURN)
    return result.attempts[0].outcome is not AttemptOutcome.SKIPPED_CONTEXT_WINDOW


async def test_a_window_the_chain_keeps_is_one_the_max_tokens_clamp_leaves_room_in() -> None:
    boundary = estimate_request_tokens(AGENT_TURN)
    for window in range(boundary - 3, boundary + 4):
        clamped = max_output_tokens(AGENT_TURN, 10**6, window)
        if await _kept_by_the_chain(window):
            assert clamped + boundary == window, f"window {window}: output budget overruns it"
        else:
            assert window - boundary <= 0, f"window {window} was skipped although input fits"
            assert clamped == 1
    assert await _kept_by_the_chain(boundary + 1)
    assert not await _kept_by_the_chain(boundary)


def test_a_tool_schema_from_the_edge_is_counted_from_the_text_the_caller_sent() -> None:
    """The edge measures each schema once (its text is at hand), so estimating a turn's tokens does
    not serialise the agent's tool schemas again on every turn."""
    text = '{"type": "object", "properties": {"query": {"type": "string"}}}'
    request = pb.GenerateRequest(
        messages=[pb.Message(role=pb.ROLE_USER, text="abcd")],
        tools=[pb.Tool(name="search", description="find", parameters_json=text)],
    )
    chat = chat_request(request)
    assert chat.tools[0].parameters_tokens == -(-len(text) // 4)
    message_tokens = 4 + 1
    tool_tokens = 2 + 1 + chat.tools[0].parameters_tokens
    assert estimate_request_tokens(chat) == message_tokens + tool_tokens


def _tool(name: str) -> Tool:
    """A tool whose schema is long (as the agent's are: descriptions on every argument)."""
    properties = {
        f"argument_{n}": {
            "type": "string",
            "description": f"What argument {n} of {name} says. " * 4,
        }
        for n in range(6)
    }
    return Tool(name, f"The {name} tool.", {"type": "object", "properties": properties})


THINKING_TURN = ChatRequest(
    messages=AGENT_TURN.messages,
    tools=tuple(_tool(name) for name in ("search", "read", "count", "calculate", "answer")),
)


async def test_a_schema_forcing_local_model_is_judged_by_what_it_reads_not_by_the_schemas() -> None:
    """With `tool_calls: json_schema` the model reads each tool as a one-line signature and the
    schema is the server's grammar. The chain's window check counts what the model reads, so a
    4,096-token local model is no longer skipped for a turn it can take (a THINKING run's five
    tools counted ~1,600-2,200 tokens of schemas against a ~550-token instruction, and the
    route's fallback answered); the same window with native tools still skips it."""
    generic = estimate_request_tokens(THINKING_TURN)
    arguments = {f"argument_{n}": "x" for n in range(6)}
    with FakeOpenAIServer() as fake:
        for _ in range(2):
            fake.push(Reply(text=json.dumps({"name": "search", "arguments": arguments})))

        def openai_entry(name: str, tool_calls: str, window: int) -> Provider:
            return build_provider(
                ProviderSettings.model_validate(
                    {
                        "kind": "openai",
                        "name": name,
                        "endpoint": "llama-cpp-python",
                        "model": "qwen",
                        "base_url": fake.base_url,
                        "tool_calls": tool_calls,
                        "context_window_tokens": window,
                    }
                )
            )

        probe = openai_entry("probe", "json_schema", 10**6)
        read = estimate_input_tokens(probe, THINKING_TURN)
        assert read < generic - 500, (read, generic)
        window = (read + generic) // 2
        large = ProgrammableProvider(name="large/m", context_window_tokens=10**6, default=reply())
        for tool_calls, kept in (("json_schema", True), ("native", False)):
            small = openai_entry(f"local-{tool_calls}", tool_calls, window)
            chain = chain_of(link(small), link(large))  # type: ignore[arg-type]
            result = await chain.generate(THINKING_TURN)
            first = result.attempts[0]
            assert (first.outcome is not AttemptOutcome.SKIPPED_CONTEXT_WINDOW) is kept, first
        assert len(fake.requests) == 1, "only the json_schema provider was called"
        body = fake.requests[0].body
    assert "tools" not in body, "the tools travelled as text"
    told = "\n".join(m["content"] for m in body["messages"] if m["role"] == "system")
    assert "- search: The search tool.\n  arguments:" in told
