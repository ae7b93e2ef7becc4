"""What a turn cost, from the configured price table."""

from __future__ import annotations

from services.llm_gateway.config import PriceSettings
from services.llm_gateway.model import Usage

_PER = 1_000_000


def cost_usd(usage: Usage, price: PriceSettings | None) -> float:
    """Dollar cost of `usage`; 0 when no price is configured.

    `usage.input_tokens` includes cache reads and writes, which are priced on their own.
    """
    if price is None:
        return 0.0
    read_price = (
        price.input_per_mtok if price.cache_read_per_mtok is None else (price.cache_read_per_mtok)
    )
    write_price = (
        price.input_per_mtok if price.cache_write_per_mtok is None else (price.cache_write_per_mtok)
    )
    uncached = max(usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens, 0)
    total = (
        uncached * price.input_per_mtok
        + usage.cache_read_tokens * read_price
        + usage.cache_write_tokens * write_price
        + usage.output_tokens * price.output_per_mtok
    )
    return total / _PER
