"""Cross-site requests to the API in a real browser: Debian's Chromium (Playwright) against
a real ``steadyflow serve --insecure-local`` process, where the credential travels by
itself (no token: any request from loopback is the actor ``local``), as it does behind a
proxy that adds the bearer header.

A page of another origin (``http://localhost:PORT``, served by the test, against the
API at ``http://127.0.0.1:PORT``) posts a ``text/plain`` form whose body is JSON, and
sends the same body with ``fetch(..., {mode: "no-cors"})``: neither needs a CORS
preflight, and both used to cancel their run (the form's body is ``{"reason": "csrf="}``:
a text/plain form sends ``name=value``). Skipped like test_console_browser.py.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port
from tests.test_console_browser import browser_fixture  # noqa: F401 (the browser fixture)
from tests.test_http_serve import serving

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(120)]

ATTACK = """<!doctype html>
<title>cute cats</title>
<form id="csrf" method="POST" enctype="text/plain" action="{api}/v1/runs/victim-1/cancel">
  <input type="hidden" name='{{"reason": "csrf' value='"}}'>
</form>
<script>
  fetch("{api}/v1/runs/victim-2/cancel", {{
    method: "POST", mode: "no-cors", body: '{{"reason": "csrf"}}',
  }}).then(() => {{ document.title = "fetched"; document.getElementById("csrf").submit(); }},
           () => {{ document.title = "fetched"; document.getElementById("csrf").submit(); }});
</script>
"""


@pytest.fixture(name="attacker")
def attacker_fixture(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A web server of another origin (``localhost``, not ``127.0.0.1``): its directory
    and its base URL."""
    site = tmp_path / "site"
    site.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, directory=str(site), **kw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site, f"http://localhost:{port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_of_another_site_cannot_cancel_runs_of_an_insecure_local_server(
    redis_url: str, key_prefix: str, tmp_path: Path, browser: Any, attacker: tuple[Path, str]
) -> None:
    site, origin = attacker
    store = ["--store", redis_url, "--prefix", key_prefix]
    with serving(store, tmp_path, "--insecure-local") as api:
        for run_id in ("victim-1", "victim-2"):  # a client that is not a browser may start them
            started = httpx.post(f"{api}/v1/runs", json={"flow": "tests.http.signalled",
                                                         "run_id": run_id})  # fmt: skip
            assert started.status_code == 201, started.text
        (site / "attack.html").write_text(ATTACK.format(api=api))

        page = browser.new_page()
        page.goto(f"{origin}/attack.html")
        # the form's post navigates the page to the API's answer
        page.wait_for_url(f"{api}/**")
        page.wait_for_load_state()
        answered = page.content()
        runs = {
            run_id: httpx.get(f"{api}/v1/runs/{run_id}").json()
            for run_id in ("victim-1", "victim-2")
        }
        events = httpx.get(f"{api}/v1/runs/victim-1/events").json()["events"]

    assert {k: r["status"] for k, r in runs.items()} == {
        "victim-1": "pending",  # the form's
        "victim-2": "pending",  # fetch's
    }
    assert '"code": "forbidden"' in answered and "from another site" in answered
    assert not [e for e in events if e["type"].startswith("run.cancel")]
    log = "".join(p.read_text() for p in tmp_path.glob("serve-*.log"))
    assert log.count("refused a cross-site request POST /v1/runs/victim-") == 2, log
