"""Queue limits across real worker processes: the cluster-wide peak, measured from
an external ledger, never exceeds the queue's concurrency, and a worker killed
with SIGKILL while holding slots gives them back when its leases expire."""

from __future__ import annotations

import time
from pathlib import Path

import attrs
import pytest

from sdk import Client
from tests.crashflows import LIMITED, Workers, limited_work, until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

STARTUP = 15.0  # a worker process imports and claims well within this
FINISH = 60.0  # 200 runs, 5 at a time, and a lease expiry (1 s), on a loaded machine


@attrs.frozen
class Line:
    what: str  # enter | exit
    label: str
    pid: int
    at: float


def read_ledger(ledger: Path) -> list[Line]:
    if not ledger.exists():
        return []
    out = []
    for text in ledger.read_text(encoding="utf-8").splitlines():
        what, label, pid, at = text.split(" ")
        out.append(Line(what, label, int(pid), float(at)))
    return out


def open_entries(lines: list[Line], pid: int) -> list[Line]:
    """The ledger's entries of `pid` that have no exit (yet)."""
    exited = {x.label for x in lines if x.what == "exit" and x.pid == pid}
    return [x for x in lines if x.what == "enter" and x.pid == pid and x.label not in exited]


def peak(lines: list[Line], killed: dict[int, float]) -> int:
    """Most steps executing at once. An entry with no exit ends when its process
    was killed; at equal times an enter counts before an exit (the stricter reading)."""
    edges: list[tuple[float, int]] = []
    for x in lines:
        edges.append((x.at, 1 if x.what == "enter" else -1))
    for x in (e for pid in killed for e in open_entries(lines, pid)):
        edges.append((killed[x.pid], -1))
    running = most = 0
    for _, step in sorted(edges, key=lambda e: (e[0], -e[1])):
        running += step
        most = max(most, running)
    return most


async def test_three_workers_never_exceed_the_queue_concurrency_even_across_a_sigkill(
    workers: Workers, client: Client, tmp_path: Path
) -> None:
    assert LIMITED.concurrency == 5
    ledger = tmp_path / "ledger"
    # the first runs take long enough that the victim surely holds some when killed
    handles = [
        await client.start(limited_work, str(ledger), f"r{i:03}", 2.0 if i < 8 else 0.02)
        for i in range(200)
    ]
    # The victim starts alone, so it surely executes runs (a worker that started
    # later than the others could find nothing left): kill it while it holds slots.
    victim = workers.spawn()
    await until(lambda: open_entries(read_ledger(ledger), victim.pid), STARTUP,
                "the victim to execute a run", victim)  # fmt: skip
    victim.kill()
    killed_at = time.time()
    held = {x.label for x in open_entries(read_ledger(ledger), victim.pid)}
    for _ in range(3):  # 4 slots each: 12 > 5
        workers.spawn()

    for h in handles:
        assert await h.result(timeout=FINISH) in {f"r{i:03}" for i in range(200)}
    lines = read_ledger(ledger)
    assert peak(lines, {victim.pid: killed_at}) <= 5
    assert peak(lines, {victim.pid: killed_at}) == 5  # the limit was reached, not just respected
    # what the victim held ran again elsewhere, once its leases expired
    again = [x for x in lines if x.what == "exit" and x.label in held]
    assert held and {x.label for x in again} == held
    assert all(x.pid != victim.pid for x in again)
    assert {x.label for x in lines if x.what == "exit"} == {f"r{i:03}" for i in range(200)}
