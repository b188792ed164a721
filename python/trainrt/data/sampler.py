"""`LoadBalancingDistributedSampler`: shards a map-style dataset across DDP ranks so that every rank gets
the same number of samples and about the same total complexity (a sequence's length, say), with the
arguments of onnxruntime.training.utils.data.LoadBalancingDistributedSampler.

    sampler = LoadBalancingDistributedSampler(dataset, complexity_fn=len)  # world size, rank: torch.distributed
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, collate_fn=pad_batch)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)  # before iterating: a new order per epoch, the same on every rank
        for batch in loader: ...

How the balancing works. Every rank computes the same deal from (seed, epoch) alone, then keeps its own
column of it (so the dataset and complexity_fn must give the same complexities on every rank, as the
dataset must for DistributedSampler):
  1. complexity_fn(dataset[i]) once per sample (cached). With random_level > 0 the sort key is the
     complexity plus noise, uniform in [0, random_level * (max - min complexity)), drawn per epoch: 0 is
     the best balance, 1 trades it for randomness.
  2. drop_last drops N mod world_size samples first (at random per epoch with shuffle, else the
     dataset's last ones), so nothing needs padding.
  3. The samples, in dataset order, are cut into groups of group_size (one group when None) and each
     group is sorted by key; with shuffle the groups' order is shuffled.
  4. Dealing out: the sorted sequence is cut into rows of world_size consecutive samples (similar
     complexities), and each row gives one sample to each rank: a row's most complex sample goes to the
     rank with the least total so far, its next to the next least, and so on (the greedy rule of LPT
     scheduling), rows taken from the heaviest down so the light ones even out what the heavy ones
     leave. Rank r's i-th sample comes from row i, on every rank.
  5. Padding: a last row of m < world_size samples is filled by repeating its own m samples, so every
     rank gets ceil(N / world_size) (floor with drop_last); those world_size - m repeats are the only
     samples two ranks share.
  6. With shuffle and no group_size, the rows' order is shuffled (the same for all ranks).

The balance it guarantees (test_data_samplers.py checks it). Let D be the largest gap between two ranks'
totals after some rows are dealt, and d the next row's range (max - min within it). Of any two ranks,
the one behind by g <= D gets the larger of their two samples, larger by at most d, so the gap after is
within [g - d, g]: D grows to at most max(D, d). Whatever the order of rows, over the epoch

    |total(rank a) - total(rank b)| <= max over rows of (max - min within the row) <= max - min complexity

for any group_size and random_level (the rows are sorted by noisy keys, but a row's true range is
still within max - min). Per step, for batches cut at the same positions on every rank (a fixed batch
size): the step's batches differ by at most the sum of its rows' ranges, which with one group and no
noise is again at most max - min complexity (the rows are then disjoint intervals of the sorted order).
"""

from __future__ import annotations

from typing import Callable, Iterator, Sized

import numpy as np
import torch.distributed as dist
from torch.utils.data import Sampler


def _world_size_and_rank(world_size: int | None, rank: int | None, who: str) -> tuple[int, int]:
    """world_size and rank as given, or from the default torch.distributed group; checked."""
    if world_size is None or rank is None:
        missing = " and ".join(name for name, v in (("world_size", world_size), ("rank", rank)) if v is None)
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(f"{who}: {missing} not given and torch.distributed is not initialized; call "
                               f"torch.distributed.init_process_group() first or pass {missing}")
        world_size = dist.get_world_size() if world_size is None else world_size
        rank = dist.get_rank() if rank is None else rank
    if world_size < 1:
        raise ValueError(f"{who}: world_size must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"{who}: rank {rank} is not in [0, {world_size - 1}] (world_size {world_size})")
    return world_size, rank


class LoadBalancingDistributedSampler(Sampler[int]):
    """Yields this rank's dataset indices for the epoch; len(self) of them, the same count on every rank.

    Example:

        >>> texts = [[0] * n for n in (5, 1, 9, 3)]
        >>> sampler = LoadBalancingDistributedSampler(texts, complexity_fn=len, world_size=2, rank=0)
        >>> sampler.set_epoch(0)
        >>> len(sampler)
        2
    """

    def __init__(self, dataset: Sized, complexity_fn: Callable[..., float], world_size: int | None = None,
                 rank: int | None = None, shuffle: bool = True, group_size: int | None = None, seed: int = 0,
                 drop_last: bool = False, random_level: float = 0.0):
        who = type(self).__name__
        self.world_size, self.rank = _world_size_and_rank(world_size, rank, who)
        if group_size is not None and group_size < 1:
            raise ValueError(f"{who}: group_size must be None or at least 1, got {group_size}")
        if not 0.0 <= random_level <= 1.0:
            raise ValueError(f"{who}: random_level must be in [0, 1], got {random_level}")
        self.dataset, self.complexity_fn = dataset, complexity_fn
        self.shuffle, self.group_size, self.seed = shuffle, group_size, seed
        self.drop_last, self.random_level = drop_last, random_level
        self.epoch = 0
        self._complexities: np.ndarray | None = None  # (N,) complexity_fn of each sample, on first use

    def set_epoch(self, epoch: int) -> None:
        """Call before each epoch's iteration on every rank: the order then depends on (seed, epoch)."""
        self.epoch = epoch

    def __len__(self) -> int:
        n, w = len(self.dataset), self.world_size
        return n // w if self.drop_last else -(-n // w)

    def __iter__(self) -> Iterator[int]:
        return iter(self.rank_indices()[:, self.rank].tolist())

    @property
    def complexities(self) -> np.ndarray:
        """(N,) float64: complexity_fn(dataset[i]) per sample, computed once."""
        if self._complexities is None:
            values = np.array([float(self.complexity_fn(self.dataset[i])) for i in range(len(self.dataset))])
            bad = np.flatnonzero(~np.isfinite(values))
            if bad.size:
                raise ValueError(f"{type(self).__name__}: complexity_fn gave {values[bad[0]]} for sample "
                                 f"{bad[0]}; complexities must be finite numbers")
            self._complexities = values
        return self._complexities

    def rank_indices(self) -> np.ndarray:
        """(len(self), world_size) int64 dataset indices of this epoch: column r is rank r's samples in
        order; row i holds every rank's i-th sample (steps 2 to 6 of the module docstring)."""
        rng = np.random.default_rng((self.seed, self.epoch))
        c, w = self.complexities, self.world_size
        kept = np.arange(len(c))
        if self.drop_last and len(c) % w:
            count = len(c) - len(c) % w
            kept = np.sort(rng.permutation(len(c))[:count]) if self.shuffle else kept[:count]
        keys = c[kept]
        if self.random_level > 0 and len(c):
            keys = keys + rng.uniform(0.0, self.random_level * np.ptp(c), len(kept))
        order = self._sorted_in_groups(kept, keys, rng)
        short = len(order) % w
        if short:
            order = np.concatenate([order, np.resize(order[-short:], w - short)])  # repeats the last run
        rows = _deal(order.reshape(-1, w), c)  # (len(self), world_size)
        if self.shuffle and self.group_size is None:
            rows = rows[rng.permutation(len(rows))]
        return rows

    def _sorted_in_groups(self, kept: np.ndarray, keys: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """kept (dataset indices, ascending) cut into groups of group_size, each sorted by its keys
        (stable: ties keep dataset order); the groups' order shuffled with shuffle and a group_size."""
        size = self.group_size or max(len(kept), 1)
        groups = [kept[s:s + size][np.argsort(keys[s:s + size], kind="stable")] for s in range(0, len(kept), size)]
        if self.shuffle and self.group_size is not None:
            groups = [groups[g] for g in rng.permutation(len(groups))]
        return np.concatenate(groups) if groups else kept


def _deal(rows: np.ndarray, complexities: np.ndarray) -> np.ndarray:
    """rows (R, world_size) of dataset indices, taken from the heaviest total down, each row's samples
    handed out one per rank: its most complex sample to the rank with the least total so far, its next
    to the next least, and so on (ties: lower rank, earlier sample). Returns (R, world_size), the rows in
    their given order, column r for rank r."""
    totals = np.zeros(rows.shape[1])  # (world_size,) complexity dealt to each rank so far
    dealt = np.empty_like(rows)
    for i in np.argsort(-complexities[rows].sum(axis=1), kind="stable"):
        row = rows[i]
        lightest_first = np.argsort(totals, kind="stable")
        heaviest_first = row[np.argsort(-complexities[row], kind="stable")]
        dealt[i, lightest_first] = heaviest_first
        totals[lightest_first] += complexities[heaviest_first]
    return dealt
