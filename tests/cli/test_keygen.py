"""`quarry keygen` prints a fresh key and the digest that authenticates it, or writes the key to a
private file and prints the entry of a keys file (`server.auth.keys_file`) for it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from quarry_cli.cli import main
from services.common.auth import (
    AUTHENTICATED,
    ApiKey,
    AuthInterceptor,
    AuthSettings,
    Caller,
    key_digest,
    read_keys_file,
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


def _keygen(*argv: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(["keygen", *argv])
    return int(exited.value.code or 0)


def test_keygen_with_a_name_writes_the_key_to_a_private_file_and_prints_its_keys_file_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "billing.key"
    assert (
        _keygen("--name", "billing", "--read", "docs", "--read", "faq", "--key-out", str(key_file))
        == 0
    )
    out = capsys.readouterr().out
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(out)
    key = key_file.read_text()
    assert key.startswith("qk_")
    assert not key.endswith("\n"), "the key file feeds `kubectl create secret --from-file`"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key not in out
    (entry,) = read_keys_file(keys_file)
    assert (entry.name, entry.read, entry.write, entry.gateway) == (
        "billing",
        ["docs", "faq"],
        [],
        False,
    )
    settings = AuthSettings(enabled=True, keys_file=keys_file)
    interceptor = AuthInterceptor(settings, {})
    assert interceptor.authorise(AUTHENTICATED, None, f"Bearer {key}").key == entry


def test_keygen_refuses_to_overwrite_a_key_file_and_needs_one_with_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    existing = tmp_path / "agent.key"
    existing.write_text("keep me")
    assert _keygen("--name", "agent", "--gateway", "--key-out", str(existing)) == 1
    assert "File exists" in capsys.readouterr().err
    assert existing.read_text() == "keep me"
    assert _keygen("--name", "agent", "--gateway") == 2
    assert "--key-out" in capsys.readouterr().err
    assert _keygen("--read", "docs") == 2
    assert "need --name" in capsys.readouterr().err
    assert _keygen("--name", "", "--key-out", str(tmp_path / "x.key")) == 2
    assert not (tmp_path / "x.key").exists()
