"""The store conformance kit: the checks every `sdk.store.Store` must pass.

Steadyflow's own stores pass these checks (the project runs them on
``memory://`` and on a real Redis); a store of yours can run the same. Subclass
`StoreConformance` in a test module and give the class a ``store`` fixture that
yields a fresh, empty store; pytest collects the inherited checks::

    import pytest_asyncio

    from testing.conformance import StoreConformance


    class TestMyStore(StoreConformance):
        @pytest_asyncio.fixture
        async def store(self):
            store = MyStore(...)  # empty: nothing of another test may be in it
            yield store
            await store.close()

The checks talk to the store only through the protocol's methods, and read
back what it holds with the protocol's own reads. They are async tests marked
for pytest-asyncio, so they run whatever the project's ``asyncio_mode``; the
fixture must be an async fixture pytest-asyncio runs (`pytest_asyncio.fixture`,
or a plain ``pytest.fixture`` under ``asyncio_mode = "auto"``). A few checks
run flows on the store with the engine's own worker (`FlowTestEnv`).

The checks of damaged data break the store's data by hand, which the protocol
has no call for: they take the fixture ``damage`` (a `Damage`). The kit gives
one for the Redis store (`RedisDamage`); for another store, define the
fixture in your subclass, or those checks skip.

The kit needs the ``test`` extra (pytest-asyncio, freezegun).
"""

from __future__ import annotations

from testing._extra import missing, needs_extra

_absent = missing("pytest_asyncio", "freezegun")
if _absent:  # an ImportError, as for any optional dependency
    raise ImportError(needs_extra("testing.conformance", _absent))

from testing.conformance._audit import AuditChecks  # noqa: E402
from testing.conformance._bounds import BoundChecks  # noqa: E402
from testing.conformance._cancels import CancelRequestChecks  # noqa: E402
from testing.conformance._claims import ClaimChecks  # noqa: E402
from testing.conformance._consume import ConsumeChecks  # noqa: E402
from testing.conformance._continue import ContinueChecks  # noqa: E402
from testing.conformance._damage import Damage, DamageChecks, RedisDamage  # noqa: E402
from testing.conformance._decisions import DecisionChecks  # noqa: E402
from testing.conformance._derive import DeriveChecks  # noqa: E402
from testing.conformance._engine import EngineChecks  # noqa: E402
from testing.conformance._events import EventChecks  # noqa: E402
from testing.conformance._history import HistoryChecks  # noqa: E402
from testing.conformance._ids import RunIdChecks  # noqa: E402
from testing.conformance._journal import JournalChecks  # noqa: E402
from testing.conformance._leases import LeaseChecks  # noqa: E402
from testing.conformance._lifecycle import LifecycleChecks  # noqa: E402
from testing.conformance._outbox import OutboxChecks  # noqa: E402
from testing.conformance._quarantine import QuarantineChecks  # noqa: E402
from testing.conformance._queues import QueueLimitChecks  # noqa: E402
from testing.conformance._retention import RetentionChecks  # noqa: E402
from testing.conformance._runs import RunChecks  # noqa: E402
from testing.conformance._schedules import ScheduleChecks  # noqa: E402
from testing.conformance._sticky import StickyChecks  # noqa: E402
from testing.conformance._timeouts import TimeoutChecks  # noqa: E402
from testing.conformance._waits import WaitChecks  # noqa: E402
from testing.conformance._workers import WorkerChecks  # noqa: E402

__all__ = ["Damage", "RedisDamage", "StoreConformance"]


class StoreConformance(
    RunChecks,
    ClaimChecks,
    LeaseChecks,
    JournalChecks,
    ConsumeChecks,
    WaitChecks,
    DecisionChecks,
    LifecycleChecks,
    RetentionChecks,
    TimeoutChecks,
    DeriveChecks,
    HistoryChecks,
    OutboxChecks,
    QuarantineChecks,
    DamageChecks,
    RunIdChecks,
    EngineChecks,
    WorkerChecks,
    EventChecks,
    ContinueChecks,
    CancelRequestChecks,
    QueueLimitChecks,
    ScheduleChecks,
    StickyChecks,
    AuditChecks,
    BoundChecks,
):
    """Every check of the store protocol, for pytest to collect in a subclass.

    A subclass (named ``Test...``) provides the fixture ``store``: a fresh,
    empty store for each test, closed afterwards.

    Example::

        class TestMyStore(StoreConformance):
            @pytest_asyncio.fixture
            async def store(self):
                async with MyStore.connect(url) as store:
                    yield store
    """
