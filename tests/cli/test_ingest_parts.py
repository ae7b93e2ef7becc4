"""`quarry ingest` and a document larger than one UpsertDocuments call may carry: it is sent as
parts `<id>#part-N`, batches stay within the search tool's per-call limits, and a rerun or a shrunk
file leaves no stale part behind."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from quarry.searchtool.v1 import search_tool_pb2

from quarry_cli.ingest import parts
from quarry_cli.ingest.files import IngestOptions, ingest
from services.common.errors import InvalidArgument
from services.common.settings import ServerSettings
from services.search_tool.client import SearchToolClient
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder
from services.search_tool.limits import RequestLimits
from services.search_tool.server import SearchToolServer, build_search_tool_server
from tests.cli.conftest import quarry

PARAGRAPH = "The kettle boils water for tea. Descale it with vinegar every month.\n\n"


def test_a_document_within_the_limits_stays_whole() -> None:
    document = search_tool_pb2.Document(id="a.txt", title="a", text=PARAGRAPH * 10)
    assert parts.split(document) == [document]


def test_a_long_document_becomes_parts_cut_at_paragraphs_that_keep_every_character() -> None:
    text = PARAGRAPH * 2_000  # 142,000 bytes, about 30,000 word pieces of text
    document = search_tool_pb2.Document(id="notes/a.txt", title="A", text=text)
    document.metadata["path"].string_value = "notes/a.txt"
    pieces = parts.split(document)
    assert len(pieces) > 1
    assert [p.id for p in pieces] == [f"notes/a.txt#part-{n}" for n in range(1, len(pieces) + 1)]
    assert "".join(p.text for p in pieces) == text
    assert all(p.text.endswith("\n\n") for p in pieces)  # cut at a paragraph break
    assert all(parts.model_word_pieces(p) <= parts.REQUEST_WORD_PIECES for p in pieces)
    assert all(len(p.text.encode()) <= parts.REQUEST_BYTES for p in pieces)
    assert all(p.title == "A" and p.metadata["path"].string_value == "notes/a.txt" for p in pieces)
    assert {parts.whole_id(p.id) for p in pieces} == {"notes/a.txt"}


def test_text_of_few_word_pieces_is_split_by_bytes() -> None:
    """Words over 100 characters are one word piece each ([UNK]): 300 KB of them is little work
    for the model, but more bytes than one call carries."""
    text = ("x" * 150 + " ") * 2_000
    pieces = parts.split(search_tool_pb2.Document(id="w", text=text))
    assert len(pieces) == 2
    assert all(len(p.text.encode()) <= parts.REQUEST_BYTES for p in pieces)
    assert "".join(p.text for p in pieces) == text


def test_one_unbreakable_word_larger_than_a_call_stays_whole_for_the_server_to_refuse() -> None:
    document = search_tool_pb2.Document(id="w", text="x" * 300_000)
    assert parts.split(document) == [document]


def test_whole_id_removes_only_a_part_suffix() -> None:
    assert parts.whole_id("a.txt#part-12") == "a.txt"
    assert parts.whole_id("a.txt#part-0") == "a.txt#part-0"
    assert parts.whole_id("a#part-2/b") == "a#part-2/b"


@pytest.fixture
async def small_search_tool(
    embedder: Embedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[SearchToolServer]:
    """A search tool whose calls take at most 3,000 word pieces of model work and 6,000 bytes;
    the ingest's own limits set just under them (as its defaults are under the defaults)."""
    monkeypatch.setattr(parts, "REQUEST_WORD_PIECES", 2_600)
    monkeypatch.setattr(parts, "REQUEST_BYTES", 5_000)
    settings = SearchToolSettings(
        server=ServerSettings(port=0, grace_s=0.5),
        data_dir=tmp_path / "data",
        log_format="text",
        max_document_bytes=6_000,
        limits=RequestLimits(upsert_total_bytes=6_000, upsert_total_word_pieces=3_000),
    )
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    yield server
    await server.stop(0)


async def _ids(address: str) -> set[str]:
    async with SearchToolClient(address) as client:
        return {d.id for d in await client.list_documents("mine")}


@pytest.mark.slow
async def test_a_file_larger_than_a_call_is_stored_in_parts_and_a_shrunk_file_drops_the_rest(
    small_search_tool: SearchToolServer, tmp_path: Path
) -> None:
    """Without parts the search tool refuses the file (it is over `max_document_bytes` and
    `upsert_total_word_pieces`); with them every part is stored and searchable, a rerun sends
    nothing, and when the file shrinks to fit one call its parts are deleted."""
    root = tmp_path / "notes"
    root.mkdir()
    tail = "The last paragraph names the quokka, a small wallaby.\n"
    (root / "big.txt").write_text(PARAGRAPH * 300 + tail)  # 21,000 bytes, 5,000 word pieces
    (root / "small.txt").write_text(PARAGRAPH)
    address = small_search_tool.address
    options = IngestOptions(collection="mine", paths=[root])
    async with SearchToolClient(address) as client:
        with pytest.raises(InvalidArgument, match="upsert_total_bytes"):
            await client.upsert_documents(
                "mine", [search_tool_pb2.Document(id="whole", text=(root / "big.txt").read_text())]
            )
        first = await ingest(client, options)
    stored = await _ids(address)
    big = {i for i in stored if i.startswith("notes/big.txt#part-")}
    assert len(big) >= 4
    assert "notes/small.txt" in stored
    assert (first.new, first.failed) == (len(big) + 1, [])
    async with SearchToolClient(address) as client:
        reply = await client.search(
            search_tool_pb2.SearchRequest(collection="mine", query={"primary": "quokka"}, limit=1)
        )
        assert reply.results[0].chunk.document_id == f"notes/big.txt#part-{len(big)}"
        again = await ingest(client, options)
    assert (again.new, again.changed, again.unchanged, again.chunks) == (0, 0, len(big) + 1, 0)
    (root / "big.txt").write_text(PARAGRAPH * 3)
    async with SearchToolClient(address) as client:
        shrunk = await ingest(client, options)
    assert (shrunk.new, shrunk.deleted) == (1, len(big))
    assert await _ids(address) == {"notes/big.txt", "notes/small.txt"}


@pytest.mark.slow
async def test_the_cli_stores_a_file_over_the_default_document_limit_in_parts(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    """300 KB is over the default `max_document_bytes` (262,144): the search tool would refuse
    the file whole. Long words keep the model's work small (each is one word piece)."""
    (tmp_path / "words.txt").write_text(("y" * 150 + " ") * 2_000)
    done = await quarry(
        "ingest", str(tmp_path / "words.txt"), "--collection", "mine",
        "--address", search_tool.address, "--json",
    )  # fmt: skip
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, done.stdout + done.stderr
    assert (summary["new"], summary["failed"]) == (2, 0)
    assert await _ids(search_tool.address) == {"words.txt#part-1", "words.txt#part-2"}
