"""`quarry collections`, `quarry search`, `quarry status` and the CLI's unhappy paths, each in a
terminal-less subprocess against a real search tool."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from services.search_tool.server import SearchToolServer
from tests.cli.conftest import quarry

pytestmark = pytest.mark.slow


async def _ingest_notes(address: str, tmp_path: Path) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    for n in range(12):
        (root / f"n{n:02}.txt").write_text(f"Kettle note {n}: descale with vinegar.\n")
    done = await quarry("ingest", str(root), "--collection", "mine", "--address", address)
    assert done.returncode == 0, done.stderr


async def test_collections_list_show_and_delete_speak_protobuf_json_with_proto_field_names(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    await _ingest_notes(search_tool.address, tmp_path)
    listed = await quarry("collections", "list", "--address", search_tool.address, "--json")
    [mine] = json.loads(listed.stdout)["collections"]
    assert (mine["name"], mine["document_count"], mine["chunk_count"]) == ("mine", "12", "12")
    shown = await quarry("collections", "show", "mine", "--address", search_tool.address)
    assert "12 documents, 12 chunks" in shown.stdout
    assert "metadata.content_sha256:string" in shown.stdout
    assert "keyword search in english" in shown.stdout
    assert mine["keyword_language"] == "english"
    refused = await quarry("collections", "delete", "mine", "--address", search_tool.address)
    assert refused.returncode == 2
    deleted = await quarry(
        "collections", "delete", "mine", "--yes", "--address", search_tool.address
    )
    assert deleted.returncode == 0
    missing = await quarry("collections", "show", "mine", "--address", search_tool.address)
    assert missing.returncode == 1
    assert missing.stderr.startswith("NOT_FOUND ")
    assert "Traceback" not in missing.stderr


async def test_search_honours_limit_and_prints_a_table_of_hits_with_scores(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    await _ingest_notes(search_tool.address, tmp_path)
    args = ("search", "descale kettle", "--collection", "mine", "--address", search_tool.address)
    as_json = json.loads((await quarry(*args, "--limit", "11", "--json")).stdout)
    assert len(as_json["results"]) == 11
    assert "total_count" in as_json
    table = await quarry(*args, "--limit", "3")
    assert "3 of 12 matching chunks" in table.stdout
    assert "     Kettle note " in table.stdout  # each hit's snippet under it
    assert ": descale with vinegar." in table.stdout


async def test_search_json_without_a_hit_still_has_results_and_total_count(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    await _ingest_notes(search_tool.address, tmp_path)
    nowhere = '[{"conditions": [{"field": "source", "operator": "equals", "value": "nowhere"}]}]'
    done = await quarry(
        "search", "descale", "--collection", "mine", "--filter", nowhere, "--json",
        "--address", search_tool.address,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert (reply["results"], reply["total_count"]) == ([], "0")


async def test_a_mistyped_flag_shows_the_usage_of_the_command_it_was_given_to() -> None:
    search = await quarry("search", "x", "--limt", "3")
    assert search.returncode == 2
    assert search.stderr.startswith("usage: quarry search ")
    assert "quarry search: error: unrecognized arguments: --limt 3" in search.stderr
    listing = await quarry("runs", "list", "--bogus")
    assert listing.stderr.startswith("usage: quarry runs list ")


async def test_a_bad_filter_operator_is_named_without_a_pydantic_dump(
    search_tool: SearchToolServer,
) -> None:
    bad = '[{"conditions": [{"field": "source", "operator": "eq", "value": "x"}]}]'
    done = await quarry("search", "x", "--filter", bad, "--address", search_tool.address)
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "--filter: groups[0].conditions[0].operator: 'eq' is not an operator"
    )
    asked = await quarry("ask", "x", "--filter", bad, "--address", search_tool.address)
    assert "'eq' is not an operator" in asked.stdout
    assert "pydantic" not in asked.stdout


async def test_a_filter_on_an_unknown_field_prints_code_message_and_field(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    await _ingest_notes(search_tool.address, tmp_path)
    unknown = '[{"conditions": [{"field": "colour", "operator": "equals", "value": "x"}]}]'
    done = await quarry(
        "search", "x", "--collection", "mine", "--filter", unknown, "--address", search_tool.address
    )
    assert done.returncode == 1
    assert done.stderr.startswith("INVALID_ARGUMENT ")
    assert "  filter.groups[0].conditions[0].field:" in done.stderr


async def test_ask_pointed_at_the_search_tool_says_which_service_answers_there(
    search_tool: SearchToolServer,
) -> None:
    done = await quarry("ask", "hello", "--address", search_tool.address)
    assert done.returncode == 1
    assert f"{search_tool.address} is the search tool, not the agent" in done.stdout


async def test_status_reports_each_service_and_the_collections(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    await _ingest_notes(search_tool.address, tmp_path)
    done = await quarry(
        "status", "--search-tool", search_tool.address, "--llm-gateway", "127.0.0.1:1",
        "--agent", search_tool.address, "--timeout", "1", "--json",
    )  # fmt: skip
    report = json.loads(done.stdout)
    states = {s["name"]: s["status"] for s in report["services"]}
    assert states == {
        "search_tool": "SERVING",
        "llm_gateway": "UNREACHABLE",
        "agent": "WRONG_SERVICE",
    }
    assert report["collections"][0]["name"] == "mine"
    assert done.returncode == 1


async def test_json_piped_into_a_reader_that_already_left_ends_without_broken_pipe(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    """`quarry search --json | head -1`, with `head` gone before the first write."""
    await _ingest_notes(search_tool.address, tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "quarry_cli.cli",
            "search", "descale", "--collection", "mine", "--json",
            "--address", search_tool.address,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=write_end,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(write_end)
    _, err = await process.communicate()
    assert "BrokenPipeError" not in err.decode()
    assert "Traceback" not in err.decode()
    assert process.returncode == 0
