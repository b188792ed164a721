"""The demo's text as byte tokens (vocab 256: every byte is a token, no tokenizer to download) and the
random training windows both runs see.

    tokens = load_tokens(TEXT)                                   # (N,) int64 in [0, 256)
    windows = random_windows(tokens, steps=200, batch=8, seq=128, seed=0)   # (200, 8, 128)
"""

from __future__ import annotations

import pathlib

import torch

VOCAB = 256
# Shakespeare, public domain (see data/README.md); in the repository, beside the package tree.
TEXT = pathlib.Path(__file__).resolve().parents[3] / "data" / "shakespeare.txt"


def load_tokens(path: pathlib.Path) -> torch.Tensor:
    """The file's bytes as token ids, (N,) int64."""
    if not path.is_file():
        raise SystemExit(f"demo: no text at {path} (the repository's data/shakespeare.txt; or pass --text PATH)")
    return torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8).long()


def random_windows(tokens: torch.Tensor, steps: int, batch: int, seq: int, seed: int) -> torch.Tensor:
    """`batch` windows of `seq` consecutive tokens per step, at starts drawn by a generator seeded with
    `seed`: (steps, batch, seq) int64. The model predicts each window's next byte at every position."""
    if len(tokens) <= seq:
        raise SystemExit(f"demo: the text has {len(tokens)} bytes, fewer than a window of {seq}")
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(tokens) - seq + 1, (steps, batch, 1), generator=generator)
    return tokens[starts + torch.arange(seq)]


def printable(ids) -> str:
    """Token ids as text for a terminal: printable ASCII, newlines and tabs as they are, any other byte
    (a control character, a byte of no ASCII text) as U+FFFD."""
    return "".join(chr(i) if 32 <= i < 127 or i in (9, 10) else "\ufffd" for i in map(int, ids))
