"""One architecture's run: build it tiny, train STEPS steps in eager and through RTModule, compare.

Both copies start from one initialization (torch seed 0, then a deep copy), see the same batches
(batches.py) and step with SGD with momentum, the reference optimizer here: AdamW divides by the
root of the squared gradient, so the rounding noise of a gradient that is exactly zero in exact
arithmetic (a key bias under softmax) becomes a full lr-sized step that no two implementations
share; SGD moves such a parameter by lr times the noise.

Agreement (the tolerances of the HF tests, tests/python/test_hf_*.py):
- each step's loss within LOSS_RTOL relative;
- each parameter's update over the run (after - before) within UPDATE_RTOL of its largest element,
  plus UPDATE_ATOL: a wrong gradient moves a weight by about lr times its gradient, far beyond
  this, while rounding differs by ~1e-6 relative. Float buffers (BatchNorm's running statistics)
  within UPDATE_RTOL of their largest element.

A run that disagrees is checked twice for a model that amplifies rounding (the outcome is then
`unstable`, not `mismatch`; the detail gives both figures; neither counts as a pass):
- eager is rerun in float64, the reference for both float32 runs: where eager in float32 disagrees
  with it as well (deep BatchNorm stacks on a batch of 3, MobileNet's), rounding alone moves the
  result beyond the tolerances;
- the engine's run is repeated with eager beside it on the engine's own weights: before each
  engine step, eager gets a copy of the model's current weights and buffers and the same batch.
  Each gradient may be off float64's by ROUNDING_FACTOR times as much as eager's own rounding moves
  it (eager float32 against float64, and eager with every weight moved by one float32 rounding
  step), plus SAME_WEIGHTS_GRAD_RTOL of its largest element (a different summation order); the
  loss alike; buffers within UPDATE_RTOL. Where every step agrees, the engine computed each step
  right and the runs part because the model magnifies a last-bit difference. CPM-Ant at its second
  step: one rounding step of the weights moves eager's attention-weight gradients by 1.7e-4 of
  their largest element, the engine is 1.6e-4 off; with weights 1e-5 apart after one update, the
  two runs' gradients are 1e-2 apart.

Fallback is disabled (TRAINRT_FALLBACK_POLICY=FALLBACK_DISABLE): a model the engine cannot run
raises, and outcome.classify says why; a run that fell back to torch would prove nothing.
"""

from __future__ import annotations

import copy
import os
import time

import torch

from trainrt.coverage.architectures import Architecture
from trainrt.coverage.batches import NUM_LABELS, make_batches
from trainrt.coverage.outcome import Outcome, classify, first_line
from trainrt.coverage.shrink import shrink_config

STEPS = 3
LR = 0.05
MOMENTUM = 0.9
LOSS_RTOL = 1e-4
UPDATE_RTOL = 1e-3
UPDATE_ATOL = 1e-6
ROUNDING_FACTOR = 4  # how much farther from float64 than eager the engine may be, where eager is far
SAME_WEIGHTS_GRAD_RTOL = 1e-4
_CLASSIFIERS = ("seq-cls", "image-cls", "audio-cls")


class NotBuilt(Exception):
    """The sweep could not make the model, its inputs, or its eager step."""


def build(arch: Architecture):
    """(model in training mode, step -> batch) of `arch`, from torch's seed 0."""
    import transformers

    try:
        config = shrink_config(arch.model_type, NUM_LABELS if arch.task in _CLASSIFIERS else None)
        cls = getattr(transformers, arch.class_name)
        config = _config_for(cls, config)
        if arch.task == "causal-lm" and hasattr(config, "is_decoder"):
            config.is_decoder = True  # encoders in the causal-LM mapping (BERT, Reformer) then mask causally
        torch.manual_seed(0)
        model = cls(config).train()
        return model, make_batches(arch.task, config, model)
    except Exception as e:  # noqa: BLE001  (any failure to build is the sweep's, reported as such)
        raise NotBuilt(first_line(e)) from e


def _config_for(cls, config):
    """The config `cls` is made from: the model type's config, or the sub-config of the class's
    config_class in it (Llama4ForCausalLM takes the text config of Llama4Config)."""
    from transformers import PretrainedConfig

    wanted = getattr(cls, "config_class", None)
    if wanted is None or isinstance(config, wanted):
        return config
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig) and isinstance(value, wanted):
            return value
    return config


def _step(model, optimizer, batch: dict) -> float:
    loss = getattr(model(**batch), "loss", None)
    if loss is None:
        raise NotBuilt("the model returned no loss for the batch")
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)


def run(arch: Architecture, steps: int = STEPS) -> Outcome:
    """Trains `arch` both ways; the Outcome says how they compare or where the engine's run failed."""
    import trainrt

    os.environ["TRAINRT_FALLBACK_POLICY"] = "FALLBACK_DISABLE"
    outcome = Outcome(arch.name, arch.class_name, "ok")
    try:
        eager, batches = build(arch)
        ours_inner = copy.deepcopy(eager)
        before = {n: p.detach().clone() for n, p in eager.named_parameters()}
        opt_e = _sgd(eager)
        times_e, losses_e = [], []
        for i in range(steps):  # eager first: a model the sweep cannot run in torch is not the engine's
            start = time.perf_counter()
            losses_e.append(_step(eager, opt_e, batches(i)))
            times_e.append(time.perf_counter() - start)
    except NotBuilt as e:
        return _with(outcome, "not-built", str(e))
    except Exception as e:  # noqa: BLE001
        return _with(outcome, "not-built", f"eager step: {first_line(e)}")
    ours = trainrt.RTModule(ours_inner)
    opt_o = _sgd(ours_inner)
    times_o, losses_o = [], []
    try:
        for i in range(steps):
            start = time.perf_counter()
            losses_o.append(_step(ours, opt_o, batches(i)))
            times_o.append(time.perf_counter() - start)
    except Exception as e:  # noqa: BLE001
        status, detail, ops = classify(e)
        outcome = _with(outcome, status, detail)
        outcome.ops = ops
        return outcome
    if ours.fallback_reason is not None:  # the policy above forbids it; a pass must be the engine's
        return _with(outcome, "engine", f"fell back to PyTorch: {ours.fallback_reason}")
    outcome.first_step_s = times_o[0]
    if steps > 1:
        # The fastest later step of each: the least disturbed by other work on the machine.
        outcome.step_ratio = min(times_o[1:]) / max(min(times_e[1:]), 1e-9)
    outcome.losses = list(zip(losses_e, losses_o))
    problems = _disagreements(losses_e, losses_o, eager, ours_inner, before)
    if not problems:
        return outcome
    rounding = _float64_disagreements(arch, batches, steps, losses_e, losses_o, eager, before)
    if rounding:
        return _with(outcome, "unstable", "; ".join(problems) + "; eager float32 vs float64: " + "; ".join(rounding))
    same = _same_weights_disagreements(arch, batches, steps)
    if same is None:
        return _with(outcome, "unstable", "; ".join(problems) + "; on the engine's own weights eager agrees at every "
                     "step (the model magnifies rounding)")
    return _with(outcome, "mismatch", "; ".join(problems) + "; on the engine's own weights: " + same)


def _float64_disagreements(arch: Architecture, batches, steps: int, losses_e, losses_o, eager, before) -> list[str]:
    """How eager in float32 departs from eager in float64 on the same run. Empty where it does not,
    where the model cannot run in float64, or where the engine's losses are farther from float64's
    than ROUNDING_FACTOR times eager's (then the float32 comparison stands: a mismatch)."""
    try:
        reference, _ = build(arch)
        reference = reference.double()
        optimizer = _sgd(reference)
        losses = [_step(reference, optimizer, _float64(batches(i))) for i in range(steps)]
    except Exception:  # noqa: BLE001  (a model with a hard-coded dtype: no reference)
        return []
    if any(abs(lo - lr) > ROUNDING_FACTOR * abs(le - lr) + LOSS_RTOL * abs(lr)
           for lr, le, lo in zip(losses, losses_e, losses_o)):
        return []
    return _disagreements(losses, losses_e, reference, eager, before)


def _same_weights_disagreements(arch: Architecture, batches, steps: int) -> str | None:
    """The engine's run again, eager beside it on the engine's own weights and buffers at each step
    (module docstring): the first disagreement's figures, or None where every step agrees. Where the
    model runs in float64, that copy is the reference: the engine may be ROUNDING_FACTOR times as far
    from it as eager in float32 is (a gradient summed with cancellation, a BatchNorm bias's, rounds
    far from its largest element in both)."""
    import trainrt

    model, _ = build(arch)
    reference = copy.deepcopy(model)
    ours = trainrt.RTModule(model)
    optimizer = _sgd(model)
    for i in range(steps):
        reference.load_state_dict(model.state_dict())
        batch = batches(i)
        exact = _float64_gradients(reference, batch)
        jittered = _jittered_gradients(reference, batch, seed=i)
        reference.zero_grad(set_to_none=True)
        optimizer.zero_grad(set_to_none=True)
        loss = reference(**batch).loss
        loss.backward()
        le = loss.item()
        loss = ours(**batch).loss
        loss.backward()
        lo = loss.item()
        l64 = exact[0] if exact else le
        rounding = max(abs(le - l64), abs(jittered[0] - le))
        if not abs(lo - l64) <= ROUNDING_FACTOR * rounding + LOSS_RTOL * abs(l64):
            return f"loss step {i + 1}: {lo:.6g} vs eager {le:.6g}"
        mine = dict(model.named_parameters())
        for name, p in reference.named_parameters():
            g, h = p.grad, mine[name].grad
            if (g is None) != (h is None):
                return f"step {i + 1}: gradient of {name} is {'None' if h is None else 'set'} (eager: {'None' if g is None else 'set'})"
            if g is None:
                continue
            g64 = exact[1].get(name) if exact else None
            g64 = g.double() if g64 is None else g64
            scale = g64.abs().max().item()
            err = (h.double() - g64).abs().max().item()
            rounding = max((g.double() - g64).abs().max().item(), (jittered[1][name] - g).abs().max().item())
            if not err <= ROUNDING_FACTOR * rounding + SAME_WEIGHTS_GRAD_RTOL * scale + UPDATE_ATOL:
                return f"step {i + 1}: gradient of {name}: max |diff| {err:.2g} vs max |gradient| {scale:.2g}"
        mine = dict(model.named_buffers())
        for name, b in reference.named_buffers():
            if b.is_floating_point() and b.numel() and name in mine:
                scale, err = b.abs().max().item(), (b - mine[name]).abs().max().item()
                if not err <= UPDATE_RTOL * scale + UPDATE_ATOL:
                    return f"step {i + 1}: buffer {name}: max |diff| {err:.2g} vs max |value| {scale:.2g}"
        optimizer.step()
    return None


def _jittered_gradients(model: torch.nn.Module, batch: dict, seed: int) -> tuple[float, dict]:
    """(loss, parameter name -> gradient) of a copy of `model` whose weights are each moved by about
    one float32 rounding step (relative 2^-23, random signs): how far eager's own result moves
    when its weights round differently."""
    moved = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in moved.parameters():
            if p.is_floating_point():
                p.mul_(1 + 2.0 ** -23 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    loss = moved(**batch).loss
    loss.backward()
    return loss.item(), {n: p.grad if p.grad is not None else torch.zeros_like(p) for n, p in moved.named_parameters()}


def _float64_gradients(model: torch.nn.Module, batch: dict) -> tuple[float, dict] | None:
    """(loss, parameter name -> gradient) of a float64 copy of `model` on `batch`, or None where the
    model cannot run in float64 (a hard-coded dtype)."""
    try:
        exact = copy.deepcopy(model).double()
        loss = exact(**_float64(batch)).loss
        loss.backward()
    except Exception:  # noqa: BLE001
        return None
    return loss.item(), {n: p.grad for n, p in exact.named_parameters() if p.grad is not None}


def _float64(batch: dict) -> dict:
    return {k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in batch.items()}


def _with(outcome: Outcome, status: str, detail: str) -> Outcome:
    outcome.status, outcome.detail = status, detail
    return outcome


def _disagreements(losses_e, losses_o, eager, ours, before) -> list[str]:
    """The figures of each disagreement: losses first, then the worst parameter update and buffer."""
    problems = []
    for step, (le, lo) in enumerate(zip(losses_e, losses_o)):
        if not abs(lo - le) <= LOSS_RTOL * abs(le):
            problems.append(f"loss step {step + 1}: {lo:.6g} vs eager {le:.6g} (rel {abs(lo - le) / max(abs(le), 1e-12):.1e})")
            break
    worst = None  # (excess over the tolerance, text)
    params_o = dict(ours.named_parameters())
    for name, pe in eager.named_parameters():
        de = pe.detach() - before[name]
        do = params_o[name].detach() - before[name]
        scale = de.abs().max().item() if de.numel() else 0.0
        err = (de - do).abs().max().item() if de.numel() else 0.0
        excess = err / (UPDATE_RTOL * scale + UPDATE_ATOL)
        if not excess <= 1 and (worst is None or excess > worst[0]):
            worst = (excess, f"update of {name}: max |diff| {err:.2g} vs max |update| {scale:.2g}")
    buffers_o = dict(ours.named_buffers())
    for name, be in eager.named_buffers():
        bo = buffers_o.get(name)
        if bo is None or not be.is_floating_point() or not be.numel():
            continue
        err = (be - bo).abs().max().item()
        scale = be.abs().max().item()
        excess = err / (UPDATE_RTOL * scale + UPDATE_ATOL)
        if not excess <= 1 and (worst is None or excess > worst[0]):
            worst = (excess, f"buffer {name}: max |diff| {err:.2g} vs max |value| {scale:.2g}")
    if worst:
        problems.append(worst[1])
    return problems
