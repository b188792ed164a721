"""Smoke test of `python -m trainrt.bench.straggler` on tiny sizes: it runs in the engine and reports both
samplers. The timed figures are not judged (performance is measured by the benchmark, never in timed
unit tests); the padded-token figures are deterministic and are."""

from trainrt.bench.straggler import main


def test_straggler_bench_reports_both_samplers_in_the_engine(monkeypatch, capsys):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    figures = main(["--world-size", "2", "--samples", "48", "--batch-size", "4", "--repeats", "1"])
    assert figures["in_engine"]
    plain, balanced = figures["samplers"].values()
    assert plain["steps"] == balanced["steps"] == 6  # 24 samples per rank in batches of 4
    for f in (plain, balanced):
        assert f["compute_max_over_mean"] >= 1 and f["tokens_max_over_mean"] >= 1
        assert 0 <= f["waiting_s"] < f["epoch_s"]
    assert balanced["tokens_max_over_mean"] < plain["tokens_max_over_mean"]
    printed = capsys.readouterr().out
    assert all(name in printed for name in figures["samplers"]) and "padded tokens max / mean" in printed
