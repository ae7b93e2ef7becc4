"""`quarry keygen` prints a fresh key and the digest that authenticates it."""

from __future__ import annotations

import pytest

from quarry_cli.cli import main
from services.common.auth import (
    AUTHENTICATED,
    ApiKey,
    AuthInterceptor,
    AuthSettings,
    Caller,
    key_digest,
)


def test_keygen_prints_a_fresh_key_whose_digest_authenticates(
    capsys: pytest.CaptureFixture[str],
) -> None:
    printed = []
    for _ in range(2):
        with pytest.raises(SystemExit) as exited:
            main(["keygen"])
        assert exited.value.code == 0
        lines = dict(line.split(":", 1) for line in capsys.readouterr().out.splitlines())
        printed.append((lines["key"].strip(), lines["sha256"].strip()))
    (key, digest), (other_key, _) = printed
    assert key != other_key
    assert digest == key_digest(key)
    settings = AuthSettings(enabled=True, keys=[ApiKey(name="ci", sha256=digest)])
    caller = AuthInterceptor(settings, {}).authorise(AUTHENTICATED, None, f"Bearer {key}")
    assert caller == Caller(settings.keys[0], f"Bearer {key}")
