"""What every provider implements. Adding a vendor adds a module, not an `if` in the chain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from services.llm_gateway.model import ChatRequest, ChatResponse, StreamEvent


class Provider(Protocol):
    """One configured model at one vendor (or an offline policy).

    Implementations raise only `services.llm_gateway.errors.ProviderError` subclasses for provider
    failures, already classified. They never retry: the chain owns retries, timeouts and breakers.
    """

    @property
    def name(self) -> str:
        """Entry name, e.g. `groq/llama-3.3-70b-versatile`."""
        ...

    @property
    def kind(self) -> str:
        """`openai`, `anthropic`, `extractive` or `scripted`."""
        ...

    @property
    def model(self) -> str: ...

    @property
    def context_window_tokens(self) -> int: ...

    async def generate(self, request: ChatRequest) -> ChatResponse:
        """One turn, not streamed."""
        ...

    def stream(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        """One turn, streamed; ends with `Completed` or raises. A stream that ends without its
        terminal event raises `RetryableProviderError`."""
        ...

    async def aclose(self) -> None:
        """Release HTTP clients."""
        ...
