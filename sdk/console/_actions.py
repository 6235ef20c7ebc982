"""The console's form posts: signal, approve, deny, cancel, resume, replay, fork.

Each is one `sdk.Client` call with the signed-in actor, so the client's
`Authorizer` (and a human wait's ``approvers``) decides, and a refusal is
audited (``auth.denied``) as from any other surface. Success answers a
redirect to the run's page (303, so a reload does not post again); a
refusal shows the run's page again with the error, at the error's status.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from sdk._core._limits import MAX_JSON_DEPTH, nested_deeper
from sdk.console._auth import csrf_ok, form_of, ui_of
from sdk.console._run import NOTICES, run_page
from sdk.console._state import Console
from sdk.http._problems import STATUS, problem_of

__all__ = ["ACTIONS", "DESTRUCTIVE", "act"]

ACTIONS = tuple(NOTICES)
#: Actions that change or abandon work: the form must tick its confirmation box.
DESTRUCTIVE = ("cancel", "replay", "fork")


_TOO_DEEP = f"the payload nests more than {MAX_JSON_DEPTH} levels deep"


def _payload(text: str) -> Any:
    """The JSON of a payload editor (empty: no payload)."""
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the payload is not JSON: {exc.msg} at line {exc.lineno}, "
                         f"column {exc.colno}") from None  # fmt: skip
    except RecursionError:  # deeper than the stack holds
        raise ValueError(_TOO_DEEP) from None
    if nested_deeper(value, MAX_JSON_DEPTH):  # before anything recursive sees it
        raise ValueError(_TOO_DEEP)
    return value


def _text(form: Any, name: str) -> str | None:
    value = str(form.get(name, "")).strip()
    return value or None


async def _do(console: Console, actor: str, action: str, run_id: str, form: Any) -> str:
    """Perform `action`; the id of the run to show next."""
    client = console.client
    if action == "signal":
        name = _text(form, "name") or ""
        await client.signal(run_id, name, _payload(str(form.get("payload", ""))),
                            dedup_id=_text(form, "dedup_id"), actor=actor)  # fmt: skip
    elif action in ("approve", "deny"):
        decide = client.approve if action == "approve" else client.deny
        await decide(run_id, _text(form, "name") or "", actor=actor, reason=_text(form, "reason"),
                     payload=_payload(str(form.get("payload", ""))))  # fmt: skip
    elif action == "cancel":
        await client.cancel(run_id, reason=_text(form, "reason") or "", actor=actor)
    elif action == "resume":
        await client.resume(run_id, actor=actor)
    elif action == "replay":
        handle = await client.replay(run_id, checkpoint_id=_text(form, "checkpoint_id"),
                                     actor=actor)  # fmt: skip
        return handle.run_id
    else:
        handle = await client.fork(run_id, checkpoint_id=_text(form, "checkpoint_id"), actor=actor)
        return handle.run_id
    return run_id


async def act(request: Request, console: Console, actor: str) -> Response:
    """``POST /ui/runs/{run_id}/{action}``."""
    run_id, action = request.path_params["run_id"], request.path_params["action"]
    form = await form_of(request, console.settings)
    if not csrf_ok(request, console.csrf_key, actor, str(form.get("csrf", ""))):
        return await run_page(request, console, actor, status=403, run_id=run_id,
                              error="This form is stale or not the console's own: reload "
                              "the page and try again.")  # fmt: skip
    if action in DESTRUCTIVE and form.get("confirm") != "yes":
        return await run_page(
            request,
            console,
            actor,
            status=422,
            run_id=run_id,
            error=f"{action.capitalize()} needs its confirmation box ticked.",
        )
    try:
        shown = await _do(console, actor, action, run_id, form)
    except ValueError as exc:
        return await run_page(request, console, actor, status=422, run_id=run_id, error=str(exc))
    except Exception as exc:  # mapped as the API maps it (a bug: logged, not shown)
        problem = problem_of(exc, run_id, unavailable=console.client.store.is_unavailable(exc))
        said = f"{action.capitalize()} refused: {problem.detail}"
        return await run_page(request, console, actor, status=STATUS[problem.code][0],
                              run_id=run_id, error=said)  # fmt: skip
    ui = ui_of(request)
    return RedirectResponse(f"{ui}/runs/{quote(shown)}?done={action}", status_code=303)
