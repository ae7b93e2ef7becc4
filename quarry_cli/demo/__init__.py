"""The bundled demo collection: the Python standard library's documentation, built on first run."""

from quarry_cli.demo.build import (
    DEFAULT_COLLECTION,
    DemoCollectionStatus,
    ProgressBar,
    document_message,
    ensure_demo_collection,
    print_lines,
)
from quarry_cli.demo.corpus import build_corpus

__all__ = [
    "DEFAULT_COLLECTION",
    "DemoCollectionStatus",
    "ProgressBar",
    "build_corpus",
    "document_message",
    "ensure_demo_collection",
    "print_lines",
]
