"""Helpers for tests and benchmarks: run a function on local ranks (gloo, loopback) and get back
what each rank returned.

    results = run_on_ranks(train, config)         # train(rank, world_size, config) -> picklable
    assert results[0] == results[1]

Each rank is a fresh spawned process with TRAINRT_FALLBACK_POLICY=FALLBACK_DISABLE and one
intra-op thread (ranks share the cores: 2 on 2 here); the process group is up while the function runs. A rank
that raises fails the call with its traceback; a collective waiting over a minute fails its rank;
a hang fails the call after `timeout` seconds with each rank's Python stacks. A rank killed by a signal (an abort in C++: gloo's
"terminate called after throwing", a failed glibc heap check) fails the call with the tail of that
rank's stderr, where faulthandler wrote each thread's Python stack.
"""

from __future__ import annotations

import datetime
import faulthandler
import gc
import os
import signal
import socket
import tempfile
import time
import traceback

import torch
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world_size: int, port: int, fn, args, out_dir: str) -> None:
    # The rank's stderr (fd 2: C++'s messages too) goes to its log, read back if the rank dies.
    log = open(os.path.join(out_dir, f"rank{rank}.log"), "w")  # noqa: SIM115  (open for the process's life)
    os.dup2(log.fileno(), 2)
    faulthandler.enable(file=log)
    faulthandler.register(signal.SIGUSR1, file=log, all_threads=True)  # the parent asks for stacks on a hang
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK=str(rank), TRAINRT_FALLBACK_POLICY="FALLBACK_DISABLE")
    torch.set_num_threads(1)
    # A collective that waits longer than a minute fails the rank (a hang becomes an error).
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=60))
    try:
        result = ("ok", fn(rank, world_size, *args))
    except BaseException:  # noqa: BLE001  (reported to the parent, which raises)
        result = ("error", traceback.format_exc())
    finally:
        # What fn made (a DeepSpeed engine, DDP's reducer, in cycles) goes now, with the process group
        # and the interpreter up, not from gloo's threads while the interpreter shuts down.
        gc.collect()
        torch.distributed.destroy_process_group()
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))


def run_on_ranks(fn, *args, world_size: int = 2, timeout: float = 300.0) -> list:
    """fn(rank, world_size, *args) on each rank; fn and args must be picklable (module level)."""
    with tempfile.TemporaryDirectory() as out_dir:
        context = mp.start_processes(_rank_main, args=(world_size, _free_port(), fn, args, out_dir),
                                     nprocs=world_size, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=1.0):
                if time.monotonic() > deadline:
                    for p in context.processes:  # each rank writes where it hangs to its log
                        os.kill(p.pid, signal.SIGUSR1)
                    time.sleep(1.0)
                    for p in context.processes:
                        p.kill()
                    raise TimeoutError(f"{world_size}-rank run of {fn.__name__} did not finish in {timeout:.0f} s"
                                       f"{_logs(out_dir, world_size)}")
        except mp.ProcessExitedException as e:
            raise RuntimeError(f"{world_size}-rank run of {fn.__name__}: {e}{_logs(out_dir, world_size)}") from None
        results = []
        for rank in range(world_size):
            status, value = torch.load(os.path.join(out_dir, f"rank{rank}.pt"), weights_only=False)
            if status == "error":
                raise RuntimeError(f"rank {rank} of {fn.__name__} raised:\n{value}")
            results.append(value)
        return results


def _logs(out_dir: str, world_size: int, tail: int = 3000) -> str:
    """The end of each rank's stderr, without torch's deprecation warnings."""
    text = ""
    for rank in range(world_size):
        path = os.path.join(out_dir, f"rank{rank}.log")
        if not os.path.exists(path):
            continue
        with open(path, errors="replace") as f:
            lines = [line for line in f if "FutureWarning" not in line and "return func(*args, **kwargs)" not in line]
        text += f"\n--- rank {rank} stderr (end) ---\n" + "".join(lines)[-tail:]
    return text
