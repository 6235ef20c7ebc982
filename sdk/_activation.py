"""One activation: a worker executing a flow function from the top against its journal.

Every intercepted call (a step, a wait, a sleep, ``now``, ``uuid4``) gets a
step key and a *position* synchronously when it is made. A call whose key has
a completed record returns the recorded value; a call without one runs and is
recorded with one fenced write. A call that must wait registers a pending
wait and raises `_Suspend`; when the flow has stopped, in-flight steps are
settled and one script parks the run (re-checking the mailboxes, so a signal
that landed meanwhile is not lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import types
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from sdk._clock import Clock
from sdk._context import RunContext, StepContext, _run_var, _step_var
from sdk._journal import Journal, Kind, Record, State, StepEvent
from sdk._registry import RESULT_GRACE
from sdk._retry import RetryPolicy
from sdk._serde import (
    converter,
    decode_value,
    dumps,
    encode_exception,
    encode_value,
    loads,
    rebuild_exception,
    request_hash,
    type_path,
)
from sdk._types import Decision, ErrorInfo, Reason, RunStatus
from sdk.errors import (
    IdempotencyConflict,
    LeaseLost,
    NonDeterminismError,
    SerializationError,
    WaitTimeout,
)

if TYPE_CHECKING:
    from sdk._outbox import NewIntent
    from sdk._registry import FlowDef
    from stores._protocol import Store, StoredRun

__all__ = ["Activation", "Engine", "StepSpec"]

log = logging.getLogger("steadyflow.worker")

_TOKEN = object()
_STEP_TAG = "__steadyflow_step__"


class _Suspend(BaseException):
    """Parks the run. A BaseException, so ``except Exception`` cannot swallow it.

    Only the engine can construct it.
    """

    def __init__(self, token: object) -> None:
        if token is not _TOKEN:
            raise TypeError("the suspension signal is raised by Steadyflow only")
        super().__init__("run suspended (waiting); this is not an error")


class _Crash(BaseException):
    """The activation is abandoned at once, as if its process died: a simulated
    crash (testing), or a store error that leaves the outcome of a write unknown.
    Nothing more is written; the lease expires and another activation continues."""

    def __init__(self, token: object, key: str) -> None:
        if token is not _TOKEN:
            raise TypeError("simulated crashes come from FlowTestEnv.crash_at only")
        super().__init__(f"activation abandoned at {key!r}")


@attrs.define
class Engine:
    """What every activation of a worker shares."""

    store: Store
    clock: Clock
    owner: str
    inline_backoff_max: float = 1.0
    settle_timeout: float = 30.0
    crash_points: dict[str, str] = attrs.field(factory=dict)  # step key -> "before"|"after"


@attrs.define
class StepSpec:
    """A decorated step's options."""

    name: str
    retry: RetryPolicy | None
    replay: str
    fn: Callable[..., Any]
    _rtype: Any = None
    _rtype_done: bool = False
    _sigs: dict[bool, inspect.Signature] = attrs.field(factory=dict)
    _plain: dict[bool, tuple[str, ...] | None] = attrs.field(factory=dict)

    def request_hash(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> str:
        """The ledger's hash of a call, by parameter name (a bound method: without self)."""
        method = isinstance(fn, types.MethodType)
        sig = self._sigs.get(method)
        if sig is None:
            sig = self._sigs[method] = inspect.signature(fn)
            simple = all(p.kind is p.POSITIONAL_OR_KEYWORD for p in sig.parameters.values())
            self._plain[method] = tuple(sig.parameters) if simple else None
        names = self._plain[method]
        if names is not None and not kwargs and len(args) <= len(names):
            # what Signature.bind gives for positional calls, without its cost
            return request_hash(args, kwargs, dict(zip(names, args, strict=False)))
        try:
            named: dict[str, Any] | None = dict(sig.bind(*args, **kwargs).arguments)
        except TypeError:  # the call itself will fail; hash what was passed
            named = None
        return request_hash(args, kwargs, named)

    def return_type(self) -> Any:
        if not self._rtype_done:
            from sdk._serde import return_type

            self._rtype = return_type(self.fn)
            self._rtype_done = True
        return self._rtype


@attrs.define
class _Pending:
    key: str
    record: str | None  # pending record to write with the suspension
    mailbox: str | None
    deadline: float | None
    human: bool
    approvers: tuple[str, ...] | None = None


def _tag(exc: BaseException, key: str, reason: str) -> BaseException:
    with contextlib.suppress(AttributeError, TypeError):  # exotic exception types
        setattr(exc, _STEP_TAG, (key, reason))
    return exc


class Activation:
    """Executes one claimed run once."""

    def __init__(
        self,
        engine: Engine,
        stored: StoredRun,
        journal: Journal,
        flow: FlowDef,
        mail: frozenset[str] | None = None,
        lineage: dict[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.stored = stored
        self.run_id = stored.record.run_id
        self.fence = stored.fence
        self.journal = journal
        self.flow = flow
        self.context = RunContext(self)
        # Mailboxes that held signals at claim time (None: unknown). A wait on
        # another one parks at once; the suspend script re-checks every mailbox.
        self.mail = mail
        # A replay's or fork's reusable results of its source runs (raw JSON by key).
        self._lineage_raw = lineage or {}
        root = stored.record.root_run_id or self.run_id
        self._key_root = root
        self.retry_override = RetryPolicy.from_json(stored.retry) if stored.retry else None
        self.suspending = False
        self.crashed = False
        self.store_error: Exception | None = None
        self.fatal: LeaseLost | NonDeterminismError | None = None
        self._pos = 0
        self._counts: dict[str, int] = {}
        self._pending: list[_Pending] = []
        # Intercepted calls in progress, and the tasks they run in (see _settle).
        self._open = 0
        self._open_tasks: dict[asyncio.Task[Any], int] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    # -- keys and positions ------------------------------------------------------

    @property
    def is_replaying(self) -> bool:
        return self._pos <= self.journal.last_pos

    def alloc(self, name: str) -> tuple[str, int]:
        """Next key for `name` and next position; synchronous, so gather is deterministic."""
        n = self._counts.get(name, 0) + 1
        self._counts[name] = n
        pos = self._pos
        self._pos = pos + 1
        return f"{name}#{n}", pos

    def check(self, key: str, pos: int) -> Record | None:
        """The record for this call, or None; `NonDeterminismError` if the journal disagrees."""
        rec = self.journal.by_pos.get(pos)
        if rec is not None:
            if rec.key != key:
                raise self._diverged(pos, rec.key, key)
            return rec
        if key in self.journal.by_key:
            raise self._diverged(pos, None, key)
        return None

    def _diverged(self, pos: int, recorded: str | None, called: str) -> NonDeterminismError:
        err = NonDeterminismError(self.run_id, pos, recorded, called)
        if self.fatal is None:
            self.fatal = err
        self.suspending = True
        return err

    def _suspend(self) -> _Suspend:
        # Only this branch is blocked: siblings run on until they block or end.
        return _Suspend(_TOKEN)

    async def _tracked(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Run one intercepted call, counted as open until it ends (see `_settle`)."""
        task = asyncio.current_task()
        self._open += 1
        self._idle.clear()
        if task is not None:
            self._open_tasks[task] = self._open_tasks.get(task, 0) + 1
        try:
            return await fn(*args)
        finally:
            self._open -= 1
            if task is not None:
                left = self._open_tasks.pop(task) - 1
                if left:
                    self._open_tasks[task] = left
            if not self._open:
                self._idle.set()

    def _maybe_crash(self, key: str, when: str) -> None:
        points = self.engine.crash_points
        if points.get(key) == when:
            del points[key]
            self.crashed = True
            self.suspending = True
            raise _Crash(_TOKEN, key)

    def _lost(self, exc: LeaseLost) -> LeaseLost:
        if self.fatal is None:
            self.fatal = exc
        self.suspending = True
        return exc

    def _store_failed(self, exc: Exception, key: str) -> _Crash:
        # Not the flow's failure: the write may or may not have happened. Stop
        # like a dead process; recovery replays whatever was recorded.
        self.store_error = exc
        self.crashed = True
        self.suspending = True
        return _Crash(_TOKEN, key)

    async def _guarded(self, key: str, call: Awaitable[None]) -> None:
        """Run a fenced store write: a lost lease or a store error ends the activation."""
        if self.crashed:
            if inspect.iscoroutine(call):
                call.close()
            raise _Crash(_TOKEN, key)
        try:
            await call
        except LeaseLost as exc:
            raise self._lost(exc) from None
        except Exception as exc:
            raise self._store_failed(exc, key) from exc

    async def _write(
        self, rec: Record, event: StepEvent | None = None, intents: Sequence[NewIntent] = ()
    ) -> None:
        event = event or self._announce(rec)
        if intents:  # the step's outbox intents, in the same script as its result
            call = self.store.record_out(
                self.run_id, self.fence, rec.key, rec.to_json(), intents,
                now=self.clock.time(), event=event,
            )  # fmt: skip
        else:
            call = self.store.record(
                self.run_id, self.fence, rec.key, rec.to_json(), now=self.clock.time(), event=event
            )
        await self._guarded(rec.key, call)
        self.journal.put(rec)

    def _announce(self, rec: Record) -> StepEvent | None:
        """The event (and checkpoint) a journal write makes, written in the same script."""
        if rec.kind is not Kind.STEP:
            return None
        if rec.state is State.OK:
            return StepEvent("step.completed", "", "step_completed")
        err = rec.error or {}
        if rec.state is State.FAILED:
            # a step that ended in failure is a boundary too: the flow may catch
            # it and carry on without that result (a degraded step)
            data = {"type": err.get("type"), "message": err.get("message"), "reason": rec.reason}
            return StepEvent("step.failed", dumps(data), "step_completed")
        optional = "retry_scheduled" if self.flow.optional_checkpoints else ""
        data = {"attempt": rec.attempts, "due": rec.due, "type": err.get("type"),
                "message": err.get("message")}  # fmt: skip
        return StepEvent("step.retry_scheduled", dumps(data), optional)

    # -- steps --------------------------------------------------------------------

    def step_call(
        self,
        spec: StepSpec,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Coroutine[Any, Any, Any]:
        key, pos = self.alloc(spec.name)
        return self._tracked(self._step, spec, fn, args, kwargs, key, pos)

    async def _step(
        self,
        spec: StepSpec,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: str,
        pos: int,
    ) -> Any:
        rec = self.check(key, pos)
        attempts = 0
        if rec is not None and rec.kind is Kind.WAIT:
            # a replay approval parked in this step's slot (replay="require_human")
            return await self._approved_rerun(spec, fn, args, kwargs, key, pos)
        if rec is None:
            lin = self._lineage(key, pos, Kind.STEP)
            if lin is not None and spec.replay == "use_recorded_result":
                return await self._reuse(spec, fn, args, kwargs, key, pos, lin)
            if lin is not None and spec.replay == "require_human":
                return await self._approved_rerun(spec, fn, args, kwargs, key, pos)
        if rec is not None:
            if rec.state is State.OK:
                return decode_value(rec.value, spec.return_type(), rec.type, _what(key))
            if rec.state is State.FAILED:
                raise _tag(rebuild_exception(rec.error or {}, key), key, rec.reason or "")
            attempts = rec.attempts  # State.RETRY: the budget survives crashes
            if rec.due is not None and self.clock.time() < rec.due:
                self._pending.append(_Pending(key, None, None, rec.due, False))
                raise self._suspend()
        return await self._attempts(spec, fn, args, kwargs, key, pos, attempts)

    def _lineage(self, key: str, pos: int, kind: Kind) -> Record | None:
        """The source runs' completed record for this call, if it is the same call."""
        raw = self._lineage_raw.get(key)
        if raw is None:
            return None
        rec = Record.from_json(raw)
        if rec.pos != pos or rec.kind is not kind or rec.state is not State.OK:
            return None
        return rec

    async def _reuse(
        self,
        spec: StepSpec,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: str,
        pos: int,
        lin: Record,
    ) -> Any:
        """Take the source's recorded result instead of running the side effect again."""
        rh = spec.request_hash(fn, args, kwargs)
        idem = f"{self._key_root}:{key}"
        if lin.rh is not None and rh != lin.rh:
            exc = IdempotencyConflict(
                f"run {self.run_id!r}: step {key!r} (idempotency key {idem!r}) was recorded "
                "with other arguments in the source run; it is not run again"
            )
            reason = Reason.IDEMPOTENCY_CONFLICT.value
            await self._write(
                Record(key, pos, Kind.STEP, State.FAILED, error=encode_exception(exc),
                       reason=reason, rh=rh)
            )  # fmt: skip
            raise _tag(exc, key, reason)
        data = dumps({"idempotency_key": idem, "source_run_id": self.stored.record.source_run_id})
        await self._write(
            Record(key, pos, Kind.STEP, State.OK, value=lin.value, type=lin.type, rh=lin.rh),
            StepEvent("side_effect.reused", data, "step_completed"),
        )
        return decode_value(lin.value, spec.return_type(), lin.type, _what(key))

    async def _approved_rerun(
        self,
        spec: StepSpec,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: str,
        pos: int,
    ) -> Any:
        """replay="require_human": wait for the approval ``replay:{key}`` before running
        the step again; a denial reuses the source's recorded result instead."""
        decision = await self._wait(key, pos, f"replay:{key}", None, True, None)
        lin = self._lineage(key, pos, Kind.STEP)
        if decision.approved or lin is None:
            return await self._attempts(spec, fn, args, kwargs, key, pos, 0)
        return await self._reuse(spec, fn, args, kwargs, key, pos, lin)

    async def _attempts(
        self,
        spec: StepSpec,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        key: str,
        pos: int,
        attempts: int,
    ) -> Any:
        policy = spec.retry or self.retry_override or self.flow.retry
        rh = spec.request_hash(fn, args, kwargs)
        while True:
            if self.suspending:
                raise self._suspend()
            self._maybe_crash(key, "before")
            if self.flow.optional_checkpoints:
                await self._guarded(
                    key, self.store.mark(self.run_id, self.fence, key, self.clock.time())
                )
            ctx = StepContext(self.run_id, key, attempts + 1, f"{self._key_root}:{key}")
            token = _step_var.set(ctx)
            try:
                value = fn(*args, **kwargs)
                if isinstance(value, Awaitable):
                    value = await value
            except Exception as exc:
                _step_var.reset(token)
                if self.crashed:
                    raise _Crash(_TOKEN, key) from None
                attempts += 1
                due = await self._failed(key, pos, exc, attempts, policy)
                if due is None:
                    raise
                delay = due - self.clock.time()
                if delay > self.engine.inline_backoff_max:
                    # a durable timer at the recorded due time; the run holds no worker
                    self._pending.append(_Pending(key, None, None, due, False))
                    raise self._suspend() from None
                await asyncio.sleep(max(delay, 0.0))
                continue
            _step_var.reset(token)
            self._maybe_crash(key, "after")
            try:
                data, tpath = encode_value(value, spec.return_type(), _what(key))
            except SerializationError as exc:
                await self._write(
                    Record(key, pos, Kind.STEP, State.FAILED, error=encode_exception(exc),
                           reason=Reason.SERIALIZATION_ERROR.value, attempts=attempts + 1)
                )  # fmt: skip
                raise _tag(exc, key, Reason.SERIALIZATION_ERROR.value) from None
            await self._write(
                Record(key, pos, Kind.STEP, State.OK, value=data, type=tpath, attempts=attempts,
                       rh=rh),
                intents=ctx._intents,
            )  # fmt: skip
            return value

    async def _failed(
        self, key: str, pos: int, exc: Exception, attempts: int, policy: RetryPolicy | None
    ) -> float | None:
        """Record a failed attempt; when the next attempt is due if it will be retried."""
        if isinstance(exc, (LeaseLost, NonDeterminismError)) and exc is self.fatal:
            return None  # not the step's failure: the activation is over
        error = encode_exception(exc)
        if policy is None:
            verdict: Reason | None = Reason.STEP_FAILED
        else:
            verdict = policy.verdict(exc, attempts, self.journal.failures() + 1)
        if verdict is not None:
            await self._write(
                Record(key, pos, Kind.STEP, State.FAILED, error=error, reason=verdict.value,
                       attempts=attempts)
            )  # fmt: skip
            _tag(exc, key, verdict.value)
            return None
        assert policy is not None
        delay = policy.delay(attempts)
        due = self.clock.time() + delay
        await self._write(
            Record(key, pos, Kind.STEP, State.RETRY, error=error, attempts=attempts, due=due)
        )
        log.info(
            "run %s: step %s failed (attempt %d: %s); retrying in %.3fs",
            self.run_id, key, attempts, type(exc).__name__, delay,
        )  # fmt: skip
        return due

    # -- waits, sleeps, values -------------------------------------------------

    def wait(
        self, name: str, timeout: float | None, human: bool, approvers: tuple[str, ...] | None
    ) -> Coroutine[Any, Any, Any]:
        key, pos = self.alloc(f"~wait:{name}")
        return self._tracked(self._wait, key, pos, name, timeout, human, approvers)

    async def _wait(
        self,
        key: str,
        pos: int,
        name: str,
        timeout: float | None,
        human: bool,
        approvers: tuple[str, ...] | None,
    ) -> Any:
        rec = self.check(key, pos)
        if rec is not None and rec.state is State.OK:
            return self._payload(rec.value, human, key)
        if rec is not None and rec.state is State.TIMEOUT:
            raise _tag(WaitTimeout(name, key), key, Reason.FLOW_ERROR.value)
        if rec is not None:
            deadline = rec.due
        else:
            deadline = None if timeout is None else self.clock.time() + timeout
        mailbox = ("h:" if human else "s:") + name
        due = deadline is not None and self.clock.time() >= deadline
        if not self.suspending and (self.mail is None or mailbox in self.mail or due):
            if self.crashed:
                raise _Crash(_TOKEN, key)
            try:
                code, payload = await self.store.consume(
                    self.run_id, self.fence, key, mailbox, self.clock.time(), deadline,
                    Record(key, pos, Kind.WAIT, State.OK).splice_prefix(),
                    Record(key, pos, Kind.WAIT, State.TIMEOUT, due=deadline).to_json(),
                )  # fmt: skip
            except LeaseLost as exc:
                raise self._lost(exc) from None
            except Exception as exc:
                raise self._store_failed(exc, key) from exc
            if code == 1:
                value = loads(payload or "null")
                self.journal.put(Record(key, pos, Kind.WAIT, State.OK, value=value))
                return self._payload(value, human, key)
            if code == 2:
                self.journal.put(Record(key, pos, Kind.WAIT, State.TIMEOUT, due=deadline))
                raise _tag(WaitTimeout(name, key), key, Reason.FLOW_ERROR.value)
        pending = Record(key, pos, Kind.WAIT, State.PENDING, due=deadline)
        self._pending.append(_Pending(key, pending.to_json(), mailbox, deadline, human, approvers))
        raise self._suspend()

    def _payload(self, value: Any, human: bool, key: str) -> Any:
        if human:
            return decode_value(value, Decision, None, f"decision at {key!r}")
        return value

    def sleep_until(
        self, deadline: float | None, duration: float | None
    ) -> Coroutine[Any, Any, None]:
        key, pos = self.alloc("~sleep")
        return self._tracked(self._sleep, key, pos, deadline, duration)

    async def _sleep(
        self, key: str, pos: int, deadline: float | None, duration: float | None
    ) -> None:
        rec = self.check(key, pos)
        if rec is not None and rec.state is State.OK:
            return
        if rec is not None:
            due = rec.due or 0.0
        elif deadline is not None:
            due = deadline
        else:
            due = self.clock.time() + (duration or 0.0)
        if self.suspending:
            raise self._suspend()
        if self.clock.time() >= due:
            await self._write(Record(key, pos, Kind.SLEEP, State.OK, due=due))
            return
        pending = Record(key, pos, Kind.SLEEP, State.PENDING, due=due)
        self._pending.append(_Pending(key, pending.to_json(), None, due, False))
        raise self._suspend()

    async def _value(self, key: str, pos: int, kind: Kind, make: Callable[[], str]) -> str:
        """A journaled value (``now``, ``uuid4``): made once, replayed after (and
        reused by replays and forks of the run)."""
        rec = self.check(key, pos)
        if rec is not None and rec.state is State.OK:
            return str(rec.value)
        if self.suspending:
            raise self._suspend()
        lin = self._lineage(key, pos, kind)
        value = str(lin.value) if lin is not None else make()
        await self._write(Record(key, pos, kind, State.OK, value=value))
        return value

    def now(self) -> Coroutine[Any, Any, datetime]:
        key, pos = self.alloc("~now")
        return self._tracked(self._now, key, pos)

    async def _now(self, key: str, pos: int) -> datetime:
        text = await self._value(key, pos, Kind.NOW, lambda: self.clock.now().isoformat())
        return datetime.fromisoformat(text)

    def uuid4(self) -> Coroutine[Any, Any, uuid.UUID]:
        key, pos = self.alloc("~uuid4")
        return self._tracked(self._uuid4, key, pos)

    async def _uuid4(self, key: str, pos: int) -> uuid.UUID:
        return uuid.UUID(await self._value(key, pos, Kind.UUID, lambda: str(uuid.uuid4())))

    # -- the activation as a whole ----------------------------------------------

    async def execute(self) -> None:
        """Run the flow from the top and write its outcome (finish or suspend)."""
        token = _run_var.set(self)
        ok = False
        result: Any = None
        failure: Exception | None = None
        try:
            args, kwargs = self.flow.decode_args(self.stored.args)
            result = await self.flow.fn(*args, **kwargs)
            ok = True
        except _Suspend:
            pass
        except _Crash:
            self.crashed = True
        except Exception as exc:
            failure = exc
        finally:
            _run_var.reset(token)
        await self._settle()
        if not self.crashed:
            try:
                await self._conclude(ok, result, failure)
            except LeaseLost as exc:
                self.fatal = exc
            except Exception as exc:
                self.store_error = exc
                self.crashed = True
        if self.store_error is not None:
            log.error(
                "run %s: store error (%s: %s); activation abandoned, the run is recovered "
                "when its lease expires", self.run_id, type(self.store_error).__name__,
                self.store_error,
            )  # fmt: skip
            return
        if self.crashed:
            log.warning("run %s: simulated crash; the lease is left to expire", self.run_id)
            return
        if isinstance(self.fatal, LeaseLost):
            log.warning(
                "run %s: lease lost (another worker owns it now, or it was canceled); "
                "this worker stopped writing: %s", self.run_id, self.fatal,
            )  # fmt: skip

    async def _settle(self) -> None:
        """Let every branch run until it blocks or ends before the run parks or ends.

        A wait in one branch of ``asyncio.gather`` does not stop the others:
        their steps run and record first (their tasks are the gather's, which
        a suspension does not cancel). Then no new call may start.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.engine.settle_timeout
        while not self.crashed:
            # Tasks a gather scheduled may not have started yet: let them.
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            if not self._open:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                for task in list(self._open_tasks):
                    task.cancel()
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._idle.wait(), remaining)
        self.suspending = True

    async def _conclude(self, ok: bool, result: Any, failure: Exception | None) -> None:
        if isinstance(self.fatal, LeaseLost):
            return
        if isinstance(self.fatal, NonDeterminismError):
            err = self.fatal
            await self._finish_failed(
                ErrorInfo(type_path(type(err)), str(err), err.called, Reason.NON_DETERMINISM.value)
            )
            return
        if self._pending and failure is None:
            await self._park()
            return
        if failure is not None:
            key, reason = getattr(failure, _STEP_TAG, (None, Reason.FLOW_ERROR.value))
            if isinstance(failure, SerializationError) and key is None:
                reason = Reason.SERIALIZATION_ERROR.value
            await self._finish_failed(
                ErrorInfo(type_path(type(failure)), str(failure), key, reason)
            )
            return
        if not ok:  # suspended without a pending wait: a swallowed divergence
            return
        left = [pos for pos in self.journal.by_pos if pos >= self._pos]
        if left:
            # The flow returned before reaching calls the journal holds: the
            # code changed (e.g. a step was removed), just as a changed call is.
            rec = self.journal.by_pos[min(left)]
            err = NonDeterminismError(self.run_id, rec.pos, rec.key, None)
            await self._finish_failed(
                ErrorInfo(type_path(type(err)), str(err), None, Reason.NON_DETERMINISM.value)
            )
            return
        try:
            data, tpath = encode_value(
                result, self.flow.return_type(), f"result of flow {self.flow.name!r}"
            )
        except SerializationError as exc:
            await self._finish_failed(
                ErrorInfo(type_path(type(exc)), str(exc), None, Reason.SERIALIZATION_ERROR.value)
            )
            return
        fields = {"result": dumps(data)}
        if tpath:
            fields["result_type"] = tpath
        now = self.clock.time()
        grace = now + RESULT_GRACE if self.flow.delete_on_success else None
        await self.store.finish(
            self.run_id, self.fence, RunStatus.COMPLETED, now, fields,
            retention=self.flow.retention, delete_until=grace,
        )  # fmt: skip

    async def _finish_failed(self, error: ErrorInfo) -> None:
        text = dumps(converter.unstructure(error))
        await self.store.finish(
            self.run_id, self.fence, RunStatus.FAILED, self.clock.time(),
            {"error": text, "reason": error.reason or ""}, event_data=text,
        )  # fmt: skip

    async def _park(self) -> None:
        deadlines = [p.deadline for p in self._pending if p.deadline is not None]
        human = any(p.human for p in self._pending)
        status = RunStatus.WAITING_FOR_HUMAN if human else RunStatus.WAITING_FOR_SIGNAL
        records = [(p.key, p.record) for p in self._pending if p.record is not None]
        mailboxes = sorted({p.mailbox for p in self._pending if p.mailbox is not None})
        approvers = {
            p.mailbox: p.approvers
            for p in self._pending
            if p.mailbox is not None and p.approvers is not None
        }
        await self.store.suspend(
            self.run_id, self.fence, self.clock.time(), min(deadlines) if deadlines else None,
            status, records, mailboxes, approvers=approvers,
        )  # fmt: skip

    def release_on_cancel(self) -> Coroutine[Any, Any, None]:
        return self.store.release(self.run_id, self.fence)


def _what(key: str) -> str:
    return f"result of step {key!r}"
