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

import pytest
import yaml

from tests.deploy.test_lock import LOCK

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


def _stages() -> dict[str, list[tuple[str, str]]]:
    """Stage name (`FROM ... AS name`) -> its instructions, FROM first."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for op, arg in _instructions():
        if op == "FROM":
            current = stages.setdefault(arg.split()[-1], [])
        current.append((op, arg))
    return stages


def _final_stage() -> list[tuple[str, str]]:
    """What every service's image is: the `runtime` stage and the service's own target."""
    stages = _stages()
    return stages["runtime"] + [i for s in SERVICES for i in stages[s]]


SERVICES = ("search-tool", "llm-gateway", "agent")
PORTS = {"search-tool": "50051", "llm-gateway": "50052", "agent": "50053"}


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
    # every stage starts from the base or from a stage built on it
    stages: set[str] = set()
    for line in froms:
        source, _, name = line.split()
        assert source == "${PYTHON_IMAGE}" or source in stages, line
        stages.add(name)


def test_the_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = [arg for op, arg in _stages()["runtime"] if op == "USER"]
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
    env = " ".join(arg for op, arg in _stages()["runtime"] if op == "ENV")
    assert "PYTHONUNBUFFERED=1" in env
    entrypoint = json.loads(next(arg for op, arg in _stages()["runtime"] if op == "ENTRYPOINT"))
    assert entrypoint == ["python", "-m"]


def test_each_services_target_starts_that_service_and_exposes_its_port_and_the_health_port() -> (
    None
):
    stages = _stages()
    for service in SERVICES:
        target = stages[service]
        assert target[0] == ("FROM", f"runtime AS {service}")
        command = json.loads(next(arg for op, arg in target if op == "CMD"))
        assert command == [f"services.{service.replace('-', '_')}", "--host", "0.0.0.0"]
        exposed = {port for op, arg in target if op == "EXPOSE" for port in arg.split()}
        assert exposed == {PORTS[service], "50060"}
        labels = " ".join(arg for op, arg in target if op == "LABEL")
        assert f'org.opencontainers.image.title="quarry-{service}"' in labels
    # the ports are those the services listen on in k8s (k8s/base/config/quarry.yaml)
    config = yaml.safe_load((ROOT / "k8s" / "base" / "config" / "quarry.yaml").read_text())
    for service, port in PORTS.items():
        assert str(config[service.replace("-", "_")]["server"]["port"]) == port
        assert str(config[service.replace("-", "_")]["server"]["health_port"]) == "50060"
    # a build without --target gives the agent: the last stage
    assert list(stages)[-1] == "agent"


def test_the_service_arg_picks_the_services_lock_and_refuses_any_other_value() -> None:
    build = _stages()["build"]
    assert ("ARG", "SERVICE") in build, "SERVICE has no default: a build must name it"
    (step,) = [arg for op, arg in build if op == "RUN" and "$SERVICE" in arg]
    (accepted,) = re.findall(r"case \"\$SERVICE\" in\s+([\w|-]+)\)", step)
    assert tuple(accepted.split("|")) == SERVICES == tuple(LOCK.SERVICES)
    assert re.search(r"\*\) echo .*exit 2", step), "any other value fails the build"
    assert '--require-hashes --no-deps -r "requirements/$SERVICE.lock"' in step
    for service in SERVICES:
        assert (ROOT / "requirements" / f"{service}.lock").is_file()
    # the wheel is built before SERVICE is used: one cached layer for all three builds
    instructions = [(op, arg) for op, arg in build if op in ("ARG", "RUN")]
    wheel = next(i for i, (op, arg) in enumerate(instructions) if "pip wheel" in arg)
    assert wheel < instructions.index(("ARG", "SERVICE"))
    # the service's entry module is imported in the build: a package missing from its lock
    # fails the build, not the first start
    assert 'python -c "import $module.__main__"' in step
    assert 'module="services.$(echo "$SERVICE" | tr - _)"' in step


def test_each_target_refuses_a_virtualenv_built_for_another_service() -> None:
    build = _stages()["build"]
    (step,) = [arg for op, arg in build if op == "RUN" and "$SERVICE" in arg]
    assert 'echo "$SERVICE" > /opt/quarry/SERVICE' in step
    for service in SERVICES:
        (check,) = [arg for op, arg in _stages()[service] if op == "RUN"]
        assert f'test "$(cat /opt/quarry/SERVICE)" = {service}' in check
        assert "exit 2" in check


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
    assert any('-r "requirements/$SERVICE.lock"' in s for s in installs)
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
    (build,) = _make_dry_run("image", "SERVICE=agent")
    assert f"--build-arg PYTHON_IMAGE={_base_image()} " in build
    pinned = f"{_base_image()}@sha256:{'0' * 64}"
    (build,) = _make_dry_run("image", "SERVICE=agent", f"PYTHON_IMAGE={pinned}")
    assert f"--build-arg PYTHON_IMAGE={pinned} " in build


def _build_command(*arguments: str) -> str:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "image", *arguments, "CONTAINER_TOOL=podman"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    (command,) = [c for c in out.replace("\\\n", " ").splitlines() if c.startswith("podman build")]
    return " ".join(command.split())


@pytest.mark.parametrize("service", SERVICES)
def test_make_image_builds_one_services_lock_and_target_under_its_own_name(service: str) -> None:
    command = _build_command(f"SERVICE={service}")
    assert (
        f"--build-arg SERVICE={service} --target {service} -t quarry-{service}:0.1.0 ." in command
    )
    command = _build_command(
        f"SERVICE={service}", "IMAGE_REPO=registry.example.com/q", "IMAGE_TAG=2"
    )
    assert f"-t registry.example.com/q-{service}:2 ." in command


@pytest.mark.parametrize("service", ["", "search_tool", "quarry", "llm-gateway agent"])
def test_make_image_refuses_a_missing_or_unknown_service(service: str) -> None:
    result = subprocess.run(
        ["make", "--no-print-directory", "image", f"SERVICE={service}", "CONTAINER_TOOL=echo"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode != 0
    assert "make image SERVICE=<one of: search-tool llm-gateway agent>" in result.stdout
    assert "build" not in result.stdout.replace("make image", "")


def test_make_images_builds_all_three() -> None:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "images", "CONTAINER_TOOL=podman"],
        cwd=ROOT, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    built = re.findall(r"--target ([\w-]+) -t quarry-([\w-]+):", out.replace("\\\n", " "))
    assert built == [(s, s) for s in SERVICES]


def test_make_base_image_digest_pulls_the_containerfiles_base_and_prints_it_by_digest() -> None:
    pull, show = _make_dry_run("base-image-digest")
    assert pull == f"podman pull {_base_image()}"
    assert show.startswith(f'echo "{_base_image()}@$(podman image inspect')
    assert "RepoDigests" in show


SMOKE = ROOT / "scripts" / "image_smoke.sh"


def test_the_smoke_script_builds_every_service_and_runs_each_as_its_pod_does() -> None:
    """scripts/image_smoke.sh (slow, run by hand: README "Image smoke test") builds each image
    with `make image` and starts it with the pods' restrictions (k8s/base: runAsUser,
    readOnlyRootFilesystem, capabilities drop ALL, allowPrivilegeEscalation false)."""
    text = SMOKE.read_text()
    assert SMOKE.stat().st_mode & 0o111, "executable"
    assert subprocess.run(["bash", "-n", str(SMOKE)], check=False).returncode == 0
    (services,) = re.findall(r"^SERVICES=\(([^)]*)\)", text, flags=re.M)
    assert tuple(services.split()) == SERVICES
    assert 'make -C "$ROOT" --no-print-directory image SERVICE="$service"' in text
    assert 'PYTHON_IMAGE="$BASE"' in text
    assert "debootstrap --variant=minbase" in text
    assert "EXTRA_CA_FILE=" in text
    assert "/usr/local/share/ca-certificates/" in text
    (run,) = re.findall(r"podman run -d .*?\n(?:.*\\\n)*.*\n", text)
    pod = yaml.safe_load_all((ROOT / "k8s" / "base" / "agent.yaml").read_text())
    (deployment,) = [d for d in pod if d and d["kind"] == "Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    uid = spec["securityContext"]["runAsUser"]
    assert f"--user {uid}:" in run
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "--read-only" in run
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "--cap-drop ALL" in run
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "--security-opt no-new-privileges" in run
    # it is not part of `make test`: nothing in tests/ or the Makefile's test target runs it
    assert (
        "image_smoke" not in (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n")[0]
    )
