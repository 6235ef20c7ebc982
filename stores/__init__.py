"""Storage for Steadyflow: one protocol, Redis as the canonical store.

from stores import open_store
store = open_store("redis://localhost:6379/0")   # or rediss://, or memory://
store = open_store()   # $STEADYFLOW_STORE and $STEADYFLOW_PREFIX, else the defaults below
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from stores.protocol import Store
from stores.redis import RedisStore

__all__ = ["RedisStore", "Store", "open_store"]

# The environment a deployment's processes share, so that a client and a worker
# agree on where runs live without code (docs/operations.md#configuration).
# Read by open_store() only: RedisStore and RedisStore.from_url take explicit values.
STORE_VARIABLE = "STEADYFLOW_STORE"
PREFIX_VARIABLE = "STEADYFLOW_PREFIX"
DEFAULT_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PREFIX = "sf"


def open_store(
    url: str | None = None,
    *,
    prefix: str | None = None,
    partitions: int = 1,
    **kwargs: Any,
) -> RedisStore:
    """Open a store from a URL.

    - ``redis://[user:password@]host:port/db`` — Redis;
    - ``rediss://...`` — Redis over TLS (ACL user and password from the URL);
    - ``memory://`` — the same Redis store on an in-process fakeredis server,
      new and empty at each call (for tests and experiments; needs the
      ``test`` extra).

    Args:
        url: the store; default ``$STEADYFLOW_STORE``, else
            ``redis://127.0.0.1:6379/0``.
        prefix: first part of every key; default ``$STEADYFLOW_PREFIX``, else ``sf``.
        partitions: hash-tag partitions, the same in every process of a deployment.
        kwargs: options of the store and of redis-py's connection pool
            (see `RedisStore.from_url`).

    An empty variable counts as unset. Call it inside the event loop that will
    use the store.

    Example::

        store = open_store()  # what the worker started with no --store/--prefix uses
    """
    url = url or os.environ.get(STORE_VARIABLE) or DEFAULT_URL
    prefix = prefix or os.environ.get(PREFIX_VARIABLE) or DEFAULT_PREFIX
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        try:
            import fakeredis  # a test dependency: only memory:// needs it
        except ImportError as e:  # ImportError, as for any optional dependency (httpx does so)
            raise ImportError(
                "memory:// stores need fakeredis, from the test extra: "
                "pip install 'steadyflow[test]'"
            ) from e

        # Only the store's own options apply: there is no connection to tune.
        unknown = set(kwargs) - {"max_events_per_run"}
        if unknown:
            raise TypeError(f"memory:// takes no connection options, got {sorted(unknown)}")
        from stores._redispy import READ_ERRORS

        client = fakeredis.FakeAsyncRedis(
            server=fakeredis.FakeServer(), decode_responses=True, encoding_errors=READ_ERRORS
        )
        store = RedisStore(client, prefix=prefix, partitions=partitions, **kwargs)
        store._label = "memory://"
        return store
    if scheme in ("redis", "rediss", "unix"):
        return RedisStore.from_url(url, prefix=prefix, partitions=partitions, **kwargs)
    raise ValueError(f"unsupported store URL {url!r}: use redis://, rediss:// or memory://")
