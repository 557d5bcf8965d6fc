"""A sweep on Dask's distributed scheduler (the `sweep` extra: pip install 'offloadsim[sweep]'): a local cluster of
worker processes, or a running scheduler at an address (`dask scheduler` and `dask worker ADDRESS` on the nodes,
each with offloadsim installed). Chunks of combinations are submitted a window at a time, so a grid of millions
never becomes millions of futures, and their rows are yielded as they complete."""
from __future__ import annotations

import importlib.util
import itertools
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from hwmodels.units import InputError
from planner.sweep import Sweep, evaluate_chunk

INSTALL = "pip install 'offloadsim[sweep]' (Dask's distributed scheduler)"
WINDOW = 4  # chunks in flight per worker thread


def available() -> bool:
    return importlib.util.find_spec("distributed") is not None


@contextmanager
def client(workers: int = 2, scheduler: str | None = None):
    """A dask.distributed Client: connected to `scheduler`, or to a local cluster of `workers` single-thread
    processes, closed on exit. Raises InputError when distributed is missing or the scheduler cannot be reached."""
    if not available():
        raise InputError(f"scheduler: Dask is not installed; {INSTALL}, or drop --scheduler to run in this process.")
    import logging

    from distributed import Client, LocalCluster
    if scheduler is not None:
        try:
            c = Client(scheduler, timeout="20s")
        except OSError as exc:
            raise InputError(f"scheduler: no Dask scheduler answered at {scheduler!r} ({exc}); start one with "
                             "'dask scheduler' and give the address it prints, like tcp://10.0.0.5:8786.") from None
        with c:
            yield c
        return
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as c:
        yield c


def backend(c):
    """A sweep backend (planner.sweep.run) that maps chunks over the client's workers."""
    def run_on_cluster(sweep: Sweep, todo: Iterable[list[int]]) -> Iterator[list[dict]]:
        from distributed import as_completed
        threads = max(1, sum(c.nthreads().values()))
        shared = c.scatter(sweep, broadcast=True)  # sent to each worker once, not with every chunk
        todo = iter(todo)
        running = as_completed()
        for chunk in itertools.islice(todo, WINDOW * threads):
            running.add(c.submit(evaluate_chunk, shared, chunk, pure=False))
        for fut in running:
            rows = fut.result()
            fut.release()
            for chunk in itertools.islice(todo, 1):
                running.add(c.submit(evaluate_chunk, shared, chunk, pure=False))
            yield rows
    return run_on_cluster

