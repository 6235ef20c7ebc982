"""The redis-py clients a store opens on a ``redis://``, ``rediss://`` or
``unix://`` URL (Redis Cluster's are made in `stores._cluster`), and the URL as
a store shows it (without its password)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from stores._redispy import READ_ERRORS

__all__ = ["redact", "redis_clients"]


def redis_clients(url: str, **kwargs: Any) -> tuple[aioredis.Redis, aioredis.Redis]:
    """The store's client and its blocking-read client for `url` (see
    `stores.redis.RedisStore.from_url` for `kwargs`)."""
    kwargs.setdefault("health_check_interval", 30)
    kwargs.setdefault("socket_connect_timeout", 5.0)
    if urlsplit(url).scheme != "unix":  # unix-socket connections refuse the option (TypeError)
        kwargs.setdefault("socket_keepalive", True)
    # No read timeout on commands by default: any socket timeout makes
    # redis-py wrap every read in asyncio.wait_for (~14 µs a step write).
    # Blocking reads (BLPOP, BRPOPLPUSH, the feed's Pub/Sub) wait up to 5 s:
    # their pool gets 30 s.
    command_timeout = kwargs.pop("socket_timeout", None)
    # Unlike redis.Redis(), Redis.from_url() retries nothing: after a Redis
    # restart every pooled connection would fail its next command once
    # ("Connection closed by server"). Retry connection errors a few times.
    # A retry can re-run a script whose reply was lost, so every script is
    # safe to run twice: consume answers from the journal, signals carry a
    # dedup id (the client makes one), fenced writes refuse a second run.
    kwargs.setdefault("retry", Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), 3))
    # Commands wait for a free connection instead of failing when more
    # activations than `max_connections` write at once. Half the pool is
    # for script calls (the store keeps those checked out), half for the rest.
    # Replies are decoded leniently: see stores._redispy (READ_ERRORS).
    kwargs.setdefault("encoding_errors", READ_ERRORS)
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=2 * kwargs.pop("max_connections", 64),
        timeout=None,
        decode_responses=True,
        socket_timeout=command_timeout,
        **kwargs,
    )
    client = aioredis.Redis.from_pool(pool)  # owns the pool: aclose() closes it
    # Blocking reads (worker wake-ups, result waiters) each hold a connection
    # for seconds: they get a pool of their own so they never starve writes.
    blocking = aioredis.Redis.from_url(
        url,
        decode_responses=True,
        max_connections=100_000,
        socket_timeout=max(command_timeout or 0.0, 30.0),
        **kwargs,
    )
    return client, blocking


def redact(url: str) -> str:
    """`url` with its password, if any, shown as ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()
