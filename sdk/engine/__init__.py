"""The Steadyflow runtime: executes a claimed run's flow against its journal
(replay, live steps, waits, cancellation, the end of an activation)."""
