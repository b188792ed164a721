"""DistributedDataParallel over RTModule, fed by LoadBalancingDistributedBatchSampler: two ranks spawned
(trainrt.testing, gloo on loopback), variable-length sequences batched by a token budget (so
the ranks' own batch counts differ and the sampler evens them out).

Each rank trains two epochs and returns what it saw; the parent checks that every rank ran the same
number of steps without a hang (a deadline on the whole run, and on each collective), that the losses
are finite, and that the parameters are identical across ranks at the end.
"""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

import trainrt
from trainrt.testing import run_on_ranks
from trainrt.data import LoadBalancingDistributedBatchSampler, LoadBalancingDistributedSampler

pytestmark = pytest.mark.slow  # two processes, each importing torch and capturing the model: ~15 s

WORLD_SIZE, EPOCHS, VOCAB, CLASSES = 2, 2, 50, 4
TOKEN_BUDGET = 48  # per batch, of the samples' own lengths
DEADLINE_S = 180


def sequences() -> list[tuple[torch.Tensor, int]]:
    """60 token sequences of skewed lengths 1..40, labelled by their first token (learnable); the same in
    every process (every rank must deal the same dataset)."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.empty(60).log_normal_(2.0, 0.8, generator=g).clamp(1, 40).int().tolist()
    samples = [torch.randint(0, VOCAB, (n,), generator=g) for n in lengths]
    return [(tokens, int(tokens[0]) % CLASSES) for tokens in samples]


def by_token_budget(dataset):
    """batch_fn: consecutive samples while their lengths sum to at most TOKEN_BUDGET."""
    def batch_fn(indices: list[int]) -> list[list[int]]:
        batches, total = [[]], 0
        for i in indices:
            n = len(dataset[i][0])
            if batches[-1] and total + n > TOKEN_BUDGET:
                batches.append([])
                total = 0
            batches[-1].append(i)
            total += n
        return [b for b in batches if b]
    return batch_fn


def pad_to_multiple_of_8(batch):
    """tokens (B, T), mask (B, T) f32, labels (B,); T the longest rounded up to a multiple of 8, so
    RTModule sees a few sequence lengths only (each new shape is planned once)."""
    length = 8 * math.ceil(max(len(t) for t, _ in batch) / 8)
    tokens = torch.zeros(len(batch), length, dtype=torch.int64)
    mask = torch.zeros(len(batch), length)
    for row, (t, _) in enumerate(batch):
        tokens[row, :len(t)], mask[row, :len(t)] = t, 1.0
    return tokens, mask, torch.tensor([label for _, label in batch])


class MeanPoolClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.hidden, self.out = nn.Embedding(VOCAB, 16), nn.Linear(16, 32), nn.Linear(32, CLASSES)

    def forward(self, tokens, mask, labels):
        h = torch.relu(self.hidden(self.embed(tokens)))  # (B, T, 32)
        pooled = (h * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)  # (B, 32), padding left out
        return F.cross_entropy(self.out(pooled), labels)


def batch_sampler(dataset, rank=None) -> LoadBalancingDistributedBatchSampler:
    """world_size and rank from torch.distributed in the ranks; given in the parent."""
    world_size = None if rank is None else WORLD_SIZE
    sampler = LoadBalancingDistributedSampler(dataset, complexity_fn=lambda s: len(s[0]), world_size=world_size,
                                              rank=rank, seed=7)
    return LoadBalancingDistributedBatchSampler(sampler, by_token_budget(dataset))


def train_rank(rank: int, world_size: int) -> dict:
    dataset = sequences()
    batches = batch_sampler(dataset)
    loader = DataLoader(dataset, batch_sampler=batches, collate_fn=pad_to_multiple_of_8)
    torch.manual_seed(rank)  # different initial weights: DDP must broadcast rank 0's
    model = DistributedDataParallel(trainrt.RTModule(MeanPoolClassifier()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    steps, losses = [], []
    for epoch in range(EPOCHS):
        batches.set_epoch(epoch)
        steps.append(0)
        for tokens, mask, labels in loader:
            loss = model(tokens, mask, labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            assert model.module.fallback_reason is None, model.module.fallback_reason
            steps[-1] += 1
            losses.append(loss.item())
    return {"steps": steps, "losses": losses, "state": model.module.state_dict()}


def own_batch_counts(epoch: int) -> list[int]:
    """How many batches batch_fn cuts from each rank's share of the epoch, before they are evened out."""
    dataset, counts = sequences(), []
    for rank in range(WORLD_SIZE):
        sampler = batch_sampler(dataset, rank).sampler
        sampler.set_epoch(epoch)
        counts.append(len(by_token_budget(dataset)(list(sampler))))
    return counts


def test_ddp_ranks_train_the_same_number_of_steps_and_stay_identical():
    own_counts = [own_batch_counts(epoch) for epoch in range(EPOCHS)]
    assert any(len(set(c)) > 1 for c in own_counts), f"the ranks' own batch counts {own_counts} should differ"

    results = run_on_ranks(train_rank, timeout=DEADLINE_S)  # fallback disabled in the ranks
    assert results[0]["steps"] == [max(c) for c in own_counts]  # every rank as many steps as the most
    for r, result in enumerate(results):
        assert result["steps"] == results[0]["steps"], f"rank {r}'s steps per epoch"
        assert all(math.isfinite(x) for x in result["losses"]), f"rank {r}: {result['losses']}"
    for name, value in results[0]["state"].items():
        for r, result in enumerate(results[1:], start=1):
            assert torch.equal(result["state"][name], value), f"{name} differs on rank {r}"
