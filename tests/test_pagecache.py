"""The page cache's batch paths give what one read at a time gives: read_many, and the fast evaluator's shortcuts
for no page cache and for a cache that holds every unit read."""
import numpy as np
from hypothesis import given, settings, strategies as st

from sim.run.reads import cache_found
from sim.run.pagecache import PageCache
from sim.run.items import Schedule
from sim.run.reads import warm_contents


@st.composite
def reads(draw):
    n_units = draw(st.integers(1, 8))
    sizes = draw(st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0, 10.0, 17.0]), min_size=n_units, max_size=n_units))
    units = draw(st.lists(st.integers(0, n_units - 1), min_size=1, max_size=40))
    scale = draw(st.sampled_from([1.0, 2.0**28, 2.0**30]))
    nbytes = [sizes[u] * scale * draw(st.sampled_from([1.0, 1.0, 0.5])) for u in units]
    largest = [max([b for u, b in zip(units, nbytes) if u == k], default=0.0) for k in range(n_units)]
    capacity = draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])) * sum(largest) + draw(st.sampled_from([0.0, 1.0])) * scale
    return units, nbytes, capacity


def one_at_a_time(units, nbytes, capacity, warm=()):
    c = PageCache(capacity, warm)
    found = [c.read(u, b) if b > 0 else 0.0 for u, b in zip(units, nbytes)]
    return found, c


@settings(max_examples=200, deadline=None)
@given(reads())
def test_read_many_equals_reads_one_at_a_time(case):
    units, nbytes, capacity = case
    keep = [i for i, b in enumerate(nbytes) if b > 0]
    found, c = one_at_a_time(units, nbytes, capacity)
    batch = PageCache(capacity)
    got = batch.read_many(np.array(units)[keep], np.array(nbytes)[keep])
    assert got.tolist() == [found[i] for i in keep]
    assert (batch.hits, batch.misses, batch.contents()) == (c.hits, c.misses, c.contents())


@settings(max_examples=200, deadline=None)
@given(reads(), st.booleans())
def test_fast_evaluator_shortcuts_equal_the_replay(case, warm):
    units, nbytes, capacity = case
    sch = Schedule(unit=units, read_bytes=nbytes, cache_capacity_bytes=capacity)
    if warm:
        sch.warm_keys = warm_contents(sch)
    sch.finalize()
    found, c = one_at_a_time(units, nbytes, capacity, sch.warm_keys)
    got, hits, misses = cache_found(sch)
    assert got.tolist() == found and (hits, misses) == (c.hits, c.misses)


def test_warm_contents_are_what_one_run_leaves():
    # capacity 40, units of 10: 'a' (0) read twice is active; the scan 1..4 keeps 2, 3, 4 on the inactive list
    sch = Schedule(unit=[0, 0, 1, 2, 3, 4], read_bytes=[10.0] * 6, cache_capacity_bytes=40)
    assert warm_contents(sch) == [(2, 10.0, False), (3, 10.0, False), (4, 10.0, False), (0, 10.0, True)]
    assert warm_contents(Schedule(unit=[0], read_bytes=[10.0], cache_capacity_bytes=0)) == []
