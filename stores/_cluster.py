"""Redis Cluster: ``redis+cluster://`` URLs and the clients a store gets for them.

``redis+cluster://[user:password@]host:port[,host:port...]`` names one or more
nodes of a cluster (any reachable one is enough: the client discovers the
others and the slot map from it); ``rediss+cluster://`` speaks TLS. A cluster
has no databases: the path, if any, must be ``/`` or ``/0``.

The store gets two of redis-py's asyncio cluster clients, as on one node: one
for store operations, one for blocking reads (their connections wait for
seconds). Each connects before its first command (`EagerCluster`).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from stores._redispy import READ_ERRORS, follow_asks

__all__ = ["CLUSTER_SCHEMES", "DEFAULT_PARTITIONS", "EagerCluster", "cluster_clients", "nodes"]

#: The URL schemes of a Redis Cluster (TLS for ``rediss+cluster``).
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")

#: Partitions of a cluster store unless told otherwise: enough for up to 16
#: masters to share the work (a partition is one slot, so one master at a time),
#: as evenly as 16 divides (3 masters: 6/5/5), for a poll of 16 scripts, sent
#: concurrently. The count is fixed for a deployment's life (changing it hides
#: existing runs): choose it for the largest cluster you expect.
DEFAULT_PARTITIONS = 16

#: Connections per node for store operations unless ``max_connections`` says
#: otherwise. redis-py's cluster client fails a command beyond it (it does not
#: wait, as the single-node pool does).
_PER_NODE = 1024


class EagerCluster(RedisCluster):
    """redis-py's cluster client, connected before its first command.

    Left to itself the client connects on first use, and of many commands
    issued together on a fresh client (a worker's first wake-up reads, 64
    concurrent ``BLPOP``) most fail: each picks its node before the slot map
    is known. `initialize` is redis-py's public call for that, a no-op once done.
    """

    async def initialize(self, *args: Any, **kwargs: Any) -> RedisCluster:
        """redis-py's, except that a cluster none of whose nodes could be reached
        raises what reaching the last one raised, as a single node's store does:
        redis-py's `ConnectionError` (`AuthenticationError` for a refused
        password) or `TimeoutError`, with redis-py's message. redis-py raises
        ``RedisClusterException``, which no caller takes for the store being
        unavailable (the CLI printed a traceback instead of exiting with 6).
        Any other refusal (not a cluster, slots not covered) is raised as it is."""
        try:
            return await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, (RedisConnectionError, RedisTimeoutError)):
                raise type(cause)(str(exc)) from exc
            if isinstance(cause, OSError):
                raise RedisConnectionError(str(exc)) from exc
            raise

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        await self.initialize()
        follow_asks(self)  # reads redirected by ASK keep their ASKING (stores._redispy)
        return await super().execute_command(*args, **kwargs)


def nodes(url: str) -> tuple[list[tuple[str, int]], str | None, str | None]:
    """The nodes (host, port), user and password a cluster URL names."""
    parts = urlsplit(url)
    if parts.scheme not in CLUSTER_SCHEMES:
        raise ValueError(f"not a Redis Cluster URL: {url!r} (use redis+cluster://host:port,...)")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    found = [_node(part, parts) for part in hosts.split(",")]
    if parts.path not in ("", "/", "/0"):
        raise ValueError(
            f"a Redis Cluster has no databases: remove {parts.path!r} from {_shown(parts)!r}"
        )
    if parts.query:
        raise ValueError(
            f"unknown options {parts.query!r} in {_shown(parts)!r}: pass them as keyword arguments"
        )
    return found, unquote(user) or None, unquote(password) if password else None


def _node(text: str, parts: SplitResult) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or host.endswith(":"):  # no port, or an IPv6 address without brackets
        host, port = text, "6379"
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad node {text!r} in {_shown(parts)!r}: expected host:port")
    return unquote(host), int(port)


def _shown(parts: SplitResult) -> str:
    """The URL without its password, for error messages."""
    userinfo, at, hosts = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}:***@{hosts}" if at else hosts).geturl()


def cluster_clients(url: str, **kwargs: Any) -> tuple[EagerCluster, EagerCluster]:
    """The store's client and its blocking-read client for a cluster URL.

    ``max_connections`` bounds each node's connections for store operations
    (default 1,024). ``socket_timeout`` applies to commands (default none);
    blocking reads get at least 30 s. Other keyword arguments go to redis-py's
    ``RedisCluster`` (``ssl_ca_certs=...``, ``retry=...``).
    """
    found, user, password = nodes(url)
    # redis-py closes every connection of the client at every 5th MOVED answer
    # (its default reinitialize_steps): commands in flight on them then fail
    # (seen as AttributeError: 'NoneType' object has no attribute 'writelines'
    # while a slot moved). With 0 it patches the moved slot only; a lost node
    # or connection still re-reads the whole slot map.
    kwargs.setdefault("reinitialize_steps", 0)
    kwargs.setdefault("health_check_interval", 30)
    kwargs.setdefault("socket_connect_timeout", 5.0)
    kwargs.setdefault("encoding_errors", READ_ERRORS)
    command_timeout = kwargs.pop("socket_timeout", None)
    per_node = kwargs.pop("max_connections", None)
    common: dict[str, Any] = {
        "username": user,
        "password": password,
        "ssl": urlsplit(url).scheme == "rediss+cluster",
        "decode_responses": True,
        **kwargs,
    }

    def client(max_connections: int, timeout: float | None) -> EagerCluster:
        return EagerCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in found],
            max_connections=max_connections,
            socket_timeout=timeout,
            **common,
        )

    return (
        client(_PER_NODE if per_node is None else per_node, command_timeout),
        client(100_000, max(command_timeout or 0.0, 30.0)),
    )
