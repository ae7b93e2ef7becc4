"""A bad-input corpus for every RPC of the three services, and the one verdict every case must get.

Requests come three ways: generated from each request message's descriptor (any field, any value of
its wire type: extreme integers, NaN, unknown enum numbers, unicode, nested Structs, timestamps far
outside the calendar), raw bytes that may or may not parse as the request, and named regressions
(the hostile requests a review sent by hand). The verdict (`judge`) is the same for all: a status
from the documented set — never INTERNAL or UNKNOWN — inside the call's deadline; a stream that
ends with an `error` event is judged by that event's code.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from hypothesis import strategies as st
from quarry.agent.v1 import agent_pb2
from quarry.llmgateway.v1 import llm_gateway_pb2
from quarry.searchtool.v1 import search_tool_pb2

CANARY_COLLECTION = "e2e-docs"
"""The collection the corpus may read but must never change."""
SCRATCH_COLLECTION = "hostile-scratch"
"""Where requests that write are sent instead, should they name the canary."""
DEADLINE_S = 20.0
"""The bound: a call that is not answered by then counts as hanging."""

DOCUMENTED = frozenset(
    {
        grpc.StatusCode.OK,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.DATA_LOSS,
    }
)
"""Every status a request may get; INTERNAL, UNKNOWN and a DEADLINE_EXCEEDED are never right.
DATA_LOSS only where data was damaged (`test_a_damaged_collection_answers_data_loss_...`)."""

SERVICES: dict[str, Any] = {
    "search_tool": search_tool_pb2.DESCRIPTOR.services_by_name["SearchToolService"],
    "llm_gateway": llm_gateway_pb2.DESCRIPTOR.services_by_name["LlmGatewayService"],
    "agent": agent_pb2.DESCRIPTOR.services_by_name["AgentService"],
}
WRITES = frozenset({"UpsertDocuments", "DeleteDocuments", "DeleteCollection"})


@dataclass(frozen=True)
class Verdict:
    """How one call ended."""

    method: str
    """Full method path."""
    code: grpc.StatusCode
    """The status, or the `error` event's code for a stream that ended with one."""
    detail: str
    """The status message, for the failure report."""
    seconds: float
    """Time to the answer."""

    @property
    def acceptable(self) -> bool:
        return self.code in DOCUMENTED


def methods() -> list[tuple[str, MethodDescriptor]]:
    """(service name, method) for every RPC of the three services."""
    return [(name, m) for name, service in SERVICES.items() for m in service.methods]


def request_class(method: MethodDescriptor) -> type[Message]:
    return message_factory.GetMessageClass(method.input_type)


def call(channel: grpc.Channel, method: MethodDescriptor, payload: bytes) -> Verdict:
    """Send `payload` (serialised request bytes, valid or not) and judge the answer."""
    path = f"/{method.containing_service.full_name}/{method.name}"
    started = time.monotonic()
    try:
        if method.server_streaming:
            stream = channel.unary_stream(path, None, None)
            code, detail = _drain(method, stream(payload, timeout=DEADLINE_S))
        else:
            channel.unary_unary(path, None, None)(payload, timeout=DEADLINE_S)
            code, detail = grpc.StatusCode.OK, ""
    except grpc.RpcError as error:
        code, detail = error.code(), error.details() or ""
    return Verdict(path, code, detail, time.monotonic() - started)


def _drain(method: MethodDescriptor, responses: Any) -> tuple[grpc.StatusCode, str]:
    """Read a stream to its end; an agent stream that ends with an `error` event is judged by it."""
    events = list(responses)
    if events and method.output_type.full_name == agent_pb2.StreamRunResponse.DESCRIPTOR.full_name:
        event = agent_pb2.StreamRunResponse.FromString(events[-1])
        if event.WhichOneof("event") == "error":
            return grpc.StatusCode[event.error.code], event.error.message
    return grpc.StatusCode.OK, ""


def keep_canary(method: MethodDescriptor, request: Message) -> Message:
    """Send writes meant for the canary collection to the scratch collection instead."""
    if method.name in WRITES and getattr(request, "collection", None) == CANARY_COLLECTION:
        request.collection = SCRATCH_COLLECTION  # type: ignore[attr-defined]
    return request


# --- generated requests ---------------------------------------------------------------------------

_INTS = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_WORDS = st.sampled_from(
    [CANARY_COLLECTION, "python", "' OR 1=1 --", "source", "created_at", "metadata.year", ""]
)
MAX_DEPTH = 4


def messages(descriptor: Any, depth: int = 0) -> st.SearchStrategy[Message]:
    """Any message of `descriptor`'s type: each field absent or any value its wire type allows."""
    cls = message_factory.GetMessageClass(descriptor)
    if depth >= MAX_DEPTH:
        return st.just(cls())
    optional = {f.name: _field(f, depth) for f in descriptor.fields}
    return st.fixed_dictionaries({}, optional=optional).map(lambda values: _build(cls, values))


def _build(cls: type[Message], values: dict[str, Any]) -> Message:
    message = cls()
    for name, value in values.items():
        field: Any = message.DESCRIPTOR.fields_by_name[name]
        target = getattr(message, name)
        if _is_map(field):
            for key, item in value.items():
                if field.message_type.fields_by_name["value"].message_type is not None:
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.is_repeated:
            target.extend(value)
        elif field.message_type is not None:
            target.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def _is_map(field: Any) -> bool:
    return bool(
        field.message_type is not None
        and field.message_type.GetOptions().map_entry
        and field.is_repeated
    )


def _field(field: Any, depth: int) -> st.SearchStrategy[Any]:
    if _is_map(field):
        entry = field.message_type
        return st.dictionaries(
            _scalar(entry.fields_by_name["key"]),
            _single(entry.fields_by_name["value"], depth),
            max_size=4,
        )
    single = _single(field, depth)
    if field.is_repeated:
        return st.lists(single, max_size=5)
    return single


def _single(field: Any, depth: int) -> st.SearchStrategy[Any]:
    if field.message_type is not None:
        return messages(field.message_type, depth + 1)
    return _scalar(field)


def _scalar(field: Any) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INTS:
        low, high = _INTS[kind]
        return st.one_of(
            st.integers(low, high), st.sampled_from([low, high, 0, 1, -1 if low else 0])
        )
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(allow_nan=True, allow_infinity=True, width=32 if kind == 2 else 64)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_ENUM:
        return st.one_of(
            st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 99)
        )
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    return st.one_of(st.text(max_size=80), _WORDS)


def generated(method: MethodDescriptor) -> st.SearchStrategy[bytes]:
    """Serialised requests for `method`, writes kept off the canary collection."""
    return messages(method.input_type).map(
        lambda request: keep_canary(method, request).SerializeToString()
    )


# --- named regressions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Regression:
    """A hostile request seen in review, and the status it must get."""

    name: str
    service: str
    method: str
    request: Callable[[], Message]
    expected: grpc.StatusCode


def _search(collection: str = CANARY_COLLECTION, **fields: Any) -> search_tool_pb2.SearchRequest:
    primary = fields.pop("primary", "directory")
    return search_tool_pb2.SearchRequest(
        collection=collection, query={"primary": primary}, **fields
    )


def _where(field: str, operator: int, value: Any) -> dict[str, Any]:
    return {"groups": [{"conditions": [{"field": field, "operator": operator, "value": value}]}]}


def _value(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        return {"string_value": raw}
    return {"number_value": raw}


def _filter_search(
    field: str, operator: int, raw: Any, collection: str = CANARY_COLLECTION
) -> Callable[[], Message]:
    return lambda: _search(collection, filter=_where(field, operator, _value(raw)))


def _upsert_at(seconds: int, nanos: int = 0) -> Callable[[], Message]:
    def build() -> Message:
        document = search_tool_pb2.Document(id="t", text="timestamp", title="t")
        document.created_at.seconds, document.created_at.nanos = seconds, nanos
        return search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION, documents=[document]
        )

    return build


def _nested_schema(depth: int) -> str:
    return '{"type": "object", "properties": {"a": ' * depth + "{}" + "}}" * depth


def _run_with_caller_filter(field: str, operator: int, raw: Any) -> Callable[[], Message]:
    return lambda: agent_pb2.RunRequest(
        collection=CANARY_COLLECTION,
        query="temporary directory",
        filter=_where(field, operator, _value(raw)),
    )


_GT, _LT, _EQ, _CONTAINS = 4, 6, 1, 3
OK, INVALID = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT
MB = 1024 * 1024

REGRESSIONS: tuple[Regression, ...] = (
    Regression(
        "search created_at after year 0001",
        "search_tool",
        "Search",
        _filter_search("created_at", _GT, "0001-01-01"),
        OK,
    ),
    Regression(
        "search created_at before year 9999",
        "search_tool",
        "Search",
        _filter_search("created_at", _LT, "9999-12-31T23:59:59Z"),
        OK,
    ),
    Regression(
        "search integer metadata beyond int64",
        "search_tool",
        "Search",
        _filter_search("metadata.year", _GT, 1e19, SCRATCH_COLLECTION),
        OK,
    ),
    Regression(
        "search integer metadata below -1e308",
        "search_tool",
        "Search",
        _filter_search("metadata.year", _LT, -1e308, SCRATCH_COLLECTION),
        OK,
    ),
    Regression(
        "delete by created_at in year 0001",
        "search_tool",
        "DeleteDocuments",
        lambda: search_tool_pb2.DeleteDocumentsRequest(
            collection=CANARY_COLLECTION, filter=_where("created_at", _LT, _value("0001-01-02"))
        ),
        OK,
    ),
    Regression(
        "upsert created_at.seconds 2^62",
        "search_tool",
        "UpsertDocuments",
        _upsert_at(2**62),
        INVALID,
    ),
    Regression(
        "upsert created_at.nanos 2e9",
        "search_tool",
        "UpsertDocuments",
        _upsert_at(0, 2_000_000_000),
        INVALID,
    ),
    Regression(
        "upsert created_at before year 1",
        "search_tool",
        "UpsertDocuments",
        _upsert_at(-62_135_596_801),
        INVALID,
    ),
    Regression(
        "structured schema nested 3,000 deep",
        "llm_gateway",
        "GenerateStructured",
        lambda: llm_gateway_pb2.GenerateStructuredRequest(
            messages=[{"role": 2, "text": "x"}], schema_json=_nested_schema(3_000)
        ),
        INVALID,
    ),
    Regression(
        "caller filter with a malformed date",
        "agent",
        "Run",
        _run_with_caller_filter("created_at", _GT, "last tuesday"),
        INVALID,
    ),
    Regression(
        "caller filter contains on an integer",
        "agent",
        "Run",
        _run_with_caller_filter("chunk_index", _CONTAINS, "1"),
        INVALID,
    ),
    Regression(
        "caller filter with a wrong value type",
        "agent",
        "Run",
        _run_with_caller_filter("chunk_index", _EQ, "one"),
        INVALID,
    ),
    Regression(
        "caller filter on an unknown metadata key",
        "agent",
        "Run",
        _run_with_caller_filter("metadata.nope", _EQ, "x"),
        INVALID,
    ),
    Regression(
        "caller filter ordering on text",
        "agent",
        "Run",
        _run_with_caller_filter("title", _GT, "a"),
        INVALID,
    ),
    Regression(
        "20 MB query", "search_tool", "Search", lambda: _search(primary="q" * (20 * MB)), INVALID
    ),
    Regression(
        "nine 1 MB variations",
        "search_tool",
        "Search",
        lambda: search_tool_pb2.SearchRequest(
            collection=CANARY_COLLECTION, query={"primary": "q", "variations": ["v" * MB] * 9}
        ),
        INVALID,
    ),
    Regression(
        "3 MB title",
        "search_tool",
        "UpsertDocuments",
        lambda: search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION,
            documents=[{"id": "t", "text": "x", "title": "t" * (3 * MB)}],
        ),
        INVALID,
    ),
    Regression(
        "50,000 breadcrumbs",
        "search_tool",
        "UpsertDocuments",
        lambda: search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION,
            documents=[
                {"id": "t", "text": "x", "breadcrumbs": [{"id": "b", "name": "n"}] * 50_000}
            ],
        ),
        INVALID,
    ),
    Regression(
        "10 MB url",
        "search_tool",
        "UpsertDocuments",
        lambda: search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION,
            documents=[{"id": "t", "text": "x", "url": "u" * (10 * MB)}],
        ),
        INVALID,
    ),
    Regression(
        "10,000 OR groups",
        "search_tool",
        "Search",
        lambda: _search(
            filter={
                "groups": [
                    {
                        "conditions": [
                            {"field": "source", "operator": _EQ, "value": {"string_value": "s"}}
                        ]
                    }
                ]
                * 10_000
            }
        ),
        INVALID,
    ),
)
"""Each request of the issue's list, by name. The integer-metadata searches run on the scratch
collection, which the test loads with an integer `year` first (`SCRATCH_DOCUMENT`)."""

SCRATCH_DOCUMENT = search_tool_pb2.Document(id="scratch", text="a scratch document")
SCRATCH_DOCUMENT.metadata["year"].int_value = 2024

UNDECODABLE = {"invalid-utf8": b"\x0a\x02\xff\xfe", "truncated": b"\x0a\x10abc"}
"""Field 1 of every request is a string: once with bytes that are not UTF-8, once cut short."""


# --- huge values: the error must reach the caller as its own status -------------------------------

HUGE = "h" * 200_000
"""A value past every limit and, echoed whole, past gRPC's 16 KiB trailer limit."""


@dataclass(frozen=True)
class HugeValue:
    """A request with one huge value; the caller must see `expected` naming `field` (a prefix of
    the violation's field, "" when the status names no field), not RESOURCE_EXHAUSTED from
    oversized trailers."""

    name: str
    service: str
    method: str
    request: Callable[[], Message]
    expected: grpc.StatusCode
    field: str


def _upsert(**document: Any) -> Callable[[], Message]:
    fields = {"id": "t", "text": "x", **document}
    return lambda: search_tool_pb2.UpsertDocumentsRequest(
        collection=SCRATCH_COLLECTION, documents=[fields]
    )


_NOT_FOUND = grpc.StatusCode.NOT_FOUND
HUGE_VALUES: tuple[HugeValue, ...] = (
    HugeValue(
        "document id",
        "search_tool",
        "UpsertDocuments",
        _upsert(id=HUGE),
        INVALID,
        "documents[0].id",
    ),
    HugeValue(
        "title",
        "search_tool",
        "UpsertDocuments",
        _upsert(title=HUGE),
        INVALID,
        "documents[0].title",
    ),
    HugeValue(
        "metadata value",
        "search_tool",
        "UpsertDocuments",
        _upsert(metadata={"k": {"string_value": HUGE}}),
        INVALID,
        'documents[0].metadata["k"]',
    ),
    HugeValue(
        "metadata key",
        "search_tool",
        "UpsertDocuments",
        _upsert(metadata={HUGE: {"string_value": "v"}}),
        INVALID,
        "documents[0].metadata",
    ),
    HugeValue(
        "read document id",
        "search_tool",
        "ReadDocument",
        lambda: search_tool_pb2.ReadDocumentRequest(collection=CANARY_COLLECTION, document_id=HUGE),
        INVALID,
        "document_id",
    ),
    HugeValue(
        "delete document id",
        "search_tool",
        "DeleteDocuments",
        lambda: search_tool_pb2.DeleteDocumentsRequest(
            collection=SCRATCH_COLLECTION, document_ids=[HUGE]
        ),
        INVALID,
        "document_ids[0]",
    ),
    HugeValue(
        "filter field",
        "search_tool",
        "Search",
        lambda: _search(filter=_where(HUGE, _EQ, _value("x"))),
        INVALID,
        "filter.groups[0].conditions[0].field",
    ),
    HugeValue(
        "filter date",
        "search_tool",
        "Search",
        lambda: _search(filter=_where("created_at", _GT, _value(HUGE))),
        INVALID,
        "filter.groups[0].conditions[0].value",
    ),
    HugeValue(
        "group by",
        "search_tool",
        "CountDocuments",
        lambda: search_tool_pb2.CountDocumentsRequest(
            collection=CANARY_COLLECTION, group_by=[HUGE]
        ),
        INVALID,
        "group_by[0]",
    ),
    HugeValue(
        "run tool name",
        "agent",
        "Run",
        lambda: agent_pb2.RunRequest(collection=CANARY_COLLECTION, query="q", tools=[HUGE]),
        INVALID,
        "tools[0]",
    ),
    HugeValue(
        "run collection",
        "agent",
        "Run",
        lambda: agent_pb2.RunRequest(collection=HUGE, query="q"),
        INVALID,
        "collection",
    ),
    HugeValue(
        "prior answer",
        "agent",
        "Run",
        lambda: agent_pb2.RunRequest(
            collection=CANARY_COLLECTION,
            query="q",
            history=[agent_pb2.ConversationTurn(question="earlier?", answer=HUGE)],
        ),
        INVALID,
        "history",
    ),
    HugeValue(
        "question answer",
        "agent",
        "AnswerQuestion",
        lambda: agent_pb2.AnswerQuestionRequest(run_id="r", question_id="q", text=HUGE),
        INVALID,
        "text",
    ),
    HugeValue(
        "question run id",
        "agent",
        "AnswerQuestion",
        lambda: agent_pb2.AnswerQuestionRequest(run_id=HUGE, question_id="q", text="yes"),
        INVALID,
        "run_id",
    ),
    HugeValue(
        "run id",
        "agent",
        "GetRun",
        lambda: agent_pb2.GetRunRequest(run_id=HUGE),
        INVALID,
        "run_id",
    ),
    HugeValue(
        "route",
        "llm_gateway",
        "Generate",
        lambda: llm_gateway_pb2.GenerateRequest(
            route=HUGE, messages=[llm_gateway_pb2.Message(role=llm_gateway_pb2.ROLE_USER, text="x")]
        ),
        _NOT_FOUND,
        "",
    ),
    HugeValue(
        "tool call id",
        "llm_gateway",
        "Generate",
        lambda: llm_gateway_pb2.GenerateRequest(
            messages=[
                llm_gateway_pb2.Message(role=llm_gateway_pb2.ROLE_USER, text="x"),
                llm_gateway_pb2.Message(
                    role=llm_gateway_pb2.ROLE_TOOL, text="r", tool_call_id=HUGE
                ),
            ]
        ),
        INVALID,
        "messages[1]",
    ),
)


# --- the largest requests each limit accepts: each must finish in seconds ------------------------

_CJK = "漢字検索"
"""One word piece per character: the most embedder work per character a caller can send."""


def _cjk(chars: int) -> str:
    return (_CJK * (chars // len(_CJK) + 1))[:chars]


def _words(size: int) -> str:
    words = "retrieval augmented answers cite the documents they read "
    return (words * (size // len(words) + 1))[:size]


def _schema_of(chars: int, seed: int) -> str:
    """A flat object schema of about `chars` characters (at most), distinct per `seed`."""
    properties: dict[str, object] = {}
    while len(json.dumps({"type": "object", "properties": properties})) < chars - 40:
        properties[f"p{seed}_{len(properties)}"] = {"type": "string"}
    return json.dumps({"type": "object", "properties": properties})


@functools.cache
def _largest_words(documents: int) -> int:
    """The longest `_words` text of which `documents` copies in one UpsertDocuments fit the
    default `upsert_total_word_pieces` (counted as the search tool counts: chunks, overlaps,
    markers)."""
    from services.search_tool.chunking import Chunker
    from services.search_tool.config import SearchToolSettings
    from services.search_tool.embedding.minilm import WordPieceTokenizer

    settings = SearchToolSettings()
    tokenizer = WordPieceTokenizer()
    chunker = Chunker(
        tokenizer,
        chunk_tokens=settings.chunking.chunk_tokens,
        overlap_tokens=settings.chunking.overlap_tokens,
    )
    most, budget = settings.embedding.max_tokens, settings.limits.upsert_total_word_pieces

    def pieces(size: int) -> int:
        chunks = chunker.split(_words(size))
        return documents * sum(min(len(tokenizer.spans(c.text)) + 2, most) for c in chunks)

    low, high = 1, settings.max_document_bytes
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if pieces(middle) <= budget else (low, middle - 1)
    return low


@dataclass(frozen=True)
class Largest:
    """The largest request an RPC accepts under the documented default limits."""

    name: str
    service: str
    method: str
    request: Callable[[], Message]


LARGEST_ACCEPTED: tuple[Largest, ...] = (
    Largest(
        "Search: 4,000-character query, 9 variations of 4,000, limit 200",
        "search_tool",
        "Search",
        lambda: search_tool_pb2.SearchRequest(
            collection=CANARY_COLLECTION,
            query={"primary": _cjk(4_000), "variations": [_cjk(4_000)] * 9},
            limit=200,
        ),
    ),
    Largest(
        "Embed: 16 texts of 254 CJK characters (4,096 word pieces, the most the model reads)",
        "search_tool",
        "Embed",
        lambda: search_tool_pb2.EmbedRequest(texts=[_cjk(254)] * 16),
    ),
    Largest(
        "Embed: 256 short texts (16,000 characters in all)",
        "search_tool",
        "Embed",
        lambda: search_tool_pb2.EmbedRequest(texts=[_words(62)] * 256),
    ),
    Largest(
        "UpsertDocuments: one English document at the word-piece bound",
        "search_tool",
        "UpsertDocuments",
        lambda: search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION,
            documents=[search_tool_pb2.Document(id="largest", text=_words(_largest_words(1)))],
        ),
    ),
    Largest(
        "UpsertDocuments: one CJK document of 13,000 characters (16,362 word pieces of chunks)",
        "search_tool",
        "UpsertDocuments",
        lambda: search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION,
            documents=[search_tool_pb2.Document(id="largest-cjk", text=_cjk(13_000))],
        ),
    ),
    Largest(
        "UpsertDocuments: one document of 262,144 bytes (words of 150 letters, one piece each)",
        "search_tool",
        "UpsertDocuments",
        lambda: search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION,
            documents=[
                search_tool_pb2.Document(
                    id="largest-bytes", text=(("w" * 150 + " ") * 1_737)[:262_144]
                )
            ],
        ),
    ),
    Largest(
        "UpsertDocuments: 1,000 documents at the word-piece bound",
        "search_tool",
        "UpsertDocuments",
        lambda: search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION,
            documents=[
                search_tool_pb2.Document(id=f"many-{n}", text=_words(_largest_words(1_000)))
                for n in range(1_000)
            ],
        ),
    ),
    Largest(
        "Generate (offline route): a 3,900,000-character tool result (its 1,000,000-token window)"
        " and two tools of 32,700-character schemas (65,536 characters of tools in all)",
        "llm_gateway",
        "Generate",
        lambda: llm_gateway_pb2.GenerateRequest(
            messages=[
                llm_gateway_pb2.Message(role=llm_gateway_pb2.ROLE_USER, text="what is cited?"),
                llm_gateway_pb2.Message(
                    role=llm_gateway_pb2.ROLE_ASSISTANT,
                    tool_calls=[llm_gateway_pb2.ToolCall(id="c1", name="t0", arguments_json="{}")],
                ),
                llm_gateway_pb2.Message(
                    role=llm_gateway_pb2.ROLE_TOOL, text=_words(3_900_000), tool_call_id="c1"
                ),
            ],
            tools=[
                llm_gateway_pb2.Tool(name=f"t{n}", parameters_json=_schema_of(32_700, n))
                for n in range(2)
            ],
        ),
    ),
    Largest(
        "ReadDocument: 200 chunks",
        "search_tool",
        "ReadDocument",
        lambda: search_tool_pb2.ReadDocumentRequest(
            collection=SCRATCH_COLLECTION, document_id="largest", max_chunks=200
        ),
    ),
    Largest(
        "ListDocuments: page of 10,000",
        "search_tool",
        "ListDocuments",
        lambda: search_tool_pb2.ListDocumentsRequest(
            collection=SCRATCH_COLLECTION, page_size=10_000
        ),
    ),
    Largest(
        "CountDocuments: grouped by source and entity_type",
        "search_tool",
        "CountDocuments",
        lambda: search_tool_pb2.CountDocumentsRequest(
            collection=SCRATCH_COLLECTION, group_by=["source", "entity_type"]
        ),
    ),
    Largest(
        "GetCollection",
        "search_tool",
        "GetCollection",
        lambda: search_tool_pb2.GetCollectionRequest(collection=SCRATCH_COLLECTION),
    ),
    Largest(
        "ListCollections", "search_tool", "ListCollections", search_tool_pb2.ListCollectionsRequest
    ),
    Largest(
        "Run: 4,000-character question, 20 prior turns of 1,600 characters (32,000 in all)",
        "agent",
        "Run",
        lambda: agent_pb2.RunRequest(
            collection=CANARY_COLLECTION,
            query=_words(4_000),
            history=[agent_pb2.ConversationTurn(question=_words(600), answer=_words(1_000))] * 20,
        ),
    ),
    Largest(
        "DeleteDocuments: 1,000 ids",
        "search_tool",
        "DeleteDocuments",
        lambda: search_tool_pb2.DeleteDocumentsRequest(
            collection=SCRATCH_COLLECTION, document_ids=[f"many-{n}" for n in range(1_000)]
        ),
    ),
)
"""In order: the reads after the upserts find their documents, the delete runs last."""
