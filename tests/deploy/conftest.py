"""The Quarry wheel, built once per session and installed into a fresh virtualenv.

The wheel is built from a copy of what the Containerfile copies and installed (without
dependencies: nothing may be downloaded here) into a fresh virtualenv; the third-party
dependencies come from this virtualenv's site-packages through a path file. The virtualenv sits
in a world-readable directory so a test may run it as the pods' non-root user.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def installed() -> Iterator[Path]:
    """The `python` of a fresh virtualenv holding only the Quarry wheel."""
    root = Path(tempfile.mkdtemp(prefix="quarry-wheel-"))
    root.chmod(0o755)
    try:
        yield _install(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _install(root: Path) -> Path:
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "var")
    for name in ("services", "quarry_cli"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    wheels = root / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("quarry-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", target, str(wheel)],
        check=True,
        capture_output=True,
    )
    (Path(target) / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python
