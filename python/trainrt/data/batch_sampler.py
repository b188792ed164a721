"""`LoadBalancingDistributedBatchSampler`: cuts each rank's share of a LoadBalancingDistributedSampler
into batches with a user batch_fn, and gives every rank the same number of batches, so DDP's gradient
all-reduce never waits on a rank with a batch more (or hangs on one that has none left). The arguments
are those of onnxruntime.training.utils.data.LoadBalancingDistributedBatchSampler.

    def batch_fn(indices: list[int]) -> list[list[int]]:      # one rank's samples, in order
        return [indices[i:i + 8] for i in range(0, len(indices), 8)]

    sampler = LoadBalancingDistributedSampler(dataset, complexity_fn=len)
    batches = LoadBalancingDistributedBatchSampler(sampler, batch_fn)
    loader = DataLoader(dataset, batch_sampler=batches, collate_fn=pad_batch)
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        for batch in loader: ...

How the counts are evened out. Every rank deals the epoch as the sampler does (sampler.py: samples
sorted by complexity within groups, dealt out one per rank per row, the last row padded) and calls
batch_fn on every rank's share, so each knows all ranks' batch counts. Ranks with fewer batches than
the most repeat their own batches from the first, in order (a few samples count twice that epoch);
with drop_last every rank stops at the fewest instead (the rest of the longer ranks is skipped).

Balance: the i-th sample of every rank comes from the same row of similar complexities, so a batch_fn
that cuts at the same positions on every rank (a fixed batch size) gives each step batches whose total
complexities differ by at most the sum of (max - min) over the step's rows (sampler.py states the
bound). A batch_fn that cuts by content (a token budget) keeps every rank's batches similar but not
aligned; the counts are evened out all the same.
"""

from __future__ import annotations

from typing import Callable, Iterator

from torch.utils.data import Sampler

from trainrt.data.sampler import LoadBalancingDistributedSampler


class LoadBalancingDistributedBatchSampler(Sampler[list[int]]):
    """Yields this rank's batches (lists of dataset indices); len(self) of them, the same on every rank.

    Example:

        >>> texts = [[0] * n for n in (5, 1, 9, 3, 7, 2)]
        >>> sampler = LoadBalancingDistributedSampler(texts, complexity_fn=len, world_size=2, rank=1)
        >>> pairs = lambda indices: [indices[i:i + 2] for i in range(0, len(indices), 2)]
        >>> batches = LoadBalancingDistributedBatchSampler(sampler, batch_fn=pairs)
        >>> loader = torch.utils.data.DataLoader(texts, batch_sampler=batches, collate_fn=list)
    """

    def __init__(self, sampler: LoadBalancingDistributedSampler, batch_fn: Callable[[list[int]], list[list[int]]],
                 drop_last: bool = False):
        if not isinstance(sampler, LoadBalancingDistributedSampler):
            raise TypeError(f"{type(self).__name__}: sampler must be a LoadBalancingDistributedSampler, "
                            f"got {type(sampler).__name__}")
        self.sampler, self.batch_fn, self.drop_last = sampler, batch_fn, drop_last
        self._epoch_batches: tuple[int, list[list[int]]] | None = None  # (epoch, this rank's batches)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __len__(self) -> int:
        return len(self._batches())

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def _batches(self) -> list[list[int]]:
        """This rank's batches for the sampler's epoch, counted out to the same number as every rank's."""
        epoch = self.sampler.epoch
        if self._epoch_batches is None or self._epoch_batches[0] != epoch:
            per_rank = [[[int(i) for i in batch] for batch in self.batch_fn(share.tolist())]
                        for share in self.sampler.rank_indices().T]
            counts = [len(b) for b in per_rank]
            count = min(counts) if self.drop_last else max(counts)
            if count and not min(counts):  # checked on every rank alike: all raise, none is left waiting
                empty = counts.index(0)
                raise ValueError(f"{type(self).__name__}: batch_fn gave no batch for rank {empty}'s "
                                 f"{len(self.sampler)} samples while rank {counts.index(count)} has {count}: "
                                 "nothing to repeat to even out the counts")
            mine = per_rank[self.sampler.rank]
            self._epoch_batches = (epoch, [mine[i % len(mine)] for i in range(count)])
        return self._epoch_batches[1]
