"""TrainRT against ONNX Runtime's training stacks: the ratios, from `make bench-peers`' results.

The peers run in their own venv (peers.py writes build/bench-peers/peers.json: ORTModule and eager
torch 2.4.1 per suite model, ORT's on-device training API on two ONNX files). This module, in the
suite's own run, puts TrainRT beside them: RTModule's step from this run's models, and
TrainingSession timed here on the very ONNX files and batches the on-device API trained, with the
same loss (cross-entropy appended) and optimizer (AdamW, lr 1e-4, decay 0.01: the artifacts' default). A ratio under 1 means TrainRT's
step is shorter. The two venvs' runs are separate processes on the same machine, so run them back
to back on an idle machine (make bench-peers does).
"""

from __future__ import annotations

import json
import os

import numpy as np

from trainrt.bench.peers import time_steps

DEFAULT_PATH = "build/bench-peers/peers.json"


def load(path: str | None) -> dict | None:
    """The peers' results, or None when `make bench-peers` has not written them."""
    path = path or DEFAULT_PATH
    if not os.path.exists(path):
        return None
    with open(path) as f:
        peers = json.load(f)
    peers["directory"] = os.path.dirname(os.path.abspath(path))
    return peers


def time_training_session(onnx_path: str, x: np.ndarray, y: np.ndarray, warmup: int, steps: int) -> dict:
    """trainrt.TrainingSession on the peers' ONNX file: cross-entropy appended, AdamW, lr 1e-4."""
    import trainrt

    session = trainrt.TrainingSession(onnx_path, append_loss="cross_entropy", output="logits", label="y",
                                      optimizer="adamw", lr=1e-4, weight_decay=0.01)

    def step() -> float:
        loss = session.train_step([x, y])
        session.optimizer_step()
        return float(np.asarray(loss).reshape(-1)[0])

    return time_steps(step, warmup, steps)


def run(peers: dict, results: dict) -> dict:
    """The comparison: per model, this run's RTModule step against the peers'; per ONNX file,
    TrainingSession timed now against ORT's on-device API."""
    ours = {m["model"]: m["modes"] for m in results.get("models", [])}
    rows = []
    for name, entry in peers.get("models", {}).items():
        rt = ours.get(name, {}).get("rtmodule", {}).get("step_median_s")
        row = {"model": name, "rtmodule_s": rt}
        for peer in ("ortmodule", "eager"):
            peer_s = entry["modes"].get(peer, {}).get("step_median_s")
            row[f"{peer}_s"] = peer_s
            row[f"{peer}_error"] = entry["modes"].get(peer, {}).get("error")
            row[f"ratio_to_{peer}"] = rt / peer_s if rt and peer_s else None
        rows.append(row)
    api = []
    for name, entry in peers.get("training_api", {}).items():
        directory = peers["directory"]
        x, y = np.load(os.path.join(directory, entry["x"])), np.load(os.path.join(directory, entry["y"]))
        onnx_path = os.path.join(directory, os.path.basename(entry["onnx"]))
        try:
            session = time_training_session(onnx_path, x, y, peers["warmup"], peers["steps"])
        except Exception as err:  # noqa: BLE001  (reported, not fatal)
            session = {"error": f"{type(err).__name__}: {err}"}
        ort = entry["ort"]
        ratio = (session["step_median_s"] / ort["step_median_s"]
                 if "step_median_s" in session and "step_median_s" in ort else None)
        api.append({"model": name, "training_session": session, "ort": ort, "ratio": ratio})
    return {"torch": peers.get("torch"), "onnxruntime": peers.get("onnxruntime"), "rtmodule": rows,
            "training_api": api}


def _ms(seconds) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e3:.3f}" if seconds < 1e-3 else f"{seconds * 1e3:.1f}"


def _ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def markdown(report: dict) -> str:
    lines = [f"Peers (make bench-peers: torch {report['torch']}, onnxruntime-training {report['onnxruntime']}); "
             "step medians in ms, ratio = TrainRT / peer (under 1: TrainRT is faster)", "",
             "| model | RTModule | ORTModule | ratio | eager torch 2.4 | ratio |", "|---|---|---|---|---|---|"]
    for r in report["rtmodule"]:
        ort = r["ortmodule_error"] or _ms(r["ortmodule_s"])
        lines.append(f"| {r['model']} | {_ms(r['rtmodule_s'])} | {ort} | {_ratio(r['ratio_to_ortmodule'])} | "
                     f"{_ms(r['eager_s'])} | {_ratio(r['ratio_to_eager'])} |")
    if report["training_api"]:
        lines += ["", "| ONNX file | TrainingSession | ORT on-device training | ratio | first step ours / ORT (s) |",
                  "|---|---|---|---|---|"]
        for a in report["training_api"]:
            ours, ort = a["training_session"], a["ort"]
            first = (f"{ours['first_step_s']:.2f} / {ort['first_step_s']:.2f}"
                     if "first_step_s" in ours and "first_step_s" in ort else "-")
            lines.append(f"| {a['model']} | {ours.get('error') or _ms(ours.get('step_median_s'))} | "
                         f"{ort.get('error') or _ms(ort.get('step_median_s'))} | {_ratio(a['ratio'])} | {first} |")
    return "\n".join(lines)
