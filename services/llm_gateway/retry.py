"""Backoff between tries against one provider: exponential, full jitter, Retry-After honoured."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from services.llm_gateway.config import RetrySettings


@dataclass
class RetryPolicy:
    """When and how long to wait before trying a provider again."""

    settings: RetrySettings
    rng: random.Random = field(default_factory=random.Random)
    """Injected for deterministic tests."""

    @property
    def max_attempts(self) -> int:
        return self.settings.max_attempts

    def backoff_s(self, retry_number: int, retry_after_s: float | None = None) -> float:
        """Delay before retry `retry_number` (1 for the first retry).

        A server's Retry-After wins over the computed backoff, capped at `max_backoff_s` so one
        provider cannot stall the chain; without it, full jitter over `base * 2**(n-1)`.
        """
        cap = self.settings.max_backoff_s
        if retry_after_s is not None and retry_after_s >= 0:
            return min(retry_after_s, cap)
        ceiling = min(cap, self.settings.base_backoff_s * 2 ** (retry_number - 1))
        return self.rng.uniform(0, ceiling) if self.settings.jitter else ceiling
