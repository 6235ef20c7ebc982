"""``steadyflow serve``: the real server process (uvicorn) on a free loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from sdk import Worker
from sdk.cli import cli
from stores.redis import RedisStore
from tests.conftest import free_port
from tests.crashflows import ROOT, STEADYFLOW
from tests.test_http import HEADERS, TOKEN


@contextlib.contextmanager
def serving(
    store: list[str], logs: Path, *args: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """`steadyflow serve tests.test_http ARGS` on `store` (``--store URL --prefix P``) and a
    free loopback port, stopped (SIGTERM, exit status 0) at the end; its base URL."""
    port = free_port()
    log = (logs / f"serve-{port}.log").open("w")
    # (--insecure-local allows everything: it refuses tokens that carry roles)
    tokens = "" if "--insecure-local" in args else f"{TOKEN}=ops:operator"
    proc = subprocess.Popen(
        [STEADYFLOW, "serve", "tests.test_http", *store, "--host", "127.0.0.1",
         "--port", str(port), *args],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "STEADYFLOW_API_TOKENS": tokens, **(env or {})},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):  # until it listens (a cold start imports uvicorn and the flows)
            if proc.poll() is not None:
                break
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert proc.poll() is None, Path(log.name).read_text()
        yield base
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=20)
        log.close()
        assert code == 0, Path(log.name).read_text()


@pytest.fixture(name="server")
def server_fixture(redis_url: str, key_prefix: str, tmp_path: Path) -> Iterator[str]:
    """`steadyflow serve tests.test_http` on the test's Redis prefix; its base URL."""
    with serving(["--store", redis_url, "--prefix", key_prefix], tmp_path) as base:
        yield base


@pytest.mark.slow
@pytest.mark.redis
async def test_the_server_process_starts_streams_and_steers_runs(
    server: str, real_store: RedisStore
) -> None:
    async with httpx.AsyncClient(base_url=server, headers=HEADERS, timeout=20) as http:
        anonymous = await http.get("/v1/runs", headers={"Authorization": ""})
        assert anonymous.status_code == 401
        assert anonymous.headers["content-type"] == "application/problem+json"
        started = await http.post("/v1/runs", json={"flow": "tests.http.signalled",
                                                    "run_id": "served-1"})  # fmt: skip
        assert started.status_code == 201, started.text
        unknown = await http.post("/v1/runs", json={"flow": "nope.flow"})
        assert unknown.json()["code"] == "flow_not_found"

        seen = ""
        sse = {"Accept": "text/event-stream"}
        async with http.stream("GET", "/v1/runs/served-1/events", headers=sse) as stream:
            lines = stream.aiter_lines()

            async def read_until(text: str) -> None:
                nonlocal seen
                while text not in seen:
                    seen += await anext(lines) + "\n"

            await read_until("event: run.created")
            signal_sent = await http.post("/v1/runs/served-1/signals/go", json={"payload": 5})
            assert signal_sent.json()["delivered"] is True
            await read_until("event: signal.received")
            await Worker(real_store).run_until_idle()
            await asyncio.wait_for(read_until("event: end"), 20)

        assert "event: run.completed" in seen
        done = (await http.get("/v1/runs/served-1")).json()
        assert (done["status"], done["result"]) == ("completed", 5)
        assert (await http.get("/readyz")).json()["status"] == "ready"


@pytest.mark.parametrize(
    ("argv", "env", "error"),
    [
        (["--insecure-local", "--host", "0.0.0.0"], {}, "refused on --host 0.0.0.0"),
        ([], {}, "no tokens to authenticate requests with"),
        ([], {"STEADYFLOW_API_TOKENS": "short=ops"}, "shorter than 16 characters"),
        (["--tokens-file", "/nonexistent/tokens"], {}, "tokens file '/nonexistent/tokens'"),
        (["--insecure-local", "--host", "192.168.1.7"], {}, "refused on --host 192.168.1.7"),
        (["--allowed-host", "http://devbox:8000"], {}, "is not a host name"),
        (["--forwarded-allow-ips", "10.0.0.1"], {}, "add --proxy-headers"),
        (["--header-timeout", "20", "--read-timeout", "5"], {}, "cannot be shorter"),
        (["--header-timeout", "0"], {}, "Invalid value for '--header-timeout'"),
        (["--session-idle", "0"], {}, "Invalid value for '--session-idle'"),
        (["--max-streams", "0"], {}, "Invalid value for '--max-streams'"),
        (["--max-streams-per-actor", "0"], {}, "Invalid value for '--max-streams-per-actor'"),
    ],
)
def test_serve_refuses_to_start_an_open_or_misconfigured_server(
    argv: list[str], env: dict[str, str], error: str
) -> None:
    done = CliRunner().invoke(
        cli, ["serve", "--store", "memory://", *argv], env={"STEADYFLOW_API_TOKENS": "", **env}
    )

    assert done.exit_code == 2, done.output
    assert error in done.output


MEMORY = ["--store", "memory://"]


@pytest.mark.slow
def test_an_insecure_local_server_answers_to_local_host_names_only(tmp_path: Path) -> None:
    """DNS rebinding: a page of attacker.example whose name now resolves to 127.0.0.1."""
    with serving(MEMORY, tmp_path, "--insecure-local", "--allowed-host", "devbox") as base:
        rebound = httpx.get(f"{base}/v1/runs", headers={"Host": "attacker.example"})
        rebound_port = httpx.get(f"{base}/v1/runs", headers={"Host": "attacker.example:8000"})
        local = [
            httpx.get(f"{base}/v1/runs", headers={"Host": host}).status_code
            for host in ("localhost:8000", "127.0.0.1", "[::1]:8000", "devbox:8000")
        ]

    for answer in (rebound, rebound_port):
        assert answer.status_code == 403
        assert answer.json()["code"] == "forbidden"
        assert "attacker.example" in answer.json()["detail"]
    assert local == [200, 200, 200, 200]


def logs_of(logs: Path) -> str:
    """What the servers `serving` started in `logs` wrote."""
    return "".join(p.read_text() for p in sorted(logs.glob("serve-*.log")))


async def held_for(port: int, head: bytes, trickle: bytes | None) -> float:
    """Seconds until the server drops a connection that sends `head`, then one byte of
    `trickle` every 0.2 s (None: nothing more); 30 if it is never dropped."""
    began = time.monotonic()  # before the server can have accepted it (its clock starts then)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        while time.monotonic() - began < 30:
            try:
                if await asyncio.wait_for(reader.read(1024), 0.2) == b"":
                    return time.monotonic() - began
            except TimeoutError:
                writer.write(trickle or b"")
            except ConnectionError:
                return time.monotonic() - began
        return 30.0
    finally:
        writer.close()


@pytest.mark.slow
async def test_slow_clients_are_dropped_within_the_header_and_read_timeouts(
    tmp_path: Path,
) -> None:
    """Slowloris: 300 connections on loopback that send nothing, or a head or a body a
    byte at a time (each byte used to keep its connection open for good)."""
    args = ("--header-timeout", "1", "--read-timeout", "2.5")
    with serving(MEMORY, tmp_path, *args) as base:
        port = int(base.rsplit(":", 1)[1])
        head = b"POST /v1/runs HTTP/1.1\r\nHost: localhost\r\n"
        body = head + b"Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n{"
        held = asyncio.gather(
            *(held_for(port, b"", None) for _ in range(100)),  # opens, sends nothing
            *(held_for(port, head, b"x") for _ in range(100)),  # a header line never ends
            *(held_for(port, body, b" ") for _ in range(100)),  # a body never ends
        )
        await asyncio.sleep(0.5)
        async with httpx.AsyncClient(base_url=base, timeout=5) as http:
            meanwhile = await http.get("/healthz")  # the server still answers others
        times = await held

    assert meanwhile.status_code == 200
    heads, bodies = sorted(times[:200]), sorted(times[200:])
    # dropped at the deadline, give or take a loaded machine's scheduling (3 s)
    assert heads[0] >= 1 and heads[-1] < 1 + 3, (heads[:2], heads[-2:])
    assert bodies[0] >= 2.5 and bodies[-1] < 2.5 + 3, (bodies[:2], bodies[-2:])
    log = logs_of(tmp_path)
    assert "its request's head did not arrive within 1 s" in log
    assert "its request's body did not arrive within 2.5 s" in log
    assert "Traceback" not in log


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "secure"),
    [
        (["--proxy-headers"], True),  # 127.0.0.1 is trusted by default
        (["--proxy-headers", "--forwarded-allow-ips", "10.9.8.7"], False),  # not this one
        ([], False),  # no proxy: what a client says about itself is not believed
    ],
)
def test_proxy_headers_from_a_trusted_proxy_make_the_console_cookie_secure(
    tmp_path: Path, args: list[str], secure: bool
) -> None:
    behind_tls = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    with serving(MEMORY, tmp_path, *args) as base:
        signed = httpx.post(f"{base}/ui/signin", data={"token": TOKEN}, headers=behind_tls)

    assert signed.status_code == 303, signed.text
    cookie = signed.headers["set-cookie"]
    assert cookie.startswith("steadyflow_session=") and TOKEN not in cookie
    assert ("; secure" in cookie.lower()) is secure, cookie


@pytest.mark.slow
def test_serve_ends_a_console_session_after_its_idle_time(tmp_path: Path) -> None:
    args = ("--session-idle", "1.5", "--session-lifetime", "60")
    with serving(MEMORY, tmp_path, *args) as base, httpx.Client(base_url=base) as browser:
        signed = browser.post("/ui/signin", data={"token": TOKEN})
        used = browser.get("/ui/runs")
        time.sleep(2)
        idle = browser.get("/ui/runs")

    assert signed.status_code == 303 and used.status_code == 200
    assert idle.status_code == 303 and "/ui/signin" in idle.headers["location"]


@pytest.mark.slow
def test_behind_a_trusted_proxy_the_client_address_is_the_one_it_forwards(
    tmp_path: Path,
) -> None:
    """An --insecure-local server behind a proxy (a mistake) refuses the proxy's clients."""
    forwarded = {"X-Forwarded-For": "203.0.113.9"}
    with serving(MEMORY, tmp_path, "--insecure-local", "--proxy-headers") as base:
        remote = httpx.get(f"{base}/v1/runs", headers=forwarded)
        local = httpx.get(f"{base}/v1/runs")

    assert remote.status_code == 403
    assert "'203.0.113.9'" in remote.json()["detail"]
    assert local.status_code == 200
