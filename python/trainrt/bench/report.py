"""The suite's results as a stdout table, JSON and a markdown table; ratios are to PyTorch eager."""

from __future__ import annotations

import json

_MIB = 1 << 20
_HEADER = ["model", "mode", "step ms (median)", "p10-p90 ms", "step / eager", "first step s", "first / eager",
           "first warm s", "warm / eager", "peak RSS +MiB", "RSS / eager", "peak tensor MiB", "tensor / eager", "engine arena MiB", "GFLOP/s", "% peak", "loss first -> last"]


def _ratio(value, base) -> str:
    return f"{value / base:.2f}x" if base else "-"


def _ms(seconds: float) -> str:
    """A step time in ms, to the µs under 10 ms (the tiny model's step is RTModule's fixed cost)."""
    return f"{seconds * 1e3:.3f}" if seconds < 1e-2 else f"{seconds * 1e3:.1f}"


def rows(results: dict) -> list[list[str]]:
    out = []
    for entry in results["models"]:
        eager = entry["modes"].get("eager", {})
        for mode, r in entry["modes"].items():
            if "error" in r:
                out.append([entry["model"], mode, f"error: {r['error'].splitlines()[0][:160]}"] + [""] * (len(_HEADER) - 3))
                continue
            engine = r.get("engine_memory")
            warm_entry = r.get("first_step_warm", {})
            warm = warm_entry.get("first_step_s")
            out.append([
                entry["model"], mode,
                _ms(r["step_median_s"]),
                f"{_ms(r['step_p10_s'])}-{_ms(r['step_p90_s'])}",
                _ratio(r["step_median_s"], eager.get("step_median_s")),
                f"{r['first_step_s']:.2f}",
                _ratio(r["first_step_s"], eager.get("first_step_s")),
                "-" if warm is None else f"{warm:.2f}" + ("" if warm_entry["from_cache"] else " (miss)"),
                "-" if warm is None else _ratio(warm, eager.get("first_step_s")),
                f"{r['peak_rss_increase_bytes'] / _MIB:.0f}",
                _ratio(r["peak_rss_increase_bytes"], eager.get("peak_rss_increase_bytes")),
                f"{r['peak_tensor_bytes'] / _MIB:.1f}",
                _ratio(r["peak_tensor_bytes"], eager.get("peak_tensor_bytes")),
                f"{(engine['planned_arena_bytes'] + engine['peak_dynamic_bytes']) / _MIB:.1f}" if engine else "-",
                f"{r['flops_per_s'] / 1e9:.1f}",
                f"{100 * r['fraction_of_peak']:.1f}",
                f"{r['first_loss']:.4f} -> {r['last_loss']:.4f}",
            ])
    return out


def _notes(results: dict) -> list[str]:
    m = results["machine"]
    return [f"{results['suite']} suite; {results['steps']} timed steps per mode after {results['warmup']} warm-up steps, "
            f"interleaved; torch {m['torch']}, {m['torch_threads']} torch threads, {m['cpus']} CPUs.",
            f"first step: the first training step of a fresh copy (RTModule: capture + engine build, export cache "
            f"{m.get('export_cache', 'cold')}; compile: dynamo + inductor, inductor cache {m['inductor_cache']}). "
            "first warm: RTModule's first step in a fresh process whose export cache the run above filled "
            "(no torch.export, no translation).",
            ] + _fixed_cost(results) + [
            f"GFLOP/s: analytic FLOPs of the matmuls and convolutions (transformers: 6 x matmul weights x tokens + 12 x L x B x T^2 x C for attention) "
            f"over the median step; % of a {m['peak_gflops']:.0f} GFLOP/s peak ({m['peak_source']}).",
            "peak RSS +MiB: VmHWM growth over each mode's first and warm-up steps (modes run one after another; "
            "memory freed by an earlier mode can be reused by a later one, so later modes can read low; "
            "torch.compile's compile workers run in other processes and are not counted). "
            "peak tensor MiB: the most tensor bytes live at once in one step beyond parameters and optimizer "
            "state (torch.profiler memory events for torch's allocator, plus the engine's own storage count: "
            "arenas, saved values, gradients and what it keeps between steps). "
            "engine arena: RTModule's planned arena (one block the forward and backward programs share) + dynamic peak bytes."
            ] + _engine_breakdown(results)


def _fixed_cost(results: dict) -> list[str]:
    """The tiny model's line: 3 x 32 wide at batch 16 with SGD computes almost nothing, so its step
    time is each mode's fixed cost per training step."""
    tiny = next((e["modes"] for e in results["models"] if e["model"] == "tiny"), None)
    if not tiny or "step_median_s" not in tiny.get("eager", {}):
        return []
    eager = tiny["eager"]["step_median_s"]
    costs = [f"{mode} {r['step_median_s'] * 1e6:.0f} µs ({r['step_median_s'] / eager:.2f}x)"
             for mode, r in tiny.items() if mode != "eager" and "step_median_s" in r]
    return [f"fixed cost of a training step (tiny: 3 x 32 wide, batch 16, SGD): eager {eager * 1e6:.0f} µs, "
            + ", ".join(costs) + "."]


def _engine_breakdown(results: dict) -> list[str]:
    """Per engine mode, what its peak tensor bytes are made of: the engine keeps its arena and the model's
    outputs between steps; a step's forward saves values for its backward, which lets go of each after its
    last reader (those it leaves in the arena's idle bytes are part of the arena, and said so); "the step's
    own" is the rest the step allocates and frees: gradients (handed to torch), kernel scratch, and torch's
    part."""
    lines = []
    for entry in results["models"]:
        for mode, r in entry["modes"].items():
            engine = r.get("engine_memory")
            if not engine or "peak_tensor_bytes" not in r:
                continue
            parts = {"arena": engine["arena_capacity_bytes"], "kept outputs": engine["kept_output_bytes"],
                     "saved values": engine["saved_value_bytes"]}
            parts["the step's own"] = r["peak_tensor_bytes"] - sum(parts.values())
            in_arena = engine.get("saved_in_arena_bytes", 0)
            lines.append(f"{entry['model']} {mode} peak tensor MiB {r['peak_tensor_bytes'] / _MIB:.1f} = "
                         + " + ".join(f"{name} {b / _MIB:.1f}" for name, b in parts.items())
                         + (f" ({in_arena / _MIB:.1f} MiB of saved values in the arena)" if in_arena else ""))
    return lines


def text_table(results: dict) -> str:
    table = [_HEADER] + rows(results)
    widths = [max(len(r[i]) for r in table if len(r) > i and not r[2].startswith("error"))
              for i in range(len(_HEADER))]
    lines = []
    for r in table:
        if r[2].startswith("error"):
            lines.append("  ".join([r[0].ljust(widths[0]), r[1].ljust(widths[1]), r[2]]))
        else:
            lines.append("  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(lines + [""] + _notes(results))


def markdown_table(results: dict) -> str:
    lines = ["| " + " | ".join(_HEADER) + " |", "|" + "---|" * len(_HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(results)]
    lines += [""] + [f"- {n}" for n in _notes(results)]
    if results.get("micro"):
        from trainrt.bench import gemm, optimizer_step, python_op, step_in_backward

        lines += ["", gemm.markdown(results["micro"]["gemm"]), "", optimizer_step.markdown(results["micro"]["optimizer"]),
                  "", step_in_backward.markdown(results["micro"]["step_in_backward"]),
                  "", python_op.markdown(results["micro"]["python_op"])]
    if results.get("ddp"):
        from trainrt.bench import ddp

        lines += ["", ddp.markdown(results["ddp"])]
    if results.get("trainer"):
        from trainrt.bench import trainer

        lines += ["", trainer.markdown(results["trainer"])]
    if results.get("sparsity"):
        from trainrt.bench import sparsity

        lines += ["", sparsity.markdown(results["sparsity"])]
    return "\n".join(lines) + "\n"


def write_json(results: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
