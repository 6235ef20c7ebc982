"""Every Redis key name Steadyflow uses, built in this one module.

All keys of a run and the per-partition indexes it sits in (ready queues,
timers, leases, wake-up lists) share one hash tag, the tag of the run's
partition (a stable hash of the run id modulo the partition count). So each
atomic operation is one Lua script on one cluster slot. Scripts get the
partition's base (``<prefix>:{<tag>}:``) and append the same suffixes as the
`SUFFIX` table below (the Lua prelude is generated from it).

Tags (`partition_tags`): with one partition, ``p0``. With N > 1, partition i's
tag is the first of ``p<i>``, ``p<i>.1``, ``p<i>.2``... whose cluster slot
(CRC16 of the tag, modulo 16384) lies near the middle of the i-th of N equal
slot ranges. ``redis-cli --cluster create`` gives each of M masters one
contiguous, equal range of slots, so the N partitions spread over any number
of masters as evenly as whole partitions can (3 masters, 8 partitions: 3/3/2;
never a master without one while N >= M). Plain ``p<i>`` tags would not (CRC16
clusters them: 2/2/4 on 3 masters, two of 6 masters get none).
"""

from __future__ import annotations

import binascii
import functools
import re
import zlib

__all__ = [
    "MAX_PARTITIONS", "RUN_SUFFIXES", "SHARED_SUFFIXES", "SHARED_TYPES", "SLOTS", "SUFFIX", "Keys",
    "partition_tags", "slot",
]  # fmt: skip

#: Redis Cluster's hash slots.
SLOTS = 16384
#: The most partitions a deployment may have (each worker polls every one;
#: finding even tags for more would take seconds).
MAX_PARTITIONS = 1024

#: The suffix of an archived generation's id (see `Keys.partition`).
_ARCHIVED = re.compile(r"~g[0-9]+$")

#: Key suffixes after the partition base. Lua gets the same table.
SUFFIX = {
    "run": "run:",  # HASH  run record fields (+ run id)
    "journal": "j:",  # HASH  step key -> record JSON (+ run id)
    "mailbox": "mb:",  # LIST  signal payloads (+ len(run id) + ":" + run id + ":" + mailbox)
    "mailboxes": "mbn:",  # SET   mailbox names that exist (+ run id)
    "dedup": "dd:",  # SET   dedup ids seen (+ run id)
    "waits": "w:",  # SET   mailboxes a waiting run waits on (+ run id)
    "approvers": "ap:",  # HASH  human mailbox -> who may decide, one per line (+ run id)
    "evwatch": "evw:",  # HASH  step key -> event mailbox its wait_for_event listens on (+ run id)
    "events": "ev:",  # STREAM the run's event log, capped (+ run id)
    "trail": "au:",  # STREAM audit events trimmed out of the log, never trimmed (+ run id)
    "checkpoints": "cp:",  # STREAM the run's checkpoints (+ run id)
    "lineage": "ln:",  # HASH  step key -> reusable record of the source runs (+ run id)
    "jseq": "js:",  # HASH  step key -> journal write sequence of its record (+ run id)
    "feed": "feed",  # CHANNEL every run's events, published live (Pub/Sub, nothing stored)
    "done": "done:",  # LIST  the final status once finished, for waiters (+ run id)
    "gone": "gone:",  # HASH  a run deleted on success, for result() until its grace ends (+ run id)
    "queue": "q:",  # ZSET  ready runs, score = priority * 2^40 + seq (+ queue)
    "wake": "wake:",  # LIST  wake-up tokens (+ queue, or "*" for any queue)
    "swake": "swake:",  # LIST  wake-up tokens of the runs one worker keeps in memory (+ owner)
    "bell": "bell:",  # LIST  the token that ends one blocking wait at its due time (+ wait id)
    "status": "idx:",  # ZSET  runs by created_at, per status (+ status)
    "queues": "queues",  # SET   queue names seen
    "seq": "seq",  # STRING FIFO counter
    "timers": "timers",  # ZSET  run id -> earliest deadline
    "leases": "leases",  # ZSET  run id -> lease expiry
    "runs": "runs",  # ZSET  every run id -> created_at
    "expiry": "expiry",  # ZSET  run id -> when its data is deleted (retention, tombstones)
    "deadlines": "deadlines",  # ZSET  run id -> when it times out (@flow(timeout=), from its start)
    "cancels": "cancels",  # ZSET  run id -> when its cancel request's grace ends (then forced)
    "repair": "repair",  # HASH  the repair pass's cursor: status, run id, score, next pass due
    # The outbox. An intent outlives its run until it is delivered: its hash is
    # not a per-run key (deleting a run drops its settled intents only).
    "intents": "obr:",  # SET   the run's outbox intent ids (+ run id)
    "intent": "ob:",  # HASH  one intent: body JSON, run, channel, status, counts (+ intent id)
    "outbox": "obq:",  # ZSET  pending intent id -> due time or lease expiry (+ channel)
    "outbox_wake": "obw:",  # LIST  wake-up tokens for dispatchers (+ channel)
    "intent_seq": "obseq",  # STRING intent id counter
    # Events matched by key (wait_for_event / send_event), per partition.
    "evindex": "evi:",  # SET   run ids listening for one event name and filter (+ index token)
    "evshapes": "evs:",  # SET   the filters' field-name lists seen for an event (+ event name)
    # Child flows: in the child's partition, the children of one parent.
    "children": "kids:",  # ZSET  child run id -> created_at (+ parent run id)
    # Queue limits (`sdk.Queue`), per partition: what a claim counts against them.
    "qslots": "qx:",  # ZSET  the queue's executing runs (claimed, not parked) -> claimed at (+ q)
    "qkeyed": "qk:",  # ZSET  the same, of one concurrency key (+ len(queue):queue:key)
    "qrate": "qr:",  # HASH  the queue's rate limit: tat, GCRA theoretical arrival time (+ queue)
    # Workers of the deployment (kept in partition 0), from their heartbeats.
    "workers": "workers",  # ZSET  worker id -> when its registration expires
    "worker": "worker",  # HASH  worker id -> its last heartbeat, JSON
    # Schedules (kept in partition 0; see stores._schedules).
    "schedule": "sch:",  # HASH  one schedule: spec, next tick, last run, counters (+ schedule id)
    "schedules": "schedules",  # ZSET  every schedule id -> created_at
    "sched_due": "schq:",  # ZSET  schedule id -> when it next needs a worker (+ flow name)
    # The deployment's audit logs (stores._audit), per partition, capped, outliving runs.
    "audit": "audit",  # STREAM changes: run deletions (in the run's partition), schedule ops (0)
    "denied": "denied",  # STREAM refusals of calls that have no run log (a start, a schedule op)
}

#: The suffixes of the keys that belong to one run (base + suffix + run id):
#: deleting a run deletes all of them, plus its mailboxes (named in "mailboxes").
#: Every SUFFIX entry is either here, "mailbox", or in SHARED_SUFFIXES.
RUN_SUFFIXES = (
    "run", "journal", "mailboxes", "dedup", "waits", "approvers", "events", "trail",
    "checkpoints", "lineage", "jseq", "done", "gone", "intents", "evwatch",
)  # fmt: skip

#: The suffixes of the keys a partition's runs share (indexes, queues, feed, outbox).
SHARED_SUFFIXES = (
    "feed", "queue", "wake", "swake", "bell", "status", "queues", "seq", "timers", "leases", "runs",
    "expiry", "deadlines", "cancels", "repair", "intent", "outbox", "outbox_wake", "intent_seq",
    "schedule", "schedules", "sched_due", "audit", "denied",
    "workers", "worker", "evindex", "evshapes", "children", "qslots", "qkeyed", "qrate",
)  # fmt: skip


#: The type of each key a partition's runs share under a fixed name (besides the
#: per-status indexes, and the queues and wake-up lists named by the list of
#: queues): a script that Redis stopped with WRONGTYPE is blamed on the first of
#: them that holds another (`StoreCore.shared_damage`).
SHARED_TYPES = {
    "queues": "set", "seq": "string", "timers": "zset", "leases": "zset", "runs": "zset",
    "expiry": "zset", "deadlines": "zset", "cancels": "zset", "repair": "hash",
    "intent_seq": "string", "schedules": "zset", "audit": "stream", "denied": "stream",
    "workers": "zset", "worker": "hash",
}  # fmt: skip


def slot(tag: str) -> int:
    """The Redis Cluster slot of keys with hash tag `tag` (CRC16/XMODEM, as Redis)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


@functools.lru_cache(maxsize=16)
def partition_tags(partitions: int) -> tuple[str, ...]:
    """The hash tag of each of `partitions` partitions (see the module docstring).

    Deterministic: every process of a deployment derives the same tags. A
    partition's slot is within a quarter of its range's width of the range's
    middle, so it lands on the master that owns most of the range. (About
    2 x partitions² CRCs: 0.5 s for 1,024 partitions, once per process.)
    """
    if partitions == 1:
        return ("p0",)
    tags = []
    width = SLOTS / partitions
    reach = int(width / 4)
    for i in range(partitions):
        middle = int(width * (i + 0.5))
        head = b"p%d" % i
        crc = binascii.crc_hqx(head, 0)  # CRC16 of head + suffix continues from it
        n, at = 0, crc % SLOTS
        while abs(at - middle) > reach:
            n += 1
            at = binascii.crc_hqx(b".%d" % n, crc) % SLOTS
        tags.append(f"p{i}.{n}" if n else f"p{i}")
    return tuple(tags)


class Keys:
    """Key names for one deployment (prefix + partition count)."""

    __slots__ = ("_bases", "partitions", "prefix")

    def __init__(self, prefix: str = "sf", partitions: int = 1) -> None:
        if not prefix or any(c in prefix for c in "{}"):
            raise ValueError(f"invalid key prefix {prefix!r}: must be non-empty, without braces")
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"partitions must be 1 to {MAX_PARTITIONS}, got {partitions}")
        self.prefix = prefix
        self.partitions = partitions
        self._bases = tuple(f"{prefix}:{{{tag}}}:" for tag in partition_tags(partitions))

    def partition(self, run_id: str) -> int:
        """The run's partition: a stable hash of its id. An archived generation
        (``"<run id>~g<n>"``, a suffix no user id may have) lives with its run,
        where the script that archived it wrote it."""
        if self.partitions == 1:
            return 0
        archived = _ARCHIVED.search(run_id)
        if archived is not None:
            run_id = run_id[: archived.start()]
        return zlib.crc32(run_id.encode()) % self.partitions

    def in_partition(self, run_id: str, partition: int) -> str:
        """`run_id`, or the first of ``run_id + "~p1"``, ``"~p2"``... that lives in
        `partition`: a deterministic id for a run that one script must write
        with keys of that partition (a schedule's tick run)."""
        candidate, n = run_id, 0
        while self.partition(candidate) != partition:
            n += 1
            candidate = f"{run_id}~p{n}"
        return candidate

    def base(self, partition: int) -> str:
        return self._bases[partition]

    def base_of(self, run_id: str) -> str:
        return self.base(self.partition(run_id))

    def run(self, run_id: str) -> str:
        return self.base_of(run_id) + SUFFIX["run"] + run_id

    def journal(self, run_id: str) -> str:
        return self.base_of(run_id) + SUFFIX["journal"] + run_id

    def events(self, run_id: str) -> str:
        return self.base_of(run_id) + SUFFIX["events"] + run_id

    def trail(self, run_id: str) -> str:
        return self.base_of(run_id) + SUFFIX["trail"] + run_id

    def checkpoints(self, run_id: str) -> str:
        return self.base_of(run_id) + SUFFIX["checkpoints"] + run_id

    def feed(self, partition: int) -> str:
        return self.base(partition) + SUFFIX["feed"]

    def done(self, run_id: str) -> str:
        return self.base_of(run_id) + SUFFIX["done"] + run_id

    def gone(self, run_id: str) -> str:
        return self.base_of(run_id) + SUFFIX["gone"] + run_id

    def expiry(self, partition: int) -> str:
        return self.base(partition) + SUFFIX["expiry"]

    def wake(self, partition: int, queue: str | None) -> str:
        return self.base(partition) + SUFFIX["wake"] + (queue or "*")

    def swake(self, partition: int, owner: str) -> str:
        return self.base(partition) + SUFFIX["swake"] + owner

    def bell(self, wait: str) -> str:
        """The list one blocking wait also watches, so that the store ends it at its
        due time (`StoreCore.blpop_until`). Partition 0: it lives for a moment."""
        return self.base(0) + SUFFIX["bell"] + wait

    def status_index(self, partition: int, status: str) -> str:
        return self.base(partition) + SUFFIX["status"] + status

    def all_runs(self, partition: int) -> str:
        return self.base(partition) + SUFFIX["runs"]

    def intents(self, run_id: str) -> str:
        return self.base_of(run_id) + SUFFIX["intents"] + run_id

    def intent(self, partition: int, intent_id: str) -> str:
        return self.base(partition) + SUFFIX["intent"] + intent_id

    def outbox_wake(self, partition: int, channel: str) -> str:
        return self.base(partition) + SUFFIX["outbox_wake"] + channel

    def event_index(self, partition: int, token: str) -> str:
        return self.base(partition) + SUFFIX["evindex"] + token

    def event_shapes(self, partition: int, event: str) -> str:
        return self.base(partition) + SUFFIX["evshapes"] + event

    def children(self, partition: int, parent_run_id: str) -> str:
        return self.base(partition) + SUFFIX["children"] + parent_run_id

    def workers(self) -> str:
        return self.base(0) + SUFFIX["workers"]

    def worker(self) -> str:
        return self.base(0) + SUFFIX["worker"]

    def layout(self) -> str:
        """The partition count the deployment was first used with (`StoreCore`
        checks it). Tag ``p0`` whatever the count: every process finds it, one
        that was given another count too; with one partition it is that
        partition's tag."""
        return f"{self.prefix}:{{p0}}:layout"

    def pattern(self) -> str:
        """A SCAN pattern matching every key of this deployment."""
        return f"{self.prefix}:{{p*}}:*"
