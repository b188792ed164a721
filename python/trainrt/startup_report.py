"""The start-up table RTModule logs at INFO when it builds an engine: what was captured, what is on,
and what it cost; and ORTModule's "MemoryOptimizer Summary" of the recompute patterns.

    _log.info("%s", startup_report.table(module, engine, runtime, debug, memory_plan, autocast,
                                         capture_s, build_s, source))
"""

from __future__ import annotations

from trainrt import _C


def table(module, engine, runtime, debug, memory_plan, autocast, capture_s: float, build_s: float,
          source: str | None) -> str:
    """The table, one `name  value` row per line (`source`: where the capture came from when it was
    not captured now)."""
    captured = engine.captured
    rows = [("model", type(module).__name__),
            ("mode", "training" if module.training else "eval"),
            ("parameters / inputs / outputs", f"{len(captured.param_inputs)} / {len(captured.user_inputs)} / {len(captured.outputs)}"),
            ("input dims", _dims(captured)),
            ("size conditions (shape guards)", "; ".join(captured.guards) or "none beyond the dims' ranges"),
            ("branches on tensor values", "; ".join(c for _, c in captured.branch_checks) + ", checked each call"
             if captured.branch_checks else "none"),
            ("mixed precision", f"{autocast} as torch.autocast runs it" if autocast else "off (f32)"),
            ("memory planning, in-place reuse, views, constant folding", "on"),
            ("compute optimizer (fusions, saved-set choice)", "on" if runtime.compute_optimizer else "off"),
            ("graph passes (forward, before autodiff)", engine.programs.forward_pass_summary),
            ("generated kernels", _codegen(engine, runtime)),
            ("memory optimizer", _memory(engine, engine.memory_opt_level)),
            *([("memory budget", memory_plan.describe())] if memory_plan else []),
            ("label sparsity", _label_sparsity(engine, runtime)),
            ("embedding sparsity", _padding_elimination(engine, runtime)),
            ("fallback policy", runtime.fallback_policy.name or str(runtime.fallback_policy)),
            ("save ONNX", debug.save_path if debug.save_onnx else "off"),
            ("capture (torch.export + translation)",
             f"{capture_s * 1e3:.0f} ms" + (f" ({source})" if source else "")),
            ("engine build (autodiff + partition)", f"{build_s * 1e3:.0f} ms")]
    width = max(len(k) for k, _ in rows)
    return "trainrt RTModule start-up\n" + "\n".join(f"  {k:<{width}}  {v}" for k, v in rows)


def _label_sparsity(engine, runtime) -> str:
    if not runtime.sparse_optimizer or not runtime.compute_optimizer:
        return "off"
    n = engine.programs.sparse_losses
    return f"on: {n} loss{'es' if n != 1 else ''} with ignored labels run on the valid rows" if n else \
        "on: no loss with ignore_index and a mean or sum reduction in the graph"


def _codegen(engine, runtime) -> str:
    if not runtime.use_codegen:
        return "off (TRAINRT_USE_CODEGEN=1 turns it on)"
    if not runtime.compute_optimizer:
        return "off: needs the compute optimizer"
    fused = {row["pass"]: row["nodes_removed"] for row in engine.programs.forward_pass_report
             if row["pass"].startswith("ElementwiseFusion")}
    stats = _C.codegen_stats()
    return (f"{fused.get('ElementwiseFusion', 0)} forward and {fused.get('ElementwiseFusion (backward)', 0)} backward "
            f"ops fewer; {stats['units_compiled']} units compiled, {stats['units_from_cache']} from the disk cache, "
            f"{stats['compile_seconds']:.2f} s in this process ({stats['compiler']})")


def _padding_elimination(engine, runtime) -> str:
    if not runtime.embedding_sparse_optimizer or not runtime.compute_optimizer:
        return "off"
    what = engine.programs.padding_elimination
    return f"on: {what}" if what.endswith("kept tokens") else f"on, not applied: {what}"


def _memory(engine, level: int) -> str:
    """The start-up table's memory line: the level, and what it recomputed."""
    p = engine.programs
    layers = len(set(engine.captured.layers.values()))
    what = {0: "cheap recompute only", 1: "each layer but its products' outputs", 2: "each layer, products too"}
    line = f"level {level} ({what[level]}): {layers} repeated layers found"
    if level:
        line += f", {p.layers_recomputed} recomputed ({p.nodes_recomputed} forward nodes run again in the backward)"
    return line


def recompute_summary(patterns: list[dict]) -> str:
    """ORTModule's "MemoryOptimizer Summary": each recompute pattern, what one occurrence frees, how
    often it was found and recomputed, and why."""
    header = ("pattern", "frees per occurrence", "found", "recomputed", "because")
    rows = [header]
    for p in patterns:
        because = f"config {p['config']}" if p["config"] else ("default: cheap" if p["cheap"] else
                                                                "not cheap: name it in the config")
        freed = f"{p['freed']} ({p['freed_bytes']} bytes)" if p["found"] else "(no occurrence)"
        rows.append((p["pattern"], freed, str(p["found"]), str(p["applied"]), because))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return ("trainrt MemoryOptimizer Summary (TRAINRT_MEMORY_OPT_CONFIG=\"<pattern>:<0|1>:<count>,...\" "
            "changes a row)\n" + "\n".join(lines))


def _dims(captured) -> str:
    """The user inputs' dims as captured, symbolic ones by name: '(s0, s1) (s0, s1) (s0, 1000)'."""
    return " ".join("(" + ", ".join(str(d) for d in dims) + ")" for dims in captured.input_dims) or "none"
