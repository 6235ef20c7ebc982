"""Definitions: what `@flow`, `@step`, `@channel` and `@scheduled` record about a
function (`FlowDef`, `StepSpec`, `ChannelDef`, schedule specs), the `Registry`
that holds them, queues and their limits, event matching, and the interceptor
hooks. Imports `sdk._core` and `sdk.store` only."""
