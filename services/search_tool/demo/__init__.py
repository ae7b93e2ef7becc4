"""The bundled demo collection: the Python standard library's documentation, built on first run."""

from services.search_tool.demo.build import (
    DEFAULT_COLLECTION,
    DemoCollectionStatus,
    ProgressBar,
    ensure_demo_collection,
    print_lines,
)
from services.search_tool.demo.corpus import build_corpus

__all__ = [
    "DEFAULT_COLLECTION",
    "DemoCollectionStatus",
    "ProgressBar",
    "build_corpus",
    "ensure_demo_collection",
    "print_lines",
]
