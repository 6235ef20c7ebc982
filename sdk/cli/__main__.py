"""``python -m sdk.cli``: the ``steadyflow`` command, where the console script is not on PATH."""

from sdk.cli import main

main()
