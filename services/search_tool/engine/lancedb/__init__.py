"""The embedded engine: LanceDB 0.40, in process, persistent under a data directory.

One table per collection. Dense search is exact (flat cosine over the rows the filter leaves, so
selective filters keep full recall) until a collection is large enough for an IVF index; keyword
search is LanceDB's native BM25 index on `search_text`, which also scans rows added since the
index was built, and is rebuilt once enough of them accumulate. Filters are prefilters compiled to
SQL (`sql`). Fusion happens in Python over both candidate lists (`search`). LanceDB's async API
runs its work on its own threads, off the event loop. Never fork a process after opening an
engine: LanceDB does not survive it.

Modules, each one concern: `engine` (the `SearchEngine`: tables, locks, writes), `rows` (schema
and conversion), `sql` (filter compilation), `indexes` (index policy and builds), `vector_builds`
(background vector-index builds), `search` (one search: sides, fusion, paging), `retrieval` (the
LanceDB queries a search makes), `describe` (GetCollection).
"""

from services.search_tool.engine.lancedb.engine import LanceDBEngine
from services.search_tool.engine.lancedb.indexes import IndexPolicy

__all__ = ["IndexPolicy", "LanceDBEngine"]
