"""``python -m sdk.worker MODULE [MODULE...]``: the ``steadyflow worker`` command.

The same click command under its older name (options, behaviour and exit
codes are those of ``steadyflow worker``; see `sdk.cli`). `sdk` never imports
this module, so running it with ``-m`` does not import it twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from sdk.cli._worker import worker


def main(argv: Sequence[str] | None = None) -> None:
    """Run the worker command with `argv` (default: the process's); exits the process."""
    worker.main(args=None if argv is None else list(argv), prog_name="python -m sdk.worker")


if __name__ == "__main__":
    main()
