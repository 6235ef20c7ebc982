"""What only the Redis store promises: its key layout, indexes and round trips.

The store protocol itself is checked by the conformance kit
(`testing.conformance`, run by ``tests/test_store_conformance.py``). These
tests read the Redis store's raw keys (built with `stores._keys.Keys`) to check
what its scripts must (not) have written, count its round trips on the wire,
and pin its encodings; like the kit, they run on fakeredis (``memory://``)
and on real Redis, so the two stay in agreement.
"""
