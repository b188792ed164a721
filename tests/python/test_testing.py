"""trainrt.testing.run_on_ranks: a hung rank fails the call, saying where each rank hung."""

import time

import pytest

from trainrt.testing import run_on_ranks


def _hang(rank, world_size):
    time.sleep(600)


def _raise_on_rank_1(rank, world_size):
    if rank == 1:
        raise ValueError("rank 1 is unhappy")
    return rank


@pytest.mark.slow  # waits out its timeout, long enough for both ranks to start on a loaded machine
def test_a_hang_fails_with_each_ranks_python_stack():
    with pytest.raises(TimeoutError) as raised:
        run_on_ranks(_hang, timeout=40)
    message = str(raised.value)
    for rank in (0, 1):
        assert f"--- rank {rank} stderr (end) ---" in message
    assert message.count("in _hang") == 2, message


def test_an_error_on_one_rank_fails_the_call_with_its_traceback():
    with pytest.raises(RuntimeError, match="rank 1 of _raise_on_rank_1 raised:(.|\n)*rank 1 is unhappy"):
        run_on_ranks(_raise_on_rank_1)
