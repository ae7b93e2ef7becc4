"""Building blocks for gateway tests: settings, a running in-process gateway, a programmable
provider and the agent-contract messages the extractive provider reads."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from quarry.llmgateway.v1 import llm_gateway_pb2 as pb
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as pb_grpc

from services.common.server import QuarryServer
from services.common.settings import ServerSettings
from services.common.telemetry import Telemetry
from services.llm_gateway.breaker import ProviderBreaker
from services.llm_gateway.chain import ChainLink, ProviderChain
from services.llm_gateway.config import (
    BreakerSettings,
    GatewaySettings,
    ProviderSettings,
    RetrySettings,
)
from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Completed,
    Message,
    Role,
    StopReason,
    StreamEvent,
    TextDelta,
    Usage,
)
from services.llm_gateway.retry import RetryPolicy
from services.llm_gateway.server import build_gateway_server
from tests.grpc_serving import stub_of

SEARCH_PARAMETERS = {
    "type": "object",
    "properties": {
        "query": {"type": "object", "properties": {"primary": {"type": "string"}}},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
    },
    "required": ["query"],
}
SUBMIT_PARAMETERS = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "citations": {"type": "array"}},
    "required": ["text", "citations"],
}


def gateway_settings(
    providers: list[ProviderSettings] | None = None,
    routes: dict[str, list[str]] | None = None,
    **overrides: Any,
) -> GatewaySettings:
    """Settings for an in-process gateway on a free port."""
    return GatewaySettings(
        providers=providers or [],
        routes=routes or {},
        server=ServerSettings(port=0, grace_s=0),
        **overrides,
    )


@asynccontextmanager
async def running_gateway(
    settings: GatewaySettings, telemetry: Telemetry | None = None
) -> AsyncIterator[pb_grpc.LlmGatewayServiceStub]:
    """A started gateway and a stub connected to it."""
    server: QuarryServer = build_gateway_server(settings, telemetry)
    async with stub_of(server, pb_grpc.LlmGatewayServiceStub) as stub:
        yield stub


def agent_question(question: str, *, thinking: bool = False, language: str = "") -> str:
    """The first user message as the agent writes it (docs/agent-tool-contract.md); `language`:
    the collection's keyword language line, when given."""
    mode = (
        "THINKING — search as often as needed, then call submit_answer."
        if thinking
        else "FAST — perform exactly ONE search, then immediately call submit_answer."
    )
    return (
        f"## Query\n{question}\n\n## Mode\n{mode}\n\n## Caller filter\nnone\n\n"
        "## Collection\nname: demo\n" + (f"keyword language: {language}\n" if language else "")
    )


def search_result(results: list[tuple[str, str, str]], total: int | None = None) -> str:
    """A `search` tool result: (result_id, title, text) per result."""
    lines = [f"Found {len(results) if total is None else total} results; showing {len(results)}."]
    for result_id, title, text in results:
        lines += [
            "",
            f"### [{result_id}] {title}",
            "source: demo | entity_type: doc | score: 0.5 | url: ",
            text,
        ]
    return "\n".join(lines)


def agent_tools() -> list[pb.Tool]:
    return [
        pb.Tool(name="search", description="Search", parameters_json=json.dumps(SEARCH_PARAMETERS)),
        pb.Tool(
            name="submit_answer",
            description="Answer",
            parameters_json=json.dumps(SUBMIT_PARAMETERS),
        ),
    ]


def user(text: str) -> pb.Message:
    return pb.Message(role=pb.ROLE_USER, text=text)


def chat(text: str = "hello") -> ChatRequest:
    return ChatRequest(messages=(Message(Role.USER, text=text),))


def reply(text: str = "ok", model: str = "m") -> ChatResponse:
    return ChatResponse(
        text=text,
        tool_calls=[],
        stop_reason=StopReason.END_TURN,
        usage=Usage(input_tokens=3, output_tokens=1),
        model=model,
    )


Step = ChatResponse | BaseException | Callable[[], Any]
"""What a `ProgrammableProvider` does for one call: answer, raise, or await a callable."""


@dataclass
class ProgrammableProvider:
    """A provider whose every call follows the next step of a list; records each call."""

    name: str = "fake/model"
    kind: str = "fake"
    model: str = "model"
    context_window_tokens: int = 100_000
    steps: list[Step] = field(default_factory=list)
    default: Step | None = None
    """Used once `steps` is exhausted."""
    calls: int = 0
    stream_text: list[str] = field(default_factory=lambda: ["Hel", "lo"])
    """Deltas `stream()` sends before the response (or the step's error)."""
    fail_after_deltas: bool = False
    """Streaming: send the deltas first, then run the step (mid-stream failure)."""
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when a stream is closed before completing."""

    async def _step(self) -> ChatResponse:
        self.calls += 1
        step = self.steps.pop(0) if self.steps else self.default
        if step is None:
            raise AssertionError(f"{self.name} was called more often than scripted")
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, ChatResponse):
            return step
        result = await step()
        assert isinstance(result, ChatResponse)
        return result

    async def generate(self, request: ChatRequest) -> ChatResponse:
        return await self._step()

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        completed = False
        try:
            if not self.fail_after_deltas:
                response = await self._step()
            for text in self.stream_text:
                yield TextDelta(text)
            if self.fail_after_deltas:
                response = await self._step()
            completed = True
            yield Completed(response)
        finally:
            if not completed:
                self.closed.set()

    async def aclose(self) -> None:
        return None


def link(
    provider: ProgrammableProvider,
    *,
    fail_max: int = 3,
    reset_timeout_s: float = 30.0,
    max_attempts: int = 1,
    timeout_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
) -> ChainLink:
    """A chain link without backoff delays beyond what tests ask for."""
    return ChainLink(
        provider=provider,
        breaker=ProviderBreaker(
            provider.name,
            BreakerSettings(fail_max=fail_max, reset_timeout_s=reset_timeout_s),
            clock=clock,
        ),
        retry=RetryPolicy(
            RetrySettings(max_attempts=max_attempts, base_backoff_s=0.001, max_backoff_s=0.01)
        ),
        timeout_s=timeout_s,
    )


class FakeClock:
    """A monotonic clock that moves only when the test advances it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class RecordedSleeps:
    """A `sleep` for chains that records the delays instead of waiting them out."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def chain_of(*links: ChainLink, sleeps: RecordedSleeps | None = None) -> ProviderChain:
    return ProviderChain(list(links), sleep=sleeps or RecordedSleeps())


def scripted_entry(path: str, name: str = "scripted/test", **overrides: Any) -> ProviderSettings:
    return ProviderSettings(kind="scripted", name=name, script=path, **overrides)
