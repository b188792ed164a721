"""Synthetic training batches of a task's input kind, with padding and ignored labels.

The input kind is the model's first forward argument: token ids (`input_ids`), images
(`pixel_values`), raw audio (`input_values`) or audio features (`input_features`, or an
`input_values` spectrogram where the config has mel bins). Sizes come from the shrunk config
(image size, channels, mel bins, conv strides), so a batch fits the model it is made for.

- text: BATCH rows of SEQ ids drawn below the special ids (shrink.py puts those at the top of the
  vocab); row r ends in 2 * r padding tokens (attention_mask 0, the config's pad id) where the
  model takes an attention_mask;
- encoder-decoder classifiers: each row's last token is the eos id (they classify from its state);
- labels: causal LM: the ids, -100 at padding; masked LM: a third of the tokens and each row's first,
  -100 elsewhere; seq2seq: decoder labels of SEQ - 4 tokens, the last row's last two -100 (models
  without decoder_input_ids, audio-text LMs that decode the ids themselves: a causal LM's labels);
  classifiers: one of NUM_LABELS classes per row;
- raw audio: about AUDIO_FRAMES frames after the conv feature extractor's strides, the last row's
  last quarter padded (zeros, attention_mask 0).

    batch = make_batches("causal-lm", config, model)(step)    # kwargs for model(**batch)
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch

from trainrt.coverage.shrink import IMAGE, MEL_BINS, VOCAB, size_of

BATCH = 3
SEQ = 12
NUM_LABELS = 3
FIRST_ID = 4  # below: pad / bos / eos / unk of most vocabularies
LAST_ID = VOCAB - 16  # above: the special ids shrink.py moved to the top
AUDIO_FRAMES = 16


def input_kind(task: str, model: torch.nn.Module, config) -> str:
    """'text', 'image', 'audio' (raw waveform) or 'audio-features', from forward's first argument."""
    first = next(iter(inspect.signature(model.forward).parameters), "")
    if first == "pixel_values" or (first == "inputs" and task == "image-cls"):
        return "image"
    if first == "input_values":
        return "audio-features" if size_of(config, ("num_mel_bins",)) else "audio"
    if first == "input_features":
        return "audio-features"
    return "text"


def make_batches(task: str, config, model: torch.nn.Module) -> Callable[[int], dict]:
    """step -> the keyword arguments of model(**batch) for that step (a new batch each step)."""
    kind = input_kind(task, model, config)
    takes = list(inspect.signature(model.forward).parameters)
    first = takes[0]

    def batch(step: int) -> dict:
        g = torch.Generator().manual_seed(step)
        mask = None
        if kind == "text":
            ids, mask = _text(config, g, ends_in_eos=task == "seq-cls")
            inputs = {first: ids, "attention_mask": mask} if "attention_mask" in takes else {first: ids}
        elif kind == "image":
            inputs = {first: _image(config, g)}
        elif kind == "audio":
            inputs = _audio(config, g, "attention_mask" in takes)
        else:
            inputs = {first: _audio_features(config, g, first)}
        # Audio-text LMs in the seq2seq mapping (Voxtral, Qwen3-ASR) decode the ids themselves:
        # their labels are the ids', as a causal LM's.
        label_task = "causal-lm" if task == "seq2seq" and "decoder_input_ids" not in takes else task
        inputs["labels"] = _labels(label_task, inputs[first], mask, g)
        return inputs

    return batch


def _pad_id(config) -> int:
    pad = size_of(config, ("pad_token_id",), 0)
    return pad if isinstance(pad, int) and 0 <= pad < VOCAB else 0


def _text(config, g: torch.Generator, ends_in_eos: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, attention_mask), both (BATCH, SEQ); padding positions hold the pad id. With
    `ends_in_eos` each row's last token is the eos id, where the config has one apart from the pad
    id: encoder-decoder classifiers (BART, mT5) read the hidden state at each row's eos."""
    ids = torch.randint(FIRST_ID, LAST_ID, (BATCH, SEQ), generator=g)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    for row in range(1, BATCH):
        mask[row, SEQ - 2 * row:] = 0
    ids[mask == 0] = _pad_id(config)
    eos = size_of(config, ("eos_token_id",))
    if ends_in_eos and getattr(config, "is_encoder_decoder", False) and isinstance(eos, int) \
            and 0 <= eos < VOCAB and eos != _pad_id(config):
        ids[torch.arange(BATCH), mask.sum(1) - 1] = eos
    return ids, mask


def _image(config, g: torch.Generator) -> torch.Tensor:
    size = size_of(config, ("image_size",), IMAGE)
    height, width = (size, size) if isinstance(size, int) else size[:2]
    channels = size_of(config, ("num_channels",), 3)
    return torch.randn(BATCH, channels, height, width, generator=g)


def _audio(config, g: torch.Generator, with_mask: bool) -> dict:
    """Raw samples: AUDIO_FRAMES times the feature extractor's total stride, plus its widest kernel."""
    strides = size_of(config, ("conv_stride",), (320,))
    kernels = size_of(config, ("conv_kernel",), (400,))
    length = math.prod(strides) * AUDIO_FRAMES + max(kernels)
    values = torch.randn(BATCH, length, generator=g)
    mask = torch.ones(BATCH, length, dtype=torch.long)
    mask[-1, length - length // 4:] = 0
    values[mask == 0] = 0.0
    return {"input_values": values, "attention_mask": mask} if with_mask else {"input_values": values}


def _audio_features(config, g: torch.Generator, name: str) -> torch.Tensor:
    """Spectrogram frames: Whisper's encoder wants 2 * max_source_positions frames (its convs halve
    them), as (batch, mel, frames); AST's input_values are (batch, frames, mel) of max_length;
    Wav2Vec2-BERT's input_features are (batch, frames, its projection's input size)."""
    mel = size_of(config, ("num_mel_bins",), MEL_BINS)
    if (width := size_of(config, ("feature_projection_input_dim",))) is not None:
        return torch.randn(BATCH, 4 * AUDIO_FRAMES, width, generator=g)
    if name == "input_values":
        return torch.randn(BATCH, size_of(config, ("max_length",), 4 * AUDIO_FRAMES), mel, generator=g)
    frames = 2 * size_of(config, ("max_source_positions",), 2 * AUDIO_FRAMES)
    return torch.randn(BATCH, mel, frames, generator=g)


def _labels(task: str, ids: torch.Tensor, mask: torch.Tensor | None, g: torch.Generator) -> torch.Tensor:
    """The task's labels; for language models from the ids (the first input) and the mask."""
    if task in ("seq-cls", "image-cls", "audio-cls"):
        return torch.randint(0, NUM_LABELS, (BATCH,), generator=g)
    if task == "seq2seq":
        labels = torch.randint(FIRST_ID, LAST_ID, (BATCH, SEQ - 4), generator=g)
        labels[-1, -2:] = -100
        return labels
    labels = ids.clone()
    if mask is not None:
        labels[mask == 0] = -100
    if task == "masked-lm":
        unlabelled = torch.rand(ids.shape, generator=g) > 1 / 3
        unlabelled[:, 0] = False
        labels[unlabelled] = -100
    return labels
