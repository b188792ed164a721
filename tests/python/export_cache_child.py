"""One training step of a small model through RTModule, in a process of its own, for the export
cache tests (test_export_cache.py): `python export_cache_child.py MODEL` prints one JSON line with
the step's loss, gradients and output structure, eager's, how often torch.export ran and what the cache logged.

The parent sets TRAINRT_CACHE_DIR, TRAINRT_LOG_LEVEL=INFO and TRAINRT_FALLBACK_POLICY=FALLBACK_DISABLE.
Models are built from torch's seed with dropout off, so two processes build the same one.
"""

import copy
import json
import logging
import sys
import warnings

import torch
import torch.nn as nn

warnings.simplefilter("ignore")


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16, bos_token_id=0,
                        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ids = torch.randint(0, 64, (2, 8))
    return GPT2LMHeadModel(config).train(), (), {"input_ids": ids, "labels": ids}


def bert():
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                        vocab_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, num_labels=3)
    ids = torch.randint(1, 64, (2, 8))
    return BertForSequenceClassification(config).train(), (), {"input_ids": ids, "labels": torch.tensor([0, 2])}


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x, y):  # x: (B, 3, 8, 8)
        return nn.functional.cross_entropy(self.head(self.features(x).flatten(1)), y)


class LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn, self.head = nn.LSTM(6, 12, batch_first=True), nn.Linear(12, 4)

    def forward(self, x):  # x: (B, T, 6)
        out, (h, c) = self.rnn(x)
        return self.head(out[:, -1]), (h, c)


MODELS = {
    "gpt2": gpt2,
    "bert": bert,
    "cnn": lambda: (CNN().train(), (torch.randn(4, 3, 8, 8), torch.tensor([1, 0, 3, 9])), {}),
    "lstm": lambda: (LSTM().train(), (torch.randn(3, 5, 6),), {}),
}


def loss_of(out) -> torch.Tensor:
    """The step's scalar: the model's loss, else the sum of its floating outputs."""
    loss = getattr(out, "loss", None)
    if loss is not None:
        return loss
    return out if isinstance(out, torch.Tensor) else sum(t.float().sum() for t in torch.utils._pytree.tree_leaves(out))


def step(model, args, kwargs) -> tuple[float, dict, str]:
    """The loss, the gradients and the output's structure (types included: a ModelOutput, a DynamicCache)."""
    out = model(*args, **kwargs)
    loss = loss_of(out)
    loss.backward()
    grads = {n: p.grad.tolist() for n, p in model.named_parameters() if p.grad is not None}
    return loss.item(), grads, str(torch.utils._pytree.tree_flatten(out)[1])


def main(name: str) -> None:
    import trainrt

    messages = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logging.getLogger("trainrt").addHandler(handler)
    exports = []
    real_export = torch.export.export
    torch.export.export = lambda *a, **k: exports.append(1) or real_export(*a, **k)

    torch.manual_seed(0)
    eager, args, kwargs = MODELS[name]()
    ours = trainrt.RTModule(copy.deepcopy(eager))
    loss, grads, structure = step(ours, args, kwargs)
    eager_loss, eager_grads, eager_structure = step(eager, args, kwargs)
    print(json.dumps({"loss": loss, "grads": grads, "eager_loss": eager_loss, "eager_grads": eager_grads,
                      "structure": structure, "eager_structure": eager_structure,
                      "exports": len(exports), "fallback": ours.fallback_reason,
                      "cache_log": [m for m in messages if "export cache" in m]}))


if __name__ == "__main__":
    main(sys.argv[1])
