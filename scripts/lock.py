"""The lock files every install reads, made from pyproject.toml by `uv pip compile`.

    python scripts/lock.py           # `make lock`: write requirements/*.lock
    python scripts/lock.py --check   # `make check-lock` (in `make test`): offline, exit 1 if stale

pyproject.toml stays the one place a direct dependency's version is pinned; the lock files add
every transitive dependency, pinned, with the SHA-256 of each of its published files, for every
platform and Python 3.11+ (`--universal`), so `pip install --require-hashes` installs the same
bytes on a laptop, in CI and in the image:

    requirements/dev.lock          everything: the services, the CLI and the `dev` extra:
                                   `make setup` (the venv, CI)
    requirements/search-tool.lock  one per service: the common dependencies + that service's
    requirements/llm-gateway.lock  extra, what its image installs (Containerfile, ARG SERVICE)
    requirements/agent.lock
    requirements/build.lock        the build backend ([build-system] requires): the image builds
                                   the wheel with it, without build isolation
    requirements/llm-runtime.lock  the `llm-runtime` extra alone: the local model server's own
                                   virtualenv (scripts/local_model.py), apart from everything else

The service locks and build.lock are resolved under dev.lock as constraints, so what ships is what
the tests ran on (llm-runtime.lock cannot be: its server needs older pydantic and numpy). A
re-run keeps every version already locked unless pyproject.toml asks otherwise
(uv reads the existing file as its preference), so after a merge that adds a pin, `make lock`
changes only what that pin brings. `--check` needs no network: each lock must list exactly the
pins of pyproject.toml (name and version) as its direct dependencies, with hashes on every entry.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOCKS = ROOT / "requirements"
UV = Path(sys.executable).with_name("uv")
COMPILE = [
    "pip",
    "compile",
    "--universal",
    "--python-version",
    "3.11",
    "--generate-hashes",
    "--custom-compile-command",
    "make lock",
    "--quiet",
]
DIRECT = "quarry (pyproject.toml)"
"""uv's `# via` annotation of a dependency pyproject.toml names itself."""
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


@dataclass(frozen=True)
class Lock:
    """One lock file and the pyproject.toml pins it must carry as direct dependencies."""

    name: str
    extras: tuple[str, ...]
    build_system: bool = False
    extras_only: bool = False
    """Only the extras' pins, without the project's own dependencies (a venv apart)."""
    constrained: bool = True
    """Resolved under dev.lock, so its versions are the ones the tests ran on."""
    left_out: tuple[str, ...] = ()
    """Distributions a dependency requires but no code of this lock's service can import, kept out
    (`--no-emit-package`; images install with `--no-deps`)."""

    @property
    def path(self) -> Path:
        return LOCKS / f"{self.name}.lock"


SERVICES = ("search-tool", "llm-gateway", "agent")
"""The services, each an extra of pyproject.toml, a lock and an image (`make image SERVICE=...`)."""
PRODUCT = ("cli", *SERVICES)
"""The extras that make up Quarry; with `dev` and the dependencies, one set of versions."""
LEFT_OUT = {"search-tool": ("docker",)}
"""pyvespa requires docker for its local-deployment module (`vespa.deployment`), which the Vespa
engine never imports (tests/deploy/test_service_images.py checks what each service imports)."""
LOCK_FILES = (
    Lock("dev", ("dev", *PRODUCT), constrained=False),
    *(Lock(service, (service,), left_out=LEFT_OUT.get(service, ())) for service in SERVICES),
    Lock("build", (), build_system=True),
    Lock("llm-runtime", ("llm-runtime",), extras_only=True, constrained=False),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="verify, offline; write nothing")
    args = parser.parse_args()
    if args.check:
        problems = conflicting_pins(PYPROJECT.read_text())
        problems += [p for lock in LOCK_FILES for p in check(lock)]
        for problem in problems:
            print(f"lock: {problem}", file=sys.stderr)
        if problems:
            print("lock: the lock files are stale: run `make lock`", file=sys.stderr)
        return 1 if problems else 0
    LOCKS.mkdir(exist_ok=True)
    for lock in LOCK_FILES:
        write(lock)
    return 0


def write(lock: Lock) -> None:
    """(Re)write `lock` with uv, relative paths only so the header reads the same everywhere."""
    command = [str(UV), *COMPILE, "-o", str(lock.path.relative_to(ROOT))]
    text = None
    if lock.build_system or lock.extras_only:
        # from stdin: uv annotates these `# via -r -`, so check() matches them by name only
        command.append("-")
        text = "\n".join(pins(lock)) + "\n"
    else:
        command += ["pyproject.toml", *(f"--extra={extra}" for extra in lock.extras)]
    if lock.constrained:
        command += ["--constraint", "requirements/dev.lock"]
    for name in lock.left_out:
        command += ["--no-emit-package", name]
    subprocess.run(command, cwd=ROOT, input=text, text=True, check=True)
    print(f"wrote {lock.path.relative_to(ROOT)}")


def pins(lock: Lock, pyproject: str | None = None) -> list[str]:
    """The requirements for `lock` in `pyproject` (pyproject.toml's text), as written there."""
    data = tomllib.loads(PYPROJECT.read_text() if pyproject is None else pyproject)
    if lock.build_system:
        return list(data["build-system"]["requires"])
    project = data["project"]
    optional = project.get("optional-dependencies", {})
    own = [r for extra in lock.extras for r in optional[extra]]
    return own if lock.extras_only else [*project["dependencies"], *own]


def conflicting_pins(pyproject: str) -> list[str]:
    """Distributions pinned at two versions among the dependencies, `dev` and the product's
    extras (which share one lock, dev.lock); empty when each has one version."""
    project = tomllib.loads(pyproject)["project"]
    optional = project.get("optional-dependencies", {})
    groups = {"dependencies": project["dependencies"]}
    groups |= {f"[{extra}]": optional.get(extra, []) for extra in ("dev", *PRODUCT)}
    seen: dict[str, tuple[str, str]] = {}
    problems = []
    for group, requirements in groups.items():
        for requirement in requirements:
            name, _, version = re.sub(r"\[[^]]*\]", "", requirement).partition("==")
            name, version = _normal(name), version.strip()
            first = seen.setdefault(name, (version, group))
            if first[0] != version:
                problems.append(
                    f"pyproject.toml: {name} is pinned at {first[0]} in {first[1]} and at "
                    f"{version} in {group} (one version: they share dev.lock)"
                )
    return problems


def check(lock: Lock) -> list[str]:
    """Why `lock`'s file does not match pyproject.toml; empty when it does."""
    where = str(lock.path.relative_to(ROOT))
    if not lock.path.exists():
        return [f"{where} is missing"]
    return mismatches(lock, PYPROJECT.read_text(), lock.path.read_text(), where=where)


def mismatches(lock: Lock, pyproject: str, text: str, *, where: str) -> list[str]:
    """Why the lock file `text` does not carry `pyproject`'s pins for `lock`; empty when it does."""
    wanted: dict[str, str] = {}
    problems: list[str] = []
    for requirement in pins(lock, pyproject):
        name, _, version = re.sub(r"\[[^]]*\]", "", requirement).partition("==")
        if not version or any(c in version for c in ",;<>~! "):
            problems.append(f"pyproject.toml: {requirement!r} is not pinned with == (pin it)")
            continue
        wanted[_normal(name)] = version.strip()
    entries = _entries(text)
    for name, version in wanted.items():
        found = entries.get(name)
        if found is None:
            problems.append(f"{where}: {name}=={version} is not locked")
        elif found.version != version:
            problems.append(f"{where}: {name} is locked at {found.version}, pinned at {version}")
    if not (lock.build_system or lock.extras_only):
        for name, entry in entries.items():
            if entry.direct and name not in wanted:
                problems.append(f"{where}: {name} is locked as a direct dependency, not pinned")
    problems += [f"{where}: {name} has no hash" for name, e in entries.items() if not e.hashed]
    return problems


@dataclass
class _Entry:
    version: str
    hashed: bool = False
    direct: bool = False


def _entries(text: str) -> dict[str, _Entry]:
    """name -> (version, has a hash, named by pyproject.toml) of each package in a lock file."""
    entries: dict[str, _Entry] = {}
    current: _Entry | None = None
    for line in text.splitlines():
        match = _ENTRY.match(line)
        if match:
            current = entries[_normal(match.group(1))] = _Entry(match.group(2))
        elif current is not None and "--hash=sha256:" in line:
            current.hashed = True
        elif current is not None and line.lstrip("# ").removeprefix("via ").strip() == DIRECT:
            current.direct = True
    return entries


def _normal(name: str) -> str:
    """The PEP 503 form of a distribution name (`Foo_Bar` and `foo-bar` are one)."""
    return re.sub(r"[-_.]+", "-", name).lower()


if __name__ == "__main__":
    sys.exit(main())
