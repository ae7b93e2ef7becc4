"""`quarry keygen`: a new API key and the digest the configuration stores for it."""

from __future__ import annotations

import secrets

from services.common.auth import key_digest

KEY_PREFIX = "qk_"


def new_key() -> str:
    """A random API key (256 bits of entropy, URL-safe)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def keygen() -> int:
    """Print a new key (for the caller's Secret) and its SHA-256 (for the config)."""
    key = new_key()
    print(f"key:    {key}")
    print(f"sha256: {key_digest(key)}")
    return 0
