"""Smoke test of the benchmark suite: every quick-suite model, eager and RTModule, two timed steps.

Checks that the suite runs and reports what it claims; the numbers themselves are not judged here
(performance is measured by `python -m trainrt.bench`, never in timed unit tests).
"""

import json
import os

import pytest
import torch

from trainrt.bench.__main__ import main
from trainrt.bench.models import MODELS, SUITES

pytestmark = pytest.mark.slow  # real training steps of two models: `make test` runs it, test-quick skips it

SMOKE_MODELS = SUITES["quick"]  # gpt2-small is the full suite's: too slow for a smoke test


@pytest.fixture(autouse=True)
def engine_only(monkeypatch):
    """The rtmodule mode's figures are the engine's: a model falling back to PyTorch fails the mode."""
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")


def test_suite_runs_eager_and_rtmodule_and_writes_json_and_markdown(tmp_path, capsys):
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    main(["--models", ",".join(SMOKE_MODELS), "--modes", "eager,rtmodule",
          "--steps", "2", "--warmup", "0", "--no-micro", "--no-trainer", "--no-sparsity", "--json", str(out_json), "--markdown", str(out_md),
          "--plot", str(tmp_path / "bench.png")])
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads(out_json.read_text())

    by_name = {m["model"]: m for m in results["models"]}
    entry_grad_bytes = {name: 4 * sum(p.numel() for p in MODELS[name]().make().parameters()) for name in SMOKE_MODELS}
    entry_matrix_grad_bytes = {name: 4 * sum(p.numel() for p in MODELS[name]().make().parameters() if p.dim() > 1)
                               for name in SMOKE_MODELS}
    assert set(by_name) == set(SMOKE_MODELS)
    for name in SMOKE_MODELS:
        entry = by_name[name]
        assert entry["flops_per_step"] > 0
        assert set(entry["modes"]) == {"eager", "rtmodule"}
        for mode, r in entry["modes"].items():
            assert "error" not in r, f"{name}/{mode}: {r.get('error')}"
            assert r["steps"] == 2
            for key in ("step_median_s", "step_p10_s", "step_p90_s", "first_step_s", "flops_per_s"):
                assert r[key] > 0, f"{name}/{mode}: {key} = {r[key]}"
            assert r["step_p10_s"] <= r["step_median_s"] <= r["step_p90_s"]
            assert 0 < r["fraction_of_peak"]
            assert r["peak_rss_increase_bytes"] >= 0
            # A step holds at least its gradients (one per parameter element, f32) beyond the parameters.
            assert r["peak_tensor_bytes"] == r["torch_peak_bytes"] + r["engine_peak_bytes"]
            assert r["peak_tensor_bytes"] >= entry_grad_bytes[name], f"{name}/{mode}"
        # The engine's tensors are counted for RTModule; eager runs none.
        assert entry["modes"]["eager"]["engine_peak_bytes"] == 0
        assert entry["modes"]["rtmodule"]["engine_peak_bytes"] >= entry_grad_bytes[name]
        # Same initial weights and batches: the first losses agree across modes.
        first = [r["first_loss"] for r in entry["modes"].values()]
        assert abs(first[0] - first[1]) <= 1e-4 * abs(first[0])
        engine = entry["modes"]["rtmodule"]["engine_memory"]
        assert engine["planned_arena_bytes"] > 0
        # What the engine keeps between steps: its arena and the model's outputs (saved values and
        # gradients are let go of), within its peak, which holds the gradients too: all of them but
        # the 1-D ones (biases, norms), which the backward may make after its busiest step (mlp:
        # the first layer's bias gradient comes after its weight gradient's product). Less the small
        # kernel scratch threads keep across runs (core/thread_scratch.h: 5 slots of up to 64 KiB
        # each), which an earlier model in this process may have left: this mode then never adds it.
        kept_scratch = 5 * 64 * 1024 * (os.cpu_count() or 1)
        assert engine["arena_capacity_bytes"] + engine["kept_output_bytes"] + entry_matrix_grad_bytes[name] \
            <= entry["modes"]["rtmodule"]["engine_peak_bytes"] + kept_scratch

    printed = capsys.readouterr().out
    markdown = out_md.read_text()
    for name in SMOKE_MODELS:
        assert name in printed and name in markdown
    assert "rtmodule peak tensor MiB" in printed and "the step's own" in markdown
    assert "step / eager" in markdown and "peak tensor MiB" in markdown and "tensor / eager" in printed


def test_every_suite_model_is_defined():
    for names in SUITES.values():
        assert set(names) <= set(MODELS)


def test_llama_mini_and_the_codegen_mode_run(tmp_path):
    spec = MODELS["llama-mini"]()
    loss = spec.make()(*spec.batch(0))
    assert loss.ndim == 0 and 8.5 < loss.item() < 9.5  # about log(8192) at initialization
    out_json = tmp_path / "bench.json"
    main(["--models", "tiny", "--modes", "rtmodule,rtmodule-codegen", "--steps", "2", "--warmup", "1", "--no-micro",
          "--no-trainer", "--no-sparsity", "--json", str(out_json)])
    result = json.loads(out_json.read_text())["models"][0]["modes"]
    assert "error" not in result["rtmodule-codegen"] and result["rtmodule-codegen"]["step_median_s"] > 0


def test_a_failing_mode_is_reported_and_the_others_run(tmp_path, monkeypatch):
    from trainrt.bench import modes

    class Broken(torch.nn.Module):  # fails at its first call, as torch.compile does without a compiler
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *args):
            raise RuntimeError("inductor: no C++ compiler found")

    monkeypatch.setattr(modes.Compile, "wrap", lambda self, model: Broken(model))
    out_json = tmp_path / "bench.json"
    main(["--models", "mlp", "--modes", "eager,compile", "--steps", "1", "--warmup", "0", "--no-micro",
          "--no-trainer", "--no-sparsity", "--json", str(out_json)])
    result = json.loads(out_json.read_text())["models"][0]["modes"]
    assert "no C++ compiler" in result["compile"]["error"]
    assert result["eager"]["step_median_s"] > 0


def test_profile_writes_traces_and_names_the_top_ops(tmp_path):
    from trainrt.bench.profile import profile_model

    summary = profile_model(MODELS["mlp"](), str(tmp_path), steps=1)
    assert "forward program" in summary and "backward program" in summary and "Gemm" in summary
    for program in ("forward", "backward"):
        events = json.loads((tmp_path / f"mlp_{program}.json").read_text())["traceEvents"]
        nodes = [e for e in events if e["ph"] == "X"]
        assert nodes and all(e["dur"] >= 0 for e in nodes)
        assert sum(e["ph"] == "C" for e in events) == len(nodes)  # the engine-storage counter after each node


def test_micro_benchmarks_report_every_shape_and_optimizer(monkeypatch):
    from trainrt.bench import gemm, optimizer_step

    monkeypatch.setattr(gemm, "SHAPES", [("small", 64, 32, 48), ("peak: small square", 128, 128, 128)])
    monkeypatch.setattr(gemm, "PEAK_SHAPE", "peak: small square")
    g = gemm.run(rounds=1, min_time=0.001)
    assert set(g["shapes"]) == {"small", "peak: small square"}
    assert g["peak_gflops"] == g["shapes"]["peak: small square"]["trainrt"]["gflops_best"] > 0
    assert "| small | 64 x 32 x 48 |" in gemm.markdown(g)

    o = optimizer_step.run(rounds=1, scale=0.001)
    assert set(o["results"]) >= {"trainrt FusedAdam", "torch AdamW fused=True", "copy: dst.copy_(src)"}
    assert o["copy_gb_per_s"] > 0 and o["fused_adam_vs_copy_limit"] > 0
    assert "FusedAdam speed-up over torch AdamW fused=True" in optimizer_step.markdown(o)


def test_python_op_bench_reports_the_cost_of_a_call_run_by_the_engine():
    from trainrt.bench import python_op

    f = python_op.run(calls=3, steps=5, rounds=1)
    assert f["in_engine"]
    for front in ("eager", "rtmodule"):
        assert f[front]["step_us"] > 0 and f[front]["step_us_with_3"] > 0
    assert "| RTModule (PythonOp) |" in python_op.markdown(f)


def test_step_in_backward_bench_times_every_variant_and_keeps_no_gradients_in_that_mode():
    from trainrt.bench import step_in_backward

    f = step_in_backward.run(width=64, layers=3, batch=2, rounds=1, steps=1)
    r = f["results"]
    assert len(r) == 6 and all(v["median_ms"] > 0 for v in r.values())
    grad_bytes = 3 * (64 * 64 + 64) * 4
    assert r["eager + torch AdamW fused=True"]["gradients_held_mb"] * 1e6 == grad_bytes
    # Stepped inside the backward, no gradient is returned: what the engine keeps is its arena only,
    # below the gradients a step after the backward needs.
    assert r["RTModule + FusedAdam step_in_backward"]["gradients_held_mb"] * 1e6 < grad_bytes
    assert "step_in_backward speed-up over eager + torch AdamW fused=True" in step_in_backward.markdown(f)
    # The optimizer's share: each variant's step minus forward + backward alone of its front end.
    fused = r["RTModule + FusedAdam"]
    assert fused["optimizer_ms"] == fused["median_ms"] - r["RTModule forward + backward only"]["median_ms"]
    eager = r["eager + torch AdamW fused=True"]
    assert eager["optimizer_ms"] == eager["median_ms"] - r["eager forward + backward only"]["median_ms"]
    assert "optimizer_ms" not in r["eager forward + backward only"]
    assert "| optimizer ms | optimizer GB/s (28 B/param) |" in step_in_backward.markdown(f)


@pytest.mark.slow
def test_largest_batch_bench_runs_on_a_tiny_budget(monkeypatch, capsys):
    """python -m trainrt.bench.largest_batch, one layer, short sequences: a row per mode."""
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    from trainrt.bench import largest_batch

    rows = largest_batch.main(["--layers", "1", "--seq", "8", "--max-batch", "2", "--steps", "1",
                               "--modes", "eager,rtmodule-2", "--budget-gib", "8"])
    assert [r["mode"] for r in rows] == ["eager", "rtmodule-2"]
    assert all(r["fitted"] is not None and r["fitted"][0] == 2 for r in rows)
    assert "| rtmodule-2 | 2 |" in capsys.readouterr().out
    assert "TRAINRT_MEMORY_OPT_LEVEL" not in os.environ  # the bench leaves the environment as it was


def test_trainer_bench_times_trainer_eager_against_rttrainer_in_the_engine():
    """python -m trainrt.bench.trainer on a 1-layer, 32-token bert-mini: every variant timed, the same
    first loss (same weights and batch), the engine variants in the engine, ratios to Trainer + eager."""
    pytest.importorskip("accelerate")
    from trainrt.bench import trainer

    f = trainer.run(rounds=2, warmup=1, steps=2, layers=1, seq=32)
    r = f["results"]
    assert list(r) == list(trainer.VARIANTS)
    assert f["in_engine"] == {"Trainer(RTModule)": True, "RTTrainer": True}
    for name, v in r.items():
        assert v["timed_steps"] == 2 * 2, name  # rounds x steps, warm-up left out
        assert 0 < v["best_ms"] <= v["median_ms"] <= v["p90_ms"], name
        assert v["steps_per_s"] == pytest.approx(1e3 / v["median_ms"])
        assert v["first_loss"] == pytest.approx(r["Trainer + eager"]["first_loss"], rel=1e-4), name
    assert r["Trainer + eager"]["speedup"] == 1.0
    assert r["RTTrainer"]["speedup"] == pytest.approx(r["RTTrainer"]["steps_per_s"] / r["Trainer + eager"]["steps_per_s"])
    text = trainer.markdown(f)
    assert "| RTTrainer |" in text and "steps/s / Trainer + eager" in text and "did not run in the engine" not in text
    clip = f["clip"]  # clipping alone: torch's against the engine's, on the same gradients
    # torch sums each tensor in f32 (3M values here: ~2e-5 off), the engine in double
    assert clip["first_norms"]["engine"] == pytest.approx(clip["first_norms"]["torch"], rel=1e-4)
    assert clip["bytes"] == 4 * sum(p.numel() for p in trainer.make_model(layers=1, seq=32).parameters())
    assert all(0 < clip[k]["best_ms"] <= clip[k]["median_ms"] for k in ("torch", "engine"))
    assert "| RTTrainer's: the engine's norm + rescale |" in text


def test_suite_runs_the_trainer_entry_and_reports_it(tmp_path, monkeypatch, capsys):
    from trainrt.bench import trainer

    real_run, calls = trainer.run, []

    def small_run(rounds, warmup, steps):  # the suite's call, on a 1-layer model to stay quick
        calls.append((rounds, warmup, steps))
        return real_run(rounds=1, warmup=1, steps=1, layers=1, seq=16)

    monkeypatch.setattr(trainer, "run", small_run)
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    main(["--models", "tiny", "--modes", "eager", "--steps", "1", "--warmup", "0", "--no-micro", "--no-sparsity",
          "--json", str(out_json), "--markdown", str(out_md)])
    assert calls == [(2, 2, 8)]  # the quick suite's rounds
    results = json.loads(out_json.read_text())
    assert set(results["trainer"]["results"]) == set(trainer.VARIANTS)
    assert "| Trainer + eager |" in out_md.read_text() and "| RTTrainer |" in capsys.readouterr().out


def test_suite_runs_the_sparsity_entry_and_reports_it(tmp_path, monkeypatch, capsys):
    from trainrt.bench import sparsity

    real_run, calls = sparsity.run, []

    def small_run(rounds, steps):  # the suite's call, on one model and one step to stay quick
        calls.append((rounds, steps))
        return real_run(models=("bert-mlm",), rounds=1, steps=1)

    monkeypatch.setattr(sparsity, "run", small_run)
    out_json, out_md = tmp_path / "bench.json", tmp_path / "bench.md"
    main(["--models", "tiny", "--modes", "eager", "--steps", "1", "--warmup", "0", "--no-micro", "--no-trainer",
          "--json", str(out_json), "--markdown", str(out_md)])
    assert calls == [(2, 5)]  # the quick suite's rounds
    results = json.loads(out_json.read_text())
    assert set(results["sparsity"]["bert-mlm"]["median_ms"]) == {"eager", "sparse-off", "labels-on", "sparse-on"}
    assert "| bert-mlm |" in out_md.read_text() and "| bert-mlm |" in capsys.readouterr().out


def test_first_step_columns_cache_cold_and_warm_and_the_fixed_cost_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TRAINRT_CACHE_DIR", raising=False)
    out_json = tmp_path / "bench.json"
    main(["--models", "tiny", "--modes", "eager,rtmodule", "--steps", "2", "--warmup", "0", "--no-micro",
          "--no-trainer", "--no-sparsity", "--json", str(out_json)])
    results = json.loads(out_json.read_text())
    assert results["machine"]["export_cache"] == "cold"
    modes = results["models"][0]["modes"]
    warm = modes["rtmodule"]["first_step_warm"]
    assert warm["from_cache"] and warm["first_step_s"] > 0  # the fresh process read the entry the run wrote
    assert "first_step_warm" not in modes["eager"]
    printed = capsys.readouterr().out
    assert "first warm s" in printed and "fixed cost of a training step (tiny: 3 x 32 wide, batch 16, SGD)" in printed
