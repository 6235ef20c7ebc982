"""The suite's own settings: what lets it pass on a busy machine (tests/conftest.py)."""

from __future__ import annotations

import time
import tomllib

from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement

from tests.crashflows import ROOT


@settings(max_examples=1)
@given(st.just("slow"))
def test_a_hypothesis_example_slower_than_the_default_deadline_passes(value: str) -> None:
    # Hypothesis's default deadline is 200 ms an example: a loaded machine
    # overruns it at random (DeadlineExceeded). The profile has none.
    time.sleep(0.25)
    assert value == "slow"


@st.composite
def slowly_drawn(draw: st.DrawFn) -> int:
    time.sleep(0.15)  # ten draws take over a second: the default too_slow budget
    return draw(st.integers())


@settings(max_examples=10)
@given(slowly_drawn())
def test_a_strategy_slow_to_draw_fails_no_health_check(value: int) -> None:
    # A loaded machine makes any strategy slow (FailedHealthCheck): the profile
    # has no draw-time budget.
    assert isinstance(value, int)


def test_every_dependency_has_an_upper_bound() -> None:
    # A release no run of the suite has seen is not installed (pyproject.toml says which).
    with open(ROOT / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    requirements = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        requirements += extra
    unbounded = []
    for line in requirements:
        requirement = Requirement(line)
        if requirement.name == "steadyflow":
            continue  # another extra of ours
        if not any(spec.operator in ("<", "<=", "==", "~=") for spec in requirement.specifier):
            unbounded.append(line)
    assert len(requirements) > 20
    assert unbounded == []
