"""Where a sweep's points run: in this process, in a process pool, or on a Ray cluster.

Every executor takes a top-level function and a list of tasks and yields (index, result) as results arrive; the
caller puts them back in task order. A point's result depends only on its task (a fixed seed, no wall clock), so
every executor gives the same table in the same row order; only the time taken differs.

Ray is the engine Vidur-Search distributes its search with; here it is the optional `ray` extra
(`pip install 'servesim[ray]'`), imported only when `--executor ray` is chosen.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from servesim.errors import ConfigError, ServesimError

EXECUTORS = ("local", "ray")


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class LocalExecutor:
    """A process pool of `workers` processes (spawned, not forked: polars' and numpy's threads do not survive a
    fork safely); one worker runs the tasks in this process, in order, with no pool to start."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = default_workers() if workers is None else workers
        if self.workers < 1:
            raise ConfigError(f"--workers {self.workers}: expected at least 1 worker")

    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        if self.workers == 1 or len(tasks) <= 1:
            for i, task in enumerate(tasks):
                yield i, fn(task)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        pool = ProcessPoolExecutor(min(self.workers, len(tasks)), mp_context=multiprocessing.get_context("spawn"))
        try:
            futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:  # an error or an interrupt: drop what has not started, keep what has finished
            pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """Tasks as Ray remote functions on the cluster at `address` (None: a local cluster started here with
    `workers` CPUs, shut down afterwards; "auto": the cluster this machine belongs to)."""

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        try:
            import ray  # noqa: F401
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'servesim[ray]'") from None
        self.address = address
        self.workers = workers
        if workers is not None and workers < 1:
            raise ConfigError(f"--workers {workers}: expected at least 1 worker")
        if address is not None and address not in ("auto", "local"):
            _probe(address)

    def run(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> Iterator[tuple[int, Any]]:
        import ray

        started = not ray.is_initialized()
        if started:
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if self.address is None:
                options["num_cpus"] = self.workers or default_workers()
            ray.init(address=self.address, **options)
        try:
            remote = ray.remote(num_cpus=1)(fn)
            refs = {remote.remote(task): i for i, task in enumerate(tasks)}
            pending = list(refs)
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    yield refs[ref], _unwrap(ray, ref)
        finally:
            if started:
                ray.shutdown()


PROBE_S = 3.0  # how long a Ray address may take to answer before it is refused (ray.init retries for minutes)


def _probe(address: str) -> None:
    """A TCP connection to the Ray cluster's head, before `ray.init` would retry it for minutes: refused in
    seconds, naming the address. `ray://host[:10001]` is Ray Client's; `host[:6379]` the head's GCS."""
    import socket

    client = address.startswith("ray://")
    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if not sep:
        host, port = hostport, "10001" if client else "6379"
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"--ray-address {address}: expected HOST:PORT, ray://HOST:PORT or auto") from None
    try:
        socket.create_connection((host.strip("[]"), number), timeout=PROBE_S).close()
    except OSError as exc:
        why = f"no answer in {PROBE_S:g} s" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ConfigError(f"--ray-address {address}: no Ray cluster answers at {host}:{number} ({why}); start one "
                          "there (ray start --head) or drop --ray-address") from None


def _unwrap(ray: Any, ref: Any) -> Any:
    """A task's result; a user error raised in a task is re-raised as itself (Ray wraps it)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, ServesimError):  # one line, as in this process
            raise exc.cause from None
        raise


def make_executor(name: str, workers: int | None = None, ray_address: str | None = None) -> Any:
    if name not in EXECUTORS:
        raise ConfigError(f"--executor {name}: expected one of {', '.join(EXECUTORS)}")
    if name == "local":
        if ray_address is not None:
            raise ConfigError("--ray-address names a Ray cluster: add --executor ray")
        return LocalExecutor(workers)
    return RayExecutor(ray_address, workers)
