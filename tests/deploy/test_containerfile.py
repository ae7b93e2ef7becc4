"""Static rules of the Containerfile, .dockerignore and `make image` (no base image can be pulled
here, so the image itself is not built in CI; `test_wheel_start` starts what the image installs).

The base image is an exact version tag (never `latest` or a floating `3.11-slim`); a digest can
only be pinned where a registry is reachable, so `make base-image-digest` prints it there and
`make image PYTHON_IMAGE=...@sha256:...` builds on it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"


def _instructions() -> list[tuple[str, str]]:
    text = CONTAINERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def _final_stage() -> list[tuple[str, str]]:
    instructions = _instructions()
    last_from = max(i for i, (op, _) in enumerate(instructions) if op == "FROM")
    return instructions[last_from:]


def _base_image() -> str:
    args = dict(arg.split("=", 1) for op, arg in _instructions() if op == "ARG" and "=" in arg)
    return args["PYTHON_IMAGE"]


def test_the_base_image_is_a_pinned_slim_python_never_latest() -> None:
    image = _base_image()
    assert re.fullmatch(
        r"docker\.io/library/python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", image
    )
    froms = [arg for op, arg in _instructions() if op == "FROM"]
    assert froms
    assert all(f.split()[0] == "${PYTHON_IMAGE}" for f in froms)


def test_the_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = [arg for op, arg in _final_stage() if op == "USER"]
    assert users, "the final stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit()
    assert int(uid) >= 1000


def test_the_final_stage_carries_no_sources_tests_or_build_tools() -> None:
    copies = [arg for op, arg in _final_stage() if op in ("COPY", "ADD")]
    assert copies
    assert all(arg.startswith("--from=build ") for arg in copies)
    build_copies = [arg for op, arg in _instructions() if op == "COPY" and "--from" not in arg]
    sources = {arg.split()[0] for arg in build_copies}
    assert sources == {"pyproject.toml", "requirements", "services", "quarry_cli"}
    assert all((ROOT / s).exists() for s in sources)
    runs = " ".join(arg for op, arg in _final_stage() if op == "RUN")
    assert not re.search(r"\b(apt-get|gcc|pip install)\b", runs)


def test_the_environment_is_unbuffered_and_the_entry_is_exec_form() -> None:
    env = " ".join(arg for op, arg in _final_stage() if op == "ENV")
    assert "PYTHONUNBUFFERED=1" in env
    entrypoint = json.loads(next(arg for op, arg in _final_stage() if op == "ENTRYPOINT"))
    command = json.loads(next(arg for op, arg in _final_stage() if op == "CMD"))
    assert entrypoint == ["python", "-m"]
    assert command[0] == "services.agent"


def test_dockerignore_admits_only_what_the_build_copies() -> None:
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    admitted = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert admitted == {"pyproject.toml", "README.md", "requirements", "services", "quarry_cli"}
    assert "tests" not in admitted
    assert ".venv" not in admitted


def test_the_service_ports_and_the_health_only_port_are_exposed() -> None:
    exposed = {port for op, arg in _final_stage() if op == "EXPOSE" for port in arg.split()}
    assert exposed == {"50051", "50052", "50053", "50060"}


def test_the_build_installs_only_locked_hash_checked_packages_and_resolves_nothing() -> None:
    runs = [arg for op, arg in _instructions() if op == "RUN"]
    installs = [
        step.strip()
        for run in runs
        for step in run.split("&&")
        if re.search(r"\bpip (install|wheel)\b", step)
    ]
    assert installs
    for step in installs:
        locked = "--require-hashes" in step and "-r requirements/" in step
        assert locked or "--no-deps" in step, step
    assert any("-r requirements/runtime.lock" in s for s in installs)
    assert any("--no-build-isolation" in s for s in installs if "pip wheel" in s)
    assert any("pip check" in run for run in runs)


def test_the_build_takes_a_private_index_and_an_extra_ca_and_make_image_passes_them() -> None:
    args = {arg.split("=", 1)[0] for op, arg in _instructions() if op == "ARG"}
    assert {"PIP_INDEX_URL", "EXTRA_CA_PEM"} <= args
    out = subprocess.run(
        ["make", "-n", "image", "CONTAINER_TOOL=podman", "PIP_INDEX_URL=https://pypi.example/simple",
         f"EXTRA_CA_FILE={CONTAINERFILE}"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert "--build-arg PIP_INDEX_URL=https://pypi.example/simple" in out
    assert f'--build-arg EXTRA_CA_PEM="$(cat {CONTAINERFILE})"' in out


def _make_dry_run(*arguments: str) -> list[str]:
    """The commands `make -n` would run (nothing is built or pulled)."""
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", *arguments, "CONTAINER_TOOL=podman"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line for line in out.splitlines() if line.startswith(("podman", "echo"))]


def test_make_image_builds_on_the_containerfiles_exact_base_or_on_a_pinned_digest() -> None:
    (build,) = _make_dry_run("image")
    assert f"--build-arg PYTHON_IMAGE={_base_image()} " in build
    pinned = f"{_base_image()}@sha256:{'0' * 64}"
    (build,) = _make_dry_run("image", f"PYTHON_IMAGE={pinned}")
    assert f"--build-arg PYTHON_IMAGE={pinned} " in build


def test_make_base_image_digest_pulls_the_containerfiles_base_and_prints_it_by_digest() -> None:
    pull, show = _make_dry_run("base-image-digest")
    assert pull == f"podman pull {_base_image()}"
    assert show.startswith(f'echo "{_base_image()}@$(podman image inspect')
    assert "RepoDigests" in show
