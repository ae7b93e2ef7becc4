"""Routes: named fallback chains over a shared set of guarded providers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from services.llm_gateway.attempts import RouteNotFound
from services.llm_gateway.breaker import ProviderBreaker
from services.llm_gateway.chain import ChainLink, ProviderChain
from services.llm_gateway.config import GatewaySettings, resolve_api_key
from services.llm_gateway.providers.base import Provider
from services.llm_gateway.redact import Redactor
from services.llm_gateway.retry import RetryPolicy
from services.llm_gateway.telemetry import GatewayTelemetry


@dataclass
class Router:
    """Resolves a route name to its chain; one breaker per provider, whatever its routes."""

    chains: dict[str, ProviderChain]
    default_route: str
    links: dict[str, ChainLink]
    """Every provider entry in use, by name, with its breaker."""

    def chain(self, route: str) -> ProviderChain:
        """The chain of `route` (the default route when empty)."""
        name = route or self.default_route
        try:
            return self.chains[name]
        except KeyError:
            raise RouteNotFound(name, sorted(self.chains)) from None

    def route_names(self) -> dict[str, list[str]]:
        return {
            name: [link.provider.name for link in chain.links]
            for name, chain in self.chains.items()
        }

    async def aclose(self) -> None:
        for link in self.links.values():
            await link.provider.aclose()

    @classmethod
    def from_settings(
        cls,
        settings: GatewaySettings,
        providers: Mapping[str, Provider],
        *,
        telemetry: GatewayTelemetry | None = None,
    ) -> Router:
        redact = redactor_for(settings)
        links: dict[str, ChainLink] = {}
        for entry in settings.providers:
            if entry.name not in providers:
                continue
            links[entry.name] = ChainLink(
                provider=providers[entry.name],
                breaker=ProviderBreaker(entry.name, entry.breaker, scrub=redact),
                retry=RetryPolicy(entry.retry),
                timeout_s=entry.timeout_s,
                price=entry.price,
            )
        chains = {
            route: ProviderChain(
                [links[name] for name in chain], telemetry=telemetry, redact=redact
            )
            for route, chain in settings.routes.items()
        }
        return cls(chains=chains, default_route=settings.default_route, links=links)


def redactor_for(settings: GatewaySettings) -> Redactor:
    """Masks every configured provider's API key."""
    return Redactor(resolve_api_key(entry) for entry in settings.providers)
