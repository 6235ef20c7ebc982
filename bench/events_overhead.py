"""Per-step overhead with the event log and checkpoints on, against the engine without them.

Issue 3: "the per-step overhead from the core issue must not grow by more than
10% with checkpoints and events on; report both". The engine before the event
log (the parent of the commit "Event log, checkpoints and run record v2") is
checked out into a temporary git worktree, and this tree's ``bench/`` is
copied over its own so both engines run the same measurement: the flow and
in-process worker of ``bench.step_overhead`` (a trivial step timed against the
same function undecorated, inside the flow). Three child processes, one per
engine (``PYTHONPATH`` and working directory = that engine's tree, each under
its own key prefix), stay up and take turns run by run:

- A: the engine without events and checkpoints;
- B0: B with its step write cut back to what A's wrote (the journal entry and
  the run's progress; no event, feed message, write sequence or checkpoint),
  the client unchanged: what events and checkpoints cost B itself;
- B: this working tree, or ``--b REF`` (every step also appends its event, a
  feed entry and its ``step_completed`` checkpoint, in the same script as its
  record);
- C: B with ``@flow(optional_checkpoints=True)`` (a ``step_started`` event and
  checkpoint per step: one more round trip; reported, no target).

The target applies to B/A: the per-step overhead of the core issue's engine
against this one's, with events and checkpoints on. B/B0 (events and
checkpoints alone, within this engine) is reported next to it, marked when it
is above the same 10%. Round i runs one short run
(``--steps``) on each, in the order A, B0, B, C rotated by i, so machine noise
falls on all four alike. Reported: the pooled median
and p90 per engine, their ratios, and the range of the ratios over blocks of
``--block`` rounds. Then, on a private redis-server when one is on PATH (else
``--store``), per step: round trips and commands inside Redis
(``bench.roundtrips``), server time in scripts (``INFO commandstats``) and
memory (``MEMORY USAGE`` of every key a 1,000-step run leaves). The worktrees
are removed at the end. Needs git and this repository's history.

    python -m bench.events_overhead [--rounds 60] [--steps 250] [--b REF] [--store URL] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from bench import flows
from bench._common import (
    TARGETS,
    bench_store,
    commandstats,
    delete_prefix,
    emit,
    new_prefix,
    parser,
    pinned_cpus,
    private_redis,
    stats_delta,
    summary,
    table,
)

__all__ = ["main", "measure"]

#: Issue 3: B / A of the median per-step overhead.
TARGET_RATIO = TARGETS["events_overhead_ratio"][1]
#: The commit that added the event log and checkpoints; its parent is A.
EVENTS_COMMIT_SUBJECT = "Event log, checkpoints and run record v2"

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The variants whose commands and memory are counted too (B0's step write is a
#: benchmark-only script: its counts would say nothing new).
COUNTED = ("A", "B", "C")

VARIANTS = {
    "A": "A: without events/checkpoints",
    "B0": "B0: B, step writes without event/checkpoint",
    "B": "B: events + checkpoints",
    "C": "C: + optional checkpoints",
}


# -- the engine without events -------------------------------------------------------

# B0's step write: what A's `record` script wrote (fenced journal entry and
# progress), on B's store; the arguments B's client sends for the event and
# checkpoint are ignored. Replays and checkpoints of B0's runs are not right
# (no write sequence): the benchmark flow uses neither.
BARE_RECORD = r"""
local run = redis.call('HMGET', KEYS[1], 'fence', 'status')
if run[1] ~= ARGV[3] or run[2] ~= 'running' then return 0 end
redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
redis.call('HSET', KEYS[1], 'current_step', ARGV[4], 'recoveries', '0')
return 1
"""


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()


def baseline_commit() -> tuple[str, str]:
    """(the commit that added events and checkpoints, its parent)."""
    found = _git("log", "--format=%H", "-1", "--grep", EVENTS_COMMIT_SUBJECT)
    if not found:
        raise SystemExit(f"no commit {EVENTS_COMMIT_SUBJECT!r} in this repository's history")
    return found, _git("rev-parse", found + "^")


@contextlib.contextmanager
def worktree(commit: str, name: str = "noevents") -> Iterator[str]:
    """`commit` checked out in a temporary worktree, with this tree's ``bench/`` over its own."""
    path = tempfile.mkdtemp(prefix=f"sf-{name}-")
    _git("worktree", "add", "--detach", path, commit)
    try:
        shutil.copytree(
            os.path.join(REPO, "bench"),
            os.path.join(path, "bench"),
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        yield path
    finally:
        _git("worktree", "remove", "--force", path)
        shutil.rmtree(path, ignore_errors=True)


async def _child(root: str, *args: str) -> dict[str, Any]:
    """``python -m ARGS --json`` on the engine in `root`; its JSON line."""
    env = {**os.environ, "PYTHONPATH": root}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *args,
        "--json",
        cwd=root,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} in {root} exited {proc.returncode}:\n{err.decode()[-2000:]}"
        )
    for line in reversed(out.decode().splitlines()):
        if line.startswith('{"bench"'):
            result: dict[str, Any] = json.loads(line)
            return result
    raise RuntimeError(f"{' '.join(args)} in {root} printed no JSON line")


# -- memory per step (runs in a child: the engine under test) -----------------------


async def memory(url: str, steps: int = 1000, optional_checkpoints: bool = False) -> dict[str, Any]:
    """Bytes (``MEMORY USAGE ... SAMPLES 0``) of each key one `steps`-step run leaves."""
    from sdk import Client, Worker
    from stores._keys import SUFFIX

    chain: Any = flows.chain
    if optional_checkpoints:
        from bench import flows_checkpointed

        chain = flows_checkpointed.chain
    prefix = new_prefix("evmem")
    async with bench_store(url, prefix) as store:
        client, worker = Client(store), Worker(store, [chain], concurrency=1)
        warm = await client.start(chain, 10)  # scripts loaded, connections made
        await worker.run_until_idle()
        await warm.result(timeout=60)
        # server time: the least of three runs (others' load only adds); memory: the last one
        usec: dict[str, float] = {}
        for _ in range(3):
            await delete_prefix(store, prefix)
            before = await commandstats(store, "usec")
            handle = await client.start(chain, steps)
            await worker.run_until_idle()
            spent = stats_delta(before, await commandstats(store, "usec"))
            assert await handle.result(timeout=60) == steps
            if not usec or spent.get("evalsha", 0) < usec.get("evalsha", 0):
                usec = {k: float(v) for k, v in spent.items()}
        base = store.keys.base_of(handle.run_id)
        by_suffix = sorted(SUFFIX.items(), key=lambda kv: -len(kv[1]))
        sizes: dict[str, int] = {}
        async for key in store.client.scan_iter(match=f"{prefix}:*", count=1000):
            rest = key.removeprefix(base)
            name = next((n for n, s in by_suffix if rest == s + handle.run_id), None)
            if name is None:  # a partition-wide key (queue, index, feed, ...)
                name = next((n for n, s in by_suffix if rest.startswith(s)), rest) + " (shared)"
            usage = await store.client.memory_usage(key, samples=0)
            sizes[name] = sizes.get(name, 0) + int(usage or 0)
    return {
        "steps": steps,
        "optional_checkpoints": optional_checkpoints,
        "bytes": sizes,
        # server time for the whole run (start, claim, steps, finish), µs per step
        # (INFO commandstats usec; a script's own includes the commands it runs)
        "server_us": {k: v / steps for k, v in usec.items() if k != "info"},
    }


# -- a served engine (runs in a child: the engine under test) -------------------------


async def serve(url: str, optional_checkpoints: bool = False, bare: bool = False) -> None:
    """Run the step-overhead flow on request: ``run N`` on stdin -> one JSON line.

    The line holds the N step and undecorated call times (seconds). The process
    stays up between runs, so the engines can take turns in small chunks.
    With `bare`, step writes run `BARE_RECORD` (variant B0).
    """
    from bench.step_overhead import ENGINE, overhead_runs

    async with overhead_runs(url, optional_checkpoints) as (store, run):
        if bare:
            store._scripts["record"] = store.client.register_script(BARE_RECORD)
            await run(50, False)  # loads it
        _say({"bench": "events_overhead_serve", "engine": ENGINE})
        while line := (await asyncio.to_thread(sys.stdin.readline)).split():
            step_t, plain_t, wall = await run(int(line[1]), False)
            _say({"step": step_t, "plain": plain_t, "wall": wall})


def _say(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class _Served:
    """A child process serving one engine (see `serve`)."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str) -> None:
        self.proc, self.name = proc, name

    @classmethod
    async def start(
        cls, name: str, root: str, url: str, *args: str, cpu: int | None = None
    ) -> _Served:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.events_overhead", "--serve", "--store", url, *args,
            cwd=root, env={**os.environ, "PYTHONPATH": root},
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        if cpu is not None:
            os.sched_setaffinity(proc.pid, {cpu})
        served = cls(proc, name)
        _check_engine(name, (await served._read())["engine"], root)
        return served

    async def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"engine {self.name}: the child exited ({await self.proc.wait()})")
        reply: dict[str, Any] = json.loads(line)
        return reply

    async def run(self, steps: int) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"run {steps}\n".encode())
        await self.proc.stdin.drain()
        return await self._read()

    async def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()


# -- the comparison -------------------------------------------------------------------


async def measure(
    url: str,
    rounds: int = 60,
    steps: int = 250,
    block: int = 10,
    b_ref: str | None = None,
    pin: bool = True,
) -> dict[str, Any]:
    """A against B0, B and C; B is this working tree, or the commit `b_ref` if given.

    With `pin` (and two CPUs and redis-server at hand), the timed runs go to a
    private redis-server on one CPU and every engine's process runs on another:
    on a 2-vCPU machine a process otherwise keeps whatever placement it got
    (sharing the server's CPU or not), which biased whole variants by 20-30%.
    """
    events_commit, base = baseline_commit()
    if b_ref is None:
        dirty = bool(_git("status", "--porcelain", "--", "sdk", "stores"))
        b_engine = f"this tree ({_git('rev-parse', '--short', 'HEAD')}"
        b_engine += " + uncommitted changes to sdk/, stores/)" if dirty else ")"
    else:
        b_ref = _git("rev-parse", "--verify", b_ref + "^{commit}")
        b_engine = b_ref[:7]
    cpus = pinned_cpus() if pin and shutil.which("redis-server") else None
    timing = (
        f"pinned: a private redis-server on CPU {cpus[0]}, the engines on CPU {cpus[1]}"
        if cpus
        else url
    )
    with contextlib.ExitStack() as trees:
        if cpus:
            url = trees.enter_context(private_redis(cpus[0]))
        old = trees.enter_context(worktree(base))
        new = REPO if b_ref is None else trees.enter_context(worktree(b_ref, "events"))
        roots = {"A": old, "B0": new, "B": new, "C": new}
        extra: dict[str, tuple[str, ...]] = {
            "A": (), "B0": ("--bare",), "B": (), "C": ("--optional-checkpoints",)
        }  # fmt: skip
        served: dict[str, _Served] = {}
        try:
            for v in VARIANTS:
                served[v] = await _Served.start(
                    v, roots[v], url, *extra[v], cpu=cpus[1] if cpus else None
                )
            runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
            order = list(VARIANTS)
            for i in range(rounds):
                for v in order[i % len(order) :] + order[: i % len(order)]:
                    runs[v].append(await served[v].run(steps))
        finally:
            for s in served.values():
                await s.close()
        with _counting_store(url) as curl:
            counts, mem = {}, {}
            for v in COUNTED:
                counts[v] = await _child(roots[v], "bench.roundtrips", "--store", curl, *extra[v])
                mem[v] = await _child(
                    roots[v], "bench.events_overhead", "--memory-child", "--store", curl,
                    "--steps", "1000", *extra[v],
                )  # fmt: skip
    return {
        "events_commit": events_commit,
        "baseline_commit": base,
        "b_engine": b_engine,
        "rounds": rounds,
        "steps": steps,
        "block": block,
        "target_ratio": TARGET_RATIO,
        "counts_store": "private redis-server" if curl != url else url,
        "timing_store": timing,
        **_figures(runs, block, counts, mem),
    }


def _check_engine(variant: str, engine: str, root: str) -> None:
    if os.path.realpath(engine) != os.path.realpath(os.path.join(root, "sdk")):
        raise RuntimeError(f"{variant} ran the engine in {engine}, not the one in {root}")


@contextlib.contextmanager
def _counting_store(url: str) -> Iterator[str]:
    """A private redis-server (clean server-side counts) if one is on PATH, else `url`."""
    if shutil.which("redis-server") is None:
        yield url
        return
    with private_redis() as private:
        yield private


def _figures(
    runs: dict[str, list[dict[str, Any]]],
    block: int,
    counts: dict[str, dict[str, Any]],
    mem: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    plain = {v: statistics.median(x for r in runs[v] for x in r["plain"]) for v in VARIANTS}

    def over(v: str, rs: list[dict[str, Any]]) -> dict[str, float]:
        return summary([x - plain[v] for r in rs for x in r["step"]], 1e6)

    blocks = [slice(i, i + block) for i in range(0, len(runs["A"]), block)]
    by_block = {v: [over(v, runs[v][b]) for b in blocks] for v in VARIANTS}
    overhead = {v: over(v, runs[v]) for v in VARIANTS}
    ratios: dict[str, dict[str, Any]] = {}
    for v, base in (("B", "A"), ("B", "B0"), ("C", "A")):
        ratio = ratios[f"{v}/{base}"] = {}
        for q in ("median", "p90"):
            each = [b[q] / a[q] for a, b in zip(by_block[base], by_block[v], strict=True)]
            ratio[q] = {"pooled": overhead[v][q] / overhead[base][q],
                        "blocks_min": min(each), "blocks_max": max(each)}  # fmt: skip
    return {
        "plain_us": {v: plain[v] * 1e6 for v in VARIANTS},
        "overhead_us": overhead,
        "overhead_us_median_by_block": {v: [b["median"] for b in by_block[v]] for v in VARIANTS},
        "ratio": ratios,
        "met": ratios["B/A"]["median"]["pooled"] <= TARGET_RATIO,
        "events_alone_within_10pct": ratios["B/B0"]["median"]["pooled"] <= TARGET_RATIO,
        "per_step": {
            v: {
                "round_trips": c["per_step"]["round_trips"],
                "server_commands": c["per_step"]["server_commands"],
                "server_by_command": {
                    k: n for k, n in c["per_step_server_by_command"].items() if abs(n) >= 0.05
                },
            }
            for v, c in counts.items()
        },
        "memory": {v: m["bytes"] for v, m in mem.items()},
        "server_us": {v: m["server_us"] for v, m in mem.items()},
        "memory_steps": next(iter(mem.values()))["steps"],
    }


# -- report -------------------------------------------------------------------------


def report(r: dict[str, Any]) -> str:
    o, ra = r["overhead_us"], r["ratio"]

    def verdict(x: float) -> str:
        return "met" if x <= r["target_ratio"] else "MISSED"

    def rng(d: dict[str, float]) -> str:
        return f"{d['pooled']:.2f} ({d['blocks_min']:.2f}-{d['blocks_max']:.2f})"

    rows = [
        (
            f"per-step overhead, {q}",
            o["A"][q],
            o["B0"][q],
            o["B"][q],
            rng(ra["B/A"][q]),
            verdict(ra["B/A"][q]["pooled"]),
            rng(ra["B/B0"][q]),
            "" if ra["B/B0"][q]["pooled"] <= r["target_ratio"] else f"> {r['target_ratio']:.2f}",
            o["C"][q],
            rng(ra["C/A"][q]),
        )
        for q in ("median", "p90")
    ]
    target = f"<= {r['target_ratio']:.2f}"
    head = ["µs per step", "A", "B0", "B", f"B/A (blocks), target {target}", "",
            "B/B0 (blocks): events + checkpoints alone", "", "C", "C/A (blocks)"]  # fmt: skip
    nb = len(r["overhead_us_median_by_block"]["A"])
    out = [
        f"per-step overhead (step - undecorated call): {r['rounds']} runs x {r['steps']} "
        "sequential steps per engine, the engines taking turns run by run (A, B0, B, C rotating); "
        f"ratios of the pooled figures, and their range over {nb} blocks of "
        f"{r['block']} rounds; {r['timing_store']}",
        f"A = {r['baseline_commit'][:7]} (without events/checkpoints), "
        f"B = {r['b_engine']} (events + checkpoints since {r['events_commit'][:7]}), "
        "B0 = B with step writes cut back to A's (no event, feed message or checkpoint), "
        "C = B with @flow(optional_checkpoints=True)",
        table(rows, head),
        "median by block, µs: "
        + "; ".join(
            f"{v} " + " ".join(f"{x:.0f}" for x in r["overhead_us_median_by_block"][v])
            for v in VARIANTS
        ),
        "",
    ]
    ps = r["per_step"]
    cmds = sorted({k for v in COUNTED for k in ps[v]["server_by_command"]})
    rows2: list[tuple[Any, ...]] = [
        ("client round trips", *(ps[v]["round_trips"] for v in COUNTED)),
        ("server commands (incl. inside scripts)", *(ps[v]["server_commands"] for v in COUNTED)),
        *(
            (f"  {k.upper()}", *(ps[v]["server_by_command"].get(k, 0.0) for v in COUNTED))
            for k in cmds
        ),
        (
            "server time in scripts, µs (EVALSHA usec, best of 3 runs)",
            *(r["server_us"][v].get("evalsha", 0.0) for v in COUNTED),
        ),
    ]
    out += [
        f"per completed step (bench.roundtrips, on {r['counts_store']})",
        table(rows2, ["per step", *COUNTED]),
        "",
    ]
    n = r["memory_steps"]
    mem = {v: {k: b / n for k, b in r["memory"][v].items()} for v in COUNTED}
    keys = sorted({k for v in COUNTED for k in mem[v]})
    big = [k for k in keys if max(mem[v].get(k, 0.0) for v in COUNTED) >= 1]
    small = [k for k in keys if k not in big]

    def total(v: str, names: list[str]) -> float:
        return float(sum(mem[v].get(k, 0.0) for k in names))

    own = [k for k in keys if not k.endswith("(shared)")]
    rows3: list[tuple[Any, ...]] = [
        *((k, *(mem[v].get(k, 0.0) for v in COUNTED)) for k in big),
        ("other keys (each < 1 B/step)", *(total(v, small) for v in COUNTED)),
        ("total, the run's own keys", *(total(v, own) for v in COUNTED)),
        ("total, with the feed's share", *(total(v, keys) for v in COUNTED)),
    ]
    out += [
        f"memory after one {n:,}-step run, bytes per step (MEMORY USAGE SAMPLES 0 / {n:,}); "
        "the feed is one capped stream per partition, shared by all runs",
        table(rows3, ["key", *COUNTED]),
    ]
    return "\n".join(out)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=60, help="runs of each engine (default 60)")
    p.add_argument("--steps", type=int, default=250, help="steps per run (default 250)")
    p.add_argument("--block", type=int, default=10, help="rounds per block (default 10)")
    p.add_argument(
        "--b",
        metavar="REF",
        help="measure the engine of commit REF as B (default: this working tree)",
    )
    p.add_argument(
        "--no-pin",
        action="store_true",
        help="time against --store, unpinned (default: a private redis-server on one CPU, "
        "the engines on another)",
    )
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--optional-checkpoints", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    # The child modes run in the tree of the engine under test (see measure).
    if a.serve:
        asyncio.run(serve(a.store, a.optional_checkpoints, a.bare))
        return
    if a.memory_child:
        r = asyncio.run(memory(a.store, a.steps, a.optional_checkpoints))
        emit("events_overhead_memory", r, True)
        return
    r = asyncio.run(measure(a.store, a.rounds, a.steps, a.block, a.b, not a.no_pin))
    print(report(r))
    emit("events_overhead", r, a.json)


if __name__ == "__main__":
    main()
