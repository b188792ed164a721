"""trainrt.hf.onnx_lowering: each com.trainrt op of an exported inference graph becomes standard ONNX that
onnxruntime runs with eager's outputs.

Each case is a small module whose capture holds the op in question (checked on the graph before the
lowering), exported by trainrt.hf.export.inference_onnx, lowered, and run by onnxruntime on the
export's inputs and on inputs of another batch size (the dims stay symbolic); outputs within 1e-5 of
eager. Ops with no standard form (PythonOp) and attention with dropout are refused, naming the node.
"""

import onnx
import onnxruntime
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainrt.hf.export import inference_onnx


class Attention(nn.Module):
    """q, k, v projections of x (B, T, C), heads H (K/V heads Hkv), then scaled_dot_product_attention."""

    def __init__(self, heads=4, kv_heads=4, dim=16, **sdpa):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.sdpa = heads, kv_heads, dim // heads, sdpa
        self.q = nn.Linear(dim, dim)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)

    def forward(self, x, mask=None):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.heads, -1).transpose(1, 2)                # (B, H, T, D)
        k, v = self.kv(x).view(B, T, 2 * self.kv_heads, -1).transpose(1, 2).chunk(2, dim=1)  # (B, Hkv, T, D)
        extra = dict(attn_mask=mask) if mask is not None else {}
        return F.scaled_dot_product_attention(q, k, v, **extra, **self.sdpa, enable_gqa=self.heads != self.kv_heads)


class EmbeddingBag(nn.Module):
    """nn.Embedding(padding_idx) then a Linear on the (B, T, C) rows: Embedding and a 3-D FusedMatMul with bias."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8, padding_idx=0)
        self.out = nn.Linear(8, 3)

    def forward(self, ids):
        return self.out(self.embed(ids)) + self.embed.weight.detach().sum()   # detach: StopGradient


def _inputs(case: str, batch: int) -> dict:
    g = torch.Generator().manual_seed(batch)
    if case == "embedding":
        ids = torch.randint(0, 20, (batch, 5), generator=g)
        ids[:, -1] = 0
        return dict(ids=ids)
    x = dict(x=torch.randn(batch, 6, 16, generator=g))
    if case == "bool mask":
        mask = torch.ones(batch, 1, 6, 6, dtype=torch.bool)
        mask[:, :, :, -2:] = False  # the last two keys padded
        x["mask"] = mask
    if case == "float mask":
        x["mask"] = torch.randn(batch, 1, 6, 6, generator=g)
    return x


CASES = {
    "embedding": (EmbeddingBag, {"Embedding", "FusedMatMul", "StopGradient"}),
    "attention": (lambda: Attention(), {"ScaledDotProductAttention", "FusedMatMul"}),
    "causal": (lambda: Attention(is_causal=True), {"ScaledDotProductAttention"}),
    "scale": (lambda: Attention(scale=0.3), {"ScaledDotProductAttention"}),
    "grouped heads": (lambda: Attention(heads=4, kv_heads=2), {"ScaledDotProductAttention"}),
    "bool mask": (lambda: Attention(), {"ScaledDotProductAttention"}),
    "float mask": (lambda: Attention(), {"ScaledDotProductAttention"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_lowered_graph_runs_in_onnxruntime_as_eager(case):
    make, ops = CASES[case]
    torch.manual_seed(0)
    module = make().eval()
    inputs = _inputs(case, 3)
    fused = inference_onnx(module, inputs, standard_ops=False)
    assert ops <= {n.op_type for n in fused.graph.node if n.domain == "com.trainrt"}
    lowered = inference_onnx(module, inputs)
    assert {n.domain for n in lowered.graph.node} <= {""} and "com.trainrt" not in {o.domain for o in lowered.opset_import}
    session = onnxruntime.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (3, 2):
        feeds = _inputs(case, batch)
        (out,) = session.run(None, {i.name: feeds[i.name].numpy() for i in session.get_inputs()})
        with torch.no_grad():
            expected = module(**feeds)
        torch.testing.assert_close(torch.from_numpy(out), expected, rtol=1e-5, atol=1e-5)


class Reverse(torch.autograd.Function):  # a user Function: captured as com.trainrt PythonOp
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return -g


class WithFunction(nn.Module):
    def forward(self, x):
        return Reverse.apply(x) * 2


def test_ops_without_a_standard_form_are_refused_naming_the_node():
    with pytest.raises(ValueError, match=r"com\.trainrt::PythonOp, which has no standard ONNX form"):
        inference_onnx(WithFunction(), dict(x=torch.randn(2, 3)))
    dropout = Attention(dropout_p=0.1)  # F.scaled_dot_product_attention's dropout_p applies in eval too
    with pytest.raises(ValueError, match="has dropout"):
        inference_onnx(dropout, _inputs("attention", 2))
    onnx.checker.check_model(inference_onnx(dropout, _inputs("attention", 2), standard_ops=False))
