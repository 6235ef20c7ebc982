# Sourced by the scripts: a project virtualenv with steadyflow and its dev extras.
# Re-installs only when pyproject.toml changed since the last install.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
if [ ! -x "$ROOT/.venv/bin/python" ]; then
  "$PY" -m venv "$ROOT/.venv"
fi
# shellcheck disable=SC1091
. "$ROOT/.venv/bin/activate"
stamp="$ROOT/.venv/.installed"
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e "$ROOT[dev]"
  touch "$stamp"
fi
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
