"""ONNX Runtime's training stacks timed on the suite's models, for `make bench-peers`.

Runs in .venv-peers (torch 2.4.1 and onnxruntime-training-cpu 1.19.2, which cannot share TrainRT's
venv: ORTModule needs that torch, and onnxruntime-training conflicts with onnxruntime), as a script:

    .venv-peers/bin/python python/trainrt/bench/peers.py --out build/bench-peers

It imports no TrainRT code but the benchmark's model definitions (models.py, cnn.py, bert.py: plain
torch modules, loaded without trainrt/__init__.py), and writes build/bench-peers/peers.json:
  * per model of the quick suite: torch 2.4.1 eager and ORTModule, each its AdamW step
    (torch.optim.AdamW, the suite's lr and decay), the first step timed apart, then warm-up steps and
    timed steps interleaved as measure.py does (step i runs both on the same batch), medians;
  * ORT's on-device training API (`artifacts.generate_artifacts`, then CheckpointState / Module /
    Optimizer) on two ONNX files written here: the suite's MLP and gpt2-mini, each without its loss
    (the artifacts append cross-entropy, as TrainRT's TrainingSession does on the same file).
`python -m trainrt.bench` reads the file and prints TrainRT's ratio to each peer, timing
TrainingSession on the same ONNX files in its own run (report.peer_rows).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
# Run as a script, its directory leads sys.path, and the bench's profile.py would stand for the
# standard library's (torch imports cProfile, which imports profile).
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
LR, WEIGHT_DECAY = 1e-4, 0.01  # modes.py's, the same for every mode
QUICK = ["tiny", "mlp", "cnn", "gpt2-mini", "bert-mini"]
API_MODELS = ["mlp", "gpt2-mini"]  # trained through ORT's on-device training API on exported ONNX


def _bench_models():
    """trainrt.bench.models without trainrt/__init__.py (which loads the engine, built for another torch)."""
    for name, path in (("trainrt", os.path.dirname(_HERE)), ("trainrt.bench", _HERE)):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [path]
            sys.modules[name] = package
    from trainrt.bench.models import MODELS  # noqa: E402  (after the stand-in packages)

    return MODELS


def _optimizer(params, sgd: bool):
    if sgd:
        return torch.optim.SGD(params, lr=LR)
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


class _Torch:
    """A module and its optimizer: one training step per call, the loss returned."""

    def __init__(self, module: nn.Module, sgd: bool):
        self.module, self.optimizer = module, _optimizer(module.parameters(), sgd)

    def step(self, args) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.module(*args)
        loss.backward()
        self.optimizer.step()
        return loss.item()


def _modes(model: nn.Module, sgd: bool) -> dict:
    from onnxruntime.training.ortmodule import DebugOptions, LogLevel, ORTModule

    return {"eager": _Torch(copy.deepcopy(model), sgd),
            "ortmodule": _Torch(ORTModule(copy.deepcopy(model), DebugOptions(log_level=LogLevel.WARNING)), sgd)}


def time_model(spec, warmup: int, steps: int) -> dict:
    """torch eager and ORTModule on one model: first step, then interleaved timed steps, medians."""
    torch.manual_seed(0)
    model = spec.make()
    copy.deepcopy(model)(*spec.batch(0)).backward()  # torch's one-time set-up off the numbers
    results, running = {}, {}
    for name, mode in _modes(model, spec.sgd).items():
        try:
            start = time.perf_counter()
            first_loss = mode.step(spec.batch(0))
            results[name] = {"first_step_s": time.perf_counter() - start, "first_loss": first_loss}
            for i in range(warmup):
                mode.step(spec.batch(1 + i))
            running[name] = mode
        except Exception as err:  # noqa: BLE001  (a peer that fails is a result)
            results[name] = {"error": f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err) else ''}"}
    times = {name: [] for name in running}
    order = list(running)
    for i in range(steps if order else 0):
        args = spec.batch(1 + warmup + i)
        shift = i % len(order)
        for name in order[shift:] + order[:shift]:
            start = time.perf_counter()
            loss = running[name].step(args)
            times[name].append(time.perf_counter() - start)
            results[name]["last_loss"] = loss
    for name, t in times.items():
        results[name].update({"steps": len(t), "step_median_s": statistics.median(t)})
    return results


class _Logits(nn.Module):
    """A suite model without its loss, for the ONNX file: (inputs) -> logits (N, classes)."""

    def __init__(self, model: nn.Module, name: str):
        super().__init__()
        self.model, self.name = model, name

    def forward(self, x):
        if self.name == "mlp":
            return self.model.net(x)
        gpt = self.model  # models.GPT: the blocks without the loss
        T = x.shape[1]
        h = gpt.wte(x) + gpt.wpe(torch.arange(T))
        for block in gpt.blocks:
            h = block(h, gpt.mask[:T, :T])
        logits = gpt.head(gpt.ln_f(h))
        return logits.reshape(-1, logits.shape[-1])


def export_onnx(spec, name: str, directory: str) -> dict:
    """The model's logits graph as ONNX (torch 2.4's exporter in training mode, opset 16: no folding, and equal weights are not merged as eval mode merges them; LayerNormalization of opset 17 has no gradient in ORT's builder), with a
    batch of inputs and labels saved beside it for both trainers."""
    torch.manual_seed(0)
    model = _Logits(spec.make(), name).train()
    x, y = spec.batch(0)
    path = os.path.join(directory, f"{name}.onnx")
    torch.onnx.export(model, (x,), path, input_names=["x"], output_names=["logits"], opset_version=16,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    np.save(os.path.join(directory, f"{name}.x.npy"), x.numpy())
    np.save(os.path.join(directory, f"{name}.y.npy"), y.reshape(-1).numpy())
    return {"onnx": path, "x": f"{name}.x.npy", "y": f"{name}.y.npy"}


def time_training_api(path: str, x: np.ndarray, y: np.ndarray, directory: str, warmup: int, steps: int) -> dict:
    """ORT's on-device training on the ONNX file: artifacts with cross-entropy and AdamW, then steps."""
    import onnx
    from onnxruntime.training import artifacts
    from onnxruntime.training.api import CheckpointState, Module, Optimizer

    model = onnx.load(path)
    params = [init.name for init in model.graph.initializer if init.data_type == onnx.TensorProto.FLOAT
              and len(init.dims) > 0 and not init.name.endswith("mask")]
    artifacts.generate_artifacts(model, requires_grad=params, loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=directory)
    state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
    module = Module(os.path.join(directory, "training_model.onnx"), state, os.path.join(directory, "eval_model.onnx"))
    optimizer = Optimizer(os.path.join(directory, "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)
    module.train()

    def step() -> float:
        loss = module(x, y)
        optimizer.step()
        module.lazy_reset_grad()
        return float(loss)

    return {**time_steps(step, warmup, steps), "parameters": len(params)}


def time_steps(step, warmup: int, steps: int) -> dict:
    """One trainer on one batch (`step()` -> loss): the first step timed apart, warm-up steps, then the
    median of `steps` timed steps. The on-device API here and TrainingSession (peer_report.py) alike."""
    start = time.perf_counter()
    first_loss = step()
    first = time.perf_counter() - start
    for _ in range(warmup):
        step()
    times = []
    loss = first_loss
    for _ in range(steps):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
    return {"first_step_s": first, "first_loss": first_loss, "last_loss": loss, "steps": steps,
            "step_median_s": statistics.median(times)}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/bench-peers")
    parser.add_argument("--models", default=",".join(QUICK))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # errors only: ORTModule's graph builds log every transformer
    os.makedirs(args.out, exist_ok=True)
    models = _bench_models()
    result = {"torch": torch.__version__, "onnxruntime": onnxruntime.__version__, "threads": torch.get_num_threads(),
              "warmup": args.warmup, "steps": args.steps, "models": {}, "training_api": {}}
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    # The ONNX files first: importing ORTModule registers its own export of embeddings (as ATen ops,
    # which only ORTModule's graphs run), and the files must be what torch.onnx.export writes.
    for name in [n for n in names if n in API_MODELS]:
        files = export_onnx(models[name](), name, args.out)
        x, y = np.load(os.path.join(args.out, files["x"])), np.load(os.path.join(args.out, files["y"]))
        directory = os.path.join(args.out, f"{name}-artifacts")
        os.makedirs(directory, exist_ok=True)
        try:
            timing = time_training_api(files["onnx"], x, y, directory, args.warmup, args.steps)
        except Exception as err:  # noqa: BLE001  (a peer that fails is a result)
            timing = {"error": f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err) else ''}"}
        result["training_api"][name] = {**files, "ort": timing}
        print(name, "training api", json.dumps(timing), flush=True)
    for name in names:
        spec = models[name]()
        result["models"][name] = {"description": spec.description, "modes": time_model(spec, args.warmup, args.steps)}
        print(name, json.dumps(result["models"][name]["modes"]), flush=True)
    with open(os.path.join(args.out, "peers.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
