"""The store seam: the protocol a store implements and the typed records that cross
it (see `sdk.store._protocol`). The engine and the client call a `Store`;
`stores` implements it (`stores.redis.RedisStore`) and imports nothing of `sdk`
but this package, `sdk._core` and `sdk.errors`."""

from sdk.store import _protocol
from sdk.store._protocol import *  # noqa: F403  (the seam's names are the protocol module's)

__all__ = _protocol.__all__
