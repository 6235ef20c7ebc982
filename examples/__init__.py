"""Runnable Steadyflow examples.

- `examples.hello`: three steps, end to end against Redis.
- `examples.checkout`: retries against a flaky payment gateway, human approval
  with a timeout, a durable sleep, and the deny / timeout / cancel paths.
- `examples.agent`: an agent loop whose model turns and tool calls are steps
  discovered at run time (a deterministic fake model, no network).

Each one is served by ``steadyflow worker examples.<name>`` and started with
``python -m examples.<name>``; ``tests/test_examples.py`` tests them all.
"""
