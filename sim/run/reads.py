"""Which bytes of each read the page cache holds: a schedule's reads replayed through the page cache in item order."""
from __future__ import annotations

import numpy as np

from sim.run.items import Schedule
from sim.run.pagecache import PageCache


def cache_found(sch: Schedule) -> tuple[np.ndarray, int, int]:
    """Bytes of each item's read found in the page cache (0 for no read), hits and misses. They depend only on the
    order of reads, which is the item order here. Without a page cache every read is cold; when every unit read fits
    at once nothing is evicted, so a read finds what the warm start or the unit's earlier reads brought in."""
    read_b = sch.read_bytes
    reads = np.flatnonzero(read_b > 0)
    found = np.zeros(len(sch))
    if sch.cache_capacity_bytes <= 0:
        return found, 0, len(reads)
    units, nbytes = sch.unit[reads], read_b[reads]
    warm_u = np.array([k for k, *_ in sch.warm_keys], dtype=np.int64)
    warm_b = np.array([b for _, b, *_ in sch.warm_keys], dtype=np.float64)
    keys = np.concatenate([warm_u, units])
    uniq, inv = np.unique(keys, return_inverse=True)
    most = np.zeros(len(uniq))
    np.maximum.at(most, inv.reshape(-1), np.concatenate([warm_b, nbytes]))
    if most.sum() * (1 + 1e-9) <= sch.cache_capacity_bytes:  # the margin covers the order of summation
        before = _resident_before(inv.reshape(-1), np.concatenate([warm_b, nbytes]))[len(warm_u):]
        found[reads] = np.minimum(before, nbytes)
    else:
        found[reads] = PageCache(sch.cache_capacity_bytes, sch.warm_keys).read_many(units, nbytes)
    hit = found[reads] >= nbytes
    return found, int(hit.sum()), int(len(reads) - hit.sum())


def _resident_before(key: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
    """For each entry, the largest `nbytes` of the same key before it (0 for its first): what an LRU that never
    evicts holds of that key. Exact: the running maximum runs over value ranks offset by key, in integers."""
    order = np.lexsort((np.arange(len(key)), key))
    vals, rank = np.unique(nbytes, return_inverse=True)
    rank = rank.reshape(-1)[order] + 1                    # 0 stands for "nothing yet"
    k = key[order]
    offset = k.astype(np.int64) * (len(vals) + 1)
    run = np.maximum.accumulate(rank + offset) - offset   # inclusive running max within each key
    prev = np.zeros(len(key), dtype=np.int64)
    prev[1:] = np.where(k[1:] == k[:-1], run[:-1], 0)
    out = np.empty(len(key))
    out[order] = np.concatenate([[0.0], vals])[prev]
    return out


def warm_contents(sch: Schedule) -> list[tuple[int, float, bool]]:
    """What a previous identical run left in the page cache: its reads, in item order, replayed through an empty
    PageCache of this capacity; (unit, resident bytes, active) oldest first."""
    read = np.asarray(sch.read_bytes, dtype=np.float64)
    reads = np.flatnonzero(read > 0)
    c = PageCache(sch.cache_capacity_bytes)
    if sch.cache_capacity_bytes > 0 and len(reads):
        c.read_many(np.asarray(sch.unit, dtype=np.int64)[reads], read[reads])
    return c.contents()
