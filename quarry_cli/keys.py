"""`quarry keygen`: a new API key and the digest the configuration stores for it.

    quarry keygen                                   key and sha256, one per line
    quarry keygen --name billing --read docs --key-out billing.key >> keys.yaml

With `--name` the key goes only to the new file `--key-out` (mode 600, no newline, ready for
`kubectl create secret --from-file`), and stdout gets one entry of a keys file
(`server.auth.keys_file`): name, sha256 and the grants, so the key never sits next to its entry.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from services.common.auth import ApiKey, key_digest

KEY_PREFIX = "qk_"
EPILOG = """examples:
  quarry keygen
  quarry keygen --name agent --gateway --key-out agent.key >> keys.yaml
  quarry keygen --name billing-backend --read docs --key-out billing.key >> keys.yaml
  quarry keygen --name ingest-job --write docs --key-out ingest.key >> keys.yaml"""


def new_key() -> str:
    """A random API key (256 bits of entropy, URL-safe)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", help="who holds the key: print a keys-file entry for it")
    parser.add_argument(
        "--read", action="append", default=[], metavar="COLLECTION", help="may read (`*`: all)"
    )
    parser.add_argument(
        "--write", action="append", default=[], metavar="COLLECTION", help="may write and read"
    )
    parser.add_argument("--gateway", action="store_true", help="may call the LLM gateway")
    parser.add_argument("--key-out", type=Path, help="new file the key is written to (with --name)")


def keygen(args: argparse.Namespace | None = None) -> int:
    """Print a new key and its SHA-256, or (with `--name`) write the key to `--key-out` and
    print its keys-file entry."""
    key = new_key()
    if args is None or args.name is None:
        if args is not None and (args.read or args.write or args.gateway or args.key_out):
            print("quarry keygen: grants and --key-out need --name", file=sys.stderr)
            return 2
        print(f"key:    {key}")
        print(f"sha256: {key_digest(key)}")
        return 0
    if args.key_out is None:
        print("quarry keygen: --name needs --key-out FILE for the key", file=sys.stderr)
        return 2
    try:
        entry = ApiKey(
            name=args.name,
            sha256=key_digest(key),
            read=args.read,
            write=args.write,
            gateway=args.gateway,
        )
    except ValidationError as error:
        print(f"quarry keygen: {error}", file=sys.stderr)
        return 2
    try:
        descriptor = os.open(args.key_out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        print(f"quarry keygen: cannot create {args.key_out}: {error.strerror}", file=sys.stderr)
        return 1
    with os.fdopen(descriptor, "w") as out:
        out.write(key)
    fields = entry.model_dump()
    print(yaml.safe_dump([fields], sort_keys=False, default_flow_style=None), end="")
    return 0
