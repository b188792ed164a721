"""The benchmark models: each a plain torch module whose forward returns the loss, its batches and FLOPs.

FLOPs are counted analytically, for the matmuls only (one multiply-add = 2 FLOPs):
  * parameter matmuls: 6 * N * tokens per training step (2 forward, 4 backward: input and weight
    gradients), N = the weights that take part in a matmul (Linear weights; the tied embedding once,
    as the LM head; biases, LayerNorm, position embeddings and embedding lookups are not counted);
  * attention: QK^T and (att @ V) are 2 * B * T * T * C FLOPs each forward, so 12 * L * B * T^2 * C per
    step with backward, counted in full (the causal mask saves nothing in these kernels).
Elementwise ops, softmax, LayerNorm, the loss and the optimizer are not counted.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn as nn


class MLP(nn.Module):
    """784-2048-2048-10 with ReLU, cross-entropy loss."""

    def __init__(self, sizes=(784, 2048, 2048, 10)):
        super().__init__()
        layers = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(nn.Linear(n_in, n_out))
            if i < len(sizes) - 2:
                layers.append(nn.ReLU())
        self.net = nn.Sequential(*layers)

    def forward(self, x, y):  # x: (B, 784) float, y: (B,) class ids
        return nn.functional.cross_entropy(self.net(x), y)


class Block(nn.Module):
    """One pre-LayerNorm GPT-2 block: x + proj(causal attention(ln1(x))), then x + out(gelu(fc(ln2(x)))).
    Attention is spelled out (matmul, masked softmax, matmul) rather than SDPA."""

    def __init__(self, dim: int, heads: int, qkv_bias: bool = True):
        super().__init__()
        self.ln1, self.qkv = nn.LayerNorm(dim), nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj, self.ln2 = nn.Linear(dim, dim), nn.LayerNorm(dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.heads = heads

    def forward(self, x, mask):  # x: (B, T, C); mask: (T, T) bool, True where query t may see key s
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))  # (B, H, T, C/H)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (q.shape[-1] ** 0.5))  # (B, H, T, T)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, -1))
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """GPT-2 style: token + position embedding, `Block`s, final LayerNorm, LM head tied to the token
    embedding, cross-entropy over every position."""

    def __init__(self, vocab: int, dim: int, heads: int, seq: int, layers: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).bool())
        for m in self.modules():  # GPT-2's initialization: N(0, 0.02) weights, zero biases (loss starts near ln V)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):  # idx, targets: (B, T) token ids
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))  # (B, T, C)
        for block in self.blocks:
            x = block(x, self.mask[:T, :T])
        logits = self.head(self.ln_f(x))  # (B, T, V)
        return nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One benchmark model: how to build it, the batch of step i, and its FLOPs per training step."""

    name: str
    make: Callable[[], nn.Module]
    batch: Callable[[int], tuple]   # step index -> forward arguments (same for every mode)
    flops_per_step: int
    description: str
    sgd: bool = False  # every mode steps torch.optim.SGD instead of its AdamW (modes.py)


def _mlp(name: str = "mlp", sizes: tuple = (784, 2048, 2048, 10), batch: int = 256, sgd: bool = False) -> ModelSpec:
    matmul_weights = sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))

    def make_batch(step):
        g = torch.Generator().manual_seed(step)
        return torch.randn(batch, sizes[0], generator=g), torch.randint(0, sizes[-1], (batch,), generator=g)

    return ModelSpec(name, lambda: MLP(sizes), make_batch, 6 * matmul_weights * batch,
                     f"MLP {'-'.join(map(str, sizes))}, batch {batch}, cross-entropy" + (", SGD" if sgd else ""), sgd)


def _gpt(name: str, layers: int, dim: int, heads: int, vocab: int, seq: int, batch: int) -> ModelSpec:
    # per block: qkv (C x 3C), proj (C x C), fc (C x 4C), out (4C x C) = 12 C^2; plus the tied head (V x C)
    matmul_weights = layers * 12 * dim * dim + vocab * dim
    tokens = batch * seq
    flops = 6 * matmul_weights * tokens + 12 * layers * batch * seq * seq * dim

    def make_batch(step):
        g = torch.Generator().manual_seed(step)
        data = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()

    return ModelSpec(name, lambda: GPT(vocab, dim, heads, seq, layers), make_batch, flops,
                     f"GPT-2 style, {layers} layers, {dim} hidden, {heads} heads, vocab {vocab}, "
                     f"sequence {seq}, batch {batch}, LM cross-entropy")


def _cnn(batch: int = 64, image: int = 32) -> ModelSpec:
    from trainrt.bench.cnn import ResNetCNN, training_flops

    def make_batch(step):
        g = torch.Generator().manual_seed(step)
        return torch.randn(batch, 3, image, image, generator=g), torch.randint(0, 10, (batch,), generator=g)

    return ModelSpec("cnn", ResNetCNN, make_batch, training_flops(ResNetCNN(), (3, image, image), batch),
                     f"ResNet-style CNN (widths 32-64-128, BatchNorm, MaxPool, GlobalAveragePool), "
                     f"{image}x{image} images, batch {batch}, cross-entropy")


def _bert(name: str, layers: int, dim: int, heads: int, vocab: int, seq: int, batch: int) -> ModelSpec:
    from trainrt.bench.bert import bert_flops, make_bert, masked_lm_batch

    return ModelSpec(name, lambda: make_bert(layers, dim, heads, vocab, seq),
                     lambda step: masked_lm_batch(step, batch, seq, vocab), bert_flops(layers, dim, vocab, seq, batch),
                     f"transformers BertForMaskedLM, {layers} layers, {dim} hidden, {heads} heads, vocab {vocab}, "
                     f"sequence {seq}, batch {batch}, 15% masked, half the batch padded")


class CausalLMLoss(nn.Module):
    """A transformers causal LM as the suite's models are: (input_ids, labels) -> loss."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


def _llama(name: str, layers: int, dim: int, heads: int, vocab: int, seq: int, batch: int, mlp: int) -> ModelSpec:
    # per block: q, k, v, o (4 C^2) and the SwiGLU MLP's gate, up, down (3 C x mlp); plus the LM head (V x C)
    matmul_weights = layers * (4 * dim * dim + 3 * dim * mlp) + vocab * dim
    flops = 6 * matmul_weights * batch * seq + 12 * layers * batch * seq * seq * dim

    def make():
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=vocab, hidden_size=dim, intermediate_size=mlp, num_hidden_layers=layers,
                             num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=seq)
        return CausalLMLoss(LlamaForCausalLM(config))

    def make_batch(step):
        g = torch.Generator().manual_seed(step)
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        return ids, ids

    return ModelSpec(name, make, make_batch, flops,
                     f"transformers LlamaForCausalLM (RMSNorm, SwiGLU, rotary), {layers} layers, {dim} hidden, "
                     f"{heads} heads, MLP {mlp}, vocab {vocab}, sequence {seq}, batch {batch}")


MODELS: dict[str, Callable[[], ModelSpec]] = {
    # 3 layers of 32 at batch 16 with SGD: a step of microseconds, so its time is each front end's
    # fixed cost per step
    "tiny": lambda: _mlp("tiny", sizes=(32, 32, 32, 10), batch=16, sgd=True),
    "mlp": _mlp,
    "cnn": _cnn,
    "bert-mini": lambda: _bert("bert-mini", layers=4, dim=256, heads=4, vocab=8192, seq=128, batch=8),
    "gpt2-mini": lambda: _gpt("gpt2-mini", layers=4, dim=256, heads=4, vocab=8192, seq=128, batch=8),
    "llama-mini": lambda: _llama("llama-mini", layers=4, dim=256, heads=4, vocab=8192, seq=128, batch=8, mlp=688),
    "gpt2-small": lambda: _gpt("gpt2-small", layers=12, dim=768, heads=12, vocab=50257, seq=256, batch=1),
}

SUITES: dict[str, list[str]] = {
    "quick": ["tiny", "mlp", "cnn", "gpt2-mini", "bert-mini"],
    "full": ["tiny", "mlp", "cnn", "gpt2-mini", "bert-mini", "llama-mini", "gpt2-small"],
}
