"""The web console in a real browser: Debian's Chromium driven by Playwright.

A real ``steadyflow serve tests.test_console`` process and real ``steadyflow
worker`` processes on the test's Redis prefix; the browser signs in with the
API's tokens and does what an approver does. The screenshots land in the
directory ``$STEADYFLOW_SCREENSHOTS`` names (``STEADYFLOW_SCREENSHOTS=docs/console``
refreshes the ones docs/console.md shows), else in a temporary directory, so a
test run leaves the checkout as it was.

Skipped only when no Chromium is installed and ``CI`` is unset; under CI a
missing browser fails (.ci/run installs it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import free_port
from tests.crashflows import ROOT, STEADYFLOW
from tests.test_console import ALICE, BOB

playwright_api = pytest.importorskip("playwright.sync_api")

SHOTS = Path(os.environ.get("STEADYFLOW_SCREENSHOTS") or tempfile.mkdtemp(prefix="sf-shots-"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
    pytest.skip("no Chromium installed (apt-get install chromium; CI installs it)",
                allow_module_level=True)  # fmt: skip

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.timeout(180)]


def until(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll `check` until it returns something truthy (what a person would wait for)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Deployment:
    """``steadyflow serve`` plus workers on one Redis prefix; stopped at the end."""

    def __init__(self, redis_url: str, prefix: str, logs: Path) -> None:
        self.options = ["--store", redis_url, "--prefix", prefix]
        self.logs = logs
        self.procs: list[subprocess.Popen[bytes]] = []
        self.base = ""

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("w")
        proc = subprocess.Popen([STEADYFLOW, *args, *self.options], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ, **env})  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def serve(self) -> None:
        port = free_port()
        # alice starts runs and approves; bob approves (the approvers= list refuses him)
        tokens = f"{ALICE}=alice:operator,approver,{BOB}=bob:approver"
        proc = self._spawn("serve", ["serve", "tests.test_console", "--port", str(port)],
                           {"STEADYFLOW_API_TOKENS": tokens})  # fmt: skip
        self.base = f"http://127.0.0.1:{port}"

        def listening() -> bool:
            assert proc.poll() is None, (self.logs / "serve.log").read_text()
            try:
                return httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        until("the server to listen", listening)

    def worker(self, name: str) -> subprocess.Popen[bytes]:
        return self._spawn(name, ["worker", "tests.test_console", "--lease-ttl", "2"], {})

    def api(self, method: str, path: str, token: str = ALICE, **kw: Any) -> Any:
        answer = httpx.request(method, f"{self.base}{path}", timeout=10,
                               headers={"Authorization": f"Bearer {token}"}, **kw)  # fmt: skip
        assert answer.status_code < 300, answer.text
        return answer.json()

    def status(self, run_id: str) -> str:
        return str(self.api("GET", f"/v1/runs/{run_id}")["status"])

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(name="deployment")
def deployment_fixture(redis_url: str, key_prefix: str, tmp_path: Path) -> Iterator[Deployment]:
    deployment = Deployment(redis_url, key_prefix, tmp_path)
    try:
        deployment.serve()
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(name="browser")
def browser_fixture() -> Iterator[Any]:
    assert CHROMIUM is not None, "CI=true but no Chromium installed (.ci/run installs it)"
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def sign_in(page: Any, token: str) -> None:
    """Fill the sign-in form the console sent the browser to."""
    page.wait_for_url("**/ui/signin**")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()


def shot(page: Any, name: str, *, full: bool = True) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=full)


def start_shipment(deployment: Deployment, workdir: Path, run_id: str) -> None:
    deployment.api(
        "POST",
        "/v1/runs",
        json={"flow": "tests.console.shipment", "args": [str(workdir)], "run_id": run_id},
    )


def test_a_denied_approver_is_refused_on_screen_and_audited(
    deployment: Deployment, browser: Any, tmp_path: Path
) -> None:
    deployment.worker("worker")
    start_shipment(deployment, tmp_path, "order-7")
    until("the run to wait for approval",
          lambda: deployment.status("order-7") == "waiting_for_human")  # fmt: skip
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{deployment.base}/ui/runs/order-7")
    sign_in(page, BOB)
    page.wait_for_url("**/ui/runs/order-7")
    wait = page.locator('[data-wait="ship-order"]')
    assert "approve or deny ship-order" in wait.inner_text()
    # by keyboard: from the reason field, past the payload's summary, to Approve
    wait.get_by_label("Reason (optional)").focus()
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Approve"
    page.keyboard.press("Enter")
    refusal = page.get_by_role("alert")
    assert "Approve refused" in refusal.inner_text() and "bob" in refusal.inner_text()
    shot(page, "refused", full=False)
    events = deployment.api("GET", "/v1/runs/order-7/events")["events"]
    denied = [e for e in events if e["type"] == "auth.denied"]
    assert [e["data"]["actor"] for e in denied] == ["bob"]
    assert deployment.status("order-7") == "waiting_for_human"


def test_an_approver_approves_and_watches_the_run_finish_live(
    deployment: Deployment, browser: Any, tmp_path: Path
) -> None:
    (tmp_path / "crash").write_text("1")  # `pack` hangs until its worker is killed
    (tmp_path / "hold").write_text("1")  # `ship` waits for the test's `release` file
    first = deployment.worker("worker-1")
    start_shipment(deployment, tmp_path, "order-42")
    until("pack to start", (tmp_path / "pack.started").exists)
    first.send_signal(signal.SIGKILL)  # a crash mid-step: a later worker recovers the run
    first.wait()
    deployment.worker("worker-2")
    until("the run to wait for approval",
          lambda: deployment.status("order-42") == "waiting_for_human")  # fmt: skip

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{deployment.base}/ui/runs")
    sign_in(page, ALICE)
    page.wait_for_url("**/ui/runs")
    page.locator(".counts").wait_for()
    page.locator('body[data-following="yes"]').wait_for()
    page.evaluate("window.sameDocument = true")
    deployment.api("POST", "/v1/runs", json={"flow": "tests.console.echo", "args": [1],
                                             "run_id": "order-43"})  # fmt: skip
    page.get_by_role("link", name="order-43").wait_for()  # the list follows live
    assert page.evaluate("window.sameDocument") is True
    shot(page, "runs", full=False)
    page.get_by_role("link", name="order-42").click()
    page.wait_for_url("**/ui/runs/order-42")
    timeline = page.locator(".gantt")
    assert timeline.locator('[data-kind="retry"]').count() == 1
    assert "warehouse did not answer" in timeline.inner_text()
    assert "recovery (the worker's lease expired)" in timeline.inner_text()
    wait = page.locator('[data-wait="ship-order"]')
    assert "The authorizer allows you (alice)" in wait.inner_text()  # her approver role
    shot(page, "run-waiting")
    wait.get_by_label("Reason (optional)").fill("stock checked")
    wait.get_by_role("button", name="Approve").click()
    page.wait_for_url("**/ui/runs/order-42?done=approve")
    assert page.get_by_role("status").inner_text() == "Approved."
    assert page.locator("[data-status]").inner_text() != "completed"  # held by `ship`
    page.locator('body[data-following="yes"]').wait_for()
    page.evaluate("window.sameDocument = true")
    (tmp_path / "release").write_text("1")
    page.locator("[data-status]", has_text="completed").wait_for(timeout=30_000)
    assert page.evaluate("window.sameDocument") is True  # updated live, not reloaded
    assert '"by": "alice"' in page.locator("#io-h + h3 + pre ~ pre").inner_text()
    shot(page, "run-completed")

    phone = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark",
                                storage_state=page.context.storage_state())  # fmt: skip
    small = phone.new_page()
    small.goto(f"{deployment.base}/ui/runs/order-42")
    assert small.locator("[data-status]").inner_text() == "completed"
    assert small.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    shot(small, "phone-dark", full=False)
    phone.close()

    # the browser keeps a session id, not the token; signing out ends it for good
    cookie = {c["name"]: c for c in page.context.cookies()}["steadyflow_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert ALICE not in cookie["value"]
    other = browser.new_context(storage_state=page.context.storage_state())  # the cookie, copied
    watching = other.new_page()
    watching.goto(f"{deployment.base}/ui/runs")
    watching.locator('body[data-following="yes"]').wait_for()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/signin")
    deployment.api("POST", "/v1/runs", json={"flow": "tests.console.echo", "args": [2],
                                             "run_id": "order-44"})  # fmt: skip
    watching.wait_for_url("**/ui/signin?next=**")  # its live list ended: sent to sign in
    watching.goto(f"{deployment.base}/ui/runs/order-42")
    watching.wait_for_url("**/ui/signin?next=**")
    other.close()


#: Whether every cell of `selector` shows its text on one line (a name broken
#: mid-word, or a pid wrapped, takes two).
ONE_LINE = """(selector) => [...document.querySelectorAll(selector)].map((cell) => {
  const range = document.createRange();
  range.selectNodeContents(cell);
  const line = parseFloat(getComputedStyle(cell).lineHeight) || 20;
  return [cell.textContent.trim(), range.getBoundingClientRect().height <= line * 1.5];
})"""


def test_names_stay_whole_and_child_runs_sit_under_their_parent(
    deployment: Deployment, browser: Any
) -> None:
    deployment.worker("worker")
    deployment.api("POST", "/v1/runs", json={
        "flow": "tests.console.order_fulfillment", "args": ["o-1", ["apple", "pear"]],
        "run_id": "order-77",
    })  # fmt: skip
    until("the order to wait for approval",
          lambda: deployment.status("order-77") == "waiting_for_human")  # fmt: skip
    page = browser.new_page(viewport={"width": 1024, "height": 800})
    page.goto(f"{deployment.base}/ui/runs")
    sign_in(page, ALICE)
    page.wait_for_url("**/ui/runs")
    row = page.locator("tr", has=page.get_by_role("link", name="order-77"))
    assert "approval manager-approval" in " ".join(row.inner_text().split())
    assert page.locator("tr.child").count() == 0  # its children are on its page
    cells = page.evaluate(ONE_LINE, "table.runs td.name, table.runs td.num")
    assert cells and all(whole for _, whole in cells), cells
    assert ["tests.console.order_fulfillment", True] in cells
    shot(page, "runs-list", full=False)

    page.get_by_role("link", name="order-77").click()
    page.wait_for_url("**/ui/runs/order-77")
    waits = page.locator('[data-wait-kind="human"]')
    assert "manager-approval" in waits.inner_text()
    children = page.locator("section[aria-labelledby=children-h] tbody tr")
    assert children.count() == 2
    assert "~" not in page.locator(".gantt").inner_text().replace("~child:", "")
    shot(page, "run-with-children")

    page.goto(f"{deployment.base}/ui/workers")
    cells = page.evaluate(ONE_LINE, "table.workers td.num, table.workers li")
    assert cells and all(whole for _, whole in cells), cells
    assert "[" not in page.locator("table.workers").inner_text()
    shot(page, "workers", full=False)
