"""The machine line the per-call benchmarks print (`bench._common.machine`)."""

from __future__ import annotations

import os

from bench._common import machine, machine_line


def test_machine_reports_cpus_load_and_a_positive_cpu_check() -> None:
    m = machine()
    assert m["cpus"] == os.cpu_count()
    assert m["load_1m"] >= 0 and m["load_5m"] >= 0
    assert m["cpu_check_ms"] > 0


def test_machine_line_names_every_figure() -> None:
    m = {"cpus": 2, "load_1m": 0.31, "load_5m": 1.5, "cpu_check_ms": 17.25}
    line = machine_line(m)
    assert line.startswith("machine: 2 CPUs, load 0.31 (1 min) 1.50 (5 min), CPU check 17.2")
