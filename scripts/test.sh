#!/usr/bin/env bash
# The test suite, on every core. Needs Redis on 127.0.0.1:6379 for the
# real-Redis tests; starts one if redis-server is on PATH and none answers.
# Fetches, once, the redis-server 6.2 the compatibility tests run on
# (tests/redis62.py).
#
#   bash scripts/test.sh [PYTEST ARGS]         # all but the tests marked long
#   bash scripts/test.sh --all [PYTEST ARGS]   # those too (what CI runs)
set -euo pipefail
. "$(dirname "$0")/env.sh" dev
# The tests marked long (tests/test_packaging.py: fresh virtualenvs, pip
# installs) take minutes of a core; the closing summary says they were left out.
select=(-m "not long")
if [ "${1:-}" = "--all" ]; then
  shift
  select=()
fi
if ! redis_up 127.0.0.1 6379 && command -v redis-server >/dev/null; then
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no >/dev/null
  for _ in $(seq 50); do redis_up 127.0.0.1 6379 && break; sleep 0.1; done
fi
if [ -z "${STEADYFLOW_TEST_REDIS62:-}" ]; then
  # Without it (no network), those tests skip and the run's summary says how to run them.
  if r62="$(python -m tests.redis62)"; then
    export STEADYFLOW_TEST_REDIS62="$r62"
  fi
fi
# The suite starts some hundreds of Python processes: each compiled the
# project's modules again where PYTHONDONTWRITEBYTECODE is set (a quarter of a
# second of a core each). Their bytecode is kept under .venv/pycache instead,
# out of the source tree.
export PYTHONPYCACHEPREFIX="$ROOT/.venv/pycache"
unset PYTHONDONTWRITEBYTECODE
set +e
# One pytest process per core (pytest-xdist); `-n 0` in the arguments runs
# serially. loadgroup: tests that share a server or a wheelhouse
# (xdist_group) go to one process; the biggest groups are handed out first.
python -m pytest -n "${STEADYFLOW_TEST_WORKERS:-auto}" --dist loadgroup ${select[@]+"${select[@]}"} "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
