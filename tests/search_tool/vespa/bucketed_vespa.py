"""A stand-in for a Vespa holding chunk documents in buckets, for the listing tests: what the
recording server (`recording_server.py`) answers with. Nothing here is Vespa; each behaviour is
written from the page named beside it.

* The registry entry of collection `fixture`: a document get (`en/reference/api/document-v1.html`,
  "Get": `{"pathId", "id", "fields"}`).
* Visits, `GET /document/v1/quarry/chunk/docid?selection=…&fieldSet=chunk:…&wantedDocumentCount=…
  [&continuation=…]` (same page, "Visit"; `en/writing/visiting.html`): documents are iterated bucket
  by bucket in one fixed order, every selected document of a bucket at once, and the answer goes
  back once at least `wantedDocumentCount` documents were selected (or the buckets ran out), so an
  answer may hold more than that. The answer is `{"pathId", "documents": [{"id", "fields"}],
  "documentCount"}` plus `"continuation"` while buckets are left; a continuation this store did not
  issue is a 400 with a `message` (the handler parses it with `ProgressToken.fromSerializedString`).
  The selection is evaluated by the reference evaluator (`selection_reference.py`).
* Unranked queries `select <fields> from chunk where <yql>` with `hits`/`offset`, evaluated by the
  YQL reference evaluator (`yql_reference.py`), and the grouping
  `… limit 0 | all(group(document_id) max(n) each(output(count())))`, answered in the format of
  the pagination sample of `en/querying/grouping.html` (root → `group:root:0` →
  `grouplist:document_id` → `group:string:<id>` with `fields["count()"]`).
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from services.search_tool.documents import Chunk, ChunkRecord
from services.search_tool.engine.vespa.documents import chunk_document_id, chunk_fields
from services.search_tool.engine.vespa.package import TEXT_ATTRIBUTE_COPIES
from services.search_tool.filters import FieldType
from tests.search_tool.engine_fixtures import DIMENSIONS
from tests.search_tool.vespa.recording_server import Recorded, Reply
from tests.search_tool.vespa.selection_reference import matches, parse
from tests.search_tool.vespa.test_http_contract import FULL, REGISTRY_FIELDS, REGISTRY_PATH
from tests.search_tool.vespa.yql_reference import evaluate, parse_query

BUCKETS = 16
METADATA_TYPES = {"year": FieldType.INTEGER, "team": FieldType.STRING}
"""As `REGISTRY_FIELDS` records them."""
_GROUPING = re.compile(
    r" limit 0 \| all\(group\(document_id\) max\((\d+)\) each\(output\(count\(\)\)\)\)$"
)


@dataclass
class VisitAnswer:
    """What one visit request was answered with."""

    wanted: int
    documents: int
    continuation: str | None


@dataclass
class BucketedVespa:
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Vespa document id → fields (with the attribute copies the schema's indexing makes)."""
    visits: list[VisitAnswer] = field(default_factory=list)

    def put(self, chunk: Chunk) -> None:
        record = ChunkRecord(chunk, np.ones(DIMENSIONS, dtype=np.float32))
        fields = chunk_fields("fixture", record, METADATA_TYPES)
        for source, copy in TEXT_ATTRIBUTE_COPIES.items():
            fields[copy] = fields[source]
        self.documents[f"id:quarry:chunk::{chunk_document_id('fixture', chunk.id)}"] = fields

    def remove_document(self, document_id: str) -> None:
        for key in [k for k, f in self.documents.items() if f["document_id"] == document_id]:
            del self.documents[key]

    @staticmethod
    def bucket(vespa_id: str) -> int:
        return hashlib.sha256(vespa_id.encode()).digest()[0] % BUCKETS

    @staticmethod
    def bucket_of_token(token: str) -> int:
        """The bucket a continuation this store issued resumes at."""
        bucket = _bucket_of(token)
        assert bucket is not None
        return bucket

    def respond(self, request: Recorded) -> Reply:
        if request.method == "GET" and request.path == REGISTRY_PATH:
            return Reply(
                200,
                {
                    "pathId": request.path,
                    "id": "id:quarry:collection::fixture",
                    "fields": REGISTRY_FIELDS,
                },
            )
        if request.method == "GET" and request.path == "/document/v1/quarry/chunk/docid":
            return self._visit(request)
        if request.method == "POST" and request.path == "/search/":
            return self._query(request.json())
        return Reply(404, {"pathId": request.path, "message": "not in this stand-in"})

    def _visit(self, request: Recorded) -> Reply:
        selection = parse(request.query["selection"])
        wanted = int(request.query["wantedDocumentCount"])
        fieldset = request.query["fieldSet"].split(":", 1)[1].split(",")
        resumed = _bucket_of(request.query.get("continuation", _token(0)))
        if resumed is None:
            return Reply(400, {"pathId": request.path, "message": "Failed to parse progress token"})
        start = resumed
        found: list[dict[str, Any]] = []
        bucket = start
        while bucket < BUCKETS and len(found) < wanted:
            found.extend(
                {"id": key, "fields": {f: fields[f] for f in fieldset if f in fields}}
                for key, fields in sorted(self.documents.items())
                if self.bucket(key) == bucket and matches(selection, fields)
            )
            bucket += 1
        body: dict[str, Any] = {
            "pathId": request.path,
            "documents": found,
            "documentCount": len(found),
        }
        continuation = _token(bucket) if bucket < BUCKETS else None
        if continuation is not None:
            body["continuation"] = continuation
        self.visits.append(VisitAnswer(wanted, len(found), continuation))
        return Reply(200, body)

    def _query(self, body: dict[str, Any]) -> Reply:
        yql = body["yql"]
        grouping = _GROUPING.search(yql)
        query = parse_query(yql[: grouping.start()] if grouping else yql)
        selected = [
            fields for _, fields in sorted(self.documents.items()) if evaluate(query.where, fields)
        ]
        if grouping:
            counts: dict[str, int] = {}
            for fields in selected:
                counts[fields["document_id"]] = counts.get(fields["document_id"], 0) + 1
            groups = [
                {"id": f"group:string:{d}", "value": d, "relevance": 1.0, "fields": {"count()": n}}
                for d, n in sorted(counts.items())[: int(grouping.group(1))]
            ]
            root_group = {
                "id": "group:root:0",
                "relevance": 1.0,
                "continuation": {"this": ""},
                "children": [
                    {
                        "id": "grouplist:document_id",
                        "label": "document_id",
                        "relevance": 1.0,
                        "children": groups,
                    }
                ],
            }
            return _answer([root_group], len(selected))
        offset, hits = int(body.get("offset", 0)), int(body.get("hits", 10))
        page = [
            {
                "id": f"id:quarry:chunk::{f['chunk_id']}",
                "relevance": 0.0,
                "fields": {name: f[name] for name in query.select if name in f},
            }
            for f in selected[offset : offset + hits]
        ]
        return _answer(page, len(selected))


def _answer(children: list[dict[str, Any]], total: int) -> Reply:
    return Reply(
        200,
        {
            "root": {
                "id": "toplevel",
                "relevance": 1.0,
                "fields": {"totalCount": total},
                "coverage": FULL,
                "children": children,
            }
        },
    )


def _token(bucket: int) -> str:
    """An opaque continuation in the base64 alphabet, as Vespa's serialized progress tokens are."""
    return base64.b64encode(f"quarry-progress:{bucket}".encode()).decode()


def _bucket_of(token: str) -> int | None:
    try:
        text = base64.b64decode(token, validate=True).decode()
    except ValueError:
        return None
    prefix, _, number = text.partition(":")
    if prefix != "quarry-progress" or not number.isdigit() or int(number) >= BUCKETS:
        return None
    return int(number)
