"""bert-mini: transformers' BertForMaskedLM from a small config (random initialization, nothing is
downloaded), with a masked-LM batch: 15% of the tokens masked and predicted, the rest labelled -100;
the second half of the batch is padded (attention mask 0) over its last eighth. Dropout is off, as in
the other suite models, so every mode computes the same losses."""

from __future__ import annotations

import torch
import torch.nn as nn

MASK_TOKEN = 4  # ids below 5 are reserved (pad 0, [CLS], [SEP], ..., [MASK] 4), as in BERT vocabularies


class MaskedLMLoss(nn.Module):
    """forward(input_ids, attention_mask, labels) -> the masked-LM loss of the wrapped model."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, labels):
        return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss


def make_bert(layers: int, dim: int, heads: int, vocab: int, seq: int) -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=vocab, hidden_size=dim, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=4 * dim, max_position_embeddings=seq, pad_token_id=0,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # modes compute the same
    return MaskedLMLoss(BertForMaskedLM(config))


def masked_lm_batch(step: int, batch: int, seq: int, vocab: int) -> tuple:
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(5, vocab, (batch, seq), generator=g)
    attention_mask = torch.ones(batch, seq, dtype=torch.long)
    attention_mask[batch // 2:, seq - seq // 8:] = 0
    masked = (torch.rand(batch, seq, generator=g) < 0.15) & attention_mask.bool()
    labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
    input_ids = torch.where(masked, torch.full_like(tokens, MASK_TOKEN), tokens) * attention_mask
    return input_ids, attention_mask, labels


def bert_flops(layers: int, dim: int, vocab: int, seq: int, batch: int) -> int:
    """Per block 12 C^2 matmul weights (QKV, output, 4C MLP), plus the MLM head's C x C transform and
    the tied V x C decoder; attention 12 * L * B * T^2 * C per step (see models.py for the rules)."""
    matmul_weights = layers * 12 * dim * dim + dim * dim + vocab * dim
    return 6 * matmul_weights * batch * seq + 12 * layers * batch * seq * seq * dim
