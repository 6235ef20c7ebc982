# Sourced by the scripts: the project's virtualenv, .venv, with steadyflow and
# the extra named as the argument (pyproject.toml's optional dependencies):
#   . scripts/env.sh embedded   # scripts/demo.sh: the runtime and the embedded server
#   . scripts/env.sh dev        # scripts/test.sh, .ci/run: the tests, linters, type checker
# One .venv serves every script. Installs only what is missing
# (scripts/extras.py keeps the list in .venv/.installed): the demo after the
# tests installs nothing, the tests after the demo add what they need, and
# everything is installed again when pyproject.toml changed since. An install
# takes the newest releases pyproject.toml's bounds admit, so what runs here
# is what CI tests.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
extra="${1:?usage: . scripts/env.sh EXTRA (an optional dependency of pyproject.toml: embedded, dev, ...)}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  "$PY" -m venv "$ROOT/.venv"
fi
# shellcheck disable=SC1091
. "$ROOT/.venv/bin/activate"
stamp="$ROOT/.venv/.installed"
install="$(python "$ROOT/scripts/extras.py" "$ROOT/pyproject.toml" "$stamp" "$extra")"
# STEADYFLOW_NO_INSTALL=1: .venv as it is (the tests that run the scripts set
# it: a test must not install into the virtualenv the suite runs in).
if [ -n "$install" ] && [ -z "${STEADYFLOW_NO_INSTALL:-}" ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet --upgrade --upgrade-strategy eager -e "$ROOT[$install]"
  python "$ROOT/scripts/extras.py" "$ROOT/pyproject.toml" "$stamp" --done "$install"
fi
unset extra install stamp
cd "$ROOT"

# redis_up HOST PORT: true when a Redis answers there.
redis_up() {
  python - "$1" "$2" <<'PY'
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1) as s:
        s.sendall(b"PING\r\n")
        sys.exit(0 if s.recv(16).startswith(b"+PONG") else 1)
except OSError:
    sys.exit(1)
PY
}
