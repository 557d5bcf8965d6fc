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

`access(key, nbytes) -> bool` is True when the whole unit was resident; `read` returns the resident bytes found.
"""
from __future__ import annotations

import math
from collections import OrderedDict

GiB = 2**30


def inactive_ratio(total_bytes: float) -> int:
    """Linux's target active:inactive ratio for file pages of this total size (mm/vmscan.c inactive_is_low)."""
    gb = int(total_bytes // GiB)
    return math.isqrt(10 * gb) if gb else 1


class PageCache:
    def __init__(self, capacity_bytes: float, contents: list[tuple] = ()):
        """`contents`: (key, nbytes) or (key, nbytes, active) a previous run left, oldest first (`contents()` of a
        cache that replayed that run); without the flag they start on the inactive list."""
        self.capacity = max(float(capacity_bytes), 0.0)
        self.inactive: OrderedDict[int, float] = OrderedDict()   # oldest first; value: resident bytes
        self.active: OrderedDict[int, float] = OrderedDict()
        self.inactive_bytes = self.active_bytes = 0.0
        self.shadow: dict[int, float] = {}
        self.age = 0.0  # nonresident_age in bytes: evictions + activations
        for key, nbytes, *active in contents:
            self.insert(key, nbytes)
            if active and active[0] and key in self.inactive:
                self._move(key, to_active=True)
        self.hits = self.misses = 0
        self.hit_bytes = self.miss_bytes = 0.0

    @property
    def used(self) -> float:
        return self.inactive_bytes + self.active_bytes

    def resident(self, key: int) -> float:
        return self.active.get(key, self.inactive.get(key, 0.0))

    def contents(self) -> list[tuple[int, float, bool]]:
        """(key, resident bytes, active) oldest first: what a later run starting warm finds."""
        return [(k, n, False) for k, n in self.inactive.items()] + [(k, n, True) for k, n in self.active.items()]

    def access(self, key: int, nbytes: float) -> bool:
        """Read `key`: True when all its bytes were resident (a hit); a miss faults the missing bytes in."""
        return self.read(key, nbytes) >= nbytes

    def read(self, key: int, nbytes: float) -> float:
        """Read `key` and return the bytes found in the cache (the rest came from storage)."""
        found = min(self.resident(key), nbytes)
        if key in self.active:
            self.active.move_to_end(key)
        elif key in self.inactive:  # second access on the inactive list: promotion
            self._move(key, to_active=True)
            self.age += found
        missing = nbytes - found
        if missing > 0:
            self.misses += 1
            refault = key in self.shadow and self.age - self.shadow.pop(key) <= self.active_bytes
            if found > 0:
                self._grow(key, nbytes)
            elif refault:
                self.active[key] = 0.0
                self._grow(key, nbytes)
                self.age += nbytes
            else:
                self.inactive[key] = 0.0
                self._grow(key, nbytes)
            self._shrink(protect=key)
        else:
            self.hits += 1
        self.hit_bytes += found
        self.miss_bytes += max(missing, 0.0)
        return found

    def insert(self, key: int, nbytes: float) -> None:
        """Put `key` in the cache without counting a read (a previous run's contents)."""
        if key not in self.active and key not in self.inactive:
            self.inactive[key] = 0.0
        self._grow(key, nbytes)
        self._shrink(protect=key)

    def _grow(self, key: int, nbytes: float) -> None:
        lst = self.active if key in self.active else self.inactive
        delta = max(nbytes - lst[key], 0.0)
        lst[key] += delta
        lst.move_to_end(key)
        if lst is self.active:
            self.active_bytes += delta
        else:
            self.inactive_bytes += delta

    def _move(self, key: int, to_active: bool) -> None:
        src, dst = (self.inactive, self.active) if to_active else (self.active, self.inactive)
        n = src.pop(key)
        dst[key] = n
        sign = 1 if to_active else -1
        self.active_bytes += sign * n
        self.inactive_bytes -= sign * n

    def _shrink(self, protect: int) -> None:
        """Reclaim down to capacity: demote while the inactive list is low, evict from the inactive tail."""
        while self.used > self.capacity + 1e-9:
            ratio = inactive_ratio(self.used)
            while self.active and self.inactive_bytes * ratio < self.active_bytes:
                oldest = next(iter(self.active))
                if oldest == protect and len(self.active) == 1:
                    break
                self._move(oldest, to_active=False)
                self.inactive.move_to_end(oldest)  # demoted pages join the inactive head
            lst = self.inactive if self.inactive else self.active
            key = next(iter(lst))
            excess = self.used - self.capacity
            n = lst[key]
            take = min(n, excess)
            lst[key] = n - take
            if lst is self.active:
                self.active_bytes -= take
            else:
                self.inactive_bytes -= take
            if lst[key] <= 1e-9:  # the whole unit is gone: leave a shadow entry
                del lst[key]
                self.shadow[key] = self.age
            self.age += take
