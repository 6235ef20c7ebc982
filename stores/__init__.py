"""Storage for Steadyflow: one protocol, Redis as the canonical store.

from stores import open_store
store = open_store("redis://localhost:6379/0")   # or rediss://, or memory://
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from stores._protocol import Store
from stores.redis import RedisStore

__all__ = ["RedisStore", "Store", "open_store"]


def open_store(url: str, *, prefix: str = "sf", partitions: int = 1, **kwargs: Any) -> RedisStore:
    """Open a store from a URL.

    - ``redis://[user:password@]host:port/db`` — Redis;
    - ``rediss://...`` — Redis over TLS (ACL user and password from the URL);
    - ``memory://`` — the same Redis store on an in-process fakeredis server,
      new and empty at each call (for tests and experiments).

    Call it inside the event loop that will use the store.
    """
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        import fakeredis  # a test dependency: only memory:// needs it

        # Only the store's own options apply: there is no connection to tune.
        unknown = set(kwargs) - {"max_events_per_run"}
        if unknown:
            raise TypeError(f"memory:// takes no connection options, got {sorted(unknown)}")
        client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
        store = RedisStore(client, prefix=prefix, partitions=partitions, **kwargs)
        store._label = "memory://"
        return store
    if scheme in ("redis", "rediss", "unix"):
        return RedisStore.from_url(url, prefix=prefix, partitions=partitions, **kwargs)
    raise ValueError(f"unsupported store URL {url!r}: use redis://, rediss:// or memory://")
