"""`search_tool.engine.vespa.ca_path` reaches pyvespa's real HTTP/2 client (httpr's
`ca_cert_file`, passed through `VespaAsync`): against a local TLS server whose certificate a
private CA signed, the engine answers only when that CA is configured — and with mTLS, only with
the client certificate too. Certificates are made per test (`tests/common/certs.py`)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from services.common.errors import Unavailable
from services.search_tool.engine.vespa import Endpoint, VespaEngine
from tests.common.certs import issue, make_ca
from tests.search_tool.vespa.recording_server import Recorded, RecordingServer, Reply

ROOT = {"root": {"id": "toplevel", "relevance": 1.0, "fields": {"totalCount": 0}, "children": []}}


def _server_context(
    directory: Path, *, client_ca: Path | None = None
) -> tuple[ssl.SSLContext, Path]:
    ca = make_ca(directory, "vespa-ca")
    leaf = issue(ca, directory, "vespa-server")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(leaf.cert_file, leaf.key_file)
    context.set_alpn_protocols(["h2"])
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    return context, ca.cert_file


def _answer(request: Recorded) -> Reply:
    return Reply(200, ROOT)


async def _collections(endpoint: Endpoint) -> list[str]:
    engine = await VespaEngine.open(endpoint)
    try:
        return await engine.list_collections()
    finally:
        await engine.close()


async def test_the_configured_ca_lets_the_engine_trust_a_privately_signed_vespa(
    tmp_path: Path,
) -> None:
    context, ca_file = _server_context(tmp_path)
    server = RecordingServer(_answer, tls=context)
    await server.start()
    try:
        assert await _collections(Endpoint(server.url, ca_path=ca_file)) == []
        assert [r.path for r in server.requests] == ["/search/"]
    finally:
        await server.close()


async def test_without_the_ca_a_privately_signed_vespa_is_unavailable(tmp_path: Path) -> None:
    context, _ = _server_context(tmp_path)
    server = RecordingServer(_answer, tls=context)
    await server.start()
    try:
        with pytest.raises(Unavailable):
            await _collections(Endpoint(server.url))
        assert server.requests == []
    finally:
        await server.close()


async def test_mtls_needs_the_client_certificate_and_the_ca_together(tmp_path: Path) -> None:
    clients = make_ca(tmp_path, "client-ca")
    client = issue(clients, tmp_path, "quarry-client", client=True)
    context, ca_file = _server_context(tmp_path, client_ca=clients.cert_file)
    server = RecordingServer(_answer, tls=context)
    await server.start()
    try:
        with pytest.raises(Unavailable):
            await _collections(Endpoint(server.url, ca_path=ca_file))
        mutual = Endpoint(
            server.url, cert_path=client.cert_file, key_path=client.key_file, ca_path=ca_file
        )
        assert await _collections(mutual) == []
    finally:
        await server.close()
