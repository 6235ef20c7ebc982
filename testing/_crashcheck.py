"""`check_crash_everywhere`: prove that a flow survives a crash at every point.

One clean run enumerates the intercept points of the run and of the child
runs it starts, and their children (an interceptor notes each one as it is
reached; other runs, a schedule's ticks say, are not looked at); then, for
each point, a run from scratch on a fresh env
over an emptied ``memory://`` store crashes there once (`FlowTestEnv.crash_at`), recovers when
the fake clock passes its lease, is driven to the end, and is compared with
the clean run: the same outcome, no step run again unless the crash cut it off
before its result was recorded, the same outbox intents recorded, and each
delivered as often as in the clean run, or once more if the crash cut off its
delivery after the handler ran.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Literal

import attrs

from sdk._core._journal import Kind, State
from sdk._core._types import ErrorInfo, RunStatus
from sdk.engine._machine import FlowMachine
from sdk.errors import RunNotFound
from sdk.model._intercept import ActivationInfo, Interceptor
from sdk.model._registry import Registry
from sdk.runtime._runtime import run_var
from stores.redis import RedisStore
from testing import _fakelua
from testing._clock import FakeClock
from testing._env import FlowTestEnv

__all__ = ["CrashPoint", "CrashReport", "check_crash_everywhere"]

Drive = Callable[[FlowTestEnv, str], Awaitable[None]]

_RUN_ID = "crash-check"
_LEASE_TTL = 30.0


@attrs.frozen
class CrashPoint:
    """Where a crash is injected: ``"before"`` or ``"after"`` the call with `key`
    (for a step, at its attempt `attempt`).

    - A step (``"charge#1"``): ``"before"`` an attempt's body runs;
      ``"after"``, the body ran, returning or raising, and its outcome (the
      result with the intents it emitted, or the failure or retry) is not
      recorded. Each attempt the run made is a point of its own.
    - A wait or a sleep (``"~wait:approval#1"``, ``"~sleep#1"``): ``"before"``,
      the flow reached it and nothing of it was written yet; ``"after"``, its
      outcome (the signal taken, the timer fired) is recorded and the flow
      was not given it.
    - A child start (``"~child:..."``): ``"before"``, nothing of it is
      written; ``"after"``, the child run exists (it may already be running)
      and the parent's journal does not record its start: the parent starts
      it again and must find the same run. (A crash after that record is the
      crash before the flow's next call.)
    - An outbox emit (``"~emit:" + idempotency key``): ``"before"`` and
      ``"after"`` the step's `sdk.emit` call: the step was cut off mid-body,
      before or after keeping the intent; either way the intent is dropped
      and the step emits it again, with the same key.
    - An intent's delivery (``"~deliver:" + idempotency key``): ``"before"``
      the handler is called (the intent is claimed, its delivery counted);
      ``"after"`` it returned and the intent is not marked sent yet, so it is
      delivered again, with the same idempotency key.
    """

    key: str
    when: Literal["before", "after"]
    attempt: int = 1

    def __str__(self) -> str:
        tail = f" (attempt {self.attempt})" if self.attempt != 1 else ""
        return f"{self.when} {self.key!r}{tail}"


@attrs.frozen
class CrashReport:
    """What `check_crash_everywhere` tried.

    Attributes:
        points: every point a crash was injected at, in the order the clean run
            reached them.
        outcome: the run's outcome, the same with and without a crash:
            ``(status, result, error)`` as `Client.get` reads them.
        reexecutions: step key -> how many crashed runs ran that step once
            more than the clean run (a crash cut it off before its result was
            recorded); steps never run again are absent.
        redeliveries: intent idempotency key -> how many crashed runs called
            its handler once more than the clean run (a crash after the
            handler returned, before the intent was marked sent).
    """

    points: tuple[CrashPoint, ...]
    outcome: tuple[RunStatus, Any, ErrorInfo | None]
    reexecutions: dict[str, int]
    redeliveries: dict[str, int] = attrs.field(factory=dict)

    @property
    def tried(self) -> int:
        """How many crashed runs were checked."""
        return len(self.points)


async def check_crash_everywhere(
    flow: Callable[..., Any] | str,
    *args: Any,
    drive: Drive | None = None,
    registry: Registry | None = None,
    **kwargs: Any,
) -> CrashReport:
    """Run `flow` once clean, then once per intercept point with a crash there.

    Each run starts from scratch: a fresh `FlowTestEnv` on an empty
    ``memory://`` store, its fake clock at the same instant. The points (see
    `CrashPoint`) are before and after each step attempt (failed ones too),
    wait, sleep, child start, outbox emit and intent delivery, as the clean run
    and the child runs it started (and theirs) reached them; other runs the
    env executes (a ``@scheduled`` flow's ticks, runs a step started with a
    client) are not checked. A crashed run recovers the
    way a dead worker's run (or delivery) does: its lease expires (the clock
    moves past it) and a fresh activation replays the journal. Then it must
    end as the clean run did (status, result, error), and:

    - each step ran as often as in the clean run, or once more when the crash
      cut it off before its result was recorded (at-least-once, with the same
      `current_step().idempotency_key`): a step recorded as completed never
      runs again;
    - every run recorded the same outbox intents as in the clean run (same
      idempotency keys, channels, payloads and final status): exactly once
      recorded;
    - each intent's handler was called as often as in the clean run, or once
      more for the intent whose delivery the crash cut off after its handler
      returned (at-least-once delivery; the intent's idempotency key is the
      same on every delivery).

    Args:
        flow: the ``@flow`` function, or its registered name.
        *args, **kwargs: the flow's arguments (``run_id=`` and the other
            options of `Client.start` go through too).
        drive: ``async def drive(env, run_id)``, called once the run is idle
            in every run (clean and crashed): send the signals and approvals
            the flow waits for, `env.advance` past its sleeps. It may not
            assume where the run stands (a crash may hold it back); signals
            sent early are kept until the flow waits for them.
        registry: where flows and channels are looked up (`FlowTestEnv`).

    Returns:
        A `CrashReport`.

    Raises:
        AssertionError: naming the first point where the crashed run differs
            (another outcome, a completed step run again, other intents, an
            extra delivery, a run that does not finish), or when the clean run
            itself does not finish.

    Example (an async test: awaiting it is the whole test)::

        async def test_checkout_survives_crashes():
            report = await check_crash_everywhere(checkout, order, drive=approve)
            assert report.tried > 0
    """
    with _Shared(datetime.now(UTC).replace(microsecond=0)) as shared:
        try:
            return await _check(shared, flow, args, kwargs, drive, registry)
        finally:
            await shared.close()


async def _check(
    shared: _Shared,
    flow: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    drive: Drive | None,
    registry: Registry | None,
) -> CrashReport:
    trial = functools.partial(_trial, shared, flow, args, kwargs, drive, registry)
    clean = await trial(None)
    # A flow that never touches the outbox (no intent, no child: nothing its
    # crashed runs could deliver) is checked without the outbox claims that
    # would find nothing: a run that reaches an outbox point after all is run
    # again with them, so it is checked as any other.
    outbox = _uses_outbox(clean.probe) or any(clean.intents.values())
    reexecutions: Counter[str] = Counter()
    redeliveries: Counter[str] = Counter()
    for point in clean.probe.points:
        crashed = await trial(point, outbox=outbox)
        if not outbox and _uses_outbox(crashed.probe):
            crashed = await trial(point)
        if crashed.probe.crashed is None:
            raise AssertionError(
                f"crash {point}: the run never reached that point again; the flow does "
                "not make the same calls from run to run (is it deterministic?)"
            )
        if crashed.outcome != clean.outcome:
            raise AssertionError(
                f"crash {point}: the outcome differs from the run without a crash:\n"
                f"  without: {_show(clean.outcome)}\n  with:    {_show(crashed.outcome)}"
            )
        for (_run, key), again in _extra_runs(clean.probe, crashed.probe, point).items():
            reexecutions[key] += again
        if crashed.intents != clean.intents:
            raise AssertionError(
                f"crash {point}: the outbox intents differ from the run without a crash:\n"
                f"  without: {clean.intents!r}\n  with:    {crashed.intents!r}"
            )
        for key in _extra_deliveries(clean.probe, crashed.probe, point):
            redeliveries[key] += 1
    return CrashReport(
        tuple(clean.probe.points), clean.outcome, dict(reexecutions), dict(redeliveries)
    )


#: what is compared of an intent: (idempotency key, channel, payload, status, step key)
_IntentView = tuple[str, str, Any, str, str]


@attrs.define
class _Trial:
    probe: _Probe
    outcome: tuple[RunStatus, Any, ErrorInfo | None]
    intents: dict[str, list[_IntentView]]  # run id -> its intents, in recorded order


class _Probe(Interceptor):
    """Notes the intercept points reached, and each run of a step's body, of the
    checked run and its tree of child runs (`tree`); other runs are not its
    business."""

    def __init__(self, root: str = _RUN_ID) -> None:
        self.tree = {root}  # the checked run, and the runs it started (and theirs)
        self.points: dict[CrashPoint, None] = {}  # in the order first reached
        self.runs: Counter[tuple[str, str]] = Counter()  # (run id, step key) -> bodies run
        self.deliveries: Counter[str] = Counter()  # "~deliver:" point key -> handlers called
        self.run_ids: set[str] = set()
        self.crashed: CrashPoint | None = None
        self.crash_run: str | None = None
        self.ran_before_crash: frozenset[tuple[str, str]] = frozenset()
        self.recorded_at_crash: frozenset[str] = frozenset()  # step keys of `crash_run`

    def _reached(self, key: str, when: Literal["before", "after"], attempt: int = 1) -> None:
        self.points.setdefault(CrashPoint(key, when, attempt))

    def activation_started(self, info: ActivationInfo) -> None:
        # a child's first activation comes after its parent's start of it
        if info.parent_run_id in self.tree:
            self.tree.add(info.run_id)

    # The env's crash interceptor comes first: a body the crash stops before
    # it runs is not counted, one it cuts off after it ran is.
    def step_started(self, run_id: str, key: str, attempt: int) -> None:
        if run_id in self.tree:
            self._reached(key, "before", attempt)
            self.runs[run_id, key] += 1
            self.run_ids.add(run_id)

    def step_ended(self, run_id: str, key: str, attempt: int, error: BaseException | None) -> None:
        if run_id in self.tree:
            self._reached(key, "after", attempt)

    def call_started(self, run_id: str, key: str, kind: str) -> None:
        if run_id in self.tree:
            self._reached(key, "before")
            self.run_ids.add(run_id)
            if kind == "deliver":
                self.deliveries[key] += 1

    def call_finished(self, run_id: str, key: str, kind: str) -> None:
        if run_id in self.tree:
            self._reached(key, "after")

    def crash(self, key: str, when: Literal["before", "after"]) -> None:
        """The env's crash interceptor fires: note what the activation had recorded."""
        self.crashed = CrashPoint(key, when)
        self.ran_before_crash = frozenset(self.runs)
        act = run_var.get()
        if isinstance(act, FlowMachine):
            self.crash_run = act.run_id
            self.recorded_at_crash = frozenset(
                rec.key
                for rec in act.cursor.journal.by_key.values()
                if rec.kind is Kind.STEP and rec.state in (State.OK, State.FAILED)
            )


class _Shared:
    """What the runs of one check share, each starting as if from scratch.

    - One fakeredis server, emptied (``FLUSHALL``) before each run. What a
      flush leaves is what a new ``memory://`` server would have after
      loading the store's scripts: the script cache, and a Lua state whose
      globals fakeredis checks after every script (`testing._fakelua`). So
      the scripts are compiled once per check, not once per run.
    - One store on it, with its connections: a store keeps no state of a run
      (its data is all on the server), each run's env (client, worker) is
      new, and a run's tasks have all ended when its env closes. Making a
      store (its script objects) and its connections cost as much as a
      dozen of a run's calls.
    - One freezegun freeze (starting one patches every loaded module, ~5 ms):
      each run's `FakeClock` is new, at the same start, and moves it.
    """

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.server = _fakelua.fake_server()
        self._store: RedisStore | None = None
        self._host = FakeClock(start)

    def __enter__(self) -> _Shared:
        self._host.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._host.stop()

    def clock(self) -> FakeClock:
        """A clock at the start, driving the check's freeze (it is started: the env
        leaves it running)."""
        clock = FakeClock(self.start)
        clock._freezer, clock._factory = self._host._freezer, self._host._factory
        clock._factory.move_to(self.start)
        return clock

    async def store(self) -> RedisStore:
        """The check's store, emptied."""
        if self._store is None:
            self._store = _fakelua.memory_store(self.server)
        await self._store.client.flushall()
        return self._store

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()


async def _trial(
    shared: _Shared,
    flow: Callable[..., Any] | str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    drive: Drive | None,
    registry: Registry | None,
    point: CrashPoint | None,
    *,
    outbox: bool = True,
) -> _Trial:
    """One run of the flow on an empty store, crashed at `point` (None: the clean
    run); without `outbox`, its worker claims no outbox intents."""
    options = dict(kwargs)
    options.setdefault("run_id", _RUN_ID)
    probe = _Probe(options["run_id"])
    what = "the run without a crash" if point is None else f"crash {point}"
    store = await shared.store()
    env = _Env(probe, shared.clock(), store, registry=registry, lease_ttl=_LEASE_TTL)
    async with env:
        if not outbox:
            env.worker.dispatcher.channels = dict  # serves no channel: claims nothing
        if point is not None:
            env.crash_at(point.key, point.when, attempt=point.attempt)
        handle = await env.start(flow, *args, **options)
        await env.run_until_idle()
        if drive is not None:
            await drive(env, handle.run_id)
        record = await env.client.get(handle.run_id)
        if env.recovered and not record.status.is_terminal:
            # The recovery moved the clock past the lease: whatever the drive
            # made due was pushed back by as much.
            await env.advance(_LEASE_TTL + 1)
            record = await env.client.get(handle.run_id)
        if not record.status.is_terminal:
            hint = "" if drive is not None else " (give a `drive` that sends what it waits for)"
            raise AssertionError(f"{what}: the run did not finish: it is {record.status}{hint}")
        intents = {run_id: await _intents(env, run_id) for run_id in sorted(probe.run_ids)}
        return _Trial(probe, (record.status, record.result, record.error), intents)


async def _intents(env: FlowTestEnv, run_id: str) -> list[_IntentView]:
    try:
        found = await env.client.intents(run_id)
    except RunNotFound:  # deleted on success: its intents went with it
        return []
    return [(i.idempotency_key, i.channel, i.payload, i.status.value, i.step_key) for i in found]


class _Env(FlowTestEnv):
    """The env of one run of the check: it recovers a crashed run as soon as the
    pass the crash happened in is over (before the drive sends anything more)."""

    def __init__(self, probe: _Probe, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probe = probe
        self._interceptors.append(probe)  # after the crash interceptor
        self._crashes.on_fire = probe.crash
        self._crashes.runs = probe.tree.__contains__  # the checked tree's runs only
        self._check_crashes = False  # a point never reached again: `_check` says why
        self.recovered = False

    async def run_until_idle(self) -> None:
        await super().run_until_idle()
        if self._probe.crashed is not None and not self.recovered:
            self.recovered = True
            # the dead worker's lease expires; the run recovers and goes on
            await self.advance(_LEASE_TTL + 1)


_OUTBOX_POINTS = ("~emit:", "~deliver:", "~child:")  # what makes or delivers intents


def _uses_outbox(probe: _Probe) -> bool:
    """Whether the runs reached a point that records or delivers an intent (an
    emit, a delivery, a child start: a child's end is an intent for its parent)."""
    return any(p.key.startswith(_OUTBOX_POINTS) for p in probe.points)


def _extra_runs(clean: _Probe, crashed: _Probe, point: CrashPoint) -> dict[tuple[str, str], int]:
    """Each step run more often than in the clean run, checked against at-least-once."""
    extra: dict[tuple[str, str], int] = {}
    for run_key in clean.runs.keys() | crashed.runs.keys():
        run_id, key = run_key
        again = crashed.runs[run_key] - clean.runs[run_key]
        if again == 0:
            continue
        cut_off = (
            run_id == crashed.crash_run
            and run_key in crashed.ran_before_crash
            and key not in crashed.recorded_at_crash
        )
        if again < 0 or again > 1 or not cut_off:
            recorded = run_id == crashed.crash_run and key in crashed.recorded_at_crash
            if again < 0:
                why = "it ran fewer times"
            elif recorded:
                why = "its result was recorded before the crash"
            else:
                why = "no crash cut it off" if not cut_off else "more than once again"
            raise AssertionError(
                f"crash {point}: step {key!r} of run {run_id!r} ran {crashed.runs[run_key]} "
                f"time(s), {clean.runs[run_key]} without a crash; {why}"
            )
        extra[run_key] = again
    return extra


def _extra_deliveries(clean: _Probe, crashed: _Probe, point: CrashPoint) -> list[str]:
    """The intents delivered once more than in the clean run, checked against
    at-least-once: only the one whose delivery the crash cut off after its
    handler returned (so it was not marked sent) may be."""
    extra: list[str] = []
    for key in clean.deliveries.keys() | crashed.deliveries.keys():
        again = crashed.deliveries[key] - clean.deliveries[key]
        if again == 0:
            continue
        cut_off = crashed.crashed == CrashPoint(key, "after")
        if again != 1 or not cut_off:
            why = "no crash cut its delivery off" if again > 0 else "it was delivered less often"
            raise AssertionError(
                f"crash {point}: intent {key.removeprefix('~deliver:')!r} was delivered "
                f"{crashed.deliveries[key]} time(s), {clean.deliveries[key]} without a crash; "
                f"{why if again < 2 or not cut_off else 'more than once again'}"
            )
        extra.append(key.removeprefix("~deliver:"))
    return extra


def _show(outcome: tuple[RunStatus, Any, ErrorInfo | None]) -> str:
    status, result, error = outcome
    return f"{status.value}, result={result!r}, error={error!r}"
