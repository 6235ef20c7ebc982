"""The web console: runs, a run's timeline, and buttons to act on them, under ``/ui/``.

Server-rendered HTML (Jinja2 templates shipped in the package) with one
small script of its own for live updates (Server-Sent Events): no build
step, no external requests. `sdk.http.create_app` mounts it; it reuses the
API's client and authentication, so one bearer token works for both
(docs/console.md).
"""

from sdk.console._routes import console_routes

__all__ = ["console_routes"]
