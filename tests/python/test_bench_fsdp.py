"""Smoke test of `python -m trainrt.bench.fsdp` on tiny sizes: every mode runs in the engine and the
sharded modes hold half of DDP's parameters, gradients and optimizer state per rank (every dim even,
so the shards are halves). The timed figures are not judged (performance is measured by the
benchmark, never in timed unit tests)."""

import pytest

from trainrt.bench.fsdp import MODES, main

pytestmark = pytest.mark.slow  # four 2-rank runs


def test_fsdp_bench_reports_every_mode_with_half_the_state_per_rank(monkeypatch, capsys):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    results = main(["--layers", "2", "--width", "64", "--vocab", "512", "--seq", "16", "--batch", "4",
                    "--warmup", "1", "--steps", "1"])
    assert list(results) == list(MODES)
    for mode in MODES[1:]:
        for key in ("parameters", "gradients", "optimizer_state"):
            assert 2 * results[mode][key] == results["ddp"][key], (mode, key)
    printed = capsys.readouterr().out
    assert all(f"| {mode} |" in printed for mode in MODES)
