"""Redis round trips and commands per completed step, and per lifecycle operation.

Two ways of counting, side by side:

- client side: the store's connections are wrapped to count round trips
  (one per request sent; a pipeline is one) and commands by name, with
  ``EVALSHA`` calls attributed to the store's named scripts;
- server side: ``INFO commandstats`` deltas, which also count the commands
  the Lua scripts run inside Redis. They are server-wide: another client
  using the same Redis meanwhile inflates them (the client-side EVALSHA
  count is printed next to the server's to show whether that happened).

Per step: a flow of N1 and one of N2 steps run through an in-process
worker (start, claim, steps, finish); (count(N2) - count(N1)) / (N2 - N1)
is the cost of one completed step, the fixed per-run cost cancelling out.

Per operation: start; the first activation of a flow that suspends at a
``wait_for`` (claim, a step, the wait); the wake-up (signal, then the
worker's claim, replay, next step, finish); ``RunHandle.result()`` on a
finished run.

``--optional-checkpoints``: the per-step flow is declared with
``@flow(optional_checkpoints=True)``.

    python -m bench.roundtrips [--small 20] [--large 220] [--store URL | --private-redis]
        [--optional-checkpoints]
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

from bench import flows
from bench._common import (
    Counter,
    bench_store,
    commandstats,
    counting,
    emit,
    new_prefix,
    parser,
    private_redis,
    stats_delta,
    table,
)
from sdk import Client, RunStatus, Worker
from stores.redis import RedisStore

__all__ = ["main", "measure"]


async def _flow_cost(
    store: RedisStore,
    counters: list[Counter],
    client: Client,
    worker: Worker,
    n: int,
    chain: Any = flows.chain,
) -> dict[str, Any]:
    """What one run of an n-step flow sends, client's start and worker's passes together."""
    before = await commandstats(store)
    snaps = [c.snapshot() for c in counters]
    handle = await client.start(chain, n)
    await worker.run_until_idle()
    parts = [c.since(s) for c, s in zip(counters, snaps, strict=True)]
    server = stats_delta(before, await commandstats(store))
    sent: dict[str, Any] = {
        "round_trips": sum(p["round_trips"] for p in parts),
        "commands": sum(p["commands"] for p in parts),
        "by_command": sum(
            (collections.Counter(p["by_command"]) for p in parts), start=collections.Counter()
        ),
        "scripts": sum(
            (collections.Counter(p["scripts"]) for p in parts), start=collections.Counter()
        ),
    }
    assert await handle.result(timeout=10) == n
    evalsha = sent["by_command"].get("EVALSHA", 0) + sent["by_command"].get("EVAL", 0)
    return {
        "round_trips": sent["round_trips"],
        "commands": sent["commands"],
        "scripts": evalsha,
        "by_script": sent["scripts"],
        "server_commands": sum(server.values()),
        "server_scripts": server.get("evalsha", 0) + server.get("eval", 0),
        "server_by_command": server,
    }


async def measure(
    url: str, small: int = 20, large: int = 220, optional_checkpoints: bool = False
) -> dict[str, Any]:
    chain: Any = flows.chain
    if optional_checkpoints:
        from bench import flows_checkpointed

        chain = flows_checkpointed.chain
    prefix = new_prefix("roundtrips")
    async with (
        bench_store(url, prefix) as wstore,
        bench_store(url, prefix, cleanup=False) as cstore,
    ):
        wcount, ccount = counting(wstore), counting(cstore)
        worker = Worker(wstore, concurrency=4)
        client = Client(cstore)
        # Warm up: connections made, scripts loaded (a first EVALSHA may need a SCRIPT LOAD).
        warm = [await client.start(chain, 3), await client.start(flows.wait_once)]
        await worker.run_until_idle()
        await client.signal(warm[1].run_id, "go", 1)
        await worker.run_until_idle()
        for h in warm:
            await h.result(timeout=10)

        # -- per completed step --------------------------------------------------
        sizes = {}
        for n in (small, large):
            c = await _flow_cost(wstore, [wcount, ccount], client, worker, n, chain)
            c2 = await _flow_cost(wstore, [wcount, ccount], client, worker, n, chain)
            # the lower of two tries: the server-side figures pick up other clients' noise
            sizes[n] = {k: min(c[k], c2[k]) if isinstance(c[k], int) else c[k] for k in c}
        d = large - small
        per_step = {
            k: (sizes[large][k] - sizes[small][k]) / d
            for k in ("round_trips", "commands", "scripts", "server_commands", "server_scripts")
        }
        per_step_server = {
            cmd: (sizes[large]["server_by_command"].get(cmd, 0) - calls) / d
            for cmd, calls in sizes[small]["server_by_command"].items()
        }
        fixed = {
            k: sizes[small][k] - per_step[k] * small
            for k in ("round_trips", "commands", "scripts", "server_commands")
        }

        # -- per operation ---------------------------------------------------------
        ops: list[tuple[str, str, dict[str, Any]]] = []
        snap = ccount.snapshot()
        handle = await client.start(flows.wait_once)
        ops.append(("start", "client", ccount.since(snap)))

        snap = wcount.snapshot()
        await worker.run_until_idle()
        assert await handle.status() is RunStatus.WAITING_FOR_SIGNAL
        ops.append(("activation to suspension (claim, 1 step, wait_for)", "worker",
                     wcount.since(snap)))  # fmt: skip

        snap = ccount.snapshot()
        await client.signal(handle.run_id, "go", 7)
        ops.append(("signal (wakes the run)", "client", ccount.since(snap)))

        snap = wcount.snapshot()
        await worker.run_until_idle()
        ops.append(("wake-up activation (claim, replay, 1 step, finish)", "worker",
                    wcount.since(snap)))  # fmt: skip

        snap = ccount.snapshot()
        assert await handle.result(timeout=10) == 7
        ops.append(("RunHandle.result() of a finished run", "client", ccount.since(snap)))

        snap = wcount.snapshot()
        await worker.run_until_idle()
        ops.append(("idle worker pass (nothing ready)", "worker",
                    wcount.since(snap)))  # fmt: skip

    return {
        "small": small,
        "large": large,
        "optional_checkpoints": optional_checkpoints,
        "per_step": per_step,
        "per_step_server_by_command": {k: v for k, v in per_step_server.items() if v},
        "fixed_per_run": fixed,
        "per_step_by_script": {
            k: (sizes[large]["by_script"].get(k, 0) - sizes[small]["by_script"].get(k, 0)) / d
            for k in sizes[large]["by_script"]
        },
        "operations": [
            {"operation": name, "side": side, **{k: v for k, v in c.items() if k != "by_command"}}
            for name, side, c in ops
        ],
    }


def report(r: dict[str, Any]) -> str:
    ps = r["per_step"]
    rows = [
        ("client round trips", ps["round_trips"]),
        ("client commands (requests)", ps["commands"]),
        ("scripts (EVALSHA/EVAL), client-counted", ps["scripts"]),
        ("scripts (EVALSHA/EVAL), server-counted", ps["server_scripts"]),
        ("server commands (incl. inside scripts)", ps["server_commands"]),
    ]
    out = [
        f"per completed step: flows of {r['small']} and {r['large']} steps, differenced"
        + (", @flow(optional_checkpoints=True)" if r.get("optional_checkpoints") else ""),
        table(rows, ["per step", "count"]),
        "server commands per step, by command: "
        + ", ".join(
            f"{k} {v:.2f}"
            for k, v in sorted(r["per_step_server_by_command"].items())
            if abs(v) >= 0.05  # below: other clients' traffic, not ours
        ),
        "scripts per step, by name: "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(r["per_step_by_script"].items()) if v),
        "fixed cost per run (start + worker passes + finish): "
        f"{r['fixed_per_run']['round_trips']:.0f} round trips "
        f"(server-side: {r['fixed_per_run']['server_commands']:.0f} commands, "
        "including any other client's)",
        *(
            [
                "WARNING: server-counted scripts differ from the client's: another client "
                "used this Redis meanwhile; server-side figures are inflated"
            ]
            if abs(ps["server_scripts"] - ps["scripts"]) > 0.05
            else []
        ),
        "",
        table(
            [
                (
                    o["operation"],
                    o["side"],
                    o["round_trips"],
                    " ".join(f"{k}x{v}" if v > 1 else k for k, v in sorted(o["scripts"].items()))
                    or "-",
                )
                for o in r["operations"]
            ],
            ["operation", "by", "round trips", "scripts"],
        ),
        "(worker rows run Worker.run_until_idle: poll x2 = the poll that claims and the poll "
        "that finds nothing once the activation ended, each sent with an outbox claim; "
        "Worker.run() polls once, then blocks on BLPOP of the wake-up list. The activation's "
        "own: 1 claiming poll + the rest.)",
    ]
    return "\n".join(out)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--small", type=int, default=20)
    p.add_argument("--large", type=int, default=220)
    p.add_argument(
        "--private-redis",
        action="store_true",
        help="start a redis-server of our own (needs it on PATH): server-side counts "
        "free of other clients' traffic",
    )
    p.add_argument(
        "--optional-checkpoints",
        action="store_true",
        help="the per-step flow with @flow(optional_checkpoints=True)",
    )
    a = p.parse_args()
    if a.private_redis:
        with private_redis() as url:
            r = asyncio.run(measure(url, a.small, a.large, a.optional_checkpoints))
    else:
        r = asyncio.run(measure(a.store, a.small, a.large, a.optional_checkpoints))
    print(report(r))
    emit("roundtrips", r, a.json)


if __name__ == "__main__":
    main()
