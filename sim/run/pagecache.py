"""The page cache as Linux keeps file pages: two LRU lists (inactive, active) with workingset detection.

What this assumes about Linux (classic two-list LRU, CONFIG_LRU_GEN off, no swap):
- A page read for the first time enters the head of the inactive list; a second read while it is still on the
  inactive list promotes it to the active list (mm/swap.c `folio_mark_accessed`, mm/workingset.c "Double CLOCK lists").
- Reclaim evicts from the inactive tail. When the inactive list is too small, `inactive * ratio < active` with
  `ratio = int_sqrt(10 * GiB of both lists)` (1 below 1 GiB), the oldest active pages are demoted to the inactive
  list first (mm/vmscan.c `inactive_is_low`).
- Each eviction leaves a shadow entry holding the node's `nonresident_age`, a counter of evictions and activations.
  A refault whose distance `age_now - age_at_eviction` is at most the active file list is activated at once: the
  page would have stayed had the active list been that much smaller (mm/workingset.c `workingset_test_recent`;
  with swap, anonymous lists count too, not modelled).
- Eviction is per page: a unit larger than the cache keeps its last `capacity` bytes.
Consequence, measured on the H200 test machine (kernel 6.18, no MGLRU, no swap; a 1.2 GiB file read 5 times in a
1 GiB memory cgroup, by read() or by mmap per 16 MiB, with or without 0.3 GiB of active pages from another file):
every pass read the whole file from storage and the kernel counted 0 activations. A cyclic scan larger than the
cache keeps nothing: refaults are activated only within the active list's size, and demotion keeps the scan's order,
so each unit is evicted just before it is read again. What the two lists do keep is a set read twice (activated)
while a scan passes through, which strict LRU would flush.

`access(key, nbytes) -> bool` is True when the whole unit was resident; `read` returns the resident bytes found;
`read_many` replays a whole sequence of reads at once. Both lists are doubly linked over per-key arrays and every
step is a numba-compiled function, so a read or an eviction is O(1) and a replay of a run costs microseconds per read.
"""
from __future__ import annotations

import math

import numpy as np

from hwmodels.units import GiB

NONE, INACTIVE, ACTIVE = 0, 1, 2
# scalar state: F = [capacity, inactive_bytes, active_bytes, age, hit_bytes, miss_bytes]; N = [head, tail] of the
# inactive list, [head, tail] of the active list (head: oldest; -1: empty), their lengths, hits, misses
CAP, IBYTES, ABYTES, AGE, HIT_B, MISS_B = range(6)
IHEAD, ITAIL, AHEAD, ATAIL, ILEN, ALEN, HITS, MISSES = range(8)


def inactive_ratio(total_bytes: float) -> int:
    """Linux's target active:inactive ratio for file pages of this total size (mm/vmscan.c inactive_is_low)."""
    gb = int(total_bytes // GiB)
    if gb <= 0:
        return 1
    r = int(math.sqrt(10 * gb))
    while r * r > 10 * gb:
        r -= 1
    while (r + 1) * (r + 1) <= 10 * gb:
        r += 1
    return r


def _unlink(N, where, prv, nxt, k):
    h, t, ln = (IHEAD, ITAIL, ILEN) if where[k] == INACTIVE else (AHEAD, ATAIL, ALEN)
    if prv[k] >= 0:
        nxt[prv[k]] = nxt[k]
    else:
        N[h] = nxt[k]
    if nxt[k] >= 0:
        prv[nxt[k]] = prv[k]
    else:
        N[t] = prv[k]
    N[ln] -= 1
    where[k] = NONE


def _append(N, where, prv, nxt, k, lst):
    """Put `k` at the newest end of list `lst`."""
    if where[k] != NONE:
        _unlink(N, where, prv, nxt, k)
    h, t, ln = (IHEAD, ITAIL, ILEN) if lst == INACTIVE else (AHEAD, ATAIL, ALEN)
    prv[k] = N[t]
    nxt[k] = -1
    if N[t] >= 0:
        nxt[N[t]] = k
    else:
        N[h] = k
    N[t] = k
    N[ln] += 1
    where[k] = lst


def _move(F, N, res, where, prv, nxt, k, to_active):
    """Move `k` to the newest end of the other list, carrying its bytes."""
    _append(N, where, prv, nxt, k, ACTIVE if to_active else INACTIVE)
    sign = 1.0 if to_active else -1.0
    F[ABYTES] += sign * res[k]
    F[IBYTES] -= sign * res[k]


def _grow(F, N, res, where, prv, nxt, k, nbytes):
    lst = where[k]
    delta = max(nbytes - res[k], 0.0)
    res[k] += delta
    _append(N, where, prv, nxt, k, lst)
    F[ABYTES if lst == ACTIVE else IBYTES] += delta


def _shrink(F, N, res, where, prv, nxt, shadow, has_shadow, protect):
    """Reclaim down to capacity: demote while the inactive list is low, evict from the inactive tail."""
    while F[IBYTES] + F[ABYTES] > F[CAP] + 1e-9:
        ratio = inactive_ratio(F[IBYTES] + F[ABYTES])
        while N[ALEN] > 0 and F[IBYTES] * ratio < F[ABYTES]:
            oldest = N[AHEAD]
            if oldest == protect and N[ALEN] == 1:
                break
            _move(F, N, res, where, prv, nxt, oldest, False)  # demoted pages join the inactive head
        k = N[IHEAD] if N[ILEN] > 0 else N[AHEAD]
        excess = (F[IBYTES] + F[ABYTES]) - F[CAP]
        n = res[k]
        take = min(n, excess)
        res[k] = n - take
        F[ABYTES if where[k] == ACTIVE else IBYTES] -= take
        if res[k] <= 1e-9:  # the whole unit is gone: leave a shadow entry
            _unlink(N, where, prv, nxt, k)
            res[k] = 0.0
            shadow[k] = F[AGE]
            has_shadow[k] = True
        F[AGE] += take


def _read(F, N, res, where, prv, nxt, shadow, has_shadow, k, nbytes):
    found = min(res[k], nbytes) if where[k] != NONE else min(0.0, nbytes)
    if where[k] == ACTIVE:
        _append(N, where, prv, nxt, k, ACTIVE)
    elif where[k] == INACTIVE:  # second access on the inactive list: promotion
        _move(F, N, res, where, prv, nxt, k, True)
        F[AGE] += found
    missing = nbytes - found
    if missing > 0:
        N[MISSES] += 1
        refault = False
        if has_shadow[k]:
            has_shadow[k] = False
            refault = F[AGE] - shadow[k] <= F[ABYTES]
        if found > 0:
            _grow(F, N, res, where, prv, nxt, k, nbytes)
        elif refault:
            res[k] = 0.0
            _append(N, where, prv, nxt, k, ACTIVE)
            _grow(F, N, res, where, prv, nxt, k, nbytes)
            F[AGE] += nbytes
        else:
            res[k] = 0.0
            _append(N, where, prv, nxt, k, INACTIVE)
            _grow(F, N, res, where, prv, nxt, k, nbytes)
        _shrink(F, N, res, where, prv, nxt, shadow, has_shadow, k)
    else:
        N[HITS] += 1
    F[HIT_B] += found
    F[MISS_B] += max(missing, 0.0)
    return found


def _insert(F, N, res, where, prv, nxt, shadow, has_shadow, k, nbytes, active):
    if where[k] == NONE:
        res[k] = 0.0
        _append(N, where, prv, nxt, k, INACTIVE)
    _grow(F, N, res, where, prv, nxt, k, nbytes)
    _shrink(F, N, res, where, prv, nxt, shadow, has_shadow, k)
    if active and where[k] == INACTIVE:
        _move(F, N, res, where, prv, nxt, k, True)


def _insert_many(F, N, res, where, prv, nxt, shadow, has_shadow, keys, nbytes, active):
    for i in range(len(keys)):
        _insert(F, N, res, where, prv, nxt, shadow, has_shadow, keys[i], nbytes[i], active[i])


def _read_many(F, N, res, where, prv, nxt, shadow, has_shadow, keys, nbytes, found):
    for i in range(len(keys)):
        found[i] = _read(F, N, res, where, prv, nxt, shadow, has_shadow, keys[i], nbytes[i])


try:
    from numba import njit
    for _f in (inactive_ratio, _unlink, _append, _move, _grow, _shrink, _read, _insert, _insert_many, _read_many):
        # no reference counting: nothing here allocates, and counting the arrays passed costs more than the step
        globals()[_f.__name__] = njit(cache=True, _nrt=False)(_f)
except ImportError:  # pragma: no cover - numba is a dependency; the plain functions give the same numbers
    pass


class PageCache:
    def __init__(self, capacity_bytes: float, contents: list[tuple] = ()):
        """`contents`: (key, nbytes) or (key, nbytes, active) a previous run left, oldest first (`contents()` of a
        cache that replayed that run); without the flag they start on the inactive list."""
        self.capacity = max(float(capacity_bytes), 0.0)
        self._F = np.array([self.capacity, 0.0, 0.0, 0.0, 0.0, 0.0])
        self._N = np.array([-1, -1, -1, -1, 0, 0, 0, 0], dtype=np.int64)
        self._slot: dict = {}   # key -> index into the per-key arrays
        self._keys: list = []
        self._arrays(max(len(contents), 16))
        if len(contents):
            idx = self._slots([c[0] for c in contents])
            nbytes = np.array([float(c[1]) for c in contents])
            active = np.array([len(c) > 2 and bool(c[2]) for c in contents], dtype=np.bool_)
            _insert_many(self._F, self._N, *self._state(), idx, nbytes, active)
        self._F[HIT_B] = self._F[MISS_B] = 0.0
        self._N[HITS] = self._N[MISSES] = 0

    def _arrays(self, n: int) -> None:
        old = getattr(self, "_res", None)
        new = (np.zeros(n), np.zeros(n, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.zeros(n),
               np.zeros(n, np.bool_))
        if old is not None:
            for a, b in zip(new, self._state()):
                a[:len(b)] = b
        self._res, self._where, self._prv, self._nxt, self._shadow, self._has_shadow = new

    def _state(self) -> tuple:
        return self._res, self._where, self._prv, self._nxt, self._shadow, self._has_shadow

    def _slots(self, keys: list) -> np.ndarray:
        """`_index` of each key, with all new keys given slots at once."""
        slot = self._slot
        new = [k for k in dict.fromkeys(keys) if k not in slot]
        n = len(self._keys)
        if n + len(new) > len(self._res):
            self._arrays(2 * (n + len(new)))
        slot.update(zip(new, range(n, n + len(new))))
        self._keys += new
        return np.array([slot[k] for k in keys], dtype=np.int64)

    def _index(self, key) -> int:
        k = self._slot.get(key)
        if k is None:
            k = self._slot[key] = len(self._keys)
            self._keys.append(key)
            if k >= len(self._res):
                self._arrays(2 * len(self._res))
        return k

    hits = property(lambda self: int(self._N[HITS]))
    misses = property(lambda self: int(self._N[MISSES]))
    hit_bytes = property(lambda self: float(self._F[HIT_B]))
    miss_bytes = property(lambda self: float(self._F[MISS_B]))
    used = property(lambda self: float(self._F[IBYTES] + self._F[ABYTES]))

    def _list(self, head: int) -> dict:
        out, k = {}, int(self._N[head])
        while k >= 0:
            out[self._keys[k]] = float(self._res[k])
            k = int(self._nxt[k])
        return out

    @property
    def inactive(self) -> dict:
        """Inactive keys -> resident bytes, oldest first (a copy)."""
        return self._list(IHEAD)

    @property
    def active(self) -> dict:
        """Active keys -> resident bytes, oldest first (a copy)."""
        return self._list(AHEAD)

    def resident(self, key) -> float:
        k = self._slot.get(key)
        return float(self._res[k]) if k is not None and self._where[k] != NONE else 0.0

    def contents(self) -> list[tuple]:
        """(key, resident bytes, active) oldest first: what a later run starting warm finds."""
        return [(k, n, False) for k, n in self.inactive.items()] + [(k, n, True) for k, n in self.active.items()]

    def access(self, key, nbytes: float) -> bool:
        """Read `key`: True when all its bytes were resident (a hit); a miss faults the missing bytes in."""
        return self.read(key, nbytes) >= nbytes

    def read(self, key, nbytes: float) -> float:
        """Read `key` and return the bytes found in the cache (the rest came from storage)."""
        k = self._index(key)
        return float(_read(self._F, self._N, *self._state(), k, float(nbytes)))

    def read_many(self, keys, nbytes: np.ndarray) -> np.ndarray:
        """`read` for each (key, nbytes) in order; returns the bytes found per read."""
        uniq, inv = np.unique(np.asarray(keys), return_inverse=True)
        idx = self._slots(uniq.tolist())
        found = np.zeros(len(inv))
        _read_many(self._F, self._N, *self._state(), idx[inv.reshape(-1)], np.asarray(nbytes, dtype=np.float64), found)
        return found

    def insert(self, key, nbytes: float) -> None:
        """Put `key` in the cache without counting a read (a previous run's contents)."""
        _insert(self._F, self._N, *self._state(), self._index(key), float(nbytes), False)
