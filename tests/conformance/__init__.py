"""The store conformance suite: every store passes it, on fakeredis and on real Redis.

The tests drive the store protocol (`stores._protocol.Store`) directly, through
its public methods; raw keys (built with `stores._keys.Keys`) are read only to
check what a method must (not) have written.
"""
