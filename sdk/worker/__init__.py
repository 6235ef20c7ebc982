"""The worker: claims ready runs and executes them on the engine, keeps their
leases, fires timers and schedules, delivers the outbox. ``python -m sdk.worker``
is its command (`sdk.worker.__main__`)."""
