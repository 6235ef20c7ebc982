"""What flow code calls: `step`, `wait_for`, `sleep`, `start_child`, `patched`,
`emit`, `current_run`... Each asks the current `Runtime` (a context variable
set by whatever executes the flow: the Steadyflow engine, or another runner),
so flow code does not depend on how it is executed."""
