"""TLS for Quarry servers and channels: server certificates, and mutual TLS when a CA is set.

    server.tls:  cert_file + key_file          the server speaks TLS
                 + client_ca_file              ...and requires client certificates it signed (mTLS)
    channel tls: enabled (+ ca_file)           the client verifies the server (else system roots)
                 + cert_file + key_file        ...and presents its own certificate (mTLS)

Files are read when the server or channel is built; a missing file is a configuration error.
"""

from __future__ import annotations

from pathlib import Path

import grpc
from pydantic import BaseModel, ConfigDict, model_validator


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


class ServerTls(BaseModel):
    """TLS of a server; off when no certificate is configured."""

    model_config = ConfigDict(extra="forbid")

    cert_file: Path | None = None
    """PEM certificate chain the server presents."""
    key_file: Path | None = None
    """PEM private key of that certificate."""
    client_ca_file: Path | None = None
    """PEM CA bundle: when set, every client must present a certificate it signed (mTLS)."""

    @model_validator(mode="after")
    def _pairs(self) -> ServerTls:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls.cert_file and tls.key_file go together")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("tls.client_ca_file (mTLS) needs the certificate of the server")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None

    def credentials(self) -> grpc.ServerCredentials:
        if self.cert_file is None or self.key_file is None:
            raise ValueError("TLS is not configured")
        return grpc.ssl_server_credentials(
            [(self.key_file.read_bytes(), self.cert_file.read_bytes())],
            root_certificates=_read(self.client_ca_file),
            require_client_auth=self.client_ca_file is not None,
        )


class ChannelTls(BaseModel):
    """TLS of a client channel (the Python clients, `quarry ask`, the agent's dependencies)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    """Speak TLS to the server."""
    ca_file: Path | None = None
    """PEM CA bundle that signed the server's certificate; the system roots when unset."""
    cert_file: Path | None = None
    """PEM client certificate, for servers that require mTLS."""
    key_file: Path | None = None
    """PEM private key of the client certificate."""
    server_name: str = ""
    """Name to verify the server's certificate against, when it differs from the target host."""

    @model_validator(mode="after")
    def _pairs(self) -> ChannelTls:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls.cert_file and tls.key_file go together")
        return self

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file),
            private_key=_read(self.key_file),
            certificate_chain=_read(self.cert_file),
        )

    def options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
