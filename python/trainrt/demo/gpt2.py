"""The demo's model: transformers' GPT2LMHeadModel from a small GPT2Config (nothing is downloaded), and
sampling text from it.

    config = gpt2_config(layers=4, hidden=256, heads=4, seq=128)
    model = gpt2_model(config)                       # logits (B, T, 256); loss with labels=input_ids
    print(sample(model, b"MENENIUS:\n", length=200, seed=0))
"""

from __future__ import annotations

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from trainrt.demo.text import VOCAB, printable


def gpt2_config(layers: int, hidden: int, heads: int, seq: int) -> GPT2Config:
    """GPT-2's architecture at a small size over bytes. Dropout is off, so the PyTorch run and the
    RTModule run compute the same function and their loss curves can be compared step by step;
    no key/value cache is kept, since training never reuses one."""
    return GPT2Config(vocab_size=VOCAB, n_positions=seq, n_embd=hidden, n_layer=layers, n_head=heads,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                      bos_token_id=None, eos_token_id=None)  # GPT-2's 50256 is no byte


def gpt2_model(config: GPT2Config) -> GPT2LMHeadModel:
    """GPT2LMHeadModel(config), initialized from torch's default generator."""
    model = GPT2LMHeadModel(config)
    # The loss it computes anyway; transformers finds no loss name in the class name and warns without this.
    model.loss_type = "ForCausalLM"
    return model


@torch.no_grad()
def sample(model: torch.nn.Module, prompt: bytes, length: int, seed: int, temperature: float = 0.8) -> str:
    """`length` bytes drawn one at a time after `prompt` (softmax at `temperature`), reading at most the
    model's context of n_positions tokens back."""
    was_training, threads = model.training, torch.get_num_threads()
    model.eval()
    # One sequence's ops are too small to split: on a busy machine two OpenMP threads mostly wait for
    # each other at barriers (60x slower than one thread, measured here).
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(seed)
    context = model.config.n_positions
    ids = torch.tensor([list(prompt)])  # (1, T)
    try:
        for _ in range(length):
            logits = model(input_ids=ids[:, -context:]).logits[0, -1]  # (V,)
            next_id = torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator)
            ids = torch.cat([ids, next_id[None]], dim=1)
    finally:
        model.train(was_training)
        torch.set_num_threads(threads)
    return printable(ids[0, len(prompt):].tolist())
