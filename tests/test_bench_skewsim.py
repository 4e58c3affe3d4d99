"""bench/skewsim.py: W10's skewed map through the real task book with simulated engines,
in memory. Pins the steal-back policy on that map: two element requests that each hold
their share of the slow elements finish near the ideal makespan, with no element moved
between engines that both have work (docs/decisions.md, "A load-balanced map, one task per
element")."""

from __future__ import annotations

import pytest

from bench.skewsim import Sim
from bench.workloads import skewed_durations


@pytest.mark.parametrize("n", [400, 1000])
def test_the_skewed_map_runs_where_it_was_placed(n):
    result = Sim(skewed_durations(n, 0.005, 0.25), 2, 0.0003, 0.00005).run()
    assert result["revokes"] == 0
    assert result["over_ideal"] < 1.01
    assert max(result["idle_s"]) < 0.005


def test_an_engine_that_runs_dry_takes_the_tail_of_the_other():
    """Uneven requests: the engine with less work steals, and the map still ends near the
    ideal (within the last slow element's reach)."""
    durations = [0.005] * 300
    durations[10] = durations[20] = durations[30] = 0.25  # all in the first request
    result = Sim(durations, 2, 0.0003, 0.00005).run()
    assert result["revokes"] >= 1
    assert result["over_ideal"] < 1.1
