"""The bundled demo collection: the Python standard library's documentation, built on first run
through the same ingest pipeline as `quarry ingest`."""

from quarry_cli.demo.build import (
    DEFAULT_COLLECTION,
    DemoCollectionStatus,
    demo_units,
    document_message,
    ensure_demo_collection,
)
from quarry_cli.demo.corpus import build_corpus

__all__ = [
    "DEFAULT_COLLECTION",
    "DemoCollectionStatus",
    "build_corpus",
    "demo_units",
    "document_message",
    "ensure_demo_collection",
]
