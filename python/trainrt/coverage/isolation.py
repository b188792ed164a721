"""Runs architectures in a worker process, one at a time, with a time limit per architecture.

A hang or a crash (a segfault in a kernel, the OOM killer) ends that architecture's run, not the
sweep: the worker is killed or found dead, the architecture is reported as timeout or crash, and a
fresh worker takes the next one. A worker imports torch and transformers once (about 5 s) and serves
MODELS_PER_WORKER architectures before it is replaced, which bounds what one model's global state
(registered pytree nodes, allocator caches, loaded modules) can do to later ones.

    for outcome in run_isolated(archs, timeout_s=300):
        print(outcome.name, outcome.status)
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterable, Iterator

from trainrt.coverage.architectures import Architecture
from trainrt.coverage.outcome import Outcome

MODELS_PER_WORKER = 25
_STARTUP_S = 180  # imports on a loaded 2-core machine


def _serve(conn, log_path: str | None) -> None:
    """The worker: output to the log (or nowhere), then one Outcome (as JSON) per Architecture received."""
    fd = os.open(log_path or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    import warnings

    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    from trainrt.coverage.run import run

    conn.send("ready")
    while (arch := conn.recv()) is not None:
        print(f"=== {arch.name}", flush=True)
        conn.send(run(arch).to_json())


class _Worker:
    def __init__(self, log_path: str | None):
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch thread pools forked
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, log_path), daemon=True)
        self.process.start()
        child.close()
        self.served = 0
        if not self.conn.poll(_STARTUP_S) or self.conn.recv() != "ready":
            self.stop()
            raise RuntimeError("the coverage worker did not start")

    def run(self, arch: Architecture, timeout_s: float) -> Outcome:
        """arch's Outcome; on a timeout or crash the worker is dead afterwards (alive() is False)."""
        self.served += 1
        self.conn.send(arch)
        try:
            if self.conn.poll(timeout_s):
                return Outcome.from_json(self.conn.recv())
        except (EOFError, ConnectionError):
            self.process.join(5)
            return Outcome(arch.name, arch.class_name, "crash", _exit_reason(self.process.exitcode))
        self.stop()
        return Outcome(arch.name, arch.class_name, "timeout", f"no result after {timeout_s:.0f} s")

    def alive(self) -> bool:
        return self.process.is_alive()

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        return f"the worker died of {signal.Signals(-code).name}"
    return f"the worker exited with status {code}"


def run_isolated(archs: Iterable[Architecture], timeout_s: float, log_path: str | None = None) -> Iterator[Outcome]:
    """Each architecture's Outcome, in order, as each finishes."""
    worker = None
    try:
        for arch in archs:
            if worker is None or not worker.alive() or worker.served >= MODELS_PER_WORKER:
                if worker is not None:
                    worker.stop()
                worker = _Worker(log_path)
            yield worker.run(arch, timeout_s)
    finally:
        if worker is not None:
            worker.stop()
