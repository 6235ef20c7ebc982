"""Throw hostile arguments and values at every public entry point, with healthy runs beside.

    python -m bench.fuzz [--calls 5000] [--seed 1] [--store URL] [--json]

Each call puts one hostile thing (a value from `hostile_values`, or a wrong
argument from `hostile_args`) into one argument of `Client.start`, `signal`,
`approve`, `deny`, `cancel`, `resume`, `delete`, `get`, `events`,
`list_runs`, `replay` or `fork`, and sorts the outcome:

- ``accepted``: the call went through; for a value, the run gives it back equal
  (it is checked after a worker pass, which also replays the run's journal);
- ``clear``: a `SteadyflowError` (`InvalidArgument`, `SerializationError`,
  `RunNotFound`...) whose message names the argument and is short;
- ``unclear``: any other error, or a message that names nothing or runs long
  (goal 0);
- ``hang``: the call, or the worker pass after it, took longer than the
  watchdog allows (goal 0; a SIGALRM interrupts even a CPU loop).

Healthy runs started before the fuzz, parked on a signal, must all complete
once signalled at the end (goal: 0 affected). A small run of this is part of
the test suite (tests/test_fuzz.py); run it large by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from sdk import Client, Registry, RunOptions, Versions, flow, step, wait_for
from sdk.errors import InvalidArgument, SerializationError, SteadyflowError
from sdk.store import Store
from stores import open_store
from testing import FakeClock
from testing._env import FlowTestEnv

__all__ = ["Report", "hostile_args", "hostile_values", "main", "run"]

REGISTRY = Registry()
HEALTHY = 10
MAX_MESSAGE = 600  # a clear error is short: it shows values cut, not whole
WATCHDOG = 5.0  # seconds a call, or a worker pass, may take


@step(name="fuzz.keep")
async def keep(value: Any):  # type: ignore[no-untyped-def]  # unannotated on purpose
    return value


@flow(registry=REGISTRY, name="fuzz.echo")
async def echo(value: Any):  # type: ignore[no-untyped-def]
    return await keep(value)


@flow(registry=REGISTRY, name="fuzz.waiter")
async def waiter():  # type: ignore[no-untyped-def]
    return await wait_for("go")


@flow(registry=REGISTRY, name="fuzz.approval")
async def approval():  # type: ignore[no-untyped-def]
    decision = await wait_for("ok", human=True)
    return decision.payload


Call = Callable[[], Awaitable[Any]]


class Hang(BaseException):
    """The watchdog fired: a call or a worker pass ran too long."""


def _alarm(_signum: int, _frame: Any) -> None:
    raise Hang


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise `Hang` in the main thread after `seconds`, even inside a CPU-bound loop."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- hostile things ---------------------------------------------------------------------


def _cycle_list() -> Any:
    x: list[Any] = []
    x.append(x)
    return x


def _cycle_dict() -> Any:
    d: dict[str, Any] = {}
    d["self"] = {"inner": [d]}
    return d


def _deep(n: int) -> Any:
    value: Any = 0
    for _ in range(n):
        value = [value]
    return value


class Opaque:
    """Not data."""


SCALARS: list[Callable[[], Any]] = [
    lambda: None, lambda: True, lambda: 0, lambda: -1, lambda: 2**53 + 1, lambda: 2**63,
    lambda: -(2**63) - 1, lambda: 10**5000 if sys.get_int_max_str_digits() == 0 else 10**400,
    lambda: 1.5, lambda: math.nan, lambda: math.inf, lambda: -math.inf, lambda: -0.0,
    lambda: "", lambda: "plain", lambda: "\ud800", lambda: "a\udcffb", lambda: "\x00",
    lambda: "line\nbreak", lambda: "\u202e rtl", lambda: "x" * 300, lambda: "y" * 3_000_000,
    lambda: "värde ✓ 🚀", lambda: b"\x00\xff", lambda: bytearray(b"ab"), lambda: 1j,
    lambda: Opaque(), lambda: object(), lambda: Ellipsis, lambda: print, lambda: int,
]  # fmt: skip
SHAPES: list[Callable[[Any], Any]] = [
    lambda v: [v], lambda v: (v,), lambda v: {v} if _hashable(v) else [v],
    lambda v: frozenset([v]) if _hashable(v) else (v,), lambda v: {"k": v},
    lambda v: {v: 1} if _hashable(v) else {"k": [v]}, lambda v: {None: v}, lambda v: {1: v},
    lambda v: {"a": [v, {"b": (v,)}]},
]  # fmt: skip
SPECIAL: list[Callable[[], Any]] = [
    _cycle_list, _cycle_dict, lambda: _deep(60), lambda: _deep(200), lambda: _deep(950),
    lambda: _deep(5000), lambda: list(range(300_000)), lambda: {str(i): i for i in range(50_000)},
]  # fmt: skip


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def hostile_values(rng: random.Random) -> Any:
    """A value to store: a scalar, a shape around one (nested up to three times), or a
    special (cycle, deep nesting, a large value)."""
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(SPECIAL)()
    value = rng.choice(SCALARS)()
    for _ in range(rng.randrange(4)):
        value = rng.choice(SHAPES)(value)
    return value


ARGS: list[Callable[[], Any]] = [
    lambda: None, lambda: "", lambda: "ok-id", lambda: "x" * 257, lambda: "x" * 100_000,
    lambda: "\ud800", lambda: "a\nb", lambda: "\x00", lambda: b"\xff", lambda: b"id", lambda: 0,
    lambda: -1, lambda: 4096, lambda: 2**70, lambda: 1.5, lambda: math.nan, lambda: math.inf,
    lambda: True, lambda: [], lambda: {}, lambda: ["a"], lambda: Opaque(), lambda: _cycle_list(),
    lambda: "värde", lambda: " ", lambda: "*", lambda: ":", lambda: "{p0}",
]  # fmt: skip


def hostile_args(rng: random.Random) -> Any:
    """A wrong (or odd but valid) argument: ids, names, numbers, options."""
    return rng.choice(ARGS)()


# -- calls ------------------------------------------------------------------------------


class Fuzz:
    """The entry points and what each hostile thing is checked against."""

    def __init__(self, env: FlowTestEnv, rng: random.Random) -> None:
        self.env = env
        self.client: Client = env.client
        self.rng = rng
        self.counts: Counter[str] = Counter()
        self.unclear: list[str] = []
        self.pending: list[tuple[str, Any, Callable[..., Awaitable[Any]]]] = []  # runs to check
        self.n = 0

    def _id(self) -> str:
        self.n += 1
        return f"fz-{self.n}"

    async def _parked(self, flow_fn: Any) -> str:
        run_id = self._id()
        await self.client.start(flow_fn, run_id=run_id)
        return run_id

    def calls(self) -> list[tuple[str, str, Call]]:
        """(entry point, the argument made hostile, a coroutine factory)."""
        c, r = self.client, self.rng
        out: list[tuple[str, str, Call]] = []

        def v() -> Any:
            return hostile_values(r)

        def a() -> Any:
            return hostile_args(r)

        def start_with(**kw: Callable[[], Any]) -> Call:
            return lambda: c.start(echo, 1, **{k: f() for k, f in kw.items()})

        def start_options(field: str) -> Call:
            return lambda: c.start(echo, 1, options=RunOptions(**{field: a()}))

        def waiting(call: Callable[[str], Awaitable[Any]]) -> Call:
            return lambda: self._with(waiter, call)

        def deciding(call: Callable[[str], Awaitable[Any]]) -> Call:
            return lambda: self._with(approval, call)

        def fork_with(option: str) -> Call:
            return waiting(lambda rid: c.fork(rid, **{option: a()}))

        def decisions(decide: Callable[..., Awaitable[Any]]) -> None:
            name = decide.__name__
            out.append((name, "actor", deciding(lambda rid: decide(rid, "ok", actor=a()))))
            out.append((name, "reason", deciding(
                lambda rid: decide(rid, "ok", actor="ann", reason=a()))))  # fmt: skip
            out.append((name, "wait name", deciding(lambda rid: decide(rid, a(), actor="ann"))))

        out.append(("start", "argument", lambda: self._start_value(v())))
        for slot in ("run_id", "priority", "queue", "tenant_id"):
            out.append(("start", slot, start_with(**{slot: a})))
        for field in ("thread_id", "trace_id", "environment", "policy_snapshot_id"):
            out.append(("start", field, start_options(field)))
        out += [
            ("start", "options", lambda: c.start(echo, 1, options=a())),
            ("start", "capabilities", lambda: c.start(
                echo, 1, options=RunOptions(versions=Versions(capabilities=(a(),))))),
            ("start", "flow", lambda: c.start(a(), 1)),
            ("signal", "payload", lambda: self._signal_value(v())),
            ("signal", "run_id", lambda: c.signal(a(), "go", 1)),
            ("signal", "signal name", waiting(lambda rid: c.signal(rid, a(), 1))),
            ("signal", "dedup_id", waiting(lambda rid: c.signal(rid, "go", 1, dedup_id=a()))),
            ("signal", "actor", waiting(lambda rid: c.signal(rid, "go", 1, actor=a()))),
            ("approve", "payload", lambda: self._approve_value(v())),
            ("cancel", "reason", waiting(lambda rid: c.cancel(rid, reason=a()))),
            ("cancel", "actor", waiting(lambda rid: c.cancel(rid, reason="r", actor=a()))),
            ("cancel", "run_id", lambda: c.cancel(a(), reason="r")),
            ("resume", "run_id", lambda: c.resume(a())),
            ("delete", "run_id", lambda: c.delete(a())),
            ("get", "run_id", lambda: c.get(a())),
            ("events", "run_id", lambda: c.events(a())),
            ("events", "limit", waiting(lambda rid: c.events(rid, limit=a()))),
            ("events", "cursor", waiting(lambda rid: c.events(rid, cursor=a()))),
            ("list_runs", "status", lambda: c.list_runs(status=a())),
            ("list_runs", "limit", lambda: c.list_runs(limit=a())),
            ("replay", "new_run_id", waiting(lambda rid: c.replay(rid, new_run_id=a()))),
            ("replay", "checkpoint_id", waiting(lambda rid: c.replay(rid, checkpoint_id=a()))),
        ]  # fmt: skip
        decisions(c.approve)
        decisions(c.deny)
        for option in ("queue", "priority", "tenant_id", "flow_version", "retry"):
            out.append(("fork", option, fork_with(option)))
        return out

    async def _start_value(self, value: Any) -> None:
        run_id = self._id()
        handle = await self.client.start(echo, value, run_id=run_id)
        self.pending.append((run_id, value, handle.result))

    async def _signal_value(self, value: Any) -> None:
        run_id = await self._parked(waiter)
        await self.client.signal(run_id, "go", value)
        self.pending.append((run_id, value, self.client.handle(run_id).result))

    async def _approve_value(self, value: Any) -> None:
        run_id = await self._parked(approval)
        await self.env.run_until_idle()  # a decision needs the run waiting for it
        await self.client.approve(run_id, "ok", actor="ann", payload=value)
        self.pending.append((run_id, value, self.client.handle(run_id).result))

    async def _with(self, flow_fn: Any, call: Callable[[str], Awaitable[Any]]) -> Any:
        run_id = await self._parked(flow_fn)
        await self.env.run_until_idle()
        return await call(run_id)

    def sort(self, name: str, slot: str, exc: BaseException | None) -> str:
        """The outcome of one call: accepted, clear or unclear."""
        if exc is None:
            return "accepted"
        message = str(exc)
        if isinstance(exc, (InvalidArgument, SerializationError)):
            named = slot.split()[0] in message  # the argument, the payload, the result...
        else:  # a valid argument refused for the run's state: it names the run
            named = isinstance(exc, SteadyflowError) and "run" in message
        if named and len(message) <= MAX_MESSAGE:
            return "clear"
        self.unclear.append(f"{name}({slot}): {type(exc).__qualname__}: {message[:200]}")
        return "unclear"

    async def check_values(self) -> None:
        """Every accepted value comes back equal (the worker pass replayed the journal)."""
        for run_id, value, result in self.pending:
            try:
                with watchdog(WATCHDOG):
                    got = await result(timeout=0)
            except Hang:
                self.counts["hang"] += 1
                self.unclear.append(f"result of {run_id} hung")
                continue
            except SteadyflowError as exc:
                # refused when stored by the worker: clear only if it says what
                outcome = self.sort("result", "result", exc)
                self.counts[f"value_{outcome}"] += 1
                continue
            except Exception as exc:  # sorted, not hidden
                self.counts["value_unclear"] += 1
                self.unclear.append(f"result of {run_id}: {type(exc).__qualname__}: {exc!s:.200}")
                continue
            if _same(got, value):
                self.counts["value_equal"] += 1
            else:
                self.counts["value_changed"] += 1
                self.unclear.append(f"{run_id}: {value!r:.80} came back as {got!r:.80}")
        self.pending.clear()


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:
        return False


class Report(dict[str, Any]):
    """The figures of a fuzz run."""


async def run(calls: int = 500, seed: int = 1, store_url: str | None = None) -> Report:
    """Make `calls` hostile calls; return the counts (see the module docstring)."""
    rng = random.Random(seed)
    prefix = f"sf-fuzz-{seed}-{time.time_ns()}"
    store = open_store(store_url, prefix=prefix) if store_url else None
    try:
        return await _run(calls, rng, seed, store)
    finally:
        if store is not None:  # a real store: delete what the fuzz wrote
            client = getattr(store, "client", None)
            if client is not None:
                keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=1000)]
                for i in range(0, len(keys), 500):
                    await client.unlink(*keys[i : i + 500])
            await store.close()


async def _run(calls: int, rng: random.Random, seed: int, store: Store | None) -> Report:
    async with FlowTestEnv(FakeClock(), store, registry=REGISTRY) as env:
        fuzz = Fuzz(env, rng)
        healthy = [await env.client.start(waiter, run_id=f"healthy-{i}") for i in range(HEALTHY)]
        await env.run_until_idle()
        table = fuzz.calls()
        for i in range(calls):
            name, slot, make = rng.choice(table)
            exc: BaseException | None = None
            try:
                with watchdog(WATCHDOG):
                    await make()
            except Hang:
                fuzz.counts["hang"] += 1
                fuzz.unclear.append(f"{name}({slot}) hung")
                continue
            except Exception as exc_:  # sorted below
                exc = exc_
            fuzz.counts[fuzz.sort(name, slot, exc)] += 1
            if i % 25 == 24 or i == calls - 1:
                try:
                    with watchdog(WATCHDOG * 4):
                        await env.run_until_idle()
                except Hang:
                    fuzz.counts["worker_hang"] += 1
                    fuzz.unclear.append("a worker pass hung")
                await fuzz.check_values()
        for handle in healthy:
            await env.client.signal(handle.run_id, "go", "fine")
        with watchdog(WATCHDOG * 4):
            await env.run_until_idle()
        affected = 0
        for handle in healthy:
            try:
                if await handle.result(timeout=0) != "fine":
                    affected += 1
            except Exception:  # counted
                affected += 1
    counts = fuzz.counts
    return Report(
        calls=calls, seed=seed, accepted=counts["accepted"], clear=counts["clear"],
        unclear=counts["unclear"], hangs=counts["hang"] + counts["worker_hang"],
        values_equal=counts["value_equal"], values_changed=counts["value_changed"],
        values_refused_clearly=counts["value_clear"], values_unclear=counts["value_unclear"],
        healthy_runs=HEALTHY, healthy_affected=affected, examples=fuzz.unclear[:20],
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--store", default=None, help="a store URL (default: memory://)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    began = time.perf_counter()
    report = asyncio.run(run(args.calls, args.seed, args.store))
    report["seconds"] = round(time.perf_counter() - began, 1)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for key, value in report.items():
            if key != "examples":
                print(f"{key:>24}: {value}")
        for line in report["examples"]:
            print("  ", line)
    bad = report["unclear"] + report["hangs"] + report["values_changed"]
    bad += report["values_unclear"] + report["healthy_affected"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
