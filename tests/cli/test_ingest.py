"""`quarry ingest` end to end: the CLI in a terminal-less subprocess, a real search tool."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from quarry.searchtool.v1 import search_tool_pb2

from services.common.auth import ApiKey, AuthSettings, key_digest
from services.common.errors import NotFound
from services.common.settings import ServerSettings
from services.common.tls import ServerTls
from services.search_tool.client import SearchToolClient
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder
from services.search_tool.server import SearchToolServer, build_search_tool_server
from tests.cli.conftest import quarry
from tests.common.certs import Authority, Pem, issue, make_ca

pytestmark = pytest.mark.slow


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "notes"
    (root / "kitchen").mkdir(parents=True)
    (root / "kitchen" / "kettle.md").write_text(
        "---\nauthor: Ada\n---\n# Kettle\nDescale the kettle with vinegar every month.\n"
    )
    (root / "garden.txt").write_text("Water the tomatoes early in the morning.\n")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    (root / "blob.txt").write_bytes(b"text\0with a NUL byte")
    (root / "broken.jsonl").write_text('{"id": "r1", "text": "fine"}\n{not json\n')
    return root


def _summary(stdout: str) -> dict[str, object]:
    parsed: dict[str, object] = json.loads(stdout.strip().splitlines()[-1])
    return parsed


async def _documents(address: str, collection: str) -> list[search_tool_pb2.DocumentInfo]:
    async with SearchToolClient(address) as client:
        return await client.list_documents(collection)


async def test_ingest_loads_a_folder_counts_skips_and_reports_a_failing_file_with_its_reason(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    root = _folder(tmp_path)
    done = await quarry(
        "ingest", str(root), "--collection", "mine", "--address", search_tool.address
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "failed  notes/broken.jsonl: line 2: not JSON" in done.stdout
    assert "3 files" not in done.stdout
    assert "5 files · 2 new" in done.stdout
    assert "2 skipped · 1 failed" in done.stdout
    documents = {d.id: d for d in await _documents(search_tool.address, "mine")}
    assert set(documents) == {"notes/kitchen/kettle.md", "notes/garden.txt"}
    kettle = documents["notes/kitchen/kettle.md"]
    assert kettle.source == "notes"
    assert kettle.metadata["author"].string_value == "Ada"
    assert kettle.metadata["path"].string_value == "notes/kitchen/kettle.md"
    assert len(kettle.metadata["content_sha256"].string_value) == 64
    async with SearchToolClient(search_tool.address) as client:
        reply = await client.search(
            search_tool_pb2.SearchRequest(
                collection="mine", query={"primary": "descale kettle"}, limit=1
            )
        )
    hit = reply.results[0].chunk
    assert hit.document_id == "notes/kitchen/kettle.md"
    assert hit.entity_type == "markdown"
    assert hit.url.startswith("file://")
    assert hit.url.endswith("/notes/kitchen/kettle.md")
    assert [b.name for b in hit.breadcrumbs] == ["notes", "kitchen"]


async def test_a_rerun_sends_only_changed_files_and_prune_deletes_documents_of_removed_files(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    root = _folder(tmp_path)
    (root / "broken.jsonl").unlink()
    args = ("ingest", str(root), "--collection", "mine", "--address", search_tool.address)
    first = _summary((await quarry(*args, "--json")).stdout)
    assert (first["new"], first["unchanged"]) == (2, 0)
    again = _summary((await quarry(*args, "--json")).stdout)
    assert (again["new"], again["changed"], again["unchanged"], again["chunks"]) == (0, 0, 2, 0)
    (root / "garden.txt").write_text("Water the tomatoes in the evening instead.\n")
    (root / "kitchen" / "kettle.md").unlink()
    changed = _summary((await quarry(*args, "--json")).stdout)
    assert (changed["changed"], changed["unchanged"], changed["deleted"]) == (1, 0, 0)
    assert {d.id for d in await _documents(search_tool.address, "mine")} == {
        "notes/kitchen/kettle.md",
        "notes/garden.txt",
    }
    pruned = _summary((await quarry(*args, "--prune", "--json")).stdout)
    assert (pruned["unchanged"], pruned["deleted"]) == (1, 1)
    assert {d.id for d in await _documents(search_tool.address, "mine")} == {"notes/garden.txt"}


async def test_dry_run_reports_the_plan_and_writes_nothing(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    root = _folder(tmp_path)
    done = await quarry(
        "ingest", str(root), "--collection", "mine", "--address", search_tool.address,
        "--dry-run", "--json",
    )  # fmt: skip
    summary = _summary(done.stdout)
    assert (summary["dry_run"], summary["new"], summary["chunks"]) == (True, 2, 0)
    async with SearchToolClient(search_tool.address) as client:
        with pytest.raises(NotFound):
            await client.get_collection("mine")


async def test_an_interrupted_ingest_run_again_finishes_without_duplicates(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    root = tmp_path / "many"
    root.mkdir()
    for n in range(40):
        (root / f"note{n:02}.txt").write_text(f"Note number {n} is about topic {n % 7}.\n")
    args = ["ingest", str(root), "--collection", "many", "--address", search_tool.address]
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "quarry_cli.cli", *args, "--batch-size", "4",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stderr is not None
    while True:
        line = (await process.stderr.readline()).decode()
        assert line, "ingest ended before storing a batch"
        if "chunks" in line and not line.startswith("ingest: 0/") and " 0 chunks" not in line:
            break
    process.send_signal(signal.SIGINT)
    await process.wait()
    stored = await _documents(search_tool.address, "many")
    assert 0 < len(stored) < 40
    done = await quarry(*args, "--json")
    summary = _summary(done.stdout)
    assert summary["unchanged"] == len(stored)
    assert summary["new"] == 40 - len(stored)
    async with SearchToolClient(search_tool.address) as client:
        info = await client.get_collection("many")
    assert (info.document_count, info.chunk_count) == (40, 40)
    assert not info.building


async def test_an_unreachable_search_tool_is_reported_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    done = await quarry(
        "ingest", str(tmp_path / "a.txt"), "--collection", "mine",
        "--address", "127.0.0.1:1", "--timeout", "2",
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "UNAVAILABLE" in done.stderr or "DEADLINE_EXCEEDED" in done.stderr


async def test_a_document_the_search_tool_refuses_counts_as_failed_and_not_as_new(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    root = tmp_path / "records"
    root.mkdir()
    (root / "a.jsonl").write_text('{"id": "r1", "text": "The trial ran in 2020.", "year": 2020}\n')
    (root / "b.jsonl").write_text('{"id": "r2", "text": "Another trial.", "year": "unknown"}\n')
    done = await quarry(
        "ingest", str(root), "--collection", "trials", "--address", search_tool.address, "--json"
    )
    summary = _summary(done.stdout)
    assert done.returncode == 1
    assert (summary["new"], summary["changed"], summary["failed"]) == (1, 0, 1)
    assert summary["failures"] == [
        {
            "path": "records/b.jsonl (r2)",
            "reason": 'refused: metadata["year"]: is string; the collection holds integer',
        }
    ]
    assert {d.id for d in await _documents(search_tool.address, "trials")} == {"r1"}
    text = await quarry(
        "ingest", str(root), "--collection", "trials", "--address", search_tool.address
    )
    assert "2 files · 0 new · 0 changed · 1 unchanged" in text.stdout
    assert "1 failed" in text.stdout


@pytest.fixture
async def secured_search_tool(
    embedder: Embedder, tmp_path: Path
) -> AsyncIterator[tuple[SearchToolServer, Authority, Pem]]:
    """A search tool that requires mutual TLS and an API key allowed to write `mine`."""
    ca = make_ca(tmp_path, "quarry-test-ca")
    pem = issue(ca, tmp_path, "search-tool")
    settings = ServerSettings(
        port=0,
        grace_s=0,
        tls=ServerTls(cert_file=pem.cert_file, key_file=pem.key_file, client_ca_file=ca.cert_file),
        auth=AuthSettings(
            enabled=True,
            keys=[
                ApiKey(name="ingest", sha256=key_digest(API_KEY), write=["mine"]),
                ApiKey(name="reader", sha256=key_digest(READ_KEY), read=["mine"]),
            ],
        ),
    )
    server = build_search_tool_server(
        SearchToolSettings(server=settings, data_dir=tmp_path / "data", log_format="text"),
        embedder_factory=lambda: embedder,
    )
    await server.start()
    yield server, ca, issue(ca, tmp_path, "ingest-job", client=True)
    await server.stop(0)


API_KEY = "qk-ingest-test-key"
READ_KEY = "qk-read-only-test-key"


async def test_ingest_and_collections_speak_mutual_tls_and_send_the_api_key_from_the_environment(
    secured_search_tool: tuple[SearchToolServer, Authority, Pem], tmp_path: Path
) -> None:
    server, ca, client = secured_search_tool
    (tmp_path / "a.txt").write_text("Descale the kettle with vinegar.")
    args = ["ingest", str(tmp_path / "a.txt"), "--collection", "mine", "--address", server.address]
    tls = ["--ca-file", str(ca.cert_file), "--cert-file", str(client.cert_file)]
    tls += ["--key-file", str(client.key_file)]
    done = await quarry(*args, *tls, "--json", env={"QUARRY_API_KEY": API_KEY})
    assert done.returncode == 0, done.stderr
    assert _summary(done.stdout)["new"] == 1
    listed = await quarry(
        "collections", "list", "--address", server.address, *tls, "--json",
        env={"QUARRY_API_KEY": API_KEY},
    )  # fmt: skip
    assert [c["name"] for c in json.loads(listed.stdout)["collections"]] == ["mine"]

    anonymous = await quarry(*args, *tls, env={"QUARRY_API_KEY": ""})
    assert anonymous.returncode == 1
    assert anonymous.stderr.startswith("UNAUTHENTICATED ")
    assert "Set QUARRY_API_KEY to an API key with write access to 'mine'." in anonymous.stderr
    assert "Traceback" not in anonymous.stderr

    plaintext = await quarry(*args, "--timeout", "5", env={"QUARRY_API_KEY": API_KEY})
    assert plaintext.returncode == 1
    assert plaintext.stderr.startswith(("UNAVAILABLE ", "DEADLINE_EXCEEDED "))

    half = await quarry(*args, "--cert-file", str(client.cert_file))
    assert half.returncode == 2
    assert "TLS options: tls.cert_file and tls.key_file go together" in half.stderr
    missing = await quarry(*args, "--ca-file", str(tmp_path / "nope.crt"))
    assert missing.returncode == 2
    assert f"TLS options: --ca-file: no such file: {tmp_path / 'nope.crt'}" in missing.stderr


async def test_status_speaks_mutual_tls_and_says_when_the_api_key_is_missing(
    secured_search_tool: tuple[SearchToolServer, Authority, Pem], tmp_path: Path
) -> None:
    server, ca, client = secured_search_tool
    (tmp_path / "a.txt").write_text("Descale the kettle with vinegar.")
    tls = ["--ca-file", str(ca.cert_file), "--cert-file", str(client.cert_file)]
    tls += ["--key-file", str(client.key_file)]
    ingest = ["ingest", str(tmp_path / "a.txt"), "--collection", "mine"]
    done = await quarry(*ingest, "--address", server.address, *tls, env={"QUARRY_API_KEY": API_KEY})
    assert done.returncode == 0, done.stderr
    status = ["status", "--search-tool", server.address, "--llm-gateway", "127.0.0.1:1"]
    status += ["--agent", "127.0.0.1:1", "--timeout", "2", "--json"]

    keyed = await quarry(*status, *tls, env={"QUARRY_API_KEY": API_KEY})
    report = json.loads(keyed.stdout)
    assert {s["name"]: s["status"] for s in report["services"]}["search_tool"] == "SERVING"
    assert [c["name"] for c in report["collections"]] == ["mine"]

    anonymous = await quarry(*status, *tls, env={"QUARRY_API_KEY": ""})
    assert json.loads(anonymous.stdout)["collections"] is None
    assert "search_tool: UNAUTHENTICATED" in anonymous.stderr
    assert "Set QUARRY_API_KEY to an API key that may read." in anonymous.stderr

    plaintext = await quarry(*status, env={"QUARRY_API_KEY": API_KEY})
    assert {s["name"]: s["status"] for s in json.loads(plaintext.stdout)["services"]} == {
        "search_tool": "UNREACHABLE",
        "llm_gateway": "UNREACHABLE",
        "agent": "UNREACHABLE",
    }
    half = await quarry(*status, "--cert-file", str(client.cert_file))
    assert half.returncode == 2
    assert "TLS options: tls.cert_file and tls.key_file go together" in half.stderr


async def test_each_tls_mistake_is_named_as_tls_with_the_flag_that_fixes_it_and_no_grpc_log_lines(
    secured_search_tool: tuple[SearchToolServer, Authority, Pem],
    search_tool: SearchToolServer,
    tmp_path: Path,
) -> None:
    server, ca, client = secured_search_tool
    # gRPC core traces every connection under GRPC_TRACE: none of its lines may reach the user
    env = {"QUARRY_API_KEY": API_KEY, "GRPC_TRACE": "subchannel,handshaker"}
    listing = ["collections", "list", "--timeout", "10"]

    async def stderr_of(address: str, *flags: str) -> str:
        done = await quarry(*listing, "--address", address, *flags, env=env)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert ".cc:" not in done.stderr, done.stderr  # a core log line: `I1127 … subchannel.cc:…`
        return done.stderr

    plaintext = await stderr_of(server.address)
    assert "if it speaks TLS, add --tls (--ca-file PEM for a private CA)" in plaintext
    untrusted = await stderr_of(server.address, "--tls")
    assert "TLS: search tool's certificate" in untrusted
    assert "not signed by a CA this client trusts: pass --ca-file" in untrusted
    no_client_certificate = await stderr_of(server.address, "--ca-file", str(ca.cert_file))
    assert "requires a client certificate (mTLS), pass --cert-file and --key-file" in (
        no_client_certificate
    )
    tls_to_plaintext = await stderr_of(
        search_tool.address, "--ca-file", str(ca.cert_file), "--cert-file", str(client.cert_file),
        "--key-file", str(client.key_file),
    )  # fmt: skip
    assert f"TLS: search tool at {search_tool.address} does not speak TLS" in tls_to_plaintext
    assert "leave out --tls and --ca-file" in tls_to_plaintext


async def test_ingest_with_a_key_that_may_not_write_says_which_key_to_use_not_to_run_it_again(
    secured_search_tool: tuple[SearchToolServer, Authority, Pem], tmp_path: Path
) -> None:
    server, ca, client = secured_search_tool
    (tmp_path / "a.txt").write_text("Descale the kettle with vinegar.")
    done = await quarry(
        "ingest", str(tmp_path / "a.txt"), "--collection", "mine", "--address", server.address,
        "--ca-file", str(ca.cert_file), "--cert-file", str(client.cert_file),
        "--key-file", str(client.key_file), env={"QUARRY_API_KEY": READ_KEY},
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.startswith("PERMISSION_DENIED ")
    assert "may not write to 'mine': use a key whose `write` list names it" in done.stderr
    assert "run the same command again" not in done.stderr


class _Stalling(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """Answers no call: every method waits for ever, and `called` is set at the first."""

    def __init__(self) -> None:
        self.called = asyncio.Event()

    def service(self, details: grpc.HandlerCallDetails) -> Any:
        async def stall(request: bytes, context: object) -> bytes:
            self.called.set()
            await asyncio.Event().wait()
            return b""

        return grpc.unary_unary_rpc_method_handler(stall)


async def test_ctrl_c_during_ingest_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    stalling = _Stalling()
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([stalling])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    root = _folder(tmp_path)
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "quarry_cli.cli", "ingest", str(root), "--collection", "mine",
            "--address", f"127.0.0.1:{port}",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        async with asyncio.timeout(60):
            await stalling.called.wait()
            process.send_signal(signal.SIGINT)
            out, _ = await process.communicate()
    finally:
        await server.stop(0)
    text = out.decode()
    assert process.returncode == 130, text
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1] == "quarry: interrupted"


async def test_progress_counts_a_file_done_only_once_its_chunks_are_stored(
    search_tool: SearchToolServer, tmp_path: Path
) -> None:
    """A re-run with one changed file of four: the three unchanged files are done at once, the
    changed one only when its chunks are stored (it read `4/4 files · 0 chunks` while embedding)."""
    from quarry_cli.ingest.files import IngestOptions, ingest
    from quarry_cli.ingest.sync import Progress

    root = tmp_path / "notes"
    root.mkdir()
    for n in range(4):
        (root / f"n{n}.txt").write_text(f"Kettle note {n}: descale with vinegar.\n")
    options = IngestOptions(collection="mine", paths=[root])
    async with SearchToolClient(search_tool.address) as client:
        first: list[Progress] = []
        await ingest(client, options, progress=first.append)
        (root / "n2.txt").write_text("Kettle note 2, rewritten: use citric acid instead.\n")
        again: list[Progress] = []
        summary = await ingest(client, options, progress=again.append)
    assert summary.changed == 1
    for reports in (first, again):
        assert [r.files_done for r in reports] == sorted(r.files_done for r in reports)
        assert (reports[-1].files_done, reports[-1].files_total) == (4, 4)
        assert reports[-1].chunks >= 1
        assert all(r.files_done < 4 for r in reports if r.chunks == 0), reports
    assert all(r.files_done == 0 for r in first if r.chunks == 0)
