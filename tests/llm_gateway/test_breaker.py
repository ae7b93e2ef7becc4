"""Circuit breakers: trip, stay open, one half-open probe, recovery; neutral outcomes uncounted."""

from __future__ import annotations

import asyncio

import pytest

from services.llm_gateway.attempts import AttemptOutcome, RequestRejected, RequestTooLarge
from services.llm_gateway.breaker import BreakerState
from services.llm_gateway.chain import ChainLink
from services.llm_gateway.errors import (
    ContextWindowExceeded,
    FatalProviderError,
    RetryableProviderError,
)
from services.llm_gateway.model import ChatResponse
from tests.llm_gateway.gateway_fixtures import (
    FakeClock,
    ProgrammableProvider,
    chain_of,
    chat,
    link,
    reply,
)

RESET_S = 30.0


def _state(guarded: ChainLink) -> BreakerState:
    return guarded.breaker.state


def _down() -> RetryableProviderError:
    return RetryableProviderError("503 service unavailable", status=503)


async def test_after_fail_max_failures_nothing_reaches_the_provider_until_a_probe_recovers() -> (
    None
):
    clock = FakeClock()
    flaky = ProgrammableProvider(name="flaky/m", steps=[_down(), _down(), _down()])
    backup = ProgrammableProvider(name="backup/m", default=reply("from backup"))
    flaky_link = link(flaky, fail_max=3, reset_timeout_s=RESET_S, clock=clock)
    chain = chain_of(flaky_link, link(backup))

    for _ in range(3):
        assert (await chain.generate(chat())).provider == "backup/m"
    assert flaky.calls == 3
    assert _state(flaky_link) is BreakerState.OPEN

    for _ in range(5):
        result = await chain.generate(chat())
        assert result.attempts[0].outcome is AttemptOutcome.SKIPPED_BREAKER_OPEN
    assert flaky.calls == 3, "an open breaker let a request through"

    clock.advance(RESET_S - 0.001)
    assert _state(flaky_link) is BreakerState.OPEN
    assert (await chain.generate(chat())).provider == "backup/m"
    assert flaky.calls == 3, "the breaker let a request through before its reset timeout"
    clock.advance(0.001)
    assert _state(flaky_link) is BreakerState.HALF_OPEN
    flaky.steps.append(reply("recovered"))
    probe = await chain.generate(chat())
    assert probe.provider == "flaky/m"
    assert flaky.calls == 4
    assert _state(flaky_link) is BreakerState.CLOSED
    assert flaky_link.breaker.consecutive_failures == 0


async def test_a_failed_half_open_probe_reopens_the_breaker() -> None:
    clock = FakeClock()
    flaky = ProgrammableProvider(name="flaky/m", default=_down())
    flaky_link = link(flaky, fail_max=1, reset_timeout_s=RESET_S, clock=clock)
    chain = chain_of(flaky_link, link(ProgrammableProvider(name="b/m", default=reply())))
    await chain.generate(chat())
    clock.advance(RESET_S)
    await chain.generate(chat())
    assert flaky.calls == 2
    assert _state(flaky_link) is BreakerState.OPEN
    await chain.generate(chat())
    assert flaky.calls == 2


async def test_half_open_lets_exactly_one_concurrent_probe_through() -> None:
    clock = FakeClock()
    release = asyncio.Event()
    probe_started = asyncio.Event()

    async def slow_recovery() -> ChatResponse:
        probe_started.set()
        await release.wait()
        return reply("probe")

    flaky = ProgrammableProvider(name="flaky/m", steps=[_down(), slow_recovery])
    flaky_link = link(flaky, fail_max=1, reset_timeout_s=RESET_S, clock=clock)
    chain = chain_of(flaky_link, link(ProgrammableProvider(name="b/m", default=reply("b"))))
    await chain.generate(chat())
    clock.advance(RESET_S)

    probe = asyncio.create_task(chain.generate(chat()))
    await probe_started.wait()
    others = [await chain.generate(chat()) for _ in range(3)]
    assert [o.provider for o in others] == ["b/m"] * 3
    assert all(o.attempts[0].outcome is AttemptOutcome.SKIPPED_BREAKER_OPEN for o in others)
    release.set()
    assert (await probe).provider == "flaky/m"
    assert flaky.calls == 2
    assert _state(flaky_link) is BreakerState.CLOSED


async def test_overflow_caller_errors_and_cancellation_neither_fail_nor_reset_the_breaker() -> None:
    hang, started = asyncio.Event(), asyncio.Event()

    async def hangs() -> ChatResponse:
        started.set()
        await hang.wait()
        raise AssertionError("never released")

    provider = ProgrammableProvider(
        name="p/m",
        steps=[
            _down(),
            _down(),
            ContextWindowExceeded("prompt is too long", status=400),
            FatalProviderError("messages: bad role", status=400, caller_error=True),
            hangs,
            _down(),
        ],
    )
    provider_link = link(provider, fail_max=3)
    chain = chain_of(provider_link, link(ProgrammableProvider(name="b/m", default=reply())))
    await chain.generate(chat())
    await chain.generate(chat())
    assert provider_link.breaker.consecutive_failures == 2

    with pytest.raises(RequestTooLarge):
        await chain.generate(chat())
    assert provider_link.breaker.consecutive_failures == 2
    with pytest.raises(RequestRejected):
        await chain.generate(chat())
    assert provider_link.breaker.consecutive_failures == 2

    task = asyncio.create_task(chain.generate(chat()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert provider_link.breaker.consecutive_failures == 2
    assert _state(provider_link) is BreakerState.CLOSED

    await chain.generate(chat())
    assert _state(provider_link) is BreakerState.OPEN
    health = provider_link.breaker.health
    assert (health.requests, health.successes, health.failures) == (6, 0, 3)
    assert "503" in health.last_error


async def test_a_neutral_outcome_during_the_probe_keeps_the_breaker_half_open() -> None:
    clock = FakeClock()
    provider = ProgrammableProvider(
        name="p/m", steps=[_down(), ContextWindowExceeded("prompt is too long"), reply("back")]
    )
    provider_link = link(provider, fail_max=1, reset_timeout_s=RESET_S, clock=clock)
    chain = chain_of(provider_link, link(ProgrammableProvider(name="b/m", default=reply())))
    await chain.generate(chat())
    clock.advance(RESET_S)
    with pytest.raises(RequestTooLarge):
        await chain.generate(chat())
    assert _state(provider_link) is BreakerState.HALF_OPEN
    assert (await chain.generate(chat())).provider == "p/m"
    assert _state(provider_link) is BreakerState.CLOSED


async def test_when_every_breaker_is_open_the_chain_still_tries_in_order() -> None:
    first = ProgrammableProvider(name="a/m", steps=[_down(), reply("a is back")])
    second = ProgrammableProvider(name="b/m", steps=[_down()])
    chain = chain_of(link(first, fail_max=1), link(second, fail_max=1))
    with pytest.raises(Exception, match="all providers failed"):
        await chain.generate(chat())
    result = await chain.generate(chat())
    assert result.provider == "a/m"
    assert first.calls == 2
