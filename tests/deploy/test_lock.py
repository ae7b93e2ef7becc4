"""The lock files (`make lock`, scripts/lock.py): they carry pyproject.toml's pins, and the offline
check says which pin is stale, missing or unhashed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_script", ROOT / "scripts" / "lock.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


LOCK = _lock_script()
PYPROJECT = """
[build-system]
requires = ["setuptools==84.2.1"]
[project]
dependencies = ["grpcio==1.83.2", "psycopg[binary]==3.3.9"]
[project.optional-dependencies]
dev = ["pytest==9.2.0"]
"""
ENTRY = "{name}=={version} \\\n    --hash=sha256:{digest}\n    # via {via}\n"


def _lock_text(*entries: tuple[str, str, str]) -> str:
    return "".join(
        ENTRY.format(name=n, version=v, digest="ab" * 32, via=via) for n, v, via in entries
    )


def test_the_committed_lock_files_carry_every_pin_of_pyproject() -> None:
    for lock in LOCK.LOCK_FILES:
        assert LOCK.check(lock) == [], lock.name


def test_a_lock_with_exactly_the_pins_and_their_dependencies_passes() -> None:
    text = _lock_text(
        ("grpcio", "1.83.2", "quarry (pyproject.toml)"),
        ("psycopg", "3.3.9", "quarry (pyproject.toml)"),
        ("psycopg-binary", "3.3.9", "psycopg"),
        ("pytest", "9.2.0", "quarry (pyproject.toml)"),
    )
    assert LOCK.mismatches(LOCK.Lock("dev", ("dev",)), PYPROJECT, text, where="dev.lock") == []


def test_a_changed_added_or_dropped_pin_and_a_missing_hash_are_each_named() -> None:
    text = (
        _lock_text(
            ("grpcio", "1.80.0", "quarry (pyproject.toml)"),
            ("anthropic", "2.12.0", "quarry (pyproject.toml)"),
        )
        + "pytest==9.2.0\n    # via quarry (pyproject.toml)\n"
    )
    problems = LOCK.mismatches(LOCK.Lock("dev", ("dev",)), PYPROJECT, text, where="dev.lock")
    assert problems == [
        "dev.lock: grpcio is locked at 1.80.0, pinned at 1.83.2",
        "dev.lock: psycopg==3.3.9 is not locked",
        "dev.lock: anthropic is locked as a direct dependency, not pinned",
        "dev.lock: pytest has no hash",
    ]


def test_a_requirement_pyproject_does_not_pin_exactly_is_refused() -> None:
    loose = PYPROJECT.replace('"pytest==9.2.0"', '"pytest>=9"')
    text = _lock_text(("grpcio", "1.83.2", "x"), ("psycopg", "3.3.9", "x"))
    problems = LOCK.mismatches(LOCK.Lock("dev", ("dev",)), loose, text, where="dev.lock")
    assert problems == ["pyproject.toml: 'pytest>=9' is not pinned with == (pin it)"]


SERVICE_PYPROJECT = """
[project]
dependencies = ["grpcio==1.83.2"]
[project.optional-dependencies]
search-tool = ["lancedb==0.40.0", "psycopg[binary]==3.3.9"]
agent = ["psycopg[binary]==3.3.9"]
llm-runtime = ["pydantic==2.7.1"]
"""


def test_a_service_lock_carries_the_common_pins_and_its_own_extra_and_no_other_services() -> None:
    agent = LOCK.Lock("agent", ("agent",))
    text = _lock_text(
        ("grpcio", "1.83.2", "quarry (pyproject.toml)"),
        ("psycopg", "3.3.9", "quarry (pyproject.toml)"),
    )
    assert LOCK.mismatches(agent, SERVICE_PYPROJECT, text, where="agent.lock") == []
    # the search tool's engine locked into the agent's set is named
    with_lancedb = text + _lock_text(("lancedb", "0.40.0", "quarry (pyproject.toml)"))
    assert LOCK.mismatches(agent, SERVICE_PYPROJECT, with_lancedb, where="agent.lock") == [
        "agent.lock: lancedb is locked as a direct dependency, not pinned"
    ]
    # and a missing common pin too
    no_grpcio = _lock_text(("psycopg", "3.3.9", "quarry (pyproject.toml)"))
    assert LOCK.mismatches(agent, SERVICE_PYPROJECT, no_grpcio, where="agent.lock") == [
        "agent.lock: grpcio==1.83.2 is not locked"
    ]


def test_the_local_model_lock_holds_its_extra_alone_without_quarrys_dependencies() -> None:
    runtime = LOCK.Lock("llm-runtime", ("llm-runtime",), extras_only=True, constrained=False)
    assert LOCK.pins(runtime, SERVICE_PYPROJECT) == ["pydantic==2.7.1"]
    text = _lock_text(("pydantic", "2.7.1", "-r -"), ("pydantic-core", "2.18.2", "pydantic"))
    assert LOCK.mismatches(runtime, SERVICE_PYPROJECT, text, where="llm-runtime.lock") == []
    moved = text.replace("pydantic==2.7.1", "pydantic==2.14.3")
    assert LOCK.mismatches(runtime, SERVICE_PYPROJECT, moved, where="llm-runtime.lock") == [
        "llm-runtime.lock: pydantic is locked at 2.14.3, pinned at 2.7.1"
    ]


def test_every_service_has_a_lock_and_the_dev_lock_holds_them_all() -> None:
    locks = {lock.name: lock for lock in LOCK.LOCK_FILES}
    assert set(LOCK.SERVICES) <= set(locks)
    assert set(locks["dev"].extras) == {"dev", "cli", *LOCK.SERVICES}
    for service in LOCK.SERVICES:
        assert locks[service].extras == (service,)
        assert locks[service].constrained, "a service ships the versions the tests ran on"
    assert not locks["llm-runtime"].constrained  # its server needs older pydantic and numpy


def test_one_package_pinned_at_two_versions_in_two_services_is_named() -> None:
    assert LOCK.conflicting_pins(SERVICE_PYPROJECT) == []
    two = SERVICE_PYPROJECT.replace(
        'agent = ["psycopg[binary]==3.3.9"]', 'agent = ["psycopg==3.3.8"]'
    )
    assert LOCK.conflicting_pins(two) == [
        "pyproject.toml: psycopg is pinned at 3.3.9 in [search-tool] and at 3.3.8 in [agent] "
        "(one version: they share dev.lock)"
    ]
    assert LOCK.conflicting_pins(PYPROJECT.replace("[project]", "[project]\n")) == []
    assert LOCK.conflicting_pins((ROOT / "pyproject.toml").read_text()) == []
