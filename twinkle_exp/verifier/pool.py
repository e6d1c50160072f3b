"""Call a function on many inputs in worker processes, each call with a hard wall-clock limit.

A call that overruns its limit has its worker killed and replaced; a worker that dies mid-call (out of
memory, a crash in C) is replaced the same way. Either way the call's result is `TIMED_OUT` and the other
calls go on. A worker that cannot start is an error, never a silent `TIMED_OUT`. Workers are started with
"spawn", so they share no state (threads, CUDA, locks) with the trainer, and run each call in their main
thread, where `signal`-based timeouts work.

The signals that stop a run (`STOP_SIGNALS`) are the trainer's: a terminal's Ctrl-C, `timeout` and Slurm
send them to every process of the group or job, and a worker ended by one would leave the trainer's last
step without its verdicts (a broken pipe, or calls scored `TIMED_OUT`). Workers ignore them, from their very
start, and the trainer ends its workers itself: `close`, or SIGKILL when it exits.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.util
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from typing import Any

TIMED_OUT = "timed_out"  # the result of a call that ran out of time or lost its worker
STARTUP_TIMEOUT_S = 120.0  # spawning a worker and importing what it needs, on a loaded machine
_READY = "ready"
STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2})


def _serve(fn: Callable[..., Any], prepare: Callable[[], None] | None, conn: Connection) -> None:
    """Worker loop: prepare, say ready, then answer each (index, args) with (index, (status, value))."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked since the fork (see `_Worker`)
    if prepare is not None:
        prepare()
    conn.send(_READY)
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        index, args = job
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except Exception as e:
            reply = ("error", f"{type(e).__name__}: {e}")
        conn.send((index, reply))


def _kill(process: mp.process.BaseProcess) -> None:
    if process.exitcode is None:
        process.kill()
        process.join(timeout=5)


class _Worker:
    def __init__(self, fn: Callable[..., Any], prepare: Callable[[], None] | None):
        context = mp.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(fn, prepare, child), daemon=True)
        # Blocked, not lost, from the fork until `_serve` ignores them: a signal to the group while the new
        # interpreter imports would otherwise end it. This thread gets them once the worker has started.
        # Starting multiprocessing's resource tracker unblocks SIGINT and SIGTERM: it must be running first.
        resource_tracker.ensure_running()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        child.close()
        # At exit multiprocessing would SIGTERM its daemons (ignored here) and wait for them: kill first.
        multiprocessing.util.Finalize(self, _kill, args=(self.process,), exitpriority=10)
        self.ready = False
        # Until ready: the start's deadline. Then, while busy: (index of the call, its deadline).
        self.start_deadline = time.monotonic() + STARTUP_TIMEOUT_S
        self.job: tuple[int, float] | None = None

    @property
    def waiting(self) -> bool:
        return not self.ready or self.job is not None

    @property
    def deadline(self) -> float:
        return self.job[1] if self.job is not None else self.start_deadline

    def stop(self, kill: bool = False) -> None:
        if not kill:
            try:
                self.conn.send(None)
            except OSError:
                kill = True
        if kill:
            self.process.kill()
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class TimeoutPool:
    """`map(calls)` -> `[fn(*args) for args in calls]`, with `TIMED_OUT` for a call past `timeout_s`.

    `fn` and `prepare` (run once per worker before its first call, e.g. imports, so that no call is charged
    for them) must be picklable: top-level functions. Workers start on the first `map` and live until
    `close` (or the trainer's exit, which kills them). Safe to call from any thread; calls are serialised.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        workers: int,
        timeout_s: float,
        prepare: Callable[[], None] | None = None,
    ):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.fn, self.prepare, self.num_workers, self.timeout_s = fn, prepare, workers, timeout_s
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()

    def map(self, calls: Sequence[tuple]) -> list[Any]:
        with self._lock:
            if not calls:
                return []
            if not self._workers:
                self._workers = [_Worker(self.fn, self.prepare) for _ in range(self.num_workers)]
            try:
                return self._run(list(calls))
            except BaseException:
                # Interrupted or failed with calls in flight: their late replies must not reach the next map.
                self._stop_all(kill=True)
                raise

    def _run(self, calls: list[tuple]) -> list[Any]:
        results: list[Any] = [None] * len(calls)
        todo = deque(range(len(calls)))
        while todo or any(w.job for w in self._workers):
            for worker in self._workers:
                if worker.ready and worker.job is None and todo:
                    index = todo.popleft()
                    worker.conn.send((index, calls[index]))
                    worker.job = (index, time.monotonic() + self.timeout_s)
            waiting = [w for w in self._workers if w.waiting]
            next_deadline = min(w.deadline for w in waiting)
            ready = wait([w.conn for w in waiting], timeout=max(0.0, next_deadline - time.monotonic()))
            for k, worker in enumerate(self._workers):
                if not worker.waiting:
                    continue
                if worker.conn in ready:
                    self._receive(k, worker, calls, results)
                elif time.monotonic() >= worker.deadline:
                    if not worker.ready:
                        raise RuntimeError(
                            f"a worker of {self._name()} did not start in {STARTUP_TIMEOUT_S} s"
                        )
                    results[worker.job[0]] = TIMED_OUT
                    self._replace(k)
        return results

    def _receive(self, k: int, worker: _Worker, calls: list[tuple], results: list[Any]) -> None:
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            if not worker.ready:
                worker.process.join(timeout=5)
                raise RuntimeError(
                    f"a worker of {self._name()} exited while starting (exit code {worker.process.exitcode}); "
                    f"its error is above"
                ) from None
            results[worker.job[0]] = TIMED_OUT  # died mid-call: treated as that call's fault
            self._replace(k)
            return
        if message == _READY:
            worker.ready = True
            return
        index, (status, value) = message
        if status == "error":
            raise RuntimeError(f"{self._name()}{calls[index]!r:.200} failed: {value}")
        results[index] = value
        worker.job = None

    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", repr(self.fn))

    def _replace(self, k: int) -> None:
        self._workers[k].stop(kill=True)
        self._workers[k] = _Worker(self.fn, self.prepare)

    def _stop_all(self, kill: bool = False) -> None:
        for worker in self._workers:
            worker.stop(kill=kill)
        self._workers = []

    def close(self) -> None:
        with self._lock:
            self._stop_all()

    def __getstate__(self) -> dict:
        # Processes, pipes and locks do not pickle: a copy (a DDP rank) starts workers of its own.
        state = dict(self.__dict__)
        state["_workers"], state["_lock"] = [], None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
