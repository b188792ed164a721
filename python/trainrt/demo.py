"""`make demo`: the best end-to-end runs the engine can do today.

1. Training: an MLP on scikit-learn's handwritten digits, trained by the C++ engine
   (TrainingSession: autodiff, planned forward+backward program, fused AdamW) and by PyTorch eager
   from the same initial weights on the same batches: the loss curves agree, and the step-time
   ratio and held-out accuracy are printed.
2. Inference: a GPT-style transformer (token embedding via Gather, LayerNormalization, causal
   self-attention with MatMul/Softmax and a mask, GELU MLP, residuals) run through TrainRT and
   onnxruntime: outputs agree; step-time ratio, planned memory and top ops by time.

    python -m trainrt.demo [--steps 300] [--layers 4] [--hidden 256] [--seq 128] [--batch 8] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import trainrt


def transformer_model(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> bytes:
    """ONNX model: tokens (batch, seq) int64 -> logits (batch, seq, vocab)."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def weight(name, shape, scale=0.02):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype=dtype), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    head_dim = hidden // heads
    x = node("Gather", [weight("wte", (vocab, hidden)), "tokens"], "embed")
    x = node("Add", [x, weight("wpe", (seq, hidden))], "embed_pos")
    mask = const("causal_mask", np.triu(np.full((seq, seq), -1e9, np.float32), 1), np.float32)
    split_heads = const("split_heads", [0, seq, heads, head_dim])
    merge_heads = const("merge_heads", [0, seq, hidden])
    scale = const("scale", 1.0 / np.sqrt(head_dim), np.float32)
    for i in range(layers):
        p = f"l{i}_"
        h = node("LayerNormalization", [x, weight(p + "ln1_g", (hidden,), 1.0), weight(p + "ln1_b", (hidden,))], p + "ln1", axis=-1)
        qkv = []
        for part in "qkv":
            t = node("MatMul", [h, weight(p + "w" + part, (hidden, hidden))], p + part)
            t = node("Reshape", [t, split_heads], p + part + "_heads")
            perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]
            qkv.append(node("Transpose", [t], p + part + "_t", perm=perm))
        scores = node("MatMul", [qkv[0], qkv[1]], p + "scores")
        scores = node("Mul", [scores, scale], p + "scaled")
        scores = node("Add", [scores, mask], p + "masked")
        probs = node("Softmax", [scores], p + "probs", axis=-1)
        att = node("MatMul", [probs, qkv[2]], p + "att")
        att = node("Transpose", [att], p + "att_t", perm=[0, 2, 1, 3])
        att = node("Reshape", [att, merge_heads], p + "att_merged")
        att = node("MatMul", [att, weight(p + "wo", (hidden, hidden))], p + "proj")
        x = node("Add", [x, att], p + "res1")
        h = node("LayerNormalization", [x, weight(p + "ln2_g", (hidden,), 1.0), weight(p + "ln2_b", (hidden,))], p + "ln2", axis=-1)
        h = node("MatMul", [h, weight(p + "w_fc", (hidden, 4 * hidden))], p + "fc")
        h = node("Add", [h, weight(p + "b_fc", (4 * hidden,))], p + "fc_b")
        h = node("Gelu", [h], p + "gelu", approximate="tanh")
        h = node("MatMul", [h, weight(p + "w_proj", (4 * hidden, hidden))], p + "mlp")
        x = node("Add", [x, h], p + "res2")
    x = node("LayerNormalization", [x, weight("lnf_g", (hidden,), 1.0), weight("lnf_b", (hidden,))], "lnf", axis=-1)
    nodes.append(helper.make_node("MatMul", [x, "wte_t"], ["logits"], name="lm_head"))
    inits.append(numpy_helper.from_array(numpy_helper.to_array(inits[0]).T.copy(), "wte_t"))
    graph = helper.make_graph(
        nodes, "gpt_demo",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", seq])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", seq, vocab])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model.SerializeToString()


def median_ms(fn, repeat: int) -> float:
    fn()  # warm-up (plans, caches)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def train_digits(steps: int) -> None:
    """Part 1: the same MLP, init and batches through TrainRT's TrainingSession and torch eager."""
    import torch
    from onnx import TensorProto, helper, numpy_helper
    from sklearn.datasets import load_digits

    data = load_digits()
    order = np.random.default_rng(0).permutation(len(data.target))
    x = (data.data[order] / 16.0).astype(np.float32)
    y = data.target[order].astype(np.int64)
    x_train, y_train, x_test, y_test = x[:1400], y[:1400], x[1400:], y[1400:]
    batch = 32
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    w1, b1, w2, b2 = (p.detach().numpy().copy() for p in net.parameters())
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["a"]),
         helper.make_node("Gemm", ["a", "w2", "b2"], ["logits"], transB=1)],
        "digits_mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    trainer = trainrt.TrainingSession(model.SerializeToString(), append_loss="cross_entropy", output="logits",
                                      label="y", optimizer="adamw", lr=3e-3)
    opt = torch.optim.AdamW(net.parameters(), lr=3e-3)
    ours, theirs, ours_t, theirs_t = [], [], [], []
    print(f"\n[1/2] training an MLP (64-128-10) on digits: {steps} AdamW steps, batch {batch}, TrainRT vs PyTorch eager")
    for step in range(steps):
        rows = [(step * batch + i) % len(x_train) for i in range(batch)]
        xb, yb = x_train[rows], y_train[rows]
        start = time.perf_counter()
        ours.append(trainer.train_step([xb, yb]))
        trainer.optimizer_step()
        ours_t.append(time.perf_counter() - start)
        xt, yt = torch.from_numpy(xb), torch.from_numpy(yb)
        start = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(net(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        theirs_t.append(time.perf_counter() - start)
        theirs.append(loss.item())
        if step % max(1, steps // 6) == 0 or step == steps - 1:
            bar = "#" * int(30 * (step + 1) / steps)
            print(f"  step {step + 1:4d} [{bar:30s}] loss TrainRT {ours[-1]:.5f}  torch {theirs[-1]:.5f}")
    rel = float(np.max(np.abs(np.array(ours) - np.array(theirs)) / np.abs(np.array(theirs))))
    trainer.export_inference_model("/tmp/trainrt_demo_digits.onnx", ["logits"])
    (logits,) = trainrt.Session("/tmp/trainrt_demo_digits.onnx").run([x_test])
    accuracy = float(np.mean(logits.argmax(axis=1) == y_test))
    ours_ms, theirs_ms = 1e3 * statistics.median(ours_t[10:]), 1e3 * statistics.median(theirs_t[10:])
    print(f"  loss curves agree: max relative difference {rel:.1e} over {steps} steps")
    print(f"  step time (median): TrainRT {ours_ms:.3f} ms, torch eager {theirs_ms:.3f} ms "
          f"(TrainRT/torch = {ours_ms / theirs_ms:.2f}x)")
    print(f"  held-out accuracy of the exported TrainRT model: {accuracy:.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    train_digits(args.steps)

    print("\n[2/2] GPT-style transformer forward, TrainRT vs onnxruntime")
    model = transformer_model(args.layers, args.hidden, args.heads, args.vocab, args.seq)
    tokens = np.random.default_rng(1).integers(0, args.vocab, (args.batch, args.seq), dtype=np.int64)
    print(f"GPT-style forward: {args.layers} layers, hidden {args.hidden}, {args.heads} heads, "
          f"vocab {args.vocab}, batch {args.batch} x seq {args.seq}")

    session = trainrt.Session(model, profile=False)
    start = time.perf_counter()
    (ours,) = session.run([tokens])
    first_ms = (time.perf_counter() - start) * 1e3
    ours_ms = median_ms(lambda: session.run([tokens]), args.repeat)

    import onnxruntime as ort

    options = ort.SessionOptions()
    ort_session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    (theirs,) = ort_session.run(None, {"tokens": tokens})
    ort_ms = median_ms(lambda: ort_session.run(None, {"tokens": tokens}), args.repeat)

    max_err = float(np.max(np.abs(ours - theirs)))
    print(f"outputs agree with onnxruntime: max |diff| = {max_err:.2e}")
    if not np.allclose(ours, theirs, rtol=1e-3, atol=1e-4):
        raise SystemExit("demo: TrainRT and onnxruntime disagree")
    stats = session.memory_stats()
    print(f"TrainRT first run (plan + run): {first_ms:.1f} ms")
    print(f"step time, median of {args.repeat}: TrainRT {ours_ms:.2f} ms, onnxruntime {ort_ms:.2f} ms "
          f"(TrainRT/onnxruntime = {ours_ms / ort_ms:.2f}x)")
    print(f"TrainRT intermediates: arena {stats['planned_arena_bytes'] / 2**20:.1f} MiB planned "
          f"(lower bound {stats['live_lower_bound'] / 2**20:.1f} MiB), {stats['inplace']} in place, "
          f"{stats['reused']} buffers reused, {stats['folded']} nodes folded")

    profiled = trainrt.Session(model, profile=True)
    profiled.run([tokens])
    print("\nTrainRT top ops by time (one run):")
    print(profiled.profile_summary(8))


if __name__ == "__main__":
    main()
