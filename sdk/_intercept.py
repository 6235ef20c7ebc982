"""Interceptors: hooks around the execution of steps and durable calls, for tools and test kits.

The engine calls every interceptor of its worker around each step attempt, and
as each wait, sleep or child start begins and each wait or sleep completes. An
interceptor observes (tracing, metrics), or, for the test kit, simulates a
crash by raising `Abandon`: the activation then stops at once, as if its
process had died there (see `testing.FlowTestEnv.crash_at`).
"""

from __future__ import annotations

__all__ = ["Abandon", "Interceptor"]


class Abandon(BaseException):
    """Stop the activation at once, as if the worker process died at this point.

    Nothing more is written by the activation (writes already sent complete);
    its lease is left to expire, and another activation continues the run.
    A `BaseException`, so flow and step code cannot swallow it with
    ``except Exception``.
    """


class Interceptor:
    """Hooks around step attempts and durable calls. Each one does nothing unless
    overridden.

    Arguments of the step hooks: the run id, the step key, and the attempt
    number (1 for the first).
    """

    def step_started(self, run_id: str, key: str, attempt: int) -> None:
        """Before the step's body runs."""

    def step_finished(self, run_id: str, key: str, attempt: int) -> None:
        """After the body returned, before its result is recorded."""

    def call_started(self, run_id: str, key: str, kind: str) -> None:
        """A wait, a sleep or a child start (`kind`: ``"wait"``, ``"sleep"``,
        ``"child"``) begins at the live frontier, before anything of it is
        written. A call that parks the run begins again in each activation
        until it completes."""

    def call_finished(self, run_id: str, key: str, kind: str) -> None:
        """A wait or a sleep (`kind`: ``"wait"``, ``"sleep"``) completed and its
        outcome is recorded, before the flow is given it."""
