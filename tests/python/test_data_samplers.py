"""trainrt.data's samplers: properties over dataset sizes, world sizes, group sizes, seeds, epochs and
random levels (hypothesis), checked on every rank's share at once, plus their errors and a DataLoader.

The balance bound tested is the one sampler.py proves: two ranks' total complexities differ by at most
the largest (max - min) within a row of the deal, so by at most max - min complexity; and per step of
fixed-size batches by at most the sum of the step's rows' ranges.
"""

import collections
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, DistributedSampler

from trainrt.data import LoadBalancingDistributedBatchSampler, LoadBalancingDistributedSampler

PROPERTY = settings(max_examples=60, deadline=None)


@st.composite
def configs(draw, shuffle=st.booleans()):
    """A dataset (its samples are their own complexities) and the sampler's arguments, but the rank."""
    n = draw(st.integers(0, 120))
    return {"dataset": draw(st.lists(st.integers(0, 1000), min_size=n, max_size=n)),
            "world_size": draw(st.integers(1, 8)),
            "group_size": draw(st.none() | st.integers(1, 40)),
            "seed": draw(st.integers(0, 2**31 - 1)),
            "epoch": draw(st.integers(0, 1000)),
            "random_level": draw(st.just(0.0) | st.floats(0.0, 1.0)),
            "shuffle": draw(shuffle),
            "drop_last": draw(st.booleans())}


def samplers(config: dict) -> list[LoadBalancingDistributedSampler]:
    """One sampler per rank, as each DDP process would build it, set to the config's epoch."""
    args = {k: v for k, v in config.items() if k != "epoch"}
    ranks = [LoadBalancingDistributedSampler(complexity_fn=lambda x: x, rank=r, **args)
             for r in range(config["world_size"])]
    for s in ranks:
        s.set_epoch(config["epoch"])
    return ranks


def shares(config: dict) -> list[list[int]]:
    """Every rank's samples in order, each iterated from that rank's own sampler."""
    return [list(s) for s in samplers(config)]


def imbalance(totals) -> float:
    return max(totals) - min(totals) if len(totals) else 0.0


def row_ranges(config: dict, per_rank: list[list[int]]) -> list[float]:
    """max - min complexity within each row of the deal (row i: every rank's i-th sample)."""
    c = config["dataset"]
    return [max(c[i] for i in row) - min(c[i] for i in row) for row in zip(*per_rank)]


@PROPERTY
@given(configs())
def test_every_rank_gets_as_many_samples_and_the_shares_cover_the_dataset(config):
    n, w = len(config["dataset"]), config["world_size"]
    per_rank = shares(config)
    expected = n // w if config["drop_last"] else math.ceil(n / w)
    assert [len(s) for s in per_rank] == [expected] * w
    seen = collections.Counter(i for share in per_rank for i in share)
    repeats = sum(k - 1 for k in seen.values())
    if config["drop_last"]:
        # No padding: the shares are disjoint; the N mod world_size dropped are the last ones unless shuffled.
        assert repeats == 0 and len(seen) == n - n % w
        if not config["shuffle"]:
            assert set(seen) == set(range(n - n % w))
    else:
        # Disjoint but for the padding of the last row, fewer than world_size repeats.
        assert set(seen) == set(range(n))
        assert repeats == w * expected - n < w


@PROPERTY
@given(configs())
def test_every_rank_deals_the_same_epoch_and_keeps_its_own_column(config):
    ranks = samplers(config)
    deal = ranks[0].rank_indices()
    assert deal.shape == (len(ranks[0]), config["world_size"])
    for r, s in enumerate(ranks):
        assert np.array_equal(s.rank_indices(), deal)
        assert list(s) == deal[:, r].tolist()


@PROPERTY
@given(configs())
def test_the_order_is_a_function_of_seed_and_epoch(config):
    first, second = samplers(config)[0], samplers(config)[0]
    order = list(first)
    first.set_epoch(config["epoch"] + 1)
    list(first)
    first.set_epoch(config["epoch"])
    assert list(first) == order == list(second)  # nothing carried over from another epoch or instance


@PROPERTY
@given(configs(shuffle=st.just(True)))
def test_shuffle_changes_the_order_with_the_epoch(config):
    n, w, g = len(config["dataset"]), config["world_size"], config["group_size"]
    rows = n // w if config["drop_last"] else math.ceil(n / w)
    # Rows are shuffled without group_size, groups with it (a row's content, not its order, makes the deal).
    assume(rows >= 2 and (g is None or math.ceil(n / g) >= 2))
    sampler = samplers(config)[0]
    deals = set()
    for epoch in range(20):  # each deal is epoch 0's with odds at most 1/2: all 20 alike, 2**-19
        sampler.set_epoch(epoch)
        deals.add(sampler.rank_indices().tobytes())
    assert len(deals) > 1


@PROPERTY
@given(configs(shuffle=st.just(False)))
def test_without_shuffle_or_noise_every_epoch_has_the_same_order(config):
    config["random_level"] = 0.0
    sampler = samplers(config)[0]
    orders = set()
    for epoch in (0, 1, config["epoch"]):
        sampler.set_epoch(epoch)
        orders.add(tuple(sampler))
    assert len(orders) == 1


@PROPERTY
@given(configs())
def test_rank_totals_differ_by_at_most_the_largest_row_range(config):
    c = config["dataset"]
    per_rank = shares(config)
    totals = [sum(c[i] for i in share) for share in per_rank]
    assert imbalance(totals) <= max(row_ranges(config, per_rank), default=0) <= (max(c) - min(c) if c else 0)


@PROPERTY
@given(configs())
def test_without_noise_or_groups_rows_are_disjoint_intervals_of_complexity(config):
    """Rows are runs of the sorted order: with one group and no noise they do not overlap, so their ranges
    add up to at most max - min (the per-step bound of fixed-size batches)."""
    config["random_level"], config["group_size"] = 0.0, None
    c = config["dataset"]
    rows = sorted((min(r), max(r)) for r in ([c[i] for i in row] for row in zip(*shares(config))))
    assert all(hi <= next_lo for (_, hi), (next_lo, _) in zip(rows, rows[1:]))
    assert sum(hi - lo for lo, hi in rows) <= (max(c) - min(c) if c else 0)


def fixed_size(size: int):
    return lambda indices: [indices[i:i + size] for i in range(0, len(indices), size)]


def token_budget(complexities: list[int], budget: int):
    """Greedy batches of at most `budget` total complexity (at least one sample each): counts differ by rank."""
    def batch_fn(indices):
        batches, batch, total = [], [], 0
        for i in indices:
            if batch and total + complexities[i] > budget:
                batches.append(batch)
                batch, total = [], 0
            batch.append(i)
            total += complexities[i]
        return batches + [batch] if batch else batches
    return batch_fn


def batch_samplers(config: dict, batch_fn, drop_last: bool) -> list[LoadBalancingDistributedBatchSampler]:
    return [LoadBalancingDistributedBatchSampler(s, batch_fn, drop_last=drop_last) for s in samplers(config)]


@PROPERTY
@given(configs(), st.integers(1, 9), st.integers(1, 3000), st.booleans(), st.booleans())
def test_every_rank_gets_as_many_batches(config, size, budget, by_budget, drop_last):
    batch_fn = token_budget(config["dataset"], budget) if by_budget else fixed_size(size)
    ranks = batch_samplers(config, batch_fn, drop_last)
    per_rank = [list(b) for b in ranks]
    own = [batch_fn(share) for share in shares(config)]
    count = (min if drop_last else max)(len(b) for b in own)
    assert [len(b) for b in per_rank] == [len(b) for b in ranks] == [count] * len(ranks)
    for batches, mine in zip(per_rank, own):
        # Its own batches, in order; repeated from the first to even out the count.
        assert batches == [mine[i % len(mine)] for i in range(count)]


@PROPERTY
@given(configs(), st.integers(1, 9))
def test_a_step_of_fixed_size_batches_differs_by_at_most_its_rows_ranges(config, size):
    c = config["dataset"]
    steps = zip(*[list(b) for b in batch_samplers(config, fixed_size(size), drop_last=False)])
    for s, batches in enumerate(steps):
        # A fixed size cuts every rank at the same positions: the step's batches are whole rows.
        assert imbalance([sum(c[i] for i in b) for b in batches]) <= sum(row_ranges(config, batches)), f"step {s}"


def test_balances_skewed_lengths_far_better_than_distributed_sampler():
    """The point of it: log-normal lengths over 4 ranks, within a few tokens of each other; torch's not."""
    lengths = np.random.default_rng(0).lognormal(3.0, 1.0, 1000).astype(int).tolist()
    ours = [sum(lengths[i] for i in LoadBalancingDistributedSampler(lengths, lambda x: x, 4, r)) for r in range(4)]
    torch_totals = [sum(lengths[i] for i in DistributedSampler(lengths, 4, r)) for r in range(4)]
    assert imbalance(ours) * 10 < imbalance(torch_totals)


def test_world_size_and_rank_come_from_torch_distributed(tmp_path):
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        sampler = LoadBalancingDistributedSampler(list(range(5)), lambda x: x)
        assert (sampler.world_size, sampler.rank) == (1, 0)
        assert LoadBalancingDistributedSampler(list(range(5)), lambda x: x, world_size=3).rank == 0
    finally:
        torch.distributed.destroy_process_group()


def test_without_torch_distributed_the_error_names_what_is_missing():
    with pytest.raises(RuntimeError, match="rank not given and torch.distributed is not initialized"):
        LoadBalancingDistributedSampler([1, 2], len, world_size=2)
    with pytest.raises(RuntimeError, match="world_size and rank not given"):
        LoadBalancingDistributedSampler([1, 2], len)


@pytest.mark.parametrize("args, message", [
    ({"world_size": 2, "rank": 2}, r"rank 2 is not in \[0, 1\]"),
    ({"world_size": 0, "rank": 0}, "world_size must be at least 1"),
    ({"world_size": 2, "rank": 0, "group_size": 0}, "group_size must be None or at least 1"),
    ({"world_size": 2, "rank": 0, "random_level": 1.5}, r"random_level must be in \[0, 1\]"),
])
def test_bad_arguments_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        LoadBalancingDistributedSampler([1, 2], lambda x: x, **args)


def test_a_complexity_that_is_not_finite_names_the_sample():
    sampler = LoadBalancingDistributedSampler([1.0, float("nan")], lambda x: x, world_size=1, rank=0)
    with pytest.raises(ValueError, match="complexity_fn gave nan for sample 1"):
        list(sampler)


def test_the_batch_sampler_wants_a_load_balancing_sampler():
    with pytest.raises(TypeError, match="must be a LoadBalancingDistributedSampler, got DistributedSampler"):
        LoadBalancingDistributedBatchSampler(DistributedSampler([1, 2], 1, 0), fixed_size(1))


def test_a_rank_without_batches_fails_on_every_rank_alike():
    """batch_fn gives the rank holding sample 0 no batch: every rank raises, none is left waiting in DDP."""
    ranks = [LoadBalancingDistributedBatchSampler(LoadBalancingDistributedSampler([5, 1, 1, 5], lambda x: x, 2, r,
                                                                                  shuffle=False),
                                                  lambda idx: [] if 0 in idx else [idx]) for r in range(2)]
    for s in ranks:
        with pytest.raises(ValueError, match=r"batch_fn gave no batch for rank [01]'s 2 samples while rank [01] has 1"):
            len(s)


def test_a_data_loader_iterates_the_batches_of_each_epoch():
    dataset = [torch.full((1,), float(n)) for n in (3, 9, 1, 7, 4, 4, 8, 2, 6)]
    batches = LoadBalancingDistributedBatchSampler(
        LoadBalancingDistributedSampler(dataset, lambda x: x.item(), world_size=2, rank=1, seed=3), fixed_size(2))
    loader = DataLoader(dataset, batch_sampler=batches)
    for epoch in range(3):
        batches.set_epoch(epoch)
        assert [b.flatten().tolist() for b in loader] == [[dataset[i].item() for i in b] for b in batches]
        assert len(loader) == len(batches) == 3
