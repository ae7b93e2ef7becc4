"""Anthropic Messages.

Who we talk to: the SDK client (`max_retries=0`, explicit timeout: retries belong to the chain;
`open_telemetry=False`: the SDK would otherwise emit its own span per call next to the gateway's),
error classification. How we speak is `translate/anthropic.py`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anthropic
import httpx2

from services.llm_gateway.classify import classify
from services.llm_gateway.errors import ProviderError
from services.llm_gateway.model import ChatRequest, ChatResponse, Completed, StreamEvent
from services.llm_gateway.translate.anthropic import (
    AnthropicRequest,
    AnthropicStreamReader,
    from_message,
    to_anthropic_request,
)


class AnthropicProvider:
    """One model behind the Anthropic Messages API."""

    kind = "anthropic"

    def __init__(
        self,
        *,
        name: str,
        model: str,
        api_key: str,
        base_url: str | None,
        context_window_tokens: int,
        default_max_output_tokens: int,
        timeout_s: float,
        prompt_caching: bool = True,
        http_client: httpx2.AsyncClient | None = None,
    ) -> None:
        self._name = name
        self._model = model
        self._api_key = api_key
        self._context_window_tokens = context_window_tokens
        self._default_max_output_tokens = default_max_output_tokens
        self.prompt_caching = prompt_caching
        self._client = anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            timeout=timeout_s,
            http_client=http_client,
            open_telemetry=False,
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def context_window_tokens(self) -> int:
        return self._context_window_tokens

    async def generate(self, request: ChatRequest) -> ChatResponse:
        wire = self._wire(request)
        try:
            message = await self._client.messages.create(**wire.params)
        except (anthropic.AnthropicError, httpx2.HTTPError) as error:
            raise self._classify(error) from None
        return from_message(message, wire, model=self._model)

    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        wire = self._wire(request)
        reader = AnthropicStreamReader(wire, model=self._model, provider=self._name)
        try:
            events = await self._client.messages.create(**wire.params, stream=True)
            async with events:
                async for event in events:
                    for generic in reader.feed(event):
                        yield generic
        except (anthropic.AnthropicError, httpx2.HTTPError, json.JSONDecodeError) as error:
            raise self._classify(error) from None
        yield Completed(reader.finish())

    async def aclose(self) -> None:
        await self._client.close()

    def _wire(self, request: ChatRequest) -> AnthropicRequest:
        return to_anthropic_request(
            request,
            model=self._model,
            default_max_output_tokens=self._default_max_output_tokens,
            context_window_tokens=self._context_window_tokens,
            prompt_caching=self.prompt_caching,
        )

    def _classify(self, error: BaseException) -> ProviderError:
        return classify(error, provider=self._name, secrets=[self._api_key])
