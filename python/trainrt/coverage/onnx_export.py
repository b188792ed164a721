"""The export sweep (`python -m trainrt.coverage --onnx`): ONNX files as torch.onnx.export writes
them, run and trained by the engine with no torch in the loop.

For each architecture of the tasks, built tiny as the model-zoo sweep builds it (run.build) and put
in eval mode (the shrunk configs have no dropout), the forward without labels is exported with
`torch.onnx.export(dynamo=True, optimize=False)` (the exporter's optimizer transposes weights into
new constants and merges initializers of equal values, such as LayerNorm's initial ones: a file that
trains those tied). Then:
- run: trainrt.Session's first output against eager's logits, and against onnxruntime's, within
  1e-4 relative to the largest logit;
- train (classifiers: logits (N, C)): TrainingSession with a cross-entropy loss appended and the
  model's buffers frozen, 5 steps of SGD with momentum, against eager training from the same weights
  (eval mode, as exported): losses within 1e-4 relative.
Each row says how far it got: export (the exporter's first line), unsupported (the op TrainRT lacks),
run / train mismatches (the figures), or ok; the summary counts them per task.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import tempfile

import numpy as np
import torch

from trainrt.coverage.architectures import Architecture
from trainrt.coverage.outcome import first_line

TRAIN_STEPS = 5
LR, MOMENTUM = 0.05, 0.9
TOL = 1e-4
_CLASSIFIERS = ("seq-cls", "image-cls", "audio-cls")
# Lowered to tensor ops by the importer (ir/onnx_sequences.h) where SequenceAt alone reads the sequence;
# otherwise the run names them.
_LOWERED_AT_IMPORT = {"SplitToSequence", "SequenceAt"}


@dataclasses.dataclass
class ExportOutcome:
    name: str
    status: str  # ok, not-built, export, unsupported, run-mismatch, train-mismatch, engine
    detail: str = ""
    trained: bool = False


def _inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "labels" and isinstance(v, torch.Tensor)}


def _logits(out):
    return out.logits if hasattr(out, "logits") else out[0]


def run_one(arch: Architecture) -> ExportOutcome:
    import onnx

    import trainrt
    from trainrt.coverage.run import NotBuilt, build

    try:
        model, batches = build(arch)
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False
        model.eval()
        batch = batches(0)
        kwargs = _inputs(batch)
        with torch.no_grad():
            want = _logits(model(**kwargs)).float()
    except NotBuilt as e:
        return ExportOutcome(arch.name, "not-built", str(e))
    except Exception as e:  # noqa: BLE001
        return ExportOutcome(arch.name, "not-built", f"eager: {first_line(e)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.onnx")
        try:
            torch.onnx.export(copy.deepcopy(model), (), path, kwargs=kwargs, dynamo=True, optimize=False)
        except Exception as e:  # noqa: BLE001
            return ExportOutcome(arch.name, "export", first_line(e))
        graph = onnx.load(path, load_external_data=False).graph
        names = [i.name for i in graph.input]
        missing = sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                          for n in graph.node} - _supported() - _LOWERED_AT_IMPORT)
        if missing:
            return ExportOutcome(arch.name, "unsupported", ", ".join(missing))
        feeds = [kwargs[n].numpy() for n in names]
        try:
            got = np.asarray(trainrt.Session(path).run(feeds)[0])
        except trainrt.UnsupportedOp as e:
            return ExportOutcome(arch.name, "unsupported", first_line(e))
        except Exception as e:  # noqa: BLE001
            return ExportOutcome(arch.name, "engine", f"run: {first_line(e)}")
        scale = float(want.abs().max()) + 1e-6
        diff = float(np.abs(got - want.numpy()).max()) if got.shape == tuple(want.shape) else float("inf")
        if diff > TOL * scale:
            return ExportOutcome(arch.name, "run-mismatch", f"logits: max |diff| {diff:.2g} vs max |logit| {scale:.2g}")
        ort_problem = _against_onnxruntime(path, dict(zip(names, feeds)), got, scale)
        if ort_problem:
            return ExportOutcome(arch.name, "run-mismatch", ort_problem)
        if arch.task not in _CLASSIFIERS or want.dim() != 2:
            return ExportOutcome(arch.name, "ok", "run only (logits not (N, C))")
        initializers = {i.name for i in graph.initializer}
        buffers = [n for n, _ in model.named_buffers() if n in initializers]
        return _train(arch, model, batches, path, names, graph.output[0].name, buffers)


def _against_onnxruntime(path, feeds: dict, got, scale: float) -> str:
    try:
        import onnxruntime as ort
    except ImportError:
        return ""
    ort.set_default_logger_severity(3)  # its notes on constant folding are not the sweep's
    try:
        (reference,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[:1]
    except Exception as e:  # noqa: BLE001  (onnxruntime's own limits are not ours: reported, not failed)
        return ""
    diff = float(np.abs(got - reference).max())
    return "" if diff <= TOL * scale else f"against onnxruntime: max |diff| {diff:.2g} vs max |logit| {scale:.2g}"


def _train(arch, model, batches, path, names, logits_name, buffers) -> ExportOutcome:
    """`buffers`: the model's buffers among the file's initializers (BatchNorm's running statistics,
    rotary inv_freq), frozen: TrainingSession trains every float initializer it is not told to keep."""
    import trainrt

    try:
        trainer = trainrt.TrainingSession(path, append_loss="cross_entropy", output=logits_name, label="label",
                                          optimizer="sgd", lr=LR, momentum=MOMENTUM, frozen=buffers)
    except Exception as e:  # noqa: BLE001
        return ExportOutcome(arch.name, "engine", f"train: {first_line(e)}")
    eager = copy.deepcopy(model)  # eval mode as exported: the shrunk configs have no dropout
    optimizer = torch.optim.SGD(eager.parameters(), lr=LR, momentum=MOMENTUM)
    for step in range(TRAIN_STEPS):
        batch = batches(step)
        kwargs = _inputs(batch)
        try:
            loss = trainer.train_step([kwargs[n].numpy() for n in names] + [batch["labels"].numpy()])
            trainer.optimizer_step()
        except Exception as e:  # noqa: BLE001
            return ExportOutcome(arch.name, "engine", f"train step {step}: {first_line(e)}")
        optimizer.zero_grad()
        want = torch.nn.functional.cross_entropy(_logits(eager(**kwargs)).float(), batch["labels"])
        want.backward()
        optimizer.step()
        if abs(loss - float(want.detach())) > TOL * abs(float(want.detach())):
            return ExportOutcome(arch.name, "train-mismatch",
                                 f"loss step {step}: {loss:.6g} vs eager {float(want.detach()):.6g}")
    return ExportOutcome(arch.name, "ok", f"trained {TRAIN_STEPS} steps", trained=True)


_SUPPORTED: set[str] | None = None


def _supported() -> set[str]:
    global _SUPPORTED
    if _SUPPORTED is None:
        import trainrt

        _SUPPORTED = {op if dom in ("", "ai.onnx") else f"{dom}::{op}" for dom, op in trainrt.supported_ops()}
    return _SUPPORTED


def summary(outcomes: list[ExportOutcome]) -> list[str]:
    by_task: dict[str, list[ExportOutcome]] = {}
    for o in outcomes:
        by_task.setdefault(o.name.split("/")[0], []).append(o)
    lines = [f"{sum(o.status == 'ok' for o in outcomes)} ran in TrainRT as eager and onnxruntime "
             f"({sum(o.trained for o in outcomes)} of them also trained as eager), {len(outcomes)} tried"]
    for task, group in by_task.items():
        counts: dict[str, int] = {}
        for o in group:
            counts[o.status] = counts.get(o.status, 0) + 1
        lines.append(f"  {task}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    missing: dict[str, int] = {}
    for o in outcomes:
        if o.status == "unsupported":
            for op in o.detail.split(", "):
                missing[op] = missing.get(op, 0) + 1
    if missing:
        lines.append("  missing ops (architectures): " +
                     ", ".join(f"{op} {n}" for op, n in sorted(missing.items(), key=lambda kv: -kv[1])))
    return lines
