"""`server.auth.keys_file`: API-key digests read at start from a file (a mounted Secret).

The keys file is written by the real `quarry keygen --name ... --key-out ...`, loaded through the
real settings loader, and enforced by a real search tool on 127.0.0.1; a file that cannot be read
stops `run_service` with exit 2 and a message naming the file.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from quarry.searchtool.v1 import search_tool_pb2 as st
from quarry.searchtool.v1 import search_tool_pb2_grpc as st_grpc

from quarry_cli.cli import main as quarry
from services.common.auth import AuthSettings
from services.common.entrypoint import run_service
from services.common.server import QuarryServer
from services.common.settings import load_settings
from services.common.telemetry import Telemetry
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import Embedder, EmbeddingSettings, build_embedder
from services.search_tool.server import build_search_tool_server


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return build_embedder(EmbeddingSettings())


def _keygen(directory: Path, capsys: pytest.CaptureFixture[str], name: str, *grants: str) -> str:
    """Append `quarry keygen --name NAME GRANTS` to keys.yaml; return the key it wrote."""
    key_file = directory / f"{name}.key"
    with pytest.raises(SystemExit) as exited:
        quarry(["keygen", "--name", name, *grants, "--key-out", str(key_file)])
    assert exited.value.code == 0
    with (directory / "keys.yaml").open("a") as keys:
        keys.write(capsys.readouterr().out)
    return key_file.read_text()


def _config(directory: Path, keys_file: Path) -> Path:
    path = directory / "quarry.yaml"
    path.write_text(
        "search_tool:\n"
        f"  data_dir: {directory / 'data'}\n"
        "  log_format: text\n"
        f"  server: {{port: 0, grace_s: 0, auth: {{enabled: true, keys_file: {keys_file}}}}}\n"
    )
    return path


@pytest.fixture
async def keyed_server(
    tmp_path: Path, embedder: Embedder, capsys: pytest.CaptureFixture[str]
) -> AsyncIterator[tuple[QuarryServer, dict[str, str]]]:
    keys = {
        "ingest": _keygen(tmp_path, capsys, "ingest", "--write", "docs"),
        "reader": _keygen(tmp_path, capsys, "reader", "--read", "docs"),
    }
    settings = load_settings(SearchToolSettings, _config(tmp_path, tmp_path / "keys.yaml"))
    server = build_search_tool_server(settings, embedder_factory=lambda: embedder)
    await server.start()
    yield server, keys
    await server.stop(0)


def _bearer(key: str) -> tuple[tuple[str, str]]:
    return (("authorization", f"Bearer {key}"),)


async def test_a_server_started_with_keys_from_a_file_enforces_them(
    keyed_server: tuple[QuarryServer, dict[str, str]],
) -> None:
    server, keys = keyed_server
    upsert = st.UpsertDocumentsRequest(
        collection="docs", documents=[st.Document(id="a", text="Quarry runs on Kubernetes.")]
    )
    search = st.SearchRequest(collection="docs", query={"primary": "kubernetes"}, limit=3)
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = st_grpc.SearchToolServiceStub(channel)
        written = await stub.UpsertDocuments(upsert, metadata=_bearer(keys["ingest"]))
        assert written.documents_upserted == 1
        found = await stub.Search(search, metadata=_bearer(keys["reader"]))
        assert [r.chunk.document_id for r in found.results] == ["a"]
        for metadata, code in (
            (_bearer(keys["reader"]), grpc.StatusCode.PERMISSION_DENIED),
            ((), grpc.StatusCode.UNAUTHENTICATED),
            (_bearer("qk_not-in-the-file"), grpc.StatusCode.UNAUTHENTICATED),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.UpsertDocuments(upsert, metadata=metadata)
            assert caught.value.code() == code


def _never_built(settings: SearchToolSettings, telemetry: Telemetry) -> QuarryServer:
    raise AssertionError("a server must not be built from an invalid configuration")


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda d: d / "absent.yaml", "No such file or directory"),
        (lambda d: d, "Is a directory"),
    ],
    ids=["missing", "unreadable"],
)
def test_a_keys_file_that_cannot_be_read_stops_the_start_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: object, reason: str
) -> None:
    keys_file = make(tmp_path)  # type: ignore[operator]
    code = run_service(
        "search_tool",
        SearchToolSettings,
        _never_built,
        argv=["--config", str(_config(tmp_path, keys_file))],
    )
    assert code == 2
    error = capsys.readouterr().err
    assert "invalid configuration" in error
    assert f"auth.keys_file {keys_file}: cannot read it ({reason})" in error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: one\n", "must be a YAML list of keys"),
        ("- {name: x, sha256: abc}\n", "key 1: sha256"),
        ("- {name: x, sha256: " + "a" * 64 + ", reed: [docs]}\n", "key 1: reed"),
        ("- [unclosed\n", "not valid YAML"),
    ],
)
def test_a_malformed_keys_file_is_refused_naming_the_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(text)
    with pytest.raises(ValueError, match=message):
        AuthSettings(enabled=True, keys_file=keys_file)


def test_file_keys_join_the_configured_keys_and_may_not_repeat_a_name(tmp_path: Path) -> None:
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text("- {name: billing, sha256: " + "b" * 64 + ", read: [docs]}\n")
    inline = {"name": "ops", "sha256": "c" * 64, "write": ["*"]}
    settings = AuthSettings(enabled=True, keys=[inline], keys_file=keys_file)
    assert [k.name for k in settings.keys] == ["ops", "billing"]
    with pytest.raises(ValueError, match="two keys share a name"):
        AuthSettings(keys=[{**inline, "name": "billing"}], keys_file=keys_file)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert AuthSettings(enabled=True, keys_file=empty).keys == []
