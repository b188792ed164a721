"""Smoke test of `python -m trainrt.bench.sparsity`: one round of one timed step per mode on both
models, with fallback disabled. The figures are not judged here (timed unit tests prove nothing)."""

import pytest

from trainrt.bench import sparsity

pytestmark = pytest.mark.slow  # three HF models of the suite's size, a few steps each


def test_sparsity_bench_runs_all_modes_and_counts_the_rows(monkeypatch):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    results = sparsity.run(rounds=1, steps=1)
    assert set(results) == {"bert-mlm", "gpt2-pad"}
    for r in results.values():
        assert set(r["median_ms"]) == {"eager", "sparse-off", "labels-on", "sparse-on"}
        assert 0 < r["valid_rows"] < r["rows"] == 8 * 128
        assert r["valid_rows"] % 64 == 0 and r["head_gflop_skipped"] > 0
    # gpt2-pad's last 40% of each row is padding: 8 x 77 tokens kept, 640 as planned; bert-mlm has none.
    assert results["gpt2-pad"]["kept_tokens"] == 640 and results["gpt2-pad"]["layers_gflop_skipped"] > 0
    assert results["bert-mlm"]["kept_tokens"] == 8 * 128 and results["bert-mlm"]["layers_gflop_skipped"] == 0
    assert "| bert-mlm |" in sparsity.markdown(results)
