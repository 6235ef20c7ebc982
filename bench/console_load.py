"""Page loads of the web console (sdk.console): the runs list over 1,000 runs and
the page of a run with 10,000 steps.

Seeds a private key prefix on real Redis (1,000 finished runs; one run of
10,000 sequential steps), then times each page two ways:

- server: the full answer (store reads + rendering) through httpx's ASGI
  transport, in process; median and p90 of ``--rounds`` loads;
- browser (when Chromium is installed): a real ``uvicorn`` server in a thread
  and headless Chromium (Playwright, ``executable_path``) loading the page;
  the navigation's ``loadEventEnd`` (request to a laid-out, scripted page).

    python -m bench.console_load [--runs 1000] [--steps 10000] [--rounds 5] [--pending N]
        [--store URL]

``--pending 100000`` adds 100,000 older runs that no worker executes (they
wait on a queue of their own), to show that a page costs the same in a store
of 100,000 runs.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from bench._common import bench_store, emit, new_prefix, parser, pct, table
from sdk import Client, Worker, flow, step
from sdk.http import BearerTokens, create_app

__all__ = ["main"]

TOKEN = "bench-console-token-0123456789"
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


@step(name="bench.console.tick")
async def tick(n: int) -> int:
    return n


@flow(name="bench.console.small", queue="console")
async def small(n: int) -> int:
    return await tick(n)


@flow(name="bench.console.long", queue="console")
async def long(steps: int) -> int:
    total = 0
    for n in range(steps):
        total += await tick(n)
    return total


async def seed(client: Client, runs: int, steps: int, pending: int) -> None:
    """`pending` runs no worker executes (older), then `runs` finished runs and one run
    of `steps` steps (id ``long``)."""
    for first in range(0, pending, 200):
        await asyncio.gather(*(client.start(small, n, run_id=f"queued-{n:06d}", queue="parked")
                               for n in range(first, min(first + 200, pending))))  # fmt: skip
    for n in range(runs):
        await client.start(small, n, run_id=f"run-{n:05d}")
    await client.start(long, steps, run_id="long")
    worker = Worker(client.store, flows=[small, long], concurrency=32, queues=["console"])
    await worker.run_until_idle()


PAGES = {
    "runs list, first page (50)": "/ui/runs",
    "runs list, 200 per page": "/ui/runs?limit=200",
    "runs list, 5th page (cursor)": None,  # found by following "Next page"
    "runs list, status completed": "/ui/runs?status=completed",
    "status counts (1,000+ cap)": "/ui/counts",
    "run of 10,000 steps (500 rows shown)": "/ui/runs/long",
    "run of 10,000 steps, all rows": "/ui/runs/long?all=1",
}


async def server_times(client: Client, rounds: int) -> tuple[dict[str, tuple[float, float, int]],
                                                               dict[str, str]]:  # fmt: skip
    """Per page: (median ms, p90 ms, bytes); and each page's path."""
    app = create_app(client, authenticate=BearerTokens({TOKEN: "bench"}))
    transport = httpx.ASGITransport(app=app)
    paths = dict(PAGES)
    out = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://sf", headers=HEADERS,
                                 timeout=120) as http:  # fmt: skip
        path = "/ui/runs"
        for _ in range(4):  # as far as the 5th page goes (fewer with fewer runs)
            text = (await http.get(path)).text
            if 'rel="next"' not in text:
                break
            path = "/ui/runs?" + text.split('rel="next" href="/ui/runs?', 1)[1].split('"')[0]
            path = path.replace("&amp;", "&")
        paths["runs list, 5th page (cursor)"] = path
        for name, p in paths.items():
            assert p is not None
            times, size = [], 0
            for _ in range(rounds):
                begun = time.perf_counter()
                answer = await http.get(p)
                times.append((time.perf_counter() - begun) * 1000)
                assert answer.status_code == 200, (p, answer.status_code)
                size = len(answer.content)
            times.sort()
            out[name] = (statistics.median(times), pct(times, 90), size)
    return out, {k: v for k, v in paths.items() if v is not None}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def served(url: str, prefix: str) -> Iterator[str]:
    """A uvicorn server of the app (its own loop and store) in a thread; its base URL."""
    import uvicorn

    from stores.redis import RedisStore

    port = _free_port()
    holder: dict[str, Any] = {}

    def run() -> None:
        async def main() -> None:
            store = RedisStore.from_url(url, prefix=prefix)
            app = create_app(Client(store), authenticate=BearerTokens({TOKEN: "bench"}))
            server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning",
                                                   lifespan="off"))  # fmt: skip
            holder["server"] = server
            try:
                await server.serve()
            finally:
                await store.close()

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(f"{base}/healthz", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.05)
    try:
        yield base
    finally:
        holder["server"].should_exit = True
        thread.join(timeout=10)


def browser_times(base: str, paths: dict[str, str], rounds: int) -> dict[str, float]:
    """Median ms from navigation start to the load event, per page, in Chromium."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        context = browser.new_context(extra_http_headers=HEADERS)
        page = context.new_page()
        for name, path in paths.items():
            if "counts" in name:
                continue
            times = []
            for _ in range(rounds):
                page.goto(base + path, wait_until="load")
                times.append(float(page.evaluate(
                    "performance.getEntriesByType('navigation')[0].loadEventEnd"
                )))  # fmt: skip
            out[name] = statistics.median(times)
        browser.close()
    return out


async def measure(url: str, runs: int, steps: int, rounds: int, pending: int) -> dict[str, Any]:
    prefix = new_prefix("console")
    async with bench_store(url, prefix) as store:
        client = Client(store)
        begun = time.perf_counter()
        await seed(client, runs, steps, pending)
        print(f"seeded {pending:,} pending runs, {runs:,} finished runs and a {steps:,}-step "
              f"run in {time.perf_counter() - begun:.1f} s")  # fmt: skip
        server, paths = await server_times(client, rounds)
        browser: dict[str, float] = {}
        if shutil.which("chromium") or shutil.which("chromium-browser"):
            with served(url, prefix) as base:
                browser = await asyncio.to_thread(browser_times, base, paths, rounds)
    rows = [(name, med, p90, size / 1024, browser.get(name, float("nan")))
            for name, (med, p90, size) in server.items()]  # fmt: skip
    print(table(rows, ["page", "server median ms", "server p90 ms", "KiB", "browser load ms"]))
    return {name: {"server_median_ms": med, "server_p90_ms": p90, "bytes": size,
                   "browser_load_ms": browser.get(name)}
            for name, (med, p90, size) in server.items()}  # fmt: skip


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--pending", type=int, default=0, help="more runs, never executed (older)")
    args = p.parse_args()
    figures = asyncio.run(measure(args.store, args.runs, args.steps, args.rounds, args.pending))
    emit("console_load", {"pages": figures}, args.json)


if __name__ == "__main__":
    main()
