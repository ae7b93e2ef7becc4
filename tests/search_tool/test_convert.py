"""The protobuf edge of the search tool: what a client reads back from domain objects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from google.protobuf import timestamp_pb2

from services.search_tool.convert import chunk_to_proto
from services.search_tool.documents import Chunk


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 3, 1, 8, 59, 59, 123456, tzinfo=timezone(timedelta(hours=9))),
        datetime(1969, 7, 20, 20, 17, 40, 500000, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
        datetime(2030, 1, 1, 12, 0, 0, 1),
    ],
    ids=["leap-day", "tokyo", "before-epoch", "epoch", "naive-is-utc"],
)
def test_chunk_timestamps_are_the_same_instant_protobuf_would_encode(moment: datetime) -> None:
    expected = timestamp_pb2.Timestamp()
    expected.FromDatetime(moment if moment.tzinfo else moment.replace(tzinfo=UTC))
    message = chunk_to_proto(
        Chunk(id="d__chunk_0", document_id="d", chunk_index=0, text="t", created_at=moment)
    )
    assert message.created_at == expected
    assert 0 <= message.created_at.nanos < 1_000_000_000
    assert not message.HasField("updated_at")
