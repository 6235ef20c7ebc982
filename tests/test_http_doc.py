"""docs/http.md: every endpoint is documented, every error code too, and the
mounting snippet runs."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from sdk.http import ErrorCode
from sdk.http._routes import routes
from tests.docsnippets import section_code

PAGE = Path(__file__).resolve().parent.parent / "docs" / "http.md"


def test_every_endpoint_is_in_the_table() -> None:
    text = PAGE.read_text()
    documented = set(re.findall(r"^\| `([A-Z]+ /[^`]*)`", text, re.M))

    assert documented == {f"{r.method} {r.path}" for r in routes()}


def test_every_error_code_is_described() -> None:
    rows = re.findall(r"^\| `([a-z_]+)` \| ([0-9]{3}) \|", PAGE.read_text(), re.M)
    from sdk.http._problems import STATUS

    assert {code: int(status) for code, status in rows} == {
        c.value: STATUS[c][0] for c in ErrorCode
    }


async def test_the_mounting_snippet_serves_the_api_under_its_prefix() -> None:
    space: dict[str, object] = {}
    exec(compile(section_code(PAGE, "Mounting it in your own app"), str(PAGE), "exec"), space)
    app = space["app"]
    headers = {"Authorization": "Bearer s3cret-token-for-ops"}

    async with app.router.lifespan_context(app):  # type: ignore[attr-defined]
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://sf") as http:
            runs = await http.get("/steadyflow/v1/runs", headers=headers)
            anonymous = await http.get("/steadyflow/v1/runs")

    assert runs.json() == {"runs": [], "next_cursor": None}
    assert anonymous.status_code == 401


def test_the_api_reference_lists_every_public_name_of_sdk_http() -> None:
    import sdk.http

    api = (PAGE.parent / "api.md").read_text()
    section = api[api.index("\n## `sdk.http`\n") : api.index("\n## `stores`\n")]

    for name in sdk.http.__all__:
        assert f"`{name}" in section, name
