"""``steadyflow serve``: the real server process (uvicorn) on a free loopback port."""

from __future__ import annotations

import asyncio
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


@pytest.fixture(name="server")
def server_fixture(redis_url: str, key_prefix: str, tmp_path: Path) -> Iterator[str]:
    """`steadyflow serve tests.test_http` on the test's Redis prefix; its base URL."""
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen(
        [STEADYFLOW, "serve", "tests.test_http", "--store", redis_url, "--prefix", key_prefix,
         "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "STEADYFLOW_API_TOKENS": f"{TOKEN}=ops:operator"},
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
        assert proc.poll() is None, (tmp_path / "serve.log").read_text()
        yield base
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        code = proc.wait(timeout=20)
        log.close()
        assert code == 0, (tmp_path / "serve.log").read_text()


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
