"""The protobuf edge of the gateway: requests to the routed chains, answers and statuses back."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import grpc
from quarry.llmgateway.v1 import llm_gateway_pb2 as pb
from quarry.llmgateway.v1 import llm_gateway_pb2_grpc as pb_grpc

from services.common.errors import InvalidArgument
from services.llm_gateway import convert
from services.llm_gateway.attempts import ChainError
from services.llm_gateway.chain import ProviderChain, RoutedCompleted
from services.llm_gateway.conversation import validate_conversation
from services.llm_gateway.errors import InvalidConversation
from services.llm_gateway.model import ChatRequest
from services.llm_gateway.routes import Router
from services.llm_gateway.structured import StructuredRequest, generate_structured
from services.llm_gateway.telemetry import GatewayTelemetry

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]
_SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class LlmGatewayServicer(pb_grpc.LlmGatewayServiceServicer):  # type: ignore[misc]
    """Generate, StreamGenerate, GenerateStructured and GetStatus over a `Router`."""

    def __init__(
        self,
        router: Router,
        *,
        telemetry: GatewayTelemetry | None = None,
        max_structured_attempts: int = 3,
    ) -> None:
        self._router = router
        self._telemetry = telemetry or GatewayTelemetry()
        self._max_structured_attempts = max_structured_attempts

    async def Generate(self, request: pb.GenerateRequest, context: Context) -> pb.GenerateResponse:
        chat = _chat_request(request)
        route, chain = self._route(request.route)
        with self._telemetry.request_span("Generate", route, chat) as span:
            try:
                result = await chain.generate(chat, deadline=_deadline(context))
            except ChainError as error:
                raise convert.quarry_error(error) from None
            self._telemetry.record_request_result(span, result.provider, result.response)
        return convert.generate_response(
            result.response,
            result.provider,
            result.attempts,
            provider_kind=_kind(chain, result.provider),
        )

    async def StreamGenerate(
        self, request: pb.StreamGenerateRequest, context: Context
    ) -> AsyncIterator[pb.StreamGenerateResponse]:
        chat = _chat_request(request)
        route, chain = self._route(request.route)
        with self._telemetry.request_span("StreamGenerate", route, chat) as span:
            try:
                async for event in chain.stream(chat, deadline=_deadline(context)):
                    if isinstance(event, RoutedCompleted):
                        result = event.result
                        self._telemetry.record_request_result(
                            span, result.provider, result.response
                        )
                        completed = convert.generate_response(
                            result.response,
                            result.provider,
                            result.attempts,
                            provider_kind=_kind(chain, result.provider),
                        )
                        yield pb.StreamGenerateResponse(completed=completed)
                    else:
                        yield convert.delta_message(event)
            except ChainError as error:
                raise convert.quarry_error(error) from None

    async def GenerateStructured(
        self, request: pb.GenerateStructuredRequest, context: Context
    ) -> pb.GenerateStructuredResponse:
        structured = _structured_request(request)
        route, chain = self._route(request.route)
        chat = ChatRequest(messages=structured.messages, response_schema=structured.schema)
        with self._telemetry.request_span("GenerateStructured", route, chat):
            try:
                result = await generate_structured(
                    chain,
                    structured,
                    max_attempts=self._max_structured_attempts,
                    deadline=_deadline(context),
                )
            except ChainError as error:
                raise convert.quarry_error(error) from None
        return pb.GenerateStructuredResponse(
            json=result.json_text,
            usage=convert.usage_message(result.usage),
            provider=result.provider,
            model=result.model,
            attempts=[convert.attempt_message(a) for a in result.attempts],
        )

    async def GetStatus(
        self, request: pb.GetStatusRequest, context: Context
    ) -> pb.GetStatusResponse:
        return pb.GetStatusResponse(
            providers=[convert.provider_status(link) for link in self._router.links.values()],
            routes=[
                pb.RouteStatus(name=name, chain=chain)
                for name, chain in self._router.route_names().items()
            ],
            default_route=self._router.default_route,
        )

    def _route(self, route: str) -> tuple[str, ProviderChain]:
        try:
            chain = self._router.chain(route)
        except ChainError as error:
            raise convert.quarry_error(error) from None
        return route or self._router.default_route, chain


def _chat_request(request: pb.GenerateRequest | pb.StreamGenerateRequest) -> ChatRequest:
    chat = convert.chat_request(request)
    _validate(chat)
    return chat


def _structured_request(request: pb.GenerateStructuredRequest) -> StructuredRequest:
    messages = convert.messages_of(request.messages)
    if not request.schema_json.strip():
        raise InvalidArgument.for_field("schema_json", "a JSON schema is required")
    schema = convert.parse_schema(request.schema_json, "schema_json", require_object=True)
    name = request.schema_name or "response"
    if not _SCHEMA_NAME.match(name):
        raise InvalidArgument.for_field("schema_name", "must match ^[A-Za-z0-9_-]{1,64}$")
    structured = StructuredRequest(
        messages=messages,
        schema=schema,
        schema_name=name,
        max_output_tokens=request.max_output_tokens
        if request.HasField("max_output_tokens")
        else None,
        temperature=request.temperature if request.HasField("temperature") else None,
        seed=request.seed if request.HasField("seed") else None,
    )
    _validate(ChatRequest(messages=messages))
    return structured


def _validate(chat: ChatRequest) -> None:
    try:
        validate_conversation(chat)
    except InvalidConversation as error:
        raise InvalidArgument.for_field(error.field, error.description) from None


def _deadline(context: Context) -> float | None:
    """The caller's deadline in event-loop time, when it set one."""
    remaining = context.time_remaining()
    if remaining is None:
        return None
    return asyncio.get_running_loop().time() + remaining


def _kind(chain: ProviderChain, provider: str) -> str:
    """The kind of the chain's provider entry named `provider` (empty: not in the chain)."""
    return next((link.provider.kind for link in chain.links if link.provider.name == provider), "")
