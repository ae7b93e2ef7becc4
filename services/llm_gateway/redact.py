"""Keep API keys out of every message the gateway logs, records or returns."""

from __future__ import annotations

from collections.abc import Iterable

from services.llm_gateway.classify import scrub


class Redactor:
    """Masks the configured secrets, and anything shaped like a vendor key (`classify.scrub`)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        return scrub(text, self._secrets)
