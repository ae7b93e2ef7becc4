"""A route's fallback chain: breakers, per-try timeouts, bounded retries, fallback, attempts.

One code path serves both RPC shapes: `stream` yields text and tool-call deltas and finally a
`RoutedCompleted`; `generate` asks each provider for a whole turn through the same loop. Rules:

* Providers that cannot hold the request (estimated tokens ≥ context window) are skipped. When none
  can, the caller learns that the request is too large (so it can compact).
* Providers whose breaker is open are skipped; when every breaker is open, each is tried anyway.
* Retryable errors (429, 5xx, timeouts, truncated streams) are retried with backoff, then the chain
  falls back. Fatal errors fall back at once. Context-window overflow and requests a provider
  rejects as malformed go straight back to the caller: no other provider would do better.
  Overflow is one signal: a reply the provider stopped at its window (`context_window_exceeded`
  from its translator) is handled as its overflow error, so the caller always learns it as
  `RequestTooLarge` (INVALID_ARGUMENT, reason CONTEXT_WINDOW_EXCEEDED), never in a reply.
* Once a delta has reached the caller a failure ends the request (`StreamInterrupted`; overflow
  still as `RequestTooLarge`): a fallback would send a second, different beginning.
* The caller's deadline bounds each try; no try starts without `MIN_TRY_S` left, and a try cut short
  by the deadline is not held against the provider.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass

from services.llm_gateway.attempts import (
    AllProvidersFailed,
    Attempt,
    AttemptOutcome,
    DeadlineReached,
    RequestRejected,
    RequestTooLarge,
    RoutedResponse,
    StreamInterrupted,
)
from services.llm_gateway.breaker import BreakerOpen, NeutralOutcome, ProviderBreaker
from services.llm_gateway.config import PriceSettings
from services.llm_gateway.errors import (
    ContextWindowExceeded,
    FatalProviderError,
    ProviderError,
    RateLimited,
    RetryableProviderError,
)
from services.llm_gateway.model import (
    ChatRequest,
    ChatResponse,
    Completed,
    StreamEvent,
    TextDelta,
    ToolCallDelta,
)
from services.llm_gateway.pricing import cost_usd
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.redact import Redactor
from services.llm_gateway.retry import RetryPolicy
from services.llm_gateway.telemetry import GatewayTelemetry
from services.llm_gateway.tokens import estimate_input_tokens

log = logging.getLogger(__name__)

MIN_TRY_S = 0.05
"""No try starts with less of the caller's deadline left than this."""


@dataclass
class ChainLink:
    """One provider in a chain, with the policies that guard it (shared across routes)."""

    provider: Provider
    breaker: ProviderBreaker
    retry: RetryPolicy
    timeout_s: float
    """Per-try timeout, a whole stream included."""
    price: PriceSettings | None = None


@dataclass(frozen=True)
class RoutedCompleted:
    """Last event of a routed stream."""

    result: RoutedResponse


Delta = TextDelta | ToolCallDelta
RoutedEvent = TextDelta | ToolCallDelta | RoutedCompleted


class _CallerDeadline(Exception):
    """A try ran out of the caller's deadline, not of its own timeout."""


class ProviderChain:
    """Tries the providers of one route in order; see the module docstring for the rules."""

    def __init__(
        self,
        links: Sequence[ChainLink],
        *,
        telemetry: GatewayTelemetry | None = None,
        redact: Redactor | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not links:
            raise ValueError("a chain needs at least one provider")
        self.links = list(links)
        self._telemetry = telemetry or GatewayTelemetry()
        self._redact = redact or Redactor()
        self._sleep = sleep

    async def generate(
        self, request: ChatRequest, *, deadline: float | None = None
    ) -> RoutedResponse:
        """One whole turn from the first provider that answers."""
        async with aclosing(self._run(request, deadline, streaming=False)) as events:
            async for event in events:
                if isinstance(event, RoutedCompleted):
                    return event.result
        raise AssertionError("the chain ended without a result")  # pragma: no cover

    def stream(
        self, request: ChatRequest, *, deadline: float | None = None
    ) -> AsyncIterator[RoutedEvent]:
        """Deltas of one turn, then `RoutedCompleted`."""
        return self._run(request, deadline, streaming=True)

    async def _run(
        self, request: ChatRequest, deadline: float | None, *, streaming: bool
    ) -> AsyncGenerator[RoutedEvent, None]:
        attempts: list[Attempt] = []
        candidates = self._fitting_links(request, attempts)
        force = all(link.breaker.is_open() for link in candidates)
        for link in candidates:
            for try_number in range(1, link.retry.max_attempts + 1):
                outcome = _TryOutcome(streaming=streaming)
                async for event in self._try(link, request, deadline, try_number, force, outcome):
                    yield event
                attempts.append(outcome.attempt)
                if outcome.result is not None:
                    outcome.result.attempts = attempts
                    yield RoutedCompleted(outcome.result)
                    return
                if outcome.error is None:
                    break
                await self._after_failure(link, outcome, attempts, deadline, try_number)
                if not outcome.retry:
                    break
        raise AllProvidersFailed(_summary(attempts), attempts)

    async def _try(
        self,
        link: ChainLink,
        request: ChatRequest,
        deadline: float | None,
        try_number: int,
        force: bool,
        outcome: _TryOutcome,
    ) -> AsyncIterator[Delta]:
        provider = link.provider
        started = asyncio.get_running_loop().time()
        budget, deadline_bound = self._budget(link, deadline, started)
        if budget is None:
            outcome.error = _CallerDeadline("no time left for a try")
            outcome.attempt = self._attempt(link, AttemptOutcome.CANCELLED, try_number, started)
            return
        try:
            with (
                link.breaker.attempt(force=force),
                self._telemetry.attempt_span(
                    provider_kind=provider.kind,
                    model=provider.model,
                    request=request,
                    try_number=try_number,
                ) as record,
            ):
                try:
                    async for delta in self._consume(link, request, started + budget, outcome):
                        yield delta
                    self._telemetry.record_response(record, outcome.response)
                except TimeoutError:
                    if deadline_bound:
                        record.error_type = "deadline"
                        raise NeutralOutcome(_CallerDeadline("caller deadline reached")) from None
                    record.error_type = "timeout"
                    raise RetryableProviderError(f"timed out after {budget:.1f}s") from None
                except (ContextWindowExceeded, _CallerDeadline) as neutral:
                    record.error_type = type(neutral).__name__
                    raise NeutralOutcome(neutral) from None
                except FatalProviderError as fatal:
                    if fatal.caller_error:
                        record.error_type = type(fatal).__name__
                        raise NeutralOutcome(fatal) from None
                    raise
        except BreakerOpen:
            outcome.attempt = self._attempt(link, AttemptOutcome.SKIPPED_BREAKER_OPEN, 0, started)
            return
        except (asyncio.CancelledError, GeneratorExit):
            outcome.attempt = self._attempt(link, AttemptOutcome.CANCELLED, try_number, started)
            raise
        except Exception as error:  # every failure is classified by the caller of _try
            outcome.error = error
            outcome.attempt = self._failed_attempt(link, error, try_number, started)
            return
        outcome.result = RoutedResponse(outcome.response, provider.name)
        outcome.attempt = self._attempt(link, AttemptOutcome.SUCCESS, try_number, started)

    @staticmethod
    async def _consume(
        link: ChainLink, request: ChatRequest, until: float, outcome: _TryOutcome
    ) -> AsyncIterator[Delta]:
        """The provider's deltas, each awaited no later than `until`; the final response goes
        to `outcome.response`."""
        events = _events(link.provider, request, streaming=outcome.streaming)
        async with aclosing(events):
            while True:
                async with asyncio.timeout_at(until):
                    try:
                        event = await anext(events)
                    except StopAsyncIteration:
                        raise RetryableProviderError("stream ended without completing") from None
                if isinstance(event, Completed):
                    if event.response.context_window_exceeded:
                        # One overflow signal: a reply the provider stopped at its context
                        # window is its overflow error (the caller gets CONTEXT_WINDOW_EXCEEDED).
                        raise ContextWindowExceeded(
                            f"{link.provider.name} stopped at its context window"
                        )
                    event.response.usage.cost_usd = cost_usd(event.response.usage, link.price)
                    outcome.response = event.response
                    return
                outcome.delivered = True
                yield event

    async def _after_failure(
        self,
        link: ChainLink,
        outcome: _TryOutcome,
        attempts: list[Attempt],
        deadline: float | None,
        try_number: int,
    ) -> None:
        """Raise when the failure ends the request; otherwise decide whether to retry."""
        error = outcome.error
        provider = link.provider
        if isinstance(error, ContextWindowExceeded):  # also after deltas: the stream overflowed
            raise RequestTooLarge(
                f"the request does not fit the context window of {provider.name}",
                attempts,
                provider=provider.name,
                model=provider.model,
                context_window_tokens=provider.context_window_tokens,
            )
        if outcome.delivered:
            raise StreamInterrupted(
                f"the stream from {provider.name} broke after it started: {outcome.attempt.error}",
                attempts,
            )
        if isinstance(error, FatalProviderError) and error.caller_error:
            raise RequestRejected(
                f"{provider.name} rejected the request: {outcome.attempt.error}", attempts
            )
        if isinstance(error, _CallerDeadline):
            raise DeadlineReached("the deadline passed while waiting for a provider", attempts)
        if not isinstance(error, RetryableProviderError) or try_number >= link.retry.max_attempts:
            return
        retry_after = error.retry_after_s
        delay = link.retry.backoff_s(try_number, retry_after)
        now = asyncio.get_running_loop().time()
        if deadline is not None and now + delay + MIN_TRY_S > deadline:
            return
        outcome.retry = True
        await self._sleep(delay)

    def _fitting_links(self, request: ChatRequest, attempts: list[Attempt]) -> list[ChainLink]:
        fitting = []
        needs = []
        for link in self.links:
            needed = estimate_input_tokens(link.provider, request)
            needs.append(needed)
            if needed < link.provider.context_window_tokens:
                fitting.append(link)
                continue
            attempts.append(
                Attempt(
                    provider=link.provider.name,
                    model=link.provider.model,
                    outcome=AttemptOutcome.SKIPPED_CONTEXT_WINDOW,
                    error=f"about {needed} tokens do not fit {link.provider.context_window_tokens}",
                )
            )
        if fitting:
            return fitting
        largest = max(self.links, key=lambda link: link.provider.context_window_tokens).provider
        raise RequestTooLarge(
            f"about {min(needs)} input tokens do not fit any provider of the route "
            f"(largest window: {largest.context_window_tokens} tokens, {largest.name})",
            attempts,
            provider=largest.name,
            model=largest.model,
            context_window_tokens=largest.context_window_tokens,
        )

    @staticmethod
    def _budget(link: ChainLink, deadline: float | None, now: float) -> tuple[float | None, bool]:
        """How long this try may take, and whether the caller's deadline (not the per-try
        timeout) is the limit; `None` when the deadline leaves no room for a try."""
        if deadline is None or deadline - now >= link.timeout_s:
            return link.timeout_s, False
        remaining = deadline - now
        return (remaining, True) if remaining >= MIN_TRY_S else (None, True)

    def _attempt(
        self,
        link: ChainLink,
        outcome: AttemptOutcome,
        try_number: int,
        started: float,
        error: str = "",
    ) -> Attempt:
        elapsed_ms = (asyncio.get_running_loop().time() - started) * 1000
        return Attempt(
            provider=link.provider.name,
            model=link.provider.model,
            outcome=outcome,
            error=error,
            latency_ms=elapsed_ms if try_number else 0.0,
            try_number=try_number,
        )

    def _failed_attempt(
        self, link: ChainLink, error: Exception, try_number: int, started: float
    ) -> Attempt:
        description = self._redact(f"{type(error).__name__}: {error}")
        attempt = self._attempt(link, _outcome_of(error), try_number, started, description)
        if not isinstance(error, ProviderError):
            log.error(
                "provider raised an unclassified error",
                extra={"provider": link.provider.name, "error": description},
            )
        rate_limited = isinstance(error, RateLimited)
        retry_after = error.retry_after_s if isinstance(error, ProviderError) else None
        log.info(
            "provider attempt failed",
            extra={
                "provider": link.provider.name,
                "try_number": try_number,
                "outcome": attempt.outcome.value,
                "error": description,
            },
        )
        return Attempt(
            provider=attempt.provider,
            model=attempt.model,
            outcome=attempt.outcome,
            error=attempt.error,
            latency_ms=attempt.latency_ms,
            try_number=try_number,
            rate_limited=rate_limited,
            retry_after_s=retry_after,
        )


class _TryOutcome:
    """What one try produced: a result, or an error and what to do next."""

    def __init__(self, *, streaming: bool = True) -> None:
        self.streaming = streaming
        self.result: RoutedResponse | None = None
        self.response: ChatResponse
        self.error: Exception | None = None
        self.attempt: Attempt
        self.delivered = False
        self.retry = False


async def _events(
    provider: Provider, request: ChatRequest, *, streaming: bool
) -> AsyncGenerator[StreamEvent, None]:
    if not streaming:
        yield Completed(await provider.generate(request))
        return
    upstream = provider.stream(request)
    try:
        async for event in upstream:
            yield event
    finally:
        close = getattr(upstream, "aclose", None)
        if close is not None:
            await close()


def _outcome_of(error: Exception) -> AttemptOutcome:
    if isinstance(error, ContextWindowExceeded):
        return AttemptOutcome.CONTEXT_WINDOW_EXCEEDED
    if isinstance(error, RetryableProviderError):
        return AttemptOutcome.RETRYABLE_ERROR
    if isinstance(error, _CallerDeadline):
        return AttemptOutcome.CANCELLED
    return AttemptOutcome.FATAL_ERROR


def _summary(attempts: list[Attempt]) -> str:
    tried = [a for a in attempts if a.try_number > 0]
    if not tried:
        return "no provider of the route could be tried"
    last = tried[-1]
    return f"all providers failed ({len(tried)} tries); last: {last.provider}: {last.error}"
