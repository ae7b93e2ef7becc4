#!/usr/bin/env bash
# The image smoke test: build the three service images for real, start each from its image as its
# pod runs it, and ask one question through them. Slow (minutes; not part of `make test`); run it
# before every change to the Containerfile, the locks or k8s/:
#
#     sudo scripts/image_smoke.sh          (root: podman, debootstrap; `make image-smoke` too)
#
# Needs podman, runc and debootstrap (Debian: apt-get install -y podman runc debootstrap) and the
# project's virtualenv (`make setup`: its `quarry` CLI asks the question and probes health).
#
# 1. The base: a Debian of the running release (/etc/os-release) made with debootstrap, with
#    Debian's python3 and venv, imported into podman as $BASE (reused when present; --new-base
#    makes it again). No registry is needed: the build pulls nothing.
# 2. podman reads $WORK/containers.conf: runtime runc, explicit ulimits, cgroupfs and file
#    events (what a host without systemd or crun needs).
# 3. `make images` on that base: every CA certificate under /usr/local/share/ca-certificates
#    (a TLS-intercepting proxy's) goes to pip in the build stage (EXTRA_CA_FILE); the build
#    time of each image is printed.
# 4. Each service runs from its image as the pods run it: user 10001, read-only root, every
#    capability dropped, no new privileges, the data directory on a volume; host network on the
#    ports below. Each must answer SERVING (gRPC health) on its readiness name and on
#    quarry.liveness, on its port and its health-only port. The demo collection is built through
#    the search tool, then `quarry ask` asks one question through the agent.
# 5. A table: each image's size (and the 1.06 GB of the former single image), build seconds,
#    health, and the answer's first line. Exit 0 only when every step passed.
#
# Ports: QUARRY_SMOKE_PORT (default 52610) and the next five (three services, three health ports).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${QUARRY_SMOKE_DIR:-/tmp/quarry-image-smoke}
PORT=${QUARRY_SMOKE_PORT:-52610}
IMAGE_REPO=${QUARRY_SMOKE_REPO:-localhost/quarry-smoke}
IMAGE_TAG=${QUARRY_SMOKE_TAG:-0.1.0}
# shellcheck source=/dev/null
RELEASE=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
[ -n "$RELEASE" ] || { echo "image_smoke: /etc/os-release names no release" >&2; exit 2; }
BASE=${QUARRY_SMOKE_BASE:-localhost/quarry-base-debian-python:$RELEASE}
MIRROR=${QUARRY_SMOKE_MIRROR:-http://deb.debian.org/debian}
FORMER_IMAGE_MB=1060   # the single image for all three services (issue 32): 1.06 GB
QUARRY=$ROOT/.venv/bin/quarry
SERVICES=(search-tool llm-gateway agent)
NEW_BASE=0
KEEP=0
for arg in "$@"; do
  case $arg in
    --new-base) NEW_BASE=1 ;;
    --keep) KEEP=1 ;;   # leave the containers running (stop them with podman rm -f)
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "image_smoke: unknown argument $arg (--new-base, --keep)" >&2; exit 2 ;;
  esac
done

say() { printf 'image_smoke: %s\n' "$*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || fail "$tool is missing: apt-get install -y podman runc debootstrap"
done
[ "$(id -u)" = 0 ] || fail "run as root (debootstrap and podman's storage)"
[ -x "$QUARRY" ] || fail "$QUARRY is missing: run make setup first"
mkdir -p "$WORK"

# 2. podman's configuration for this host
# Explicit ulimits: podman's own defaults (nofile 1048576, nproc = the host's) are refused here
# ("error setting rlimit type 7: operation not permitted"); the host's hard nofile limit works,
# and nproc up to 32768 (seen refused at 50000 with a hard limit of 96364).
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] && nofile=65536
{ [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
cat > "$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF=$WORK/containers.conf

# 1. the base image
if [ "$NEW_BASE" = 1 ] || ! podman image exists "$BASE"; then
  say "debootstrap $RELEASE into $WORK/rootfs (a few minutes) ..."
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python-is-python3,passwd,ca-certificates \
    "$RELEASE" "$WORK/rootfs" "$MIRROR" > "$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log" >&2; fail "debootstrap (log: $WORK/debootstrap.log)"; }
  rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
  # through a file, not a pipe: a failure of tar or of the import is then named, not lost in a pipe
  tar -C "$WORK/rootfs" -cf "$WORK/rootfs.tar" .
  podman import --change 'CMD ["python3"]' "$WORK/rootfs.tar" "$BASE" >/dev/null 2>&1 \
    || fail "podman import of $WORK/rootfs.tar"
  rm -rf "$WORK/rootfs" "$WORK/rootfs.tar"
fi
say "base $BASE: $(podman run --rm "$BASE" python3 --version)"

# 3. the images
EXTRA_CA=$WORK/extra-ca.pem
cat /usr/local/share/ca-certificates/*.crt > "$EXTRA_CA" 2>/dev/null || : > "$EXTRA_CA"
declare -A BUILD_S SIZE_MB HEALTH
for service in "${SERVICES[@]}"; do
  say "building $IMAGE_REPO-$service:$IMAGE_TAG ..."
  start=$(date +%s)
  ca=()
  [ -s "$EXTRA_CA" ] && ca=("EXTRA_CA_FILE=$EXTRA_CA")
  make -C "$ROOT" --no-print-directory image SERVICE="$service" CONTAINER_TOOL=podman \
    PYTHON_IMAGE="$BASE" IMAGE_REPO="$IMAGE_REPO" IMAGE_TAG="$IMAGE_TAG" \
    "${ca[@]}" > "$WORK/build-$service.log" 2>&1 \
    || { tail -30 "$WORK/build-$service.log" >&2; fail "build of $service (log: $WORK/build-$service.log)"; }
  BUILD_S[$service]=$(( $(date +%s) - start ))
  bytes=$(podman image inspect --format '{{.Size}}' "$IMAGE_REPO-$service:$IMAGE_TAG")
  SIZE_MB[$service]=$(( bytes / 1000000 ))
done

# 4. run them as the pods do
declare -A MAIN_PORT=([search-tool]=$PORT [llm-gateway]=$((PORT + 1)) [agent]=$((PORT + 2)))
declare -A HEALTH_PORT=([search-tool]=$((PORT + 3)) [llm-gateway]=$((PORT + 4)) [agent]=$((PORT + 5)))
declare -A READINESS=(
  [search-tool]=quarry.searchtool.v1.SearchToolService
  [llm-gateway]=quarry.llmgateway.v1.LlmGatewayService
  [agent]=quarry.agent.v1.AgentService
)
cleanup() {
  if [ "$KEEP" = 0 ]; then
    for service in "${SERVICES[@]}"; do podman rm -f "quarry-smoke-$service" >/dev/null 2>&1 || :; done
    podman volume rm -f quarry-smoke-data >/dev/null 2>&1 || :
  fi
}
trap cleanup EXIT
cleanup
podman volume create quarry-smoke-data >/dev/null
for service in "${SERVICES[@]}"; do
  section=QUARRY_$(echo "$service" | tr a-z- A-Z_)
  extra=()
  case $service in
    search-tool) extra=(-v quarry-smoke-data:/var/lib/quarry:U) ;;
    agent) extra=(-e "QUARRY_AGENT_SEARCH_TOOL_ADDRESS=127.0.0.1:${MAIN_PORT[search-tool]}"
                  -e "QUARRY_AGENT_LLM_GATEWAY_ADDRESS=127.0.0.1:${MAIN_PORT[llm-gateway]}"
                  -e "QUARRY_AGENT_HISTORY__PATH=/tmp/runs.sqlite3") ;;
  esac
  podman run -d --name "quarry-smoke-$service" --network host \
    --user 10001:10001 --read-only --cap-drop ALL --security-opt no-new-privileges \
    -e "${section}_SERVER__HOST=127.0.0.1" \
    -e "${section}_SERVER__PORT=${MAIN_PORT[$service]}" \
    -e "${section}_SERVER__HEALTH_PORT=${HEALTH_PORT[$service]}" \
    "${extra[@]}" "$IMAGE_REPO-$service:$IMAGE_TAG" >/dev/null \
    || fail "podman run $service"
done

serving() {  # serving PORT SERVICE-NAME: exit 0 when the health service answers SERVING
  "$ROOT/.venv/bin/python" - "$1" "$2" <<'EOF'
import sys, grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
with grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}") as channel:
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=sys.argv[2]), timeout=3)
    except grpc.RpcError:
        sys.exit(1)
sys.exit(0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1)
EOF
}
for service in "${SERVICES[@]}"; do
  deadline=$(( $(date +%s) + 180 ))
  checks=()
  for port in "${MAIN_PORT[$service]}" "${HEALTH_PORT[$service]}"; do
    for name in "${READINESS[$service]}" quarry.liveness; do checks+=("$port $name"); done
  done
  for check in "${checks[@]}"; do
    until serving "${check% *}" "${check#* }"; do
      if ! podman container inspect -f '{{.State.Running}}' "quarry-smoke-$service" | grep -q true; then
        podman logs --tail 30 "quarry-smoke-$service" >&2 || :
        fail "$service exited (its log is above)"
      fi
      [ "$(date +%s)" -lt "$deadline" ] || {
        podman logs --tail 30 "quarry-smoke-$service" >&2; fail "$service: not SERVING on $check"; }
      sleep 1
    done
  done
  HEALTH[$service]="SERVING (${#checks[@]} checks)"
  user=$(podman exec "quarry-smoke-$service" id -u)
  [ "$user" = 10001 ] || fail "$service runs as uid $user, not 10001"
  say "$service: ${HEALTH[$service]} on ${MAIN_PORT[$service]} and ${HEALTH_PORT[$service]}, uid $user"
done

say "building the demo collection through the search tool's image ..."
"$ROOT/.venv/bin/python" -m quarry_cli.demo --address "127.0.0.1:${MAIN_PORT[search-tool]}" \
  > "$WORK/demo.log" 2>&1 || { cat "$WORK/demo.log" >&2; fail "demo collection"; }
say "$(tail -1 "$WORK/demo.log")"
QUESTION="How do I read a file line by line in Python?"
QUARRY_AGENT_ADDRESS=127.0.0.1:${MAIN_PORT[agent]} "$QUARRY" ask "$QUESTION" --json \
  > "$WORK/ask.jsonl" 2> "$WORK/ask.err" || { cat "$WORK/ask.err" >&2; fail "quarry ask"; }
ANSWER=$("$ROOT/.venv/bin/python" - "$WORK/ask.jsonl" <<'EOF'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
done = [e["done"]["response"] for e in events if "done" in e]
text = done[-1].get("answer", {}).get("text", "") if done else ""
cited = len(done[-1].get("answer", {}).get("citations", [])) if done else 0
print(f"{text.strip().splitlines()[0][:100] if text.strip() else '(empty)'} [{cited} citations]")
sys.exit(0 if text.strip() and cited else 1)
EOF
) || fail "no cited answer in $WORK/ask.jsonl"

# 5. the report
printf '\n%-13s %-46s %10s %12s %8s  %s\n' service image "size MB" "vs 1.06 GB" "build s" health
for service in "${SERVICES[@]}"; do
  printf '%-13s %-46s %10s %11s%% %8s  %s\n' "$service" "$IMAGE_REPO-$service:$IMAGE_TAG" \
    "${SIZE_MB[$service]}" "$(( SIZE_MB[$service] * 100 / FORMER_IMAGE_MB ))" \
    "${BUILD_S[$service]}" "${HEALTH[$service]}"
done
printf '\nquestion: %s\nanswer:   %s\n' "$QUESTION" "$ANSWER"
say "passed"
