"""TLS and mutual TLS of Quarry servers and channels, with certificates made in the test.

Every handshake is real (gRPC's BoringSSL on 127.0.0.1); a failed handshake surfaces to the client
as UNAVAILABLE, which is what each unhappy path asserts.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from quarry.searchtool.v1.search_tool_pb2 import Document

from services.common.auth import ApiKey, AuthSettings, key_digest
from services.common.channels import open_channel
from services.common.errors import Unauthenticated
from services.common.server import QuarryServer, build_server
from services.common.settings import ServerSettings
from services.common.tls import ChannelTls, ServerTls
from services.search_tool.client import SearchToolClient
from services.search_tool.config import SearchToolSettings
from services.search_tool.embedding import EmbeddingSettings, build_embedder
from services.search_tool.server import build_search_tool_server
from tests.common.certs import Authority, Pem, issue, make_ca

HANDSHAKE_TIMEOUT_S = 10.0


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    return make_ca(tmp_path, "quarry-test-ca")


@pytest.fixture
def other_ca(tmp_path: Path) -> Authority:
    return make_ca(tmp_path, "someone-else-ca")


async def _serve(tls: ServerTls) -> QuarryServer:
    server = build_server([], ServerSettings(port=0, grace_s=0, tls=tls))
    await server.start()
    return server


@pytest.fixture
async def tls_server(ca: Authority, tmp_path: Path) -> AsyncIterator[QuarryServer]:
    pem = issue(ca, tmp_path, "server")
    server = await _serve(ServerTls(cert_file=pem.cert_file, key_file=pem.key_file))
    yield server
    await server.stop(0)


@pytest.fixture
async def mtls_server(ca: Authority, tmp_path: Path) -> AsyncIterator[QuarryServer]:
    pem = issue(ca, tmp_path, "server")
    tls = ServerTls(cert_file=pem.cert_file, key_file=pem.key_file, client_ca_file=ca.cert_file)
    server = await _serve(tls)
    yield server
    await server.stop(0)


async def _health(address: str, tls: ChannelTls | None) -> grpc.StatusCode:
    channel = open_channel(address, tls=tls)
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=HANDSHAKE_TIMEOUT_S
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        return grpc.StatusCode.OK
    except grpc.aio.AioRpcError as error:
        return error.code()
    finally:
        await channel.close(None)


def _client(ca: Authority, pem: Pem | None = None) -> ChannelTls:
    return ChannelTls(
        enabled=True,
        ca_file=ca.cert_file,
        cert_file=pem.cert_file if pem else None,
        key_file=pem.key_file if pem else None,
    )


async def test_a_client_trusting_the_ca_completes_the_tls_handshake(
    tls_server: QuarryServer, ca: Authority
) -> None:
    assert await _health(tls_server.address, _client(ca)) == grpc.StatusCode.OK


async def test_a_plaintext_client_cannot_talk_to_a_tls_server(tls_server: QuarryServer) -> None:
    assert await _health(tls_server.address, None) == grpc.StatusCode.UNAVAILABLE


async def test_a_client_trusting_another_ca_rejects_the_server(
    tls_server: QuarryServer, other_ca: Authority
) -> None:
    assert await _health(tls_server.address, _client(other_ca)) == grpc.StatusCode.UNAVAILABLE


async def test_an_expired_server_certificate_is_rejected(ca: Authority, tmp_path: Path) -> None:
    pem = issue(ca, tmp_path, "expired-server", expired=True)
    server = await _serve(ServerTls(cert_file=pem.cert_file, key_file=pem.key_file))
    try:
        assert await _health(server.address, _client(ca)) == grpc.StatusCode.UNAVAILABLE
    finally:
        await server.stop(0)


async def test_mtls_admits_a_client_certificate_signed_by_the_configured_ca(
    mtls_server: QuarryServer, ca: Authority, tmp_path: Path
) -> None:
    client = issue(ca, tmp_path, "agent", client=True)
    assert await _health(mtls_server.address, _client(ca, client)) == grpc.StatusCode.OK


async def test_mtls_refuses_a_client_without_a_certificate(
    mtls_server: QuarryServer, ca: Authority
) -> None:
    assert await _health(mtls_server.address, _client(ca)) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_refuses_a_client_certificate_from_another_ca(
    mtls_server: QuarryServer, ca: Authority, other_ca: Authority, tmp_path: Path
) -> None:
    stranger = issue(other_ca, tmp_path, "stranger", client=True)
    status = await _health(mtls_server.address, _client(ca, stranger))
    assert status == grpc.StatusCode.UNAVAILABLE


async def test_mtls_refuses_an_expired_client_certificate(
    mtls_server: QuarryServer, ca: Authority, tmp_path: Path
) -> None:
    expired = issue(ca, tmp_path, "old-agent", client=True, expired=True)
    status = await _health(mtls_server.address, _client(ca, expired))
    assert status == grpc.StatusCode.UNAVAILABLE


def test_a_certificate_without_its_key_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="go together"):
        ServerTls(cert_file=tmp_path / "server.crt")
    with pytest.raises(ValueError, match="needs the certificate"):
        ServerTls(client_ca_file=tmp_path / "ca.crt")


async def test_the_python_client_sends_its_key_over_mtls_and_is_refused_without_it(
    ca: Authority, tmp_path: Path
) -> None:
    pem = issue(ca, tmp_path, "search-tool")
    key = "qk-tls-client-1"
    server_settings = ServerSettings(
        port=0,
        grace_s=0,
        tls=ServerTls(cert_file=pem.cert_file, key_file=pem.key_file, client_ca_file=ca.cert_file),
        auth=AuthSettings(
            enabled=True, keys=[ApiKey(name="ingest", sha256=key_digest(key), write=["notes"])]
        ),
    )
    embedder = build_embedder(EmbeddingSettings())
    server = build_search_tool_server(
        SearchToolSettings(server=server_settings, data_dir=tmp_path / "data", log_format="text"),
        embedder_factory=lambda: embedder,
    )
    await server.start()
    tls = _client(ca, issue(ca, tmp_path, "ingest-job", client=True))
    try:
        async with SearchToolClient(server.address, api_key=key, tls=tls) as client:
            reply = await client.upsert_documents("notes", [Document(id="a", text="hello tls")])
            assert reply.documents_upserted == 1
        async with SearchToolClient(server.address, tls=tls) as anonymous:
            with pytest.raises(Unauthenticated):
                await anonymous.get_collection("notes")
    finally:
        await server.stop(0)
