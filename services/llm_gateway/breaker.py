"""One circuit breaker per provider: pybreaker, plus the accounting the gateway reports.

How an attempt is counted:

* success → a breaker success (resets the consecutive-failure count, closes a half-open breaker);
* retryable or fatal provider error, timeout → a breaker failure;
* neutral outcomes — the caller cancelled, the request overflowed the context window, the request
  itself was wrong (`caller_error`), the caller's own deadline cut the try short — are neither.
  pybreaker only knows failure and success (an `exclude`d error is recorded as a success, which
  would reset the failure count and close a half-open breaker), so a neutral outcome leaves the
  `with breaker.calling()` block as `_NeutralExit`, an excluded error, while the storage ignores the
  success pybreaker records for it. Counts and state stay exactly as they were.

Half-open: pybreaker lets every concurrent call through a half-open breaker. We let exactly ONE
probe through; concurrent calls meanwhile see the breaker as open (skipped, fallback), and the
probe's outcome closes or re-opens the breaker.

The awaited call runs inside `with breaker.calling():` (never `call_async`, which needs Tornado,
nor `call(coroutine_fn)`, which records success before the coroutine runs).

Time is ours, not pybreaker's: when an open breaker's reset timeout has passed is read from an
injected monotonic `clock`, and the breaker is moved to half-open before pybreaker would consult
its own wall clock. Tests advance a fake clock instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum

import pybreaker

from services.llm_gateway.config import BreakerSettings


class BreakerState(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerOpen(Exception):
    """The provider's breaker is open (or its one half-open probe is in flight)."""


class NeutralOutcome(Exception):
    """Wraps an error that must count neither as a failure nor as a success."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass
class ProviderHealth:
    """Counters reported by GetStatus."""

    requests: int = 0
    successes: int = 0
    failures: int = 0
    last_error: str = ""
    last_error_at: datetime | None = None


class _NeutralAwareStorage(pybreaker.CircuitMemoryStorage):
    """Memory storage that can ignore the success pybreaker records for a neutral outcome, and
    notes on `clock` when the breaker last opened."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__(pybreaker.STATE_CLOSED)
        self.ignoring_success = False
        self._clock = clock
        self.opened_at_clock: float | None = None
        """`clock()` when the breaker last opened."""

    @property
    def opened_at(self) -> datetime | None:
        return self._opened_at

    @opened_at.setter
    def opened_at(self, value: datetime) -> None:
        self._opened_at = value
        self.opened_at_clock = self._clock()

    def reset_counter(self) -> None:
        if not self.ignoring_success:
            super().reset_counter()

    def increment_success_counter(self) -> None:
        if not self.ignoring_success:
            super().increment_success_counter()


class _NeutralExit(Exception):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error


class ProviderBreaker:
    """pybreaker `CircuitBreaker` with neutral outcomes, a single half-open probe and counters."""

    def __init__(
        self,
        name: str,
        settings: BreakerSettings,
        *,
        scrub: Callable[[str], str] = str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._scrub = scrub
        self._clock = clock
        self._storage = _NeutralAwareStorage(clock)
        self._breaker = pybreaker.CircuitBreaker(
            fail_max=settings.fail_max,
            reset_timeout=settings.reset_timeout_s,
            exclude=[_NeutralExit],
            state_storage=self._storage,
            name=name,
            throw_new_error_on_trip=False,
        )
        self._probes_in_flight = 0
        self.health = ProviderHealth()

    @property
    def state(self) -> BreakerState:
        """The state a caller would meet now (open turns half-open once the timeout passed)."""
        current = self._breaker.current_state
        if current == pybreaker.STATE_CLOSED:
            return BreakerState.CLOSED
        if current == pybreaker.STATE_OPEN and not self._reset_timeout_elapsed():
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    @property
    def consecutive_failures(self) -> int:
        return self._breaker.fail_counter

    def is_open(self) -> bool:
        """Calls would be refused now: open, or half-open with its probe in flight."""
        state = self.state
        return state is BreakerState.OPEN or (
            state is BreakerState.HALF_OPEN and self._probes_in_flight > 0
        )

    @contextmanager
    def attempt(self, *, force: bool = False) -> Iterator[None]:
        """Guard one try. Raises `BreakerOpen` before the try when refused, unless `force`
        (every breaker of the chain is open: try anyway). Wrap neutral errors raised inside in
        `NeutralOutcome` so they are not counted; they are re-raised unwrapped."""
        if self._breaker.current_state == pybreaker.STATE_OPEN and (
            force or self._reset_timeout_elapsed()
        ):
            self._breaker.half_open()
        if self.is_open() and not force:
            raise BreakerOpen(f"circuit breaker of {self._breaker.name} is open")
        probing = self.state is not BreakerState.CLOSED
        self._probes_in_flight += probing
        self.health.requests += 1
        try:
            with self._guarded():
                yield
        except pybreaker.CircuitBreakerError as error:
            raise BreakerOpen(str(error)) from None
        finally:
            self._probes_in_flight -= probing

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        try:
            with self._breaker.calling():
                try:
                    yield
                except NeutralOutcome as neutral:
                    self._storage.ignoring_success = True
                    raise _NeutralExit(neutral.error) from None
                except (asyncio.CancelledError, GeneratorExit) as stopped:
                    self._storage.ignoring_success = True
                    raise _NeutralExit(stopped) from None
                except Exception as error:
                    self._record_failure(error)
                    raise
                self.health.successes += 1
        except _NeutralExit as neutral:
            raise neutral.error from None
        finally:
            self._storage.ignoring_success = False

    def _record_failure(self, error: Exception) -> None:
        self.health.failures += 1
        self.health.last_error = self._scrub(f"{type(error).__name__}: {error}")
        self.health.last_error_at = datetime.now(UTC)

    def _reset_timeout_elapsed(self) -> bool:
        opened_at = self._storage.opened_at_clock
        if opened_at is None:
            return True
        return self._clock() >= opened_at + self._breaker.reset_timeout
