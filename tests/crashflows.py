"""Flows served by real ``python -m sdk.worker tests.crashflows`` processes, and the
harness the process tests drive them with.

Steps leave *markers* (one line per execution: label, idempotency key, pid,
time) in a file whose path is a run argument, so a test can see what ran,
where and how often. A step that must stay "in flight" polls for a *release*
file, so a test decides when it may finish; tests synchronise on these files
and on the store, never on fixed sleeps.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar, overload

import attrs

from sdk import Queue, current_step, flow, run_child, sleep, step, wait_for_event

ROOT = Path(__file__).resolve().parent.parent  # the worker runs here: `tests.crashflows` imports
STEADYFLOW = str(Path(sys.executable).with_name("steadyflow"))  # the installed console script

T = TypeVar("T")


# -- markers ---------------------------------------------------------------------------


@attrs.frozen
class Mark:
    """One execution of a step, as its marker line recorded it."""

    label: str
    key: str
    pid: int
    at: float


def _mark(markers: str, label: str) -> None:
    line = f"{label} {current_step().idempotency_key} {os.getpid()} {time.time()!r}\n"
    with open(markers, "a", encoding="utf-8") as f:  # one short append per line
        f.write(line)


def _released(release: str) -> bool:
    return os.path.exists(release)


def read_marks(markers: Path) -> list[Mark]:
    if not markers.exists():
        return []
    out = []
    for line in markers.read_text(encoding="utf-8").splitlines():
        label, key, pid, at = line.split(" ")
        out.append(Mark(label, key, int(pid), float(at)))
    return out


def labelled(markers: Path, label: str) -> list[Mark]:
    return [m for m in read_marks(markers) if m.label == label]


# -- steps and flows ------------------------------------------------------------------------


@step
async def note(markers: str, label: str) -> str:
    _mark(markers, label)
    return label


@step
async def hold(markers: str, label: str, release: str) -> str:
    """Mark that the step started, then stay in flight until `release` exists."""
    _mark(markers, label)
    # Another process releases it, through a file: there is no event to await.
    while not _released(release):  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    return label


@flow
async def crash_mid_step(markers: str, release: str) -> list[str]:
    first = await note(markers, "first")
    second = await note(markers, "second")
    held = await hold(markers, "held", release)
    last = await note(markers, "last")
    return [first, second, held, last]


@step
async def hold_until_canceled(markers: str, release: str) -> str:
    """Like `hold`, but marks ``interrupted`` when its task is cancelled."""
    _mark(markers, "holding")
    try:
        while not _released(release):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        _mark(markers, "interrupted")
        raise
    _mark(markers, "finished")
    return "held"


@flow
async def cancel_mid_step(markers: str, release: str) -> str:
    await hold_until_canceled(markers, release)
    return await note(markers, "after")


@flow
async def sleep_between_steps(markers: str, seconds: float) -> str:
    await note(markers, "before")
    await sleep(seconds)
    return await note(markers, "after")


@flow
async def one_step(markers: str, label: str) -> str:
    return await note(markers, label)


@flow
async def await_payment(markers: str, batch: str) -> object:
    data = await wait_for_event("crash.payment", match={"batch": batch})
    await note(markers, "paid")
    return data


@flow
async def priced(markers: str, item: int) -> int:
    await note(markers, f"child-{item}")
    return item * 10


@flow
async def fan_out(markers: str, n: int) -> int:
    totals = await asyncio.gather(*(run_child(priced, markers, i) for i in range(n)))
    return sum(totals)


#: A queue whose limit the 3-process test measures from a ledger of its own.
LIMITED = Queue("crash.limited", concurrency=5)


def _ledger(ledger: str, what: str, label: str) -> None:
    with open(ledger, "a", encoding="utf-8") as f:  # one short append per line
        f.write(f"{what} {label} {os.getpid()} {time.time()!r}\n")


@step
async def ledgered(ledger: str, label: str, seconds: float) -> str:
    """Writes ``enter`` and ``exit`` lines around `seconds` of work: the ledger shows
    what executed when, whatever the engine's own counters say."""
    _ledger(ledger, "enter", label)
    await asyncio.sleep(seconds)
    _ledger(ledger, "exit", label)
    return label


@flow(queue=LIMITED)
async def limited_work(ledger: str, label: str, seconds: float) -> str:
    return await ledgered(ledger, label, seconds)


def _die_before_journaling_children(flag: str) -> None:
    """Make this worker SIGKILL itself once it has started a fan-out's children and
    before it journals them (the ``CRASHFLOWS_DIE_BEFORE_CHILD_RECORD`` test hook)."""
    from stores.redis import RedisStore

    started = RedisStore.create_runs

    async def create_then_die(self: RedisStore, *args: object, **kwargs: object) -> object:
        out = await started(self, *args, **kwargs)  # type: ignore[arg-type]
        Path(flag).write_text(str(os.getpid()), encoding="utf-8")  # noqa: ASYNC240 (then death)
        os.kill(os.getpid(), signal.SIGKILL)
        return out

    RedisStore.create_runs = create_then_die  # type: ignore[assignment,method-assign]


if os.environ.get("CRASHFLOWS_DIE_BEFORE_CHILD_RECORD"):
    _die_before_journaling_children(os.environ["CRASHFLOWS_DIE_BEFORE_CHILD_RECORD"])


#: A process that sends one event (argv: store URL, prefix, batch, event id), then
#: exits; a test SIGKILLs it while its deliveries are under way.
SENDER = """
import asyncio, sys
from sdk import Client
from stores import open_store

async def main() -> None:
    store = open_store(sys.argv[1], prefix=sys.argv[2])
    await Client(store).send_event("crash.payment", {"batch": sys.argv[3]}, event_id=sys.argv[4])
    await store.close()

asyncio.run(main())
"""


# -- worker processes ----------------------------------------------------------------------


class WorkerProcess:
    """One ``python -m sdk.worker tests.crashflows`` process (or `module`), its output in a file."""

    def __init__(
        self, store_url: str, prefix: str, log: Path, *extra: str,
        module: str = "tests.crashflows", env: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.args = [
            sys.executable, "-m", "sdk.worker", module,
            "--store", store_url, "--prefix", prefix,
            "--lease-ttl", "1", "--concurrency", "4", *extra,
        ]  # fmt: skip
        self.log_path = log
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                self.args, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None, "worker not started"
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def send(self, sig: signal.Signals) -> None:
        assert self.proc is not None, "worker not started"
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, writing nothing more."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    async def exited(self, timeout: float) -> int:
        """Wait (without blocking the loop) for the process to exit; its return code."""
        assert self.proc is not None, "worker not started"
        proc = self.proc
        await until(lambda: proc.poll() is not None, timeout, f"worker {proc.pid} to exit", self)
        return proc.returncode

    def describe(self) -> str:
        return f"worker {self.pid} log:\n{self.log()}"


@overload
async def until(
    probe: Callable[[], Awaitable[T | None]],
    timeout: float,
    what: str,
    *workers: WorkerProcess,
) -> T: ...


@overload
async def until(
    probe: Callable[[], T | None],
    timeout: float,
    what: str,
    *workers: WorkerProcess,
) -> T: ...


async def until(
    probe: Callable[[], T | Awaitable[T | None] | None],
    timeout: float,
    what: str,
    *workers: WorkerProcess,
) -> T:
    """Poll `probe` (sync or async) until it returns something truthy; return that.

    Fails with `what` and the workers' logs when `timeout` seconds pass first.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = probe()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            logs = "\n".join(w.describe() for w in workers)
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")
        await asyncio.sleep(0.02)


class Workers:
    """The worker processes one test started; `close` SIGKILLs those still alive."""

    def __init__(self, store_url: str, prefix: str, logs: Path) -> None:
        self.store_url = store_url
        self.prefix = prefix
        self.logs = logs
        self.started: list[WorkerProcess] = []

    def spawn(
        self, *extra: str, module: str = "tests.crashflows", env: dict[str, str] | None = None
    ) -> WorkerProcess:
        log = self.logs / f"worker-{len(self.started) + 1}.log"
        worker = WorkerProcess(
            self.store_url, self.prefix, log, *extra, module=module, env=env
        ).start()
        self.started.append(worker)
        return worker

    def close(self) -> None:
        for worker in self.started:
            worker.kill()
