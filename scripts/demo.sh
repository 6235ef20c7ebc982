#!/usr/bin/env bash
# Runs the hello example end to end: a worker process (steadyflow worker) serves
# it, a client starts a run and prints its result, then the worker is stopped
# with SIGTERM. Both find the store and the key prefix in STEADYFLOW_STORE and
# STEADYFLOW_PREFIX (docs/operations.md#configuration), exported below.
#
# Store: $STEADYFLOW_STORE, or redis://127.0.0.1:6379/0. When that default does
# not answer and redis-server is on PATH, a private redis-server is started on a
# free port (and stopped at the end). Keys go under the prefix "sf-demo", the
# demo's own: at the end every key under it is deleted, so a Redis you keep
# holds nothing of the demo afterwards.
set -euo pipefail
. "$(dirname "$0")/env.sh"   # .venv with steadyflow installed; cd to the repo root

PREFIX="sf-demo"
STORE="${STEADYFLOW_STORE:-}"
workdir="$(mktemp -d)"
worker_pid=""
redis_pid=""
demo_store=""   # set once the demo may have written keys: the store to sweep

cleanup() {
  if [ -n "$worker_pid" ] && kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
  fi
  # After the worker: nothing writes under the prefix any more. A private
  # redis-server goes away whole, so only a Redis of the user's is swept.
  if [ -n "$demo_store" ] && [ -z "$redis_pid" ]; then
    remove_demo_keys || echo "demo: could not delete the keys under $PREFIX: at $STORE" >&2
  fi
  if [ -n "$redis_pid" ]; then
    kill -TERM "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# remove_demo_keys: delete every key under "$PREFIX:" at $STORE (the run, its
# journal, events and checkpoints, and the prefix's queues and indexes).
remove_demo_keys() {
  python - "$STORE" "$PREFIX" <<'PY'
import sys
import redis
r = redis.Redis.from_url(sys.argv[1], socket_timeout=5, socket_connect_timeout=2)
keys = list(r.scan_iter(match=f"{sys.argv[2]}:*", count=1000))
for i in range(0, len(keys), 500):
    r.unlink(*keys[i : i + 500])
print(f"demo: deleted the {len(keys)} keys the demo wrote under {sys.argv[2]}:")
PY
}

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
# The worker and the client below read these; neither is given --store or --prefix.
export STEADYFLOW_STORE="$STORE" STEADYFLOW_PREFIX="$PREFIX"
demo_store="$STORE"
steadyflow worker examples.hello >"$workdir/worker.log" 2>&1 &
worker_pid=$!

if ! python -m examples.hello --name "Steadyflow user"; then
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
