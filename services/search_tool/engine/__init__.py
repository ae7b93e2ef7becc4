"""Engines behind one interface: the embedded LanceDB engine now, Vespa later."""

from services.search_tool.engine.base import (
    CollectionSpec,
    CollectionStats,
    EngineQuery,
    Fusion,
    FusionMethod,
    Hit,
    SearchEngine,
    SearchPage,
    StoredVersion,
    Strategy,
)

__all__ = [
    "CollectionSpec",
    "CollectionStats",
    "EngineQuery",
    "Fusion",
    "FusionMethod",
    "Hit",
    "SearchEngine",
    "SearchPage",
    "StoredVersion",
    "Strategy",
]
