#!/usr/bin/env bash
# The whole test suite. Needs Redis on 127.0.0.1:6379 for the real-Redis tests;
# starts one if redis-server is on PATH and none answers.
set -euo pipefail
. "$(dirname "$0")/env.sh"
if ! redis_up 127.0.0.1 6379 && command -v redis-server >/dev/null; then
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no >/dev/null
  for _ in $(seq 50); do redis_up 127.0.0.1 6379 && break; sleep 0.1; done
fi
set +e
# One pytest process per core (pytest-xdist); `-n 0` in the arguments runs serially.
python -m pytest -n "${STEADYFLOW_TEST_WORKERS:-auto}" --dist loadgroup "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
