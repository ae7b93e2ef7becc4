"""The LLM gateway as the loop's `ModelClient`, over gRPC, with deadlines passed downstream.

Every failed call becomes the `services.common.errors` exception of the same status code (by
`services.common.status.domain_error`); the gateway's CONTEXT_WINDOW_EXCEEDED status, its one
overflow signal (`_gateway_error`), becomes `ContextWindowExceeded`, so the loop never sees grpc.
A call waits briefly for the channel to connect, then names the gateway as unreachable
(`services.agent.dependencies`).
"""

from __future__ import annotations

import asyncio
import json

import grpc
from quarry.llmgateway.v1 import llm_gateway_pb2 as gw
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as gw_grpc

from services.agent.dependencies import call_options, dependency_error
from services.agent.messages import Message, Role, ToolCall
from services.agent.ports import (
    ContextWindowExceeded,
    ModelRequest,
    ModelResponse,
    StructuredRequest,
    StructuredResponse,
    TokenUsage,
)
from services.common import errors
from services.common.status import details_of_rpc_error

_ROLES = {
    Role.SYSTEM: gw.ROLE_SYSTEM,
    Role.USER: gw.ROLE_USER,
    Role.ASSISTANT: gw.ROLE_ASSISTANT,
    Role.TOOL: gw.ROLE_TOOL,
}
_CHOICES = {
    "auto": gw.TOOL_CHOICE_MODE_AUTO,
    "required": gw.TOOL_CHOICE_MODE_REQUIRED,
    "named": gw.TOOL_CHOICE_MODE_NAMED,
}


class GatewayModelClient:
    """`ModelClient` over `quarry.llmgateway.v1.LlmGatewayService`."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel
        self._stub = gw_grpc.LlmGatewayServiceStub(channel)
        self._windows: dict[str, gw.ProviderStatus | None] = {}
        self._lock = asyncio.Lock()

    async def generate(self, request: ModelRequest, *, remaining_s: float | None) -> ModelResponse:
        message = gw.GenerateRequest(
            route=request.route,
            messages=[_message(m) for m in request.messages],
            tools=[
                gw.Tool(
                    name=t.name, description=t.description, parameters_json=json.dumps(t.parameters)
                )
                for t in request.tools
            ],
            tool_choice=gw.ToolChoice(
                mode=_CHOICES[request.tool_choice.mode],
                name=request.tool_choice.name,
                allowed=request.tool_choice.allowed,
            ),
        )
        if request.temperature is not None:
            message.temperature = request.temperature
        if request.seed is not None:
            message.seed = request.seed
        if request.max_output_tokens is not None:
            message.max_output_tokens = request.max_output_tokens
        if request.top_logprobs is not None:
            message.top_logprobs = request.top_logprobs
        try:
            reply = await self._stub.Generate(
                message, **await call_options(self._channel, "llm gateway", remaining_s)
            )
        except grpc.aio.AioRpcError as error:
            raise _gateway_error(error, self._channel) from error
        calls = tuple(ToolCall(c.id, c.name, c.arguments_json) for c in reply.message.tool_calls)
        return ModelResponse(
            text=reply.message.text,
            tool_calls=calls,
            usage=_usage(reply.usage),
            provider=reply.provider,
            provider_kind=reply.provider_kind,
            model=reply.model,
            fallback_reason=fallback_reason(reply),
            first_token_logprobs=tuple((t.token, t.logprob) for t in reply.first_token_logprobs),
        )

    async def generate_structured(
        self, request: StructuredRequest, *, remaining_s: float | None
    ) -> StructuredResponse:
        message = gw.GenerateStructuredRequest(
            route=request.route,
            messages=[_message(m) for m in request.messages],
            schema_json=json.dumps(request.schema),
            schema_name=request.schema_name,
        )
        try:
            reply = await self._stub.GenerateStructured(
                message, **await call_options(self._channel, "llm gateway", remaining_s)
            )
        except grpc.aio.AioRpcError as error:
            raise _gateway_error(error, self._channel) from error
        return StructuredResponse(json_text=reply.json, usage=_usage(reply.usage))

    async def context_window(self, route: str, *, remaining_s: float | None) -> int | None:
        """The first provider of `route`'s window, from `GetStatus`, read once per route."""
        first = await self._first_provider(route, remaining_s)
        return (first.context_window_tokens or None) if first is not None else None

    async def enforces_tool_schemas(self, route: str, *, remaining_s: float | None) -> bool:
        """Whether the first provider of `route` holds tool arguments to their schemas."""
        first = await self._first_provider(route, remaining_s)
        return first is not None and first.enforces_tool_schemas

    async def forces_tool_calls(self, route: str, *, remaining_s: float | None) -> bool:
        """Whether every reply of the first provider of `route` is a tool call."""
        first = await self._first_provider(route, remaining_s)
        return first is not None and first.forces_tool_calls

    async def provider_kind(self, route: str, *, remaining_s: float | None) -> str:
        """The kind of the first provider of `route`, from `GetStatus`, read once per route."""
        first = await self._first_provider(route, remaining_s)
        return first.kind if first is not None else ""

    async def _first_provider(
        self, route: str, remaining_s: float | None
    ) -> gw.ProviderStatus | None:
        """The status of `route`'s first provider, from `GetStatus`, read once per route."""
        async with self._lock:
            if route not in self._windows:
                try:
                    status = await self._stub.GetStatus(
                        gw.GetStatusRequest(),
                        **await call_options(self._channel, "llm gateway", remaining_s),
                    )
                except grpc.aio.AioRpcError as error:
                    raise _gateway_error(error, self._channel) from error
                self._windows[route] = _route_first(status, route)
            return self._windows[route]


def _route_first(status: gw.GetStatusResponse, route: str) -> gw.ProviderStatus | None:
    name = route or status.default_route
    chains = {r.name: list(r.chain) for r in status.routes}
    providers = {p.name: p for p in status.providers}
    chain = chains.get(name) or []
    return providers.get(chain[0]) if chain else None


def _gateway_error(error: grpc.aio.AioRpcError, channel: grpc.aio.Channel) -> Exception:
    details = details_of_rpc_error(error)
    if details.reason == errors.CONTEXT_WINDOW_EXCEEDED:
        return ContextWindowExceeded(details.message)
    if details.code == grpc.StatusCode.INVALID_ARGUMENT:
        return errors.QuarryError(f"llm gateway rejected the conversation: {details.message}")
    return dependency_error(error, channel, "llm gateway")


def _message(message: Message) -> gw.Message:
    return gw.Message(
        role=_ROLES[message.role],
        text=message.text,
        tool_calls=[
            gw.ToolCall(id=c.id, name=c.name, arguments_json=c.arguments_json)
            for c in message.tool_calls
        ],
        tool_call_id=message.tool_call_id,
        is_error=message.is_error,
    )


def _usage(usage: gw.Usage) -> TokenUsage:
    return TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        cost_usd=usage.cost_usd,
    )


_PASSED_OVER = {
    gw.ATTEMPT_OUTCOME_RETRYABLE_ERROR: "retryable error",
    gw.ATTEMPT_OUTCOME_FATAL_ERROR: "error",
    gw.ATTEMPT_OUTCOME_CONTEXT_WINDOW_EXCEEDED: "context window exceeded",
    gw.ATTEMPT_OUTCOME_SKIPPED_BREAKER_OPEN: "skipped, circuit breaker open",
    gw.ATTEMPT_OUTCOME_SKIPPED_CONTEXT_WINDOW: "skipped, context window too small",
}


def fallback_reason(reply: gw.GenerateResponse) -> str:
    """Which earlier providers of the route were passed over, and why; empty when the first
    provider answered."""
    passed = [
        a for a in reply.attempts if a.provider != reply.provider and a.outcome in _PASSED_OVER
    ]
    reasons: dict[str, str] = {}
    for attempt in passed:
        detail = f": {attempt.error}" if attempt.error else ""
        reasons[attempt.provider] = f"{attempt.provider}: {_PASSED_OVER[attempt.outcome]}{detail}"
    return "; ".join(reasons.values())
