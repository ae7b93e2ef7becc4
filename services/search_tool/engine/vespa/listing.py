"""ListDocuments on Vespa, page by page: a visit of the collection's first chunks.

Every stored document has exactly one chunk 0 (the chunker numbers from 0, a new version rewrites
chunk 0 and deletes only chunks past its end), and every chunk of a document carries the same
document-level fields (source, title, dates, url, breadcrumbs, metadata). So "the documents with a
chunk matching the filter" are "the documents whose chunk 0 matches it" whenever the filter names
document-level fields only, and listing them is visiting `chunk.chunk_index == 0` with the filter's
document selection (`selection.py`), `wantedDocumentCount` about a page, resuming from Vespa's
`continuation` (`en/reference/api/document-v1.html`, "Visit"). A page then costs the buckets it
visits, and the whole listing one pass over the collection, where the query path read every
matching id for every page.

Why visiting and not grouping with continuations (which would keep the id order): a grouping
page over `group(document_id)` matches every chunk of the filter and builds a group per document
on every content node for every page (the continuation only says which groups to return), so a
listing of N documents costs about N²/page; groups are ordered by `uca` collation, not the code
point order the other engines list in; and the grouping reference itself warns that ordering by
`max`/`min` is not re-sorted after the merge across content nodes. The price of visiting is the
order: bucket order, stable within one listing, not by id (`DocumentPaging`).

Vespa answers a visit after *about* `wantedDocumentCount` documents: whole buckets, so a response
may hold more than the page has room for. The cursor then stays on that response: it keeps the
continuation the response was asked from, the `wantedDocumentCount` it was asked with, the last id
served (a response is sorted by id here) and a digest of the continuation the response ended
with. The next page asks the same again: one visitor at a time in bucket order, the same request
covers the same buckets, which the same ending continuation confirms, and the ids after the last
one served follow. When writes in those very buckets changed what the request covers (another
ending continuation), the response is served again from its start: a document may then be listed
twice, never skipped. Otherwise a document written or deleted during a listing may or may not be
listed, as visiting itself promises (no snapshot isolation).

Filters naming a per-chunk field (`id`, `chunk_index`, `text`) or without a document selection
(metadata keys, non-ASCII values, the empty string: `selection.py`) are not paged here: the
service lists those with `list_documents`, ordered by id, as before.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from services.search_tool.engine.base import CursorRejected
from services.search_tool.engine.vespa.package import CHUNK
from services.search_tool.engine.vespa.selection import compile_selection
from services.search_tool.filters import FilterExpression

PER_CHUNK_FIELDS = frozenset({"id", "chunk_index", "text"})
"""Fields whose value differs between the chunks of one document."""
MAX_WANTED = 1000
"""`wantedDocumentCount` of one visit request (Vespa's handler capped it at 1024 for years)."""
MAX_ROUNDS = 32
"""Visit requests one page may make; a page that needed more comes back short, with a cursor."""
_CONTINUATION = re.compile(r"[A-Za-z0-9+/=_-]{1,32768}")
"""A serialized `ProgressToken` is base64 text."""
_DIGEST = re.compile(r"(?:[0-9a-f]{16})?")
_FOREIGN = "is not a token this service issued (pass next_page_token as is)"


def first_chunk_selection(collection: str, expression: FilterExpression | None) -> str | None:
    """The document selection of the chunks 0 of the documents `expression` lists, or None
    when this filter is not paged by visiting (see the module docstring)."""
    expression = expression or FilterExpression()
    named = {c.field for group in expression.groups for c in group.conditions}
    if named & PER_CHUNK_FIELDS:
        return None
    selection = compile_selection(collection, expression)
    if selection is None:
        return None
    return f"{selection} and {CHUNK}.chunk_index == 0"


@dataclass(frozen=True)
class VisitCursor:
    """Where a listing resumes: a visit request (its `continuation`, "" at the start, and the
    `wantedDocumentCount` it was sent with, 0 when it was not sent yet), the last document id
    already served from its response ("" when none was) and `ending`, the digest of the
    continuation that response ended with."""

    continuation: str = ""
    wanted: int = 0
    after: str = ""
    ending: str = ""

    def encode(self) -> str:
        return json.dumps(
            {"c": self.continuation, "w": self.wanted, "a": self.after, "e": self.ending}
        )

    @classmethod
    def decode(cls, text: str) -> VisitCursor:
        """The cursor `encode` wrote; `CursorRejected` for anything else."""
        try:
            fields = json.loads(text)
        except ValueError:
            fields = None
        if not isinstance(fields, dict) or set(fields) != {"c", "w", "a", "e"}:
            raise CursorRejected(_FOREIGN)
        continuation, wanted, after, ending = fields["c"], fields["w"], fields["a"], fields["e"]
        valid = (
            isinstance(continuation, str)
            and (not continuation or _CONTINUATION.fullmatch(continuation) is not None)
            and isinstance(wanted, int)
            and not isinstance(wanted, bool)
            and 0 <= wanted <= MAX_WANTED
            and isinstance(after, str)
            and isinstance(ending, str)
            and _DIGEST.fullmatch(ending) is not None
            and (wanted > 0 or not after)  # an id is served only from a response already asked
        )
        if not valid:
            raise CursorRejected(_FOREIGN)
        return cls(continuation, wanted, after, ending)


def ending_digest(continuation: str) -> str:
    """The digest a cursor keeps of the continuation a response ended with."""
    return hashlib.sha256(continuation.encode()).hexdigest()[:16]
