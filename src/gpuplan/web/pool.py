"""A bounded pool of worker processes for the web server's computations.

Why processes: a computation can then be stopped for real. When its client goes away or it runs
past its deadline, its worker process is ended and a fresh one takes its place; the server's
event loop never runs engine code, and the engine's caches live and die with the workers (a
worker retires after `max_jobs` jobs or once it holds more than `max_rss` bytes), so the
server's memory stays bounded however many distinct models it is asked about.

Each worker is `python -m gpuplan.web.worker` talking over its stdin/stdout (web/worker.py), so
nothing depends on how the server itself was started. `call` blocks (run it in a thread): it
returns the worker's (HTTP status, JSON bytes) or raises Busy (too many requests waiting),
TimedOut (past the deadline) or Cancelled (the client went away, or the pool closed).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from gpuplan.web.worker import ANSWER, JOB, read_exactly

POLL_S = 0.05


class Busy(Exception):
    """Every worker is busy and the waiting line is full (or waited too long)."""


class TimedOut(Exception):
    """The computation ran past its deadline and was stopped."""


class Cancelled(Exception):
    """The client went away (or the server is stopping); the computation was stopped."""


class WorkerEnded(Exception):
    """The worker process ended without answering."""


def _worker_env() -> dict[str, str]:
    """The server's environment, with this gpuplan's source root first on PYTHONPATH."""
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class _Worker:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpuplan.web.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_worker_env(),
            start_new_session=os.name == "posix",  # the terminal's Ctrl+C is the server's
        )
        self.answers: queue.Queue[tuple[int, int, bytes] | None] = queue.Queue()
        self.jobs = 0
        threading.Thread(target=self._read_answers, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def send(self, kind: str, body: Any) -> None:
        job = json.dumps([kind, body]).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(JOB.pack(len(job)) + job)
        self.process.stdin.flush()

    def _read_answers(self) -> None:
        stdout = self.process.stdout
        assert stdout is not None
        while True:
            head = read_exactly(stdout, ANSWER.size)
            if head is None:
                break
            status, rss, size = ANSWER.unpack(head)
            payload = read_exactly(stdout, size)
            if payload is None:
                break
            self.answers.put((status, rss, payload))
        self.answers.put(None)

    def stop(self) -> None:
        if self.alive():
            self.process.kill()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


class WorkerPool:
    """At most `size` computations at once, each in its own worker process, at most `waiting`
    more in line (each waits at most `queue_s`), each stopped after `deadline_s`."""

    def __init__(
        self,
        size: int,
        deadline_s: float,
        waiting: int = 64,
        queue_s: float = 10.0,
        max_jobs: int = 500,
        max_rss: int = 384 * 2**20,
    ) -> None:
        self.size, self.deadline_s, self.waiting, self.queue_s = size, deadline_s, waiting, queue_s
        self.max_jobs, self.max_rss = max_jobs, max_rss
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(size)
        self._in_line = 0
        self._closed = False

    # --- what the server sees ------------------------------------------------------------

    def call(self, kind: str, body: Any, cancel: threading.Event) -> tuple[int, bytes]:
        """Run one job in a worker; blocks. `cancel`, once set, stops it."""
        self._wait_for_slot(cancel)
        try:
            worker = self._take()
            try:
                status, payload = self._run(worker, kind, body, cancel)
            except BaseException:
                self._retire(worker)
                raise
            self._give_back(worker)
            return status, payload
        finally:
            self._slots.release()

    def warm(self) -> None:
        """Start the workers now rather than on the first requests (blocks while they start)."""
        while True:
            with self._lock:
                if self._closed or len(self._idle) + len(self._busy) >= self.size:
                    return
            worker = _Worker()
            with self._lock:
                if self._closed:
                    worker.stop()
                    return
                self._idle.append(worker)

    def pids(self) -> list[int]:
        """The worker processes now alive, busy or idle."""
        with self._lock:
            workers = [*self._idle, *self._busy]
        return [w.pid for w in workers if w.alive()]

    def busy_pids(self) -> list[int]:
        with self._lock:
            return [w.pid for w in self._busy]

    def close(self) -> None:
        """Stop every worker now; running and waiting calls end with Cancelled."""
        with self._lock:
            self._closed = True
            workers, self._idle = [*self._idle, *self._busy], []
        for w in workers:
            w.stop()

    # --- inside --------------------------------------------------------------------------

    def _wait_for_slot(self, cancel: threading.Event) -> None:
        with self._lock:
            if self._closed:
                raise Cancelled
            if self._in_line >= self.waiting:
                raise Busy
            self._in_line += 1
        try:
            give_up = time.monotonic() + self.queue_s
            while not self._slots.acquire(timeout=POLL_S):
                if cancel.is_set() or self._closed:
                    raise Cancelled
                if time.monotonic() > give_up:
                    raise Busy
        finally:
            with self._lock:
                self._in_line -= 1

    def _take(self) -> _Worker:
        with self._lock:
            if self._closed:
                raise Cancelled
            worker = self._idle.pop() if self._idle else None
        if worker is None or not worker.alive():
            if worker is not None:
                worker.stop()
            worker = _Worker()
        with self._lock:
            self._busy.add(worker)
        return worker

    def _run(
        self, worker: _Worker, kind: str, body: Any, cancel: threading.Event
    ) -> tuple[int, bytes]:
        try:
            worker.send(kind, body)
        except OSError as err:
            raise WorkerEnded(str(err)) from None
        deadline = time.monotonic() + self.deadline_s
        while True:
            try:
                answer = worker.answers.get(timeout=POLL_S)
                break
            except queue.Empty:
                pass
            if cancel.is_set() or self._closed:
                raise Cancelled
            if time.monotonic() > deadline:
                raise TimedOut
        if answer is None:
            raise WorkerEnded("the worker ended without answering")
        status, rss, payload = answer
        worker.jobs += 1
        if worker.jobs >= self.max_jobs or rss > self.max_rss:
            worker.jobs = -1  # retire it
        return status, payload

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
            room = len(self._idle) + len(self._busy) < self.size
            keep = worker.jobs >= 0 and not self._closed and room
            if keep:
                self._idle.append(worker)
        if not keep:
            worker.stop()

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            self._busy.discard(worker)
        worker.stop()
