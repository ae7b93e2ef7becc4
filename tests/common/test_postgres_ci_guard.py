"""Under CI a skipped PostgreSQL test fails the run (`tests/conftest.py`); elsewhere it skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CONFTEST = """
import pytest
from tests.conftest import pytest_collection_modifyitems, pytest_runtest_makereport

@pytest.fixture
def postgres_dsn():
    pytest.skip("no PostgreSQL here")
"""

_TEST = """
def test_needs_postgres(postgres_dsn):
    pass
"""


def _run(tmp_path: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_probe.py").write_text(_TEST)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = str(ROOT)
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_skipped_postgres_test_fails_under_ci(tmp_path: Path) -> None:
    result = _run(tmp_path, ci=True)
    assert result.returncode == 1, result.stdout
    assert "1 error" in result.stdout  # the skip came from a fixture: an error in setup
    assert "must run against the embedded PostgreSQL" in result.stdout


def test_a_skip_inside_a_postgres_test_fails_under_ci(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(_CONFTEST.replace("pytest.skip", "return #"))
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n\ndef test_needs_postgres(postgres_dsn):\n    pytest.skip('later')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PYTHONPATH=str(ROOT), CI="true")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout


def test_a_skipped_postgres_test_is_only_a_skip_outside_ci(tmp_path: Path) -> None:
    result = _run(tmp_path, ci=False)
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
