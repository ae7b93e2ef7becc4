"""How every `quarry` client command reaches a service: TLS flags and the API key, read one way.

--tls                speak TLS (the system's CA roots verify the server)
--ca-file PEM        the CA that signed the server's certificate (implies --tls)
--cert-file/--key-file PEM   a client certificate, for servers that require mTLS
QUARRY_API_KEY       the API key, sent as `authorization: Bearer …` (never a flag: `ps`
                     would show it)
"""

from __future__ import annotations

import argparse
import os

from pydantic import ValidationError

from services.common.tls import ChannelTls

API_KEY_ENV = "QUARRY_API_KEY"
"""The commands send this variable's value as their API key."""


class ConnectionOptionsError(ValueError):
    """TLS flags that do not make a channel; the message says why."""


def add_tls_arguments(
    parser: argparse.ArgumentParser, service: str, *, default: object = None
) -> None:
    """`--tls`, `--ca-file`, `--cert-file`, `--key-file` for a channel to `service`.

    `default=argparse.SUPPRESS` lets a command and its subcommands both take the flags."""
    store_true_default = False if default is None else default
    parser.add_argument(
        "--tls", action="store_true", default=store_true_default, help=f"speak TLS to {service}"
    )
    parser.add_argument(
        "--ca-file", default=default, help=f"PEM CA of {service}'s certificate (implies --tls)"
    )
    parser.add_argument("--cert-file", default=default, help="PEM client certificate for mTLS")
    parser.add_argument("--key-file", default=default, help="PEM key of the client certificate")


def channel_tls(args: argparse.Namespace) -> ChannelTls:
    """The channel TLS the flags ask for (off without any of them)."""
    ca_file = getattr(args, "ca_file", None)
    cert_file = getattr(args, "cert_file", None)
    for flag in ("ca_file", "cert_file", "key_file"):
        path = getattr(args, flag, None)
        if path is not None and not os.path.isfile(path):
            raise ConnectionOptionsError(f"--{flag.replace('_', '-')}: no such file: {path}")
    try:
        return ChannelTls(
            enabled=bool(getattr(args, "tls", False) or ca_file or cert_file),
            ca_file=ca_file,
            cert_file=cert_file,
            key_file=getattr(args, "key_file", None),
        )
    except (ValueError, ValidationError) as error:
        raise ConnectionOptionsError(_first_message(error)) from error


def api_key() -> str:
    """The API key from `QUARRY_API_KEY`; empty when unset."""
    return os.environ.get(API_KEY_ENV, "")


def _first_message(error: ValueError) -> str:
    if isinstance(error, ValidationError):
        return "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
    return str(error)


def unreachable_hint(message: str, tls: ChannelTls, service: str, address: str) -> str:
    """What to do about an UNAVAILABLE call to `service` at `address`: a TLS mismatch is named
    with the flag that fixes it (gRPC reports each as a closed socket or a failed handshake),
    anything else asks whether the service runs there."""
    if "CERTIFICATE_VERIFY_FAILED" in message:
        return (
            f"TLS: {service}'s certificate at {address} is not signed by a CA this client trusts: "
            "pass --ca-file with the CA that signed it."
        )
    if "WRONG_VERSION_NUMBER" in message:
        return f"TLS: {service} at {address} does not speak TLS: leave out --tls and --ca-file."
    if "handshake failed" in message.lower():
        return f"TLS: the handshake with {service} at {address} failed; check --ca-file."
    if "Socket closed" in message and not tls.enabled:
        return (
            f"{service} at {address} closed the connection: if it speaks TLS, add --tls "
            "(--ca-file PEM for a private CA)."
        )
    if "Socket closed" in message and tls.cert_file is None:
        return (
            f"TLS: {service} at {address} closed the connection: if it requires a client "
            "certificate (mTLS), pass --cert-file and --key-file."
        )
    return f"Is the {service} running at {address}? Try `make run`."
