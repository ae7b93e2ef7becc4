"""One provider behind a per-try timeout, bounded retries that honour Retry-After, and a
pybreaker circuit breaker — the same for every provider.

Counted against the breaker: every failed try (retryable or not). Not counted: a try the caller
cancelled, and a try cut short because the caller's deadline was nearer than the provider's
timeout (the provider did nothing wrong). An open breaker refuses at once; once `breaker_reset_s`
has passed ONE probe goes through (concurrent searches meanwhile see it open), and its outcome
closes or re-opens the breaker. Recording goes through pybreaker's synchronous `call` after the
awaited try, so pybreaker never sees a coroutine.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import NoReturn

import pybreaker

from services.search_tool.web.base import WebProvider, WebProviderError, WebResult
from services.search_tool.web.config import WebProviderSettings

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]


class BreakerOpen(Exception):
    """The provider's breaker refuses tries for now."""

    def __init__(self, provider: str, retry_after_s: float) -> None:
        super().__init__(f"{provider}: circuit breaker open (failing repeatedly)")
        self.retry_after_s = retry_after_s


class GuardedProvider:
    """A `WebProvider` with timeout, retries and a circuit breaker."""

    def __init__(
        self,
        provider: WebProvider,
        settings: WebProviderSettings,
        *,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.settings = settings
        self._sleep = sleep
        self._clock = clock
        self._breaker = pybreaker.CircuitBreaker(
            fail_max=settings.breaker_fail_max,
            reset_timeout=settings.breaker_reset_s,
            name=settings.name,
            throw_new_error_on_trip=False,
        )
        self._probing = False

    @property
    def name(self) -> str:
        return self.provider.name

    @property
    def breaker_state(self) -> str:
        """pybreaker's `closed`, `open` or `half-open`."""
        return str(self._breaker.current_state)

    async def search(self, query: str, limit: int, *, deadline: float | None) -> list[WebResult]:
        """Results of the first successful try; the last try's `WebProviderError` otherwise.
        `deadline` is on `clock`; None: only the provider's own timeout bounds a try."""
        settings = self.settings
        for attempt in range(1, settings.max_attempts + 1):
            timeout_s, caller_bound = self._timeout(deadline)
            probe = self._admit()
            try:
                results = await self.provider.search(query, limit, timeout_s=timeout_s)
            except WebProviderError as error:
                if not (caller_bound and error.status is None and error.retryable):
                    self._record(error)
                self._retry_or_raise(error, attempt, deadline)
                await self._sleep(self._wait_s(error, attempt))
            else:
                self._record(None)
                return results
            finally:
                self._probing = self._probing and not probe
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    def _timeout(self, deadline: float | None) -> tuple[float, bool]:
        """This try's timeout, and whether the caller's deadline (not ours) set it."""
        if deadline is None:
            return self.settings.timeout_s, False
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise WebProviderError(f"{self.name}: no time left for a try", retryable=False)
        return min(self.settings.timeout_s, remaining), remaining < self.settings.timeout_s

    def _admit(self) -> bool:
        """Raise `BreakerOpen` when refused; True when this try is the half-open probe."""
        if self._breaker.current_state == pybreaker.STATE_OPEN:
            left = self._reset_left_s()
            if left > 0 or self._probing:
                raise BreakerOpen(self.name, max(left, 1.0))
            self._breaker.half_open()
        if self._breaker.current_state == pybreaker.STATE_HALF_OPEN:
            if self._probing:
                raise BreakerOpen(self.name, 1.0)
            self._probing = True
            return True
        return False

    def _reset_left_s(self) -> float:
        opened_at = self._breaker._state_storage.opened_at
        if opened_at is None:
            return 0.0
        reopens = opened_at + timedelta(seconds=self.settings.breaker_reset_s)
        return max(0.0, (reopens - datetime.now(UTC)).total_seconds())

    def _record(self, error: WebProviderError | None) -> None:
        try:
            if error is None:
                self._breaker.call(lambda: None)
            else:
                self._breaker.call(_raise, error)
        except (WebProviderError, pybreaker.CircuitBreakerError):
            pass
        if error is not None:
            log.warning(
                "web search provider failed",
                extra={"provider": self.name, "error": error.message, "status": error.status},
            )

    def _retry_or_raise(
        self, error: WebProviderError, attempt: int, deadline: float | None
    ) -> None:
        """Re-raise `error` unless one more try is allowed and worth waiting for."""
        settings = self.settings
        if not error.retryable or attempt >= settings.max_attempts:
            raise error
        if error.retry_after_s is not None and error.retry_after_s > settings.max_retry_after_s:
            raise error
        if self._breaker.current_state == pybreaker.STATE_OPEN:
            raise error
        if deadline is not None and self._clock() + self._wait_s(error, attempt) >= deadline:
            raise error

    def _wait_s(self, error: WebProviderError, attempt: int) -> float:
        if error.retry_after_s is not None:
            return error.retry_after_s
        return float(self.settings.base_backoff_s * 2 ** (attempt - 1))

    async def aclose(self) -> None:
        await self.provider.aclose()


def _raise(error: WebProviderError) -> NoReturn:
    raise error
