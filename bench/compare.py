"""Before and after: `bench.all`'s figures of two engines, measured in one run.

The engine at ``--a REF`` (a commit, checked out into a temporary git worktree)
and this working tree (or ``--b REF``) each run their own ``python -m bench.all``
(their own benchmark code, which follows their own API), taking turns round
by round so that machine noise falls on both alike. Printed: the median and
range of each figure per engine over the rounds, and B/A of the medians.
Figures, never pass/fail.

    python -m bench.compare --a 0087699 [--b REF] [--rounds 3] [--store URL]
        [--skip events_overhead,redis_parser] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from bench._common import emit, table
from bench.events_overhead import REPO, _git, worktree

__all__ = ["main"]

#: How each figure reads: higher is better, or lower.
_HIGHER_IS_BETTER = {"throughput_steps_per_s"}


def _run_all(tree: str, store: str, skip: str) -> dict[str, Any]:
    """One ``python -m bench.all --json`` in `tree`: its `measured` figures."""
    env = {**os.environ, "PYTHONPATH": tree}
    done = subprocess.run(
        [sys.executable, "-m", "bench.all", "--json", "--store", store, "--skip", skip],
        cwd=tree, env=env, capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("{") and '"bench": "all"' in line:
            figures: dict[str, Any] = json.loads(line)["measured"]
            return figures
    raise RuntimeError(f"bench.all in {tree} printed no figures:\n{done.stdout}\n{done.stderr}")


@contextlib.contextmanager
def _trees(a_ref: str, b_ref: str | None) -> Iterator[tuple[str, str]]:
    with contextlib.ExitStack() as stack:
        # the worktree helper copies this tree's bench/ over the old one: undo that,
        # so each engine runs the benchmark code written for it
        a = stack.enter_context(worktree(_git("rev-parse", a_ref), "compare-a"))
        _git("-C", a, "checkout", "--", "bench")
        b = REPO
        if b_ref is not None:
            b = stack.enter_context(worktree(_git("rev-parse", b_ref), "compare-b"))
            _git("-C", b, "checkout", "--", "bench")
        yield a, b


def measure(a_ref: str, b_ref: str | None, store: str, rounds: int, skip: str) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    with _trees(a_ref, b_ref) as (a, b):
        for i in range(rounds):
            order = [("A", a), ("B", b)] if i % 2 == 0 else [("B", b), ("A", a)]
            for label, tree in order:
                runs[label].append(_run_all(tree, store, skip))
                print(f"round {i + 1}/{rounds}: {label} done", file=sys.stderr)
    figures: dict[str, Any] = {}
    for key in runs["A"][0]:
        a_vals = [r[key] for r in runs["A"] if r.get(key) is not None]
        b_vals = [r[key] for r in runs["B"] if r.get(key) is not None]
        if not a_vals or not b_vals:
            continue
        a_med, b_med = statistics.median(a_vals), statistics.median(b_vals)
        figures[key] = {
            "A": {"median": a_med, "min": min(a_vals), "max": max(a_vals)},
            "B": {"median": b_med, "min": min(b_vals), "max": max(b_vals)},
            "B/A": b_med / a_med if a_med else None,
            "better": "higher" if key in _HIGHER_IS_BETTER else "lower",
        }
    return {"a": a_ref, "b": b_ref or "working tree", "rounds": rounds, "figures": figures}


def report(result: dict[str, Any]) -> str:
    rows = []
    for key, f in result["figures"].items():
        ratio = f["B/A"]
        rows.append((
            key,
            f"{f['A']['median']:.4g} ({f['A']['min']:.4g}-{f['A']['max']:.4g})",
            f"{f['B']['median']:.4g} ({f['B']['min']:.4g}-{f['B']['max']:.4g})",
            "-" if ratio is None else f"{ratio:.2f}",
            f"{f['better']} is better",
        ))  # fmt: skip
    head = f"A = {result['a']}, B = {result['b']}, {result['rounds']} rounds each, interleaved"
    return head + "\n" + table(rows, ["figure", "A median (range)", "B median (range)", "B/A", ""])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", required=True, help="the engine before (a git ref)")
    p.add_argument("--b", default=None, help="the engine after (default: this working tree)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--store",
        default=os.environ.get("STEADYFLOW_BENCH_STORE", "redis://127.0.0.1:6379/0"),
    )
    p.add_argument("--skip", default="events_overhead,redis_parser")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    result = measure(a.a, a.b, a.store, a.rounds, a.skip)
    print(report(result))
    emit("compare", result, a.json)


if __name__ == "__main__":
    main()
