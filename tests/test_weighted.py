"""Order statistics and moments of weighted values in bounded memory equal numpy's on the repeated values."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servesim.analysis import weighted
from servesim.analysis.weighted import moments, values_at_ranks

# few distinct values (heavy repeats, edge bins) or many (bins between edges), zero weights included
values = st.one_of(st.integers(0, 5).map(float), st.floats(0, 10, allow_nan=False))
data = st.lists(st.tuples(values, st.integers(0, 6)), min_size=1, max_size=400).filter(
    lambda pairs: sum(c for _, c in pairs) > 0)


@pytest.fixture
def tiny_bins(monkeypatch):
    # the binned path on small inputs: past 8 values, samples of 8, an edge every 2nd, chunks of 16
    monkeypatch.setattr(weighted, "SORT_UP_TO", 8)
    monkeypatch.setattr(weighted, "SAMPLE", 8)
    monkeypatch.setattr(weighted, "EDGE_EVERY", 2)
    monkeypatch.setattr(weighted, "CHUNK", 16)  # the same for every example: safe to share across them


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=data, picks=st.lists(st.floats(0, 1), min_size=1, max_size=6))
def test_values_at_ranks_are_the_sorted_repeated_values(tiny_bins, pairs, picks):
    x = np.array([v for v, _ in pairs])
    w = np.array([c for _, c in pairs], dtype=np.int32)
    repeated = np.sort(np.repeat(x, w))
    ranks = [int(p * (len(repeated) - 1)) for p in picks]
    assert values_at_ranks(x, w, ranks) == repeated[ranks].tolist()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=data)
def test_moments_are_numpys_on_the_repeated_values(tiny_bins, pairs):
    x = np.array([v for v, _ in pairs])
    w = np.array([c for _, c in pairs], dtype=np.int32)
    repeated = np.repeat(x, w)
    mean, std = moments(x, w, int(w.sum()))
    assert mean == pytest.approx(repeated.mean(), rel=1e-12, abs=1e-12)
    assert std == pytest.approx(repeated.std(), rel=1e-9, abs=1e-9)


def test_one_value_repeated_everywhere_is_found_without_sorting_it(tiny_bins):
    # 1,000 gaps of exactly 1.0 s (a unit-cost clock) and one of 3.0 s: the 1.0 s edge bin holds them all
    x = np.array([1.0] * 1000 + [3.0])
    w = np.ones(1001, np.int32)
    assert values_at_ranks(x, w, [0, 500, 999, 1000]) == [1.0, 1.0, 1.0, 3.0]
