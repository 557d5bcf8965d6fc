"""The page cache: RAM left over after resident weights and pinned buffers, least-recently-used.

Hits read at the page-cache speed, misses at the device's cold speed. Linux's active/inactive lists protect
re-used pages better than strict LRU; this model is the pessimistic strict-LRU case.
"""
from __future__ import annotations

from collections import OrderedDict


class PageCache:
    def __init__(self, capacity_bytes: float, contents: list[tuple[int, float]] = ()):
        self.capacity = capacity_bytes
        self.used = 0.0
        self.lru: OrderedDict[int, float] = OrderedDict()
        for key, nbytes in contents:
            self.insert(key, nbytes)
        self.hits = self.misses = 0

    def access(self, key: int, nbytes: float) -> bool:
        """Read `key`: True on a hit. A miss inserts it, evicting least-recently-used entries."""
        if key in self.lru:
            self.lru.move_to_end(key)
            self.hits += 1
            return True
        self.misses += 1
        self.insert(key, nbytes)
        return False

    def insert(self, key: int, nbytes: float) -> None:
        if nbytes > self.capacity:
            return
        while self.used + nbytes > self.capacity and self.lru:
            self.used -= self.lru.popitem(last=False)[1]
        self.lru[key] = nbytes
        self.used += nbytes
