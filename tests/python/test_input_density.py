"""TRAINRT_PRINT_INPUT_DENSITY (ORTMODULE_PRINT_INPUT_DENSITY): the share of real tokens and labels."""

import torch
import torch.nn as nn

import trainrt


class PaddedLM(nn.Module):
    """Embedding with a padding row, a linear head and cross-entropy over shifted labels (-100 ignored)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8, padding_idx=0)
        self.head = nn.Linear(8, 20)

    def forward(self, ids, labels):
        logits = self.head(self.embed(ids))[:, :-1]
        return nn.functional.cross_entropy(logits.reshape(-1, 20), labels[:, 1:].reshape(-1))


def test_density_of_embedding_and_label_inputs_is_logged_each_step(monkeypatch, trainrt_log):
    monkeypatch.setenv("ORTMODULE_PRINT_INPUT_DENSITY", "1")
    model = trainrt.RTModule(PaddedLM())
    ids = torch.randint(1, 20, (2, 8))
    ids[1, 4:] = 0  # 4 of 16 tokens are padding: 75%
    labels = ids.clone()
    labels[0, 6:] = -100  # 2 of 16 labels ignored: 87.5%
    model(ids, labels).backward()
    assert model._fallback_reason is None
    text = trainrt_log.text
    assert "(embedding, padding 0): density 75.0% of 16" in text
    assert "(label, ignore_index -100): density 87.5% of 16" in text
    model(ids, labels)
    assert trainrt_log.text.count("trainrt input density") == 2


def test_density_is_quiet_unless_asked(trainrt_log):
    model = trainrt.RTModule(PaddedLM())
    model(torch.randint(1, 20, (2, 8)), torch.randint(0, 20, (2, 8)))
    assert "input density" not in trainrt_log.text
