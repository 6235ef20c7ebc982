"""The store protocol, under the name it had before the engine owned it.

The seam lives in `sdk.store` now; this module re-exports it unchanged, for
stores and tests written against ``stores.protocol``."""

from sdk.store import *  # noqa: F403
from sdk.store import __all__ as __all__
