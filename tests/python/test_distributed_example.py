"""examples/train_distributed.py under the README's launch commands, on this machine with 2 ranks:
torchrun (DDP) and the deepspeed launcher (ZeRO-2), each as on one machine and with the flags a
multi-machine run takes (node rank, master address; the deepspeed launcher from a hostfile, without
ssh). Fallback disabled: each rank must print that it trained in the engine. faulthandler is on in
the ranks: one that aborts prints each thread's Python stack, and a failure shows those lines."""

import os
import pathlib
import re
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow  # 2-process runs, DeepSpeed's import in two of them

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
EXAMPLE = str(ROOT / "examples" / "train_distributed.py")


def _free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def _what_failed(out: str) -> str:
    """The lines of a failed run that say why (an abort's message and stacks), then its end: the
    launcher's own traceback comes last and would hide them."""
    markers = ("terminate called", "what():", "Fatal Python error", "Error", "error", "Thread 0x", "File \"")
    lines = [line for line in out.splitlines() if "FutureWarning" not in line and any(m in line for m in markers)]
    return "\n".join(lines)[:6000] + "\n--- end of the output ---\n" + out[-2000:]


def _launchers(tmp_path) -> dict[str, list[str]]:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=2\n")
    port = _free_port()
    return {
        "torchrun": [str(BIN / "torchrun"), "--nproc-per-node", "2", EXAMPLE],
        "torchrun, node flags": [str(BIN / "torchrun"), "--nnodes", "1", "--node-rank", "0", "--nproc-per-node", "2",
                                 "--master-addr", "127.0.0.1", "--master-port", port, EXAMPLE],
        "deepspeed": [str(BIN / "deepspeed"), "--num_accelerators", "2", "--master_port", port,
                      EXAMPLE, "--zero-stage", "2"],
        "deepspeed, hostfile without ssh": [str(BIN / "deepspeed"), "--hostfile", str(hosts), "--no_ssh", "--node_rank",
                                            "0", "--master_addr", "127.0.0.1", "--master_port", port, EXAMPLE,
                                            "--zero-stage", "2"],
    }


@pytest.mark.parametrize("launcher", ["torchrun", "torchrun, node flags", "deepspeed", "deepspeed, hostfile without ssh"])
def test_example_trains_in_the_engine_under_the_readme_commands(launcher, tmp_path):
    env = {**os.environ, "TRAINRT_FALLBACK_POLICY": "FALLBACK_DISABLE", "PYTHONFAULTHANDLER": "1", "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(_launchers(tmp_path)[launcher] + ["--steps", "5"], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 0, _what_failed(out)
    # The ranks' lines can run together in the launcher's output: matched anywhere.
    in_engine = re.findall(r"rank (\d) of 2: loss [\d.]+, fallback: None", out)
    assert sorted(in_engine) == ["0", "1"], out[-4000:]
