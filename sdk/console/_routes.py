"""The console's route table, mounted by `create_app` under ``/ui``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from sdk.console._actions import ACTIONS, act
from sdk.console._auth import ui_of
from sdk.console._live import run_live, runs_live
from sdk.console._pages import (
    queues,
    runs,
    schedules,
    signin,
    signin_form,
    signout,
    status_counts,
    workers,
)
from sdk.console._run import run_page
from sdk.console._state import Console, guarded, refused
from sdk.http._problems import ApiError
from sdk.http._routing import Settings

__all__ = ["console_routes"]

STATIC = Path(__file__).parent / "static"


def console_routes(settings: Settings) -> list[BaseRoute]:
    """The web console's routes (one `Mount` at ``/ui``) over the API's `settings`:
    the same client, and the same authentication (one token works for both).

    Example::

        app = Starlette(routes=[*api_routes, *console_routes(settings)])
    """
    console = Console(settings)

    async def home(request: Request) -> Response:
        return RedirectResponse(ui_of(request) + "/runs", status_code=307)

    async def form(request: Request) -> Response:
        return await signin_form(request, console)

    async def sign_in(request: Request) -> Response:
        try:
            return await signin(request, console)
        except ApiError as exc:  # a form over max_body, before anyone is signed in
            return refused(exc)

    # Nothing but runs under /runs/, so any run id has a page; a run id may hold "/":
    # the routes that end at the run id come last (as in the API).
    routes: list[BaseRoute] = [
        Route("/", home, methods=["GET"]),
        Route("/signin", form, methods=["GET"]),
        Route("/signin", sign_in, methods=["POST"]),
        Route("/signout", guarded(console, signout), methods=["POST"]),
        Route("/runs", guarded(console, runs), methods=["GET"]),
        Route("/counts", guarded(console, status_counts), methods=["GET"]),
        Route("/live", guarded(console, runs_live), methods=["GET"]),
        Route("/queues", guarded(console, queues), methods=["GET"]),
        Route("/schedules", guarded(console, schedules), methods=["GET"]),
        Route("/workers", guarded(console, workers), methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC), name="console-static"),
        Route("/runs/{run_id:path}/live", guarded(console, run_live), methods=["GET"]),
        *(
            Route(f"/runs/{{run_id:path}}/{action}", _bound(console, action), methods=["POST"])
            for action in ACTIONS
        ),
        Route("/runs/{run_id:path}", guarded(console, run_page), methods=["GET"]),
    ]
    return [Mount("/ui", routes=routes)]


def _bound(console: Console, action: str) -> Callable[[Request], Awaitable[Response]]:
    """The guarded endpoint of one action (its name is in the path, not a parameter)."""

    async def one(request: Request, console: Console, actor: str) -> Response:
        request.path_params["action"] = action
        return await act(request, console, actor)

    one.__name__ = f"console_{action}"
    return guarded(console, one)
