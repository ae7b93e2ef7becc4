"""The scale-out engine: Vespa, reached over HTTP/2 with pyvespa's async client.

Modules, each one concern: `package` (the application package: schemas, rank profiles, limits),
`topology` (where it runs: multi-node self-hosted and Vespa Cloud layouts), `registry` (the
collection entries replicas share, written by test-and-set), `yql` (filter compilation),
`queries` (the request bodies a search sends), `documents` (chunk records ⇄ Vespa documents),
`transport` (pyvespa inside our event loop: time limits, bounded concurrency and retries, error
mapping), `engine` (the `SearchEngine`: collections, writes, deletes, search, GetCollection).
"""

from services.search_tool.engine.vespa.engine import VespaEngine
from services.search_tool.engine.vespa.transport import Endpoint

__all__ = ["Endpoint", "VespaEngine"]
