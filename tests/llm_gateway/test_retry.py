"""Backoff: exponential with full jitter, Retry-After honoured and capped."""

from __future__ import annotations

import random

from services.llm_gateway.config import RetrySettings
from services.llm_gateway.retry import RetryPolicy


def test_backoff_doubles_per_retry_up_to_the_cap_without_jitter() -> None:
    policy = RetryPolicy(RetrySettings(base_backoff_s=0.5, max_backoff_s=3, jitter=False))
    assert [policy.backoff_s(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3, 3]


def test_full_jitter_stays_between_zero_and_the_exponential_ceiling() -> None:
    policy = RetryPolicy(RetrySettings(base_backoff_s=1, max_backoff_s=8), rng=random.Random(7))
    delays = [policy.backoff_s(3) for _ in range(200)]
    assert all(0 <= d <= 4 for d in delays)
    assert max(delays) - min(delays) > 2, "jitter spreads the delays"


def test_retry_after_wins_over_the_computed_backoff_but_is_capped() -> None:
    policy = RetryPolicy(RetrySettings(base_backoff_s=0.1, max_backoff_s=5))
    assert policy.backoff_s(1, retry_after_s=2.5) == 2.5
    assert policy.backoff_s(1, retry_after_s=120) == 5
