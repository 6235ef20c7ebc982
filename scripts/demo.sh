#!/usr/bin/env bash
# Runs the hello example end to end: a worker process serves it, a client starts
# a run and prints its result, then the worker is stopped with SIGTERM.
#
# Store: $STEADYFLOW_STORE, or redis://127.0.0.1:6379/0. When that default does
# not answer and redis-server is on PATH, a private redis-server is started on a
# free port (and stopped at the end). Keys go under the prefix "sf-demo".
set -euo pipefail
. "$(dirname "$0")/env.sh"   # .venv with steadyflow installed; cd to the repo root

PREFIX="sf-demo"
STORE="${STEADYFLOW_STORE:-}"
workdir="$(mktemp -d)"
worker_pid=""
redis_pid=""

cleanup() {
  if [ -n "$worker_pid" ] && kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
  fi
  if [ -n "$redis_pid" ]; then
    kill -TERM "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# store_up URL: true when a Redis answers PING there (TLS and ACL users included).
store_up() {
  python - "$1" <<'PY'
import sys
import redis
try:
    redis.Redis.from_url(sys.argv[1], socket_timeout=2, socket_connect_timeout=2).ping()
except Exception:
    sys.exit(1)
PY
}

if [ -n "$STORE" ]; then
  if ! store_up "$STORE"; then
    echo "demo: no Redis answers at \$STEADYFLOW_STORE ($STORE)" >&2
    exit 1
  fi
else
  STORE="redis://127.0.0.1:6379/0"
  if ! store_up "$STORE"; then
    if ! command -v redis-server >/dev/null; then
      echo "demo: no Redis answers at $STORE and redis-server is not on PATH." >&2
      echo "      Start Redis there, or set STEADYFLOW_STORE=redis://host:port/db." >&2
      exit 1
    fi
    port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    echo "demo: no Redis at $STORE; starting a private redis-server on port $port"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$workdir" --save "" --appendonly no \
      >"$workdir/redis.log" 2>&1 &
    redis_pid=$!
    STORE="redis://127.0.0.1:$port/0"
    for _ in $(seq 100); do store_up "$STORE" && break; sleep 0.1; done
    store_up "$STORE" || { cat "$workdir/redis.log" >&2; exit 1; }
  fi
fi

echo "demo: store $STORE, prefix $PREFIX"
python -m sdk.worker examples.hello --store "$STORE" --prefix "$PREFIX" \
  >"$workdir/worker.log" 2>&1 &
worker_pid=$!

if ! python -m examples.hello --store "$STORE" --prefix "$PREFIX" --name "Steadyflow user"; then
  echo "demo: the run did not finish; worker log:" >&2
  cat "$workdir/worker.log" >&2
  exit 1
fi

kill -TERM "$worker_pid"
status=0
wait "$worker_pid" || status=$?
worker_pid=""
if [ "$status" -ne 0 ]; then
  echo "demo: the worker exited with status $status; its log:" >&2
  cat "$workdir/worker.log" >&2
  exit 1
fi
echo "demo: worker stopped cleanly (SIGTERM)"
