"""Tooling stays outside the deployables and reaches the services only through public clients."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ("services.common", "services.agent.client", "services.search_tool.client")


def _imports(package: str) -> set[str]:
    names: set[str] = set()
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
    return names


def test_no_service_imports_the_tooling() -> None:
    assert not {m for m in _imports("services") if m.startswith("quarry_cli")}


def test_the_tooling_uses_only_the_services_public_modules() -> None:
    internal = {
        m for m in _imports("quarry_cli") if m.startswith("services.") and not m.startswith(PUBLIC)
    }
    assert not internal
