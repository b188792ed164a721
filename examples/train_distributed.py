"""A small language model trained with RTModule on several processes: DDP under torchrun, ZeRO under
the deepspeed launcher (gloo on the CPU). Each rank trains on its own slice of the same random token
batches and prints its last loss and its fallback reason (None: every step ran in the engine).

    torchrun --nproc-per-node 2 examples/train_distributed.py
    deepspeed --num_accelerators 2 examples/train_distributed.py --zero-stage 2      # or 1, 3
"""

import argparse
import gc

import torch

import trainrt


class TinyLM(torch.nn.Module):
    """Embedding tied to the output projection, a LayerNorm and an MLP: (B, T) ids -> loss."""

    def __init__(self, vocab=256, width=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.norm = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width))
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight
        torch.nn.init.normal_(self.embed.weight, std=0.02)  # GPT-2's: the loss starts near ln(vocab)

    def forward(self, ids, labels):
        h = self.embed(ids)
        h = h + self.mlp(self.norm(h))
        return torch.nn.functional.cross_entropy(self.head(h).flatten(0, 1), labels.flatten())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zero-stage", type=int, default=0, help="0: DDP; 1, 2 or 3: DeepSpeed ZeRO")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8, help="per rank")
    parser.add_argument("--local_rank", type=int, default=None, help="set by the deepspeed launcher")
    args = parser.parse_args()

    torch.distributed.init_process_group("gloo")  # the launchers set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    torch.manual_seed(0)
    if args.zero_stage:
        import deepspeed

        config = {"train_micro_batch_size_per_gpu": args.batch, "zero_optimization": {"stage": args.zero_stage},
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}, "gradient_clipping": 1.0}
        with deepspeed.zero.Init(config_dict_or_path=config, enabled=args.zero_stage == 3):  # stage 3: partitioned
            lm = TinyLM()
        model = trainrt.RTModule(lm)
        engine, _, _, _ = deepspeed.initialize(model=model, config=config)
    else:
        model = trainrt.RTModule(TinyLM())
        engine = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = trainrt.optim.FusedAdam(engine.parameters(), lr=1e-3)
    data = torch.Generator().manual_seed(1)
    for _ in range(args.steps):
        batch = torch.randint(0, 256, (world_size * args.batch, 17), generator=data)[rank * args.batch:(rank + 1) * args.batch]
        loss = engine(batch[:, :-1], batch[:, 1:])
        if args.zero_stage:
            engine.backward(loss)
            engine.step()
        else:
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    print(f"rank {rank} of {world_size}: loss {loss.item():.4f}, fallback: {model.fallback_reason}", flush=True)
    # DeepSpeed's engine and DDP's reducer live in reference cycles: free them while the process group is
    # up, not while the interpreter shuts down, when a gloo thread dropping their last tensors can abort.
    engine = optimizer = None
    gc.collect()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
