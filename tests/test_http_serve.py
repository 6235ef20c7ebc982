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
    proc = subprocess.Popen(
        [STEADYFLOW, "serve", "tests.test_http", *store, "--host", "127.0.0.1",
         "--port", str(port), *args],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "STEADYFLOW_API_TOKENS": f"{TOKEN}=ops", **(env or {})},
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
