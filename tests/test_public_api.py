"""The public surface is exactly the documented one (docs/api.md)."""

import inspect

import sdk
import sdk.errors
import stores
import testing

DOCUMENTED_SDK = {
    # the programming model (docs/api.md)
    "flow", "step", "wait_for", "sleep", "sleep_until", "now", "uuid4",
    "current_run", "current_step", "RetryPolicy", "Client", "Worker",
    "RunHandle", "RunRecord", "RunStatus", "Decision",
    # lifecycle operations (docs/lifecycle.md)
    "Checkpoint", "Event",
    # docs/api.md: documented additions
    "Authorizer", "Clock", "ErrorInfo", "Reason", "RunContext", "StepContext", "SystemClock",
    "CheckpointKind", "EventType", "RunOptions", "Versions",
    # docs/outbox.md: the outbox
    "emit", "channel", "Intent", "IntentStatus",
    # docs/api.md "Registries": flow and channel definitions as objects
    "Registry",
    # docs/api.md "Serialization": the converter as an object you pass
    "Serializer",
    # docs/api.md "Client": Client.workers() lists these
    "WorkerInfo",
    # docs/composition.md "Events matched by a key" (issue 9)
    "wait_for_event",
    # docs/composition.md "Continue-as-new" (issue 9)
    "continue_as_new",
    # docs/composition.md "Child flows" (issue 9)
    "start_child", "run_child", "ChildHandle",
    # docs/queues-and-schedules.md "Queues" (issue 10)
    "Queue", "QueueInfo", "RateLimit",
    # docs/queues-and-schedules.md "Schedules" (issue 10)
    "scheduled", "ScheduleInfo",
    # docs/changing-flows.md "Patching" (issue 11)
    "patched", "deprecate_patch",
    # docs/api.md "Run records": RunRecord.waiting_on (issue 28)
    "WaitingOn", "WaitKind",
    # docs/security.md "The role model", "The audit log" (issue 30)
    "Role", "RoleAuthorizer", "AuditEntry",
}  # fmt: skip


def test_sdk_all_is_exactly_the_documented_surface() -> None:
    assert set(sdk.__all__) == DOCUMENTED_SDK
    assert sdk.__all__ == sorted(sdk.__all__)


def test_every_public_name_has_a_docstring() -> None:
    for name in sdk.__all__:
        assert inspect.getdoc(getattr(sdk, name)), name


def test_every_sdk_error_derives_from_the_root() -> None:
    for name in sdk.errors.__all__:
        assert issubclass(getattr(sdk.errors, name), sdk.errors.SteadyflowError), name


def test_stores_and_testing_export_the_contract() -> None:
    assert {"open_store", "RedisStore"} <= set(stores.__all__)
    assert set(testing.__all__) == {
        "CrashPoint", "CrashReport", "FakeClock", "FlowTestEnv", "HistoryEntry", "ReplayPoint",
        "ReplayReport", "StoreConformance", "check_crash_everywhere", "load_exports", "replay",
    }  # fmt: skip


def test_importing_stores_imports_no_sdk_module_but_the_seam() -> None:
    # The engine owns the store seam (sdk.store) and stores implement it: importing
    # the stores loads the seam and the foundation it stands on (sdk._core), never
    # the engine, the client or the worker.
    import ast
    import subprocess
    import sys

    code = (
        "import sys, stores, stores.redis, sdk.store\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sdk'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = ast.literal_eval(done.stdout)
    assert "sdk.store" in loaded, loaded
    assert all(_in_seam(m) for m in loaded), loaded


def _in_seam(module: str) -> bool:
    """The seam (`sdk.store`), the foundation and the error tree under it
    (`sdk._core`, `sdk.errors`), the lazy `sdk`."""
    return module in ("sdk", "sdk.store", "sdk._core", "sdk.errors") or module.startswith(
        ("sdk.store.", "sdk._core.")
    )


def test_no_stores_module_imports_sdk_but_the_seam() -> None:
    import pathlib
    import re

    root = pathlib.Path(stores.__file__).parent
    for path in root.rglob("*.py"):
        imports = re.findall(r"^\s*(?:from|import) (sdk\b[\w.]*)", path.read_text(), re.M)
        beyond = [m for m in imports if not _in_seam(m)]
        assert not beyond, (path.name, beyond)


def test_step_timeout_is_a_public_timeout_error() -> None:
    # pinned by issue 9: sdk.errors.StepTimeout, a TimeoutError
    assert "StepTimeout" in sdk.errors.__all__
    assert issubclass(sdk.errors.StepTimeout, TimeoutError)
    assert sdk.errors.__all__ == sorted(sdk.errors.__all__)


def test_child_failed_is_a_public_run_failed() -> None:
    # pinned by issue 9: sdk.errors.ChildFailed, a RunFailed
    assert "ChildFailed" in sdk.errors.__all__
    assert issubclass(sdk.errors.ChildFailed, sdk.errors.RunFailed)


def test_the_bounds_of_a_run_raise_public_errors() -> None:
    # issue 30: a message too large, a run holding its bound of pending messages
    assert {"PayloadTooLarge", "MailboxFull"} <= set(sdk.errors.__all__)
    assert issubclass(sdk.errors.PayloadTooLarge, sdk.errors.SerializationError)
    too_large = sdk.errors.PayloadTooLarge("too large", 10, 5, "r-1")
    assert (too_large.size, too_large.limit, too_large.run_id) == (10, 5, "r-1")
    full = sdk.errors.MailboxFull("r-1", "messages", 1001, 1000)
    assert (full.run_id, full.bound, full.pending, full.limit) == ("r-1", "messages", 1001, 1000)


def test_schedule_not_found_is_a_public_lookup_error() -> None:
    # docs/queues-and-schedules.md "Schedules": an unknown schedule id
    assert "ScheduleNotFound" in sdk.errors.__all__
    assert issubclass(sdk.errors.ScheduleNotFound, LookupError)
    assert sdk.errors.ScheduleNotFound("nightly").schedule_id == "nightly"
