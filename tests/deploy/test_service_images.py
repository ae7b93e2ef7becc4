"""Each service's image holds what that service imports and nothing it does not.

Every module a service can import is found by reading its code (AST, no import): from the
service's entry module `services.<name>.__main__`, every `import` — at the top or inside a
function (engines, embedders and providers load lazily) — is followed through Quarry's own
packages; each third-party module reached is then traced to the distribution whose files hold
it in this virtualenv (site-packages, not `import`), and must be in the service's lock
(requirements/<service>.lock, what its image installs). A service that starts importing a new
package fails here until its extra in pyproject.toml names it. The images are built and run for
real by scripts/image_smoke.sh (slow, not part of `make test`).
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import subprocess
import sys
import sysconfig
from functools import cache
from pathlib import Path

import pytest

from tests.deploy.test_lock import LOCK

ROOT = Path(__file__).resolve().parents[2]
OWN = {"services": ROOT / "services", "quarry": ROOT / "services" / "generated" / "quarry"}
OWN["quarry_cli"] = ROOT / "quarry_cli"
HEAVY = {"lancedb", "pyarrow", "onnxruntime", "tokenizers", "pyvespa", "numpy", "huggingface-hub"}
"""The search tool's engine and embedder (~420 MB): never in the agent's or gateway's image."""
DEV_ONLY = {"grpcio-tools", "starlette", "uvicorn", "pytest", "mypy", "ruff", "uv", "setuptools"}
"""Build, test and test-support packages: in no service's image."""


def _own_file(module: str) -> Path | None:
    parts = module.split(".")
    base = OWN.get(parts[0])
    if base is None:
        return None
    path = base.joinpath(*parts[1:])
    if (path / "__init__.py").is_file():
        return path / "__init__.py"
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    return None


def imports_of(start: str) -> dict[str, set[str]]:
    """Third-party module -> the files of Quarry importing it, reachable from module `start`."""
    seen: set[str] = set()
    found: dict[str, set[str]] = {}
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _own_file(module)
        if path is None:
            continue
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
        package = parts if path.name == "__init__.py" else parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = package[: len(package) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                else:
                    base = node.module or ""
                names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            for name in names:
                top = name.split(".")[0]
                if top in OWN:
                    if _own_file(name) is not None:
                        todo.append(name)
                elif top not in sys.stdlib_module_names and top != "__future__":
                    found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


@cache
def _files_to_distributions() -> dict[str, str]:
    """Each installed module file (path relative to site-packages) -> its distribution."""
    owners: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = LOCK._normal(dist.metadata["Name"])
        for file in dist.files or ():
            if file.suffix in (".py", ".so", ".pyd", ".pyi"):
                owners.setdefault(os.path.normpath(str(file)), name)
    return owners


def distribution_of(module: str) -> str | None:
    """The distribution installed here holding `module`, or else its longest installed prefix
    (`from a.b import name`: `a.b.name` may be an attribute); None when nothing holds it."""
    owners = _files_to_distributions()
    roots = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    parts = module.split(".")
    for depth in range(len(parts), 0, -1):
        stem = os.path.join(*parts[:depth])
        candidates = [os.path.join(stem, "__init__.py"), stem + ".py"]
        for root in roots:
            folder = Path(root, *parts[: depth - 1])
            if folder.is_dir():
                candidates += [
                    os.path.join(*parts[: depth - 1], p.name)
                    for p in folder.glob(f"{parts[depth - 1]}.*")
                    if p.suffix in (".so", ".pyd")
                ]
        for candidate in candidates:
            if os.path.normpath(candidate) in owners:
                return owners[os.path.normpath(candidate)]
    return None


def locked(name: str) -> set[str]:
    (lock,) = [lock for lock in LOCK.LOCK_FILES if lock.name == name]
    return set(LOCK._entries(lock.path.read_text()))


def _needed(start: str) -> dict[str, set[str]]:
    """distribution -> the modules of it that `start` reaches. A name held by no file is a
    namespace package (`opentelemetry` of `from opentelemetry import trace`): what it holds is
    counted through the longer names."""
    found = imports_of(start)
    needed: dict[str, set[str]] = {}
    for module in found:
        distribution = distribution_of(module)
        if distribution is None:
            deeper = [m for m in found if m.startswith(module + ".")]
            assert deeper, f"{module}: imported by {sorted(found[module])}, installed nowhere here"
            continue
        needed.setdefault(distribution, set()).add(module)
    return needed


@pytest.mark.parametrize("service", LOCK.SERVICES)
def test_each_services_lock_holds_every_package_its_code_can_import(service: str) -> None:
    entry = f"services.{service.replace('-', '_')}.__main__"
    needed = _needed(entry)
    assert "grpcio" in needed  # the scan reaches the server, not just the entry module
    missing = {d: sorted(m) for d, m in needed.items() if d not in locked(service)}
    assert not missing, f"add these to the [{service}] extra of pyproject.toml: {missing}"


def test_the_search_tool_image_can_run_the_vespa_deploy_job() -> None:
    needed = _needed("quarry_cli.vespa_deploy")
    assert needed
    assert set(needed) <= locked("search-tool")


@pytest.mark.parametrize("service", ["agent", "llm-gateway"])
def test_the_agent_and_gateway_images_carry_no_search_engine_or_embedder(service: str) -> None:
    packages = locked(service)
    assert not packages & HEAVY, sorted(packages & HEAVY)
    search_tool = locked("search-tool")
    assert HEAVY - {"huggingface-hub"} <= search_tool


@pytest.mark.parametrize("service", LOCK.SERVICES)
def test_no_service_image_carries_build_or_test_packages(service: str) -> None:
    assert not locked(service) & DEV_ONLY, sorted(locked(service) & DEV_ONLY)


def test_the_gateways_test_support_module_is_not_reached_from_its_entry() -> None:
    reached = {f for files in imports_of("services.llm_gateway.__main__").values() for f in files}
    assert "services/llm_gateway/testing.py" not in reached
    # ...while the scan does see that module's imports when asked for it
    assert "starlette" in {m.split(".")[0] for m in imports_of("services.llm_gateway.testing")}


def test_the_dev_lock_holds_every_service_and_the_cli() -> None:
    dev = locked("dev")
    for service in LOCK.SERVICES:
        assert locked(service) <= dev, service
    assert set(_needed("quarry_cli.cli")) <= dev


def test_the_scan_follows_lazy_imports_inside_functions() -> None:
    # the Vespa engine is imported only when `engine.kind: vespa` is configured
    reached = {f for files in imports_of("services.search_tool.__main__").values() for f in files}
    assert any(f.startswith("services/search_tool/engine/vespa/") for f in reached)
    assert distribution_of("vespa.package") == "pyvespa"
    assert distribution_of("google.protobuf.json_format") == "protobuf"
    assert distribution_of("no_such_module_anywhere") is None


def test_the_search_tool_image_leaves_out_docker_which_its_vespa_code_never_imports() -> None:
    assert "docker" not in locked("search-tool")
    assert "docker" in locked("dev")  # pyvespa requires it; the image installs with --no-deps
    # with docker unimportable, every module of the Vespa engine and the deploy job still imports
    probe = (
        "import sys, importlib, pkgutil\n"
        "sys.modules['docker'] = None\n"
        "import services.search_tool.engine.vespa as v\n"
        "for m in pkgutil.walk_packages(v.__path__, v.__name__ + '.'):\n"
        "    importlib.import_module(m.name)\n"
        "import quarry_cli.vespa_deploy\n"
        "assert 'docker' not in {k for k, m in sys.modules.items() if m is not None}\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
