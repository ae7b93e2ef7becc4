"""The fallback chain: retries, Retry-After, fallback, context windows, streams, deadlines."""

from __future__ import annotations

import asyncio

import pytest

from services.llm_gateway.attempts import (
    AllProvidersFailed,
    AttemptOutcome,
    DeadlineReached,
    RequestRejected,
    RequestTooLarge,
    StreamInterrupted,
)
from services.llm_gateway.chain import RoutedCompleted, RoutedEvent
from services.llm_gateway.config import PriceSettings
from services.llm_gateway.errors import (
    ContextWindowExceeded,
    FatalProviderError,
    RateLimited,
    RetryableProviderError,
)
from services.llm_gateway.model import ChatResponse, TextDelta
from tests.llm_gateway.gateway_fixtures import (
    ProgrammableProvider,
    RecordedSleeps,
    chain_of,
    chat,
    link,
    reply,
)


def _outcomes(attempts: list) -> list[tuple[str, AttemptOutcome, int]]:  # type: ignore[type-arg]
    return [(a.provider, a.outcome, a.try_number) for a in attempts]


async def test_retryable_errors_are_retried_then_the_chain_falls_back() -> None:
    first = ProgrammableProvider(
        name="a/m", default=RetryableProviderError("500 internal", status=500)
    )
    second = ProgrammableProvider(name="b/m", default=reply("from b"))
    result = await chain_of(link(first, max_attempts=3), link(second)).generate(chat())
    assert result.provider == "b/m"
    assert result.response.text == "from b"
    assert _outcomes(result.attempts) == [
        ("a/m", AttemptOutcome.RETRYABLE_ERROR, 1),
        ("a/m", AttemptOutcome.RETRYABLE_ERROR, 2),
        ("a/m", AttemptOutcome.RETRYABLE_ERROR, 3),
        ("b/m", AttemptOutcome.SUCCESS, 1),
    ]
    assert "500 internal" in result.attempts[0].error


async def test_a_retry_waits_the_retry_after_the_provider_asked_for_capped() -> None:
    provider = ProgrammableProvider(
        name="a/m",
        steps=[
            RateLimited("429", status=429, retry_after_s=0.007),
            RateLimited("429", status=429, retry_after_s=600),
            reply(),
        ],
    )
    sleeps = RecordedSleeps()
    result = await chain_of(link(provider, max_attempts=3), sleeps=sleeps).generate(chat())
    assert result.provider == "a/m"
    assert sleeps.delays == [0.007, 0.01], "Retry-After honoured, then capped at max_backoff_s"


async def test_fatal_errors_fall_back_without_retrying() -> None:
    first = ProgrammableProvider(name="a/m", default=FatalProviderError("401 bad key", status=401))
    second = ProgrammableProvider(name="b/m", default=reply())
    result = await chain_of(link(first, max_attempts=3), link(second)).generate(chat())
    assert first.calls == 1
    assert _outcomes(result.attempts)[0] == ("a/m", AttemptOutcome.FATAL_ERROR, 1)


async def test_a_request_the_provider_rejects_as_malformed_goes_back_to_the_caller() -> None:
    first = ProgrammableProvider(
        name="a/m", default=FatalProviderError("400 bad tool schema", status=400, caller_error=True)
    )
    second = ProgrammableProvider(name="b/m", default=reply())
    with pytest.raises(RequestRejected) as caught:
        await chain_of(link(first, max_attempts=3), link(second)).generate(chat())
    assert (first.calls, second.calls) == (1, 0)
    assert caught.value.attempts[0].outcome is AttemptOutcome.FATAL_ERROR


async def test_context_overflow_is_returned_at_once_without_retry_or_fallback() -> None:
    first = ProgrammableProvider(
        name="a/m", context_window_tokens=8000, default=ContextWindowExceeded("prompt is too long")
    )
    second = ProgrammableProvider(name="b/m", default=reply())
    with pytest.raises(RequestTooLarge) as caught:
        await chain_of(link(first, max_attempts=3), link(second)).generate(chat())
    assert (first.calls, second.calls) == (1, 0)
    assert (caught.value.provider, caught.value.context_window_tokens) == ("a/m", 8000)
    assert caught.value.attempts[0].outcome is AttemptOutcome.CONTEXT_WINDOW_EXCEEDED


async def test_a_fallback_whose_window_cannot_hold_the_request_is_skipped() -> None:
    big_request = chat("word " * 4000)
    first = ProgrammableProvider(name="a/m", default=RetryableProviderError("503"))
    small = ProgrammableProvider(name="small/m", context_window_tokens=1000, default=reply())
    large = ProgrammableProvider(name="large/m", context_window_tokens=200_000, default=reply())
    result = await chain_of(link(first), link(small), link(large)).generate(big_request)
    assert result.provider == "large/m"
    assert small.calls == 0
    assert _outcomes(result.attempts) == [
        ("small/m", AttemptOutcome.SKIPPED_CONTEXT_WINDOW, 0),
        ("a/m", AttemptOutcome.RETRYABLE_ERROR, 1),
        ("large/m", AttemptOutcome.SUCCESS, 1),
    ]


async def test_a_request_no_provider_can_hold_is_too_large() -> None:
    small = ProgrammableProvider(name="small/m", context_window_tokens=100, default=reply())
    with pytest.raises(RequestTooLarge) as caught:
        await chain_of(link(small)).generate(chat("word " * 1000))
    assert small.calls == 0
    assert caught.value.context_window_tokens == 100


async def test_rate_limited_everywhere_reports_the_smallest_retry_after() -> None:
    first = ProgrammableProvider(name="a/m", default=RateLimited("429", retry_after_s=30))
    second = ProgrammableProvider(name="b/m", default=RateLimited("429", retry_after_s=4))
    with pytest.raises(AllProvidersFailed) as caught:
        await chain_of(link(first), link(second)).generate(chat())
    assert caught.value.rate_limited_everywhere
    assert caught.value.retry_after_s == 4


async def test_a_try_that_hangs_past_its_timeout_is_retryable_and_falls_back() -> None:
    async def hangs() -> ChatResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    first = ProgrammableProvider(name="a/m", default=hangs)
    second = ProgrammableProvider(name="b/m", default=reply())
    first_link = link(first, timeout_s=0.05)
    result = await chain_of(first_link, link(second)).generate(chat())
    assert result.provider == "b/m"
    assert result.attempts[0].outcome is AttemptOutcome.RETRYABLE_ERROR
    assert "timed out" in result.attempts[0].error
    assert first_link.breaker.consecutive_failures == 1


async def test_cost_is_computed_from_the_price_table() -> None:
    provider = ProgrammableProvider(name="a/m", default=reply())
    priced = link(provider)
    priced.price = PriceSettings(input_per_mtok=3.0, output_per_mtok=15.0)
    result = await chain_of(priced).generate(chat())
    assert result.response.usage.cost_usd == pytest.approx((3 * 3.0 + 1 * 15.0) / 1_000_000)


async def _collect(events: object) -> list[RoutedEvent]:
    return [event async for event in events]  # type: ignore[attr-defined]


async def test_a_stream_failing_before_its_first_delta_falls_back() -> None:
    first = ProgrammableProvider(name="a/m", default=RetryableProviderError("529 overloaded"))
    second = ProgrammableProvider(name="b/m", default=reply("Hello"))
    events = await _collect(chain_of(link(first), link(second)).stream(chat()))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    final = events[-1]
    assert isinstance(final, RoutedCompleted)
    assert final.result.provider == "b/m"


async def test_a_stream_cut_after_deltas_reached_the_caller_is_an_error_not_a_fallback() -> None:
    first = ProgrammableProvider(
        name="a/m", default=RetryableProviderError("stream ended"), fail_after_deltas=True
    )
    second = ProgrammableProvider(name="b/m", default=reply())
    first_link = link(first, max_attempts=3)
    received: list[RoutedEvent] = []

    async def consume() -> None:
        async for event in chain_of(first_link, link(second)).stream(chat()):
            received.append(event)

    with pytest.raises(StreamInterrupted) as caught:
        await consume()
    assert [e.text for e in received if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert (first.calls, second.calls) == (1, 0)
    assert first_link.breaker.consecutive_failures == 1
    assert caught.value.attempts[-1].outcome is AttemptOutcome.RETRYABLE_ERROR


async def test_cancelling_mid_stream_closes_the_upstream_and_does_not_charge_the_breaker() -> None:
    async def hangs() -> ChatResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    provider = ProgrammableProvider(name="a/m", default=hangs, fail_after_deltas=True)
    provider_link = link(provider)
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for _ in chain_of(provider_link).stream(chat()):
            first_delta.set()

    task = asyncio.create_task(consume())
    await first_delta.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(provider.closed.wait(), 1)
    assert provider_link.breaker.consecutive_failures == 0
    assert provider_link.breaker.health.failures == 0


async def test_no_try_starts_when_the_deadline_has_passed() -> None:
    provider = ProgrammableProvider(name="a/m", default=reply())
    deadline = asyncio.get_running_loop().time() + 0.001
    with pytest.raises(DeadlineReached):
        await chain_of(link(provider)).generate(chat(), deadline=deadline)
    assert provider.calls == 0


async def test_a_try_cut_short_by_the_callers_deadline_is_not_held_against_the_provider() -> None:
    never = asyncio.Event()

    async def hangs() -> ChatResponse:
        await never.wait()
        raise AssertionError("the caller's deadline ends the try first")

    provider = ProgrammableProvider(name="a/m", default=hangs)
    provider_link = link(provider, timeout_s=5)
    deadline = asyncio.get_running_loop().time() + 0.1
    with pytest.raises(DeadlineReached):
        await chain_of(provider_link).generate(chat(), deadline=deadline)
    assert provider_link.breaker.consecutive_failures == 0
