"""Hostile input against the three real services as processes: every RPC, generated requests, raw
bytes and the named regressions. Each call gets a documented status (never INTERNAL or UNKNOWN)
inside its deadline, the services stay up, and the canary collection is unchanged at the end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf.descriptor import MethodDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quarry.searchtool.v1 import search_tool_pb2, search_tool_pb2_grpc

from services.common.status import details_of_rpc_error
from tests.e2e.conftest import CHUNK_IDS, Stack
from tests.e2e.hostile import (
    CANARY_COLLECTION,
    DEADLINE_S,
    DOCUMENTED,
    HUGE_VALUES,
    REGRESSIONS,
    SCRATCH_COLLECTION,
    SCRATCH_DOCUMENT,
    UNDECODABLE,
    HugeValue,
    Regression,
    Verdict,
    call,
    generated,
    methods,
)
from tests.faults import damage

pytestmark = pytest.mark.slow
METHODS = methods()
EXAMPLES_PER_METHOD = 12


@pytest.fixture(scope="module")
def channels(stack: Stack) -> Iterator[dict[str, grpc.Channel]]:
    addresses = {
        "search_tool": stack.search_tool,
        "llm_gateway": stack.gateway,
        "agent": stack.agent,
    }
    opened = {name: grpc.insecure_channel(address) for name, address in addresses.items()}
    yield opened
    for channel in opened.values():
        channel.close()


def _assert_acceptable(verdict: Verdict) -> None:
    assert verdict.acceptable, f"{verdict.method}: {verdict.code.name} {verdict.detail[:300]}"


def _id(item: tuple[str, MethodDescriptor]) -> str:
    return item[1].name


@pytest.mark.parametrize("service_method", METHODS, ids=[_id(m) for m in METHODS])
@settings(
    max_examples=EXAMPLES_PER_METHOD,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
@given(data=st.data())
def test_generated_requests_get_a_documented_status_in_time(
    channels: dict[str, grpc.Channel],
    service_method: tuple[str, MethodDescriptor],
    data: st.DataObject,
) -> None:
    service, method = service_method
    payload = data.draw(generated(method), label="request")
    _assert_acceptable(call(channels[service], method, payload))


@pytest.mark.parametrize("service_method", METHODS, ids=[_id(m) for m in METHODS])
@settings(
    max_examples=EXAMPLES_PER_METHOD,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
@given(payload=st.binary(max_size=48))
def test_random_bytes_get_a_documented_status_in_time(
    channels: dict[str, grpc.Channel],
    service_method: tuple[str, MethodDescriptor],
    payload: bytes,
) -> None:
    service, method = service_method
    _assert_acceptable(call(channels[service], method, payload))


@pytest.mark.parametrize("service_method", METHODS, ids=[_id(m) for m in METHODS])
@pytest.mark.parametrize("kind", sorted(UNDECODABLE))
def test_bytes_that_are_not_the_request_are_invalid_argument(
    channels: dict[str, grpc.Channel], service_method: tuple[str, MethodDescriptor], kind: str
) -> None:
    service, method = service_method
    first = method.input_type.fields_by_number.get(1)
    if kind == "invalid-utf8" and (first is None or first.type != first.TYPE_STRING):
        pytest.skip(f"{method.input_type.name} has no string field 1 to carry invalid UTF-8")
    verdict = call(channels[service], method, UNDECODABLE[kind])
    assert verdict.code == grpc.StatusCode.INVALID_ARGUMENT, verdict


@pytest.mark.parametrize("regression", REGRESSIONS, ids=[r.name for r in REGRESSIONS])
def test_named_regression_gets_its_status(
    channels: dict[str, grpc.Channel], regression: Regression
) -> None:
    search = search_tool_pb2_grpc.SearchToolServiceStub(channels["search_tool"])
    search.UpsertDocuments(  # the generated requests may have deleted the scratch collection
        search_tool_pb2.UpsertDocumentsRequest(
            collection=SCRATCH_COLLECTION, documents=[SCRATCH_DOCUMENT]
        ),
        timeout=60,
    )
    method = next(m for s, m in METHODS if s == regression.service and m.name == regression.method)
    verdict = call(channels[regression.service], method, regression.request().SerializeToString())
    assert verdict.code == regression.expected, verdict


@pytest.mark.parametrize("huge", HUGE_VALUES, ids=[h.name for h in HUGE_VALUES])
def test_an_error_about_a_huge_value_reaches_the_caller_as_its_own_status(
    channels: dict[str, grpc.Channel], huge: HugeValue
) -> None:
    """Errors echoing 100 KB values passed gRPC's 16 KiB trailer limit, and the caller saw
    RESOURCE_EXHAUSTED "received metadata size exceeds hard limit" instead."""
    method = next(m for s, m in METHODS if s == huge.service and m.name == huge.method)
    path = f"/{method.containing_service.full_name}/{method.name}"
    request = huge.request().SerializeToString()
    with pytest.raises(grpc.RpcError) as caught:
        channels[huge.service].unary_unary(path, None, None)(request, timeout=DEADLINE_S)
    error: Any = caught.value
    assert error.code() == huge.expected, error.details()[:300]
    assert len(error.details()) < 1_000
    details = details_of_rpc_error(error)
    if huge.field:
        assert [v.field for v in details.violations if v.field.startswith(huge.field)]


def test_a_damaged_collection_answers_data_loss_on_every_read_and_the_others_keep_working(
    stack: Stack, channels: dict[str, grpc.Channel]
) -> None:
    """DATA_LOSS is documented because this test damages data: 4 KB of random bytes in every data
    file of one collection of the running search tool. Each read of it answers a documented
    status (a search DATA_LOSS naming it), never INTERNAL; the canary keeps answering."""
    stub = search_tool_pb2_grpc.SearchToolServiceStub(channels["search_tool"])
    stub.UpsertDocuments(
        search_tool_pb2.UpsertDocumentsRequest(
            collection="damaged",
            documents=[
                search_tool_pb2.Document(id=f"d{n}", text=f"alpha beta gamma {n} " * 40)
                for n in range(20)
            ],
        ),
        timeout=120,
    )
    files = [p for p in (stack.logs / "data" / "damaged.lance").rglob("*") if p.is_file()]
    files = [p for p in files if "/data/" in str(p)]
    assert files
    for path in files:
        size = path.stat().st_size
        damage(path, offset=size // 3, length=min(4096, max(1, size // 3)))
    reads: dict[str, Callable[[], Any]] = {
        "Search": lambda: stub.Search(
            search_tool_pb2.SearchRequest(collection="damaged", query={"primary": "alpha"}),
            timeout=DEADLINE_S,
        ),
        "ReadDocument": lambda: stub.ReadDocument(
            search_tool_pb2.ReadDocumentRequest(collection="damaged", document_id="d1"),
            timeout=DEADLINE_S,
        ),
        "ListDocuments": lambda: stub.ListDocuments(
            search_tool_pb2.ListDocumentsRequest(collection="damaged"), timeout=DEADLINE_S
        ),
        "CountDocuments": lambda: stub.CountDocuments(
            search_tool_pb2.CountDocumentsRequest(collection="damaged"), timeout=DEADLINE_S
        ),
    }
    codes: dict[str, grpc.StatusCode] = {}
    details: dict[str, str] = {}
    for name, read in reads.items():
        try:
            read()
            codes[name] = grpc.StatusCode.OK
        except grpc.RpcError as error:
            failed: Any = error
            codes[name], details[name] = failed.code(), failed.details() or ""
    assert all(code in DOCUMENTED for code in codes.values()), codes
    assert codes["Search"] == grpc.StatusCode.DATA_LOSS, codes
    assert all(
        "collection damaged is damaged" in details[n]
        for n, code in codes.items()
        if code == grpc.StatusCode.DATA_LOSS
    )
    listed = stub.ListCollections(search_tool_pb2.ListCollectionsRequest(), timeout=DEADLINE_S)
    assert CANARY_COLLECTION in [c.name for c in listed.collections]
    canary = stub.Search(
        search_tool_pb2.SearchRequest(collection=CANARY_COLLECTION, query={"primary": "directory"}),
        timeout=DEADLINE_S,
    )
    assert canary.results


def test_the_canary_collection_is_unchanged_after_the_corpus(
    channels: dict[str, grpc.Channel],
) -> None:
    """Runs last in this module (pytest keeps file order): every write above went elsewhere or was
    refused, and the services still answer."""
    stub = search_tool_pb2_grpc.SearchToolServiceStub(channels["search_tool"])
    collection = stub.GetCollection(
        search_tool_pb2.GetCollectionRequest(collection=CANARY_COLLECTION), timeout=10
    ).collection
    assert collection.chunk_count == len(CHUNK_IDS)
    reply = stub.Search(
        search_tool_pb2.SearchRequest(
            collection=CANARY_COLLECTION, query={"primary": "directory"}, limit=200
        ),
        timeout=10,
    )
    assert {r.chunk.id for r in reply.results} == CHUNK_IDS
