"""The public surface is exactly what DESIGN.md documents (plus docs/api.md's extras)."""

import inspect

import sdk
import sdk.errors
import stores
import testing

DOCUMENTED_SDK = {
    # DESIGN.md "Public contract"
    "flow", "step", "wait_for", "sleep", "sleep_until", "now", "uuid4",
    "current_run", "current_step", "RetryPolicy", "Client", "Worker",
    "RunHandle", "RunRecord", "RunStatus", "Decision",
    # DESIGN.md "Lifecycle operations (contract)"
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
    assert set(testing.__all__) == {"FakeClock", "FlowTestEnv"}
