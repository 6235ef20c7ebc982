"""The client: starts, reads and steers runs through the store (`sdk.Client`),
and what the operator surfaces (CLI, HTTP API, console) read through it."""
