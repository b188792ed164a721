"""A tiny, consistent config for any transformers architecture, from its own config class.

The shrink is driven by the config's attribute names, not by a table per model: every `__init__`
argument whose name says what it sizes (widths, layer counts, heads, key/value heads, head dims,
feed-forward sizes, vocab, positions, image and patch sizes, audio feature sizes, experts) gets a
tiny value, and every dropout-like probability (dropout, *_prob, drop path, layer drop, jitter) is 0
so that eager and the engine compute the same function.

Consistency comes from the choice of values and from the config's own `__init__`:
- widths are WIDTH = HEADS * HEAD_DIM, and KV_HEADS divides HEADS (grouped-query attention stays);
- an argument whose default is None is derived in `__init__` from the others (head_dim, n_inner,
  layer_types, num_key_value_heads): it is left out, so the config recomputes it from the shrunk
  sizes;
- per-stage lists of vision models keep their length: depths become 1s, stage widths are divided
  by one factor (the first stage becomes WIDTH // 2) and stage head counts by the first one's, so
  each stage's width stays divisible by its heads;
- sub-configs (text_config, vision_config, encoder / decoder) are shrunk the same way, recursively.

    config = shrink_config("llama", num_labels=3)
    config.hidden_size, config.num_hidden_layers, config.head_dim   # 32, 2, 8
"""

from __future__ import annotations

import inspect
import re

WIDTH = 32
HEADS = 4
KV_HEADS = 2
HEAD_DIM = WIDTH // HEADS
FFN = 64
LAYERS = 2
VOCAB = 128
POSITIONS = 64
IMAGE = 64  # CNNs end at 2 x 2: batch norm over 3 images of 1 x 1 is too ill-conditioned to compare
PATCH = 8
WINDOW = 2  # divides the resolution of every Swin stage (IMAGE / 4 = 16 patches a side, halved per stage)
EXPERTS = 4
EXPERTS_PER_TOKEN = 2
LOW_RANK = 16  # LoRA-style ranks (DeepSeek's q_lora_rank / kv_lora_rank)
AUDIO_CHANNELS = 32  # each conv layer of a raw-waveform feature extractor (Wav2Vec2's conv_dim)
MEL_BINS = 16

# Per-model overrides, only where the generic shrink cannot know a constraint. Each says why.
OVERRIDES: dict[str, dict] = {
    # Its layers are a pattern repeated n times ([[["global", "local"], 12]]), which must give num_layers.
    "gpt_neo": {"attention_types": [[["global", "local"], LAYERS // 2]]},
    # CvtStage reads stage i's drop-path rates (one per block) at index i: stage i needs i + 1 blocks.
    "cvt": {"depth": [1, 2, 3]},
    # Its stem downsamples by 16 whatever patch_size says, and the attention biases are sized by it.
    "levit": {"patch_size": 16},
    # Axial position embeddings: their widths sum to the hidden size and their shape multiplies to
    # the sequence length in training; attention works in chunks the sequence must be a whole number of.
    "reformer": {"axial_pos_embds_dim": (WIDTH // 2, WIDTH // 2), "axial_pos_shape": (3, 4),  # 12: batches.SEQ
                 "local_attn_chunk_length": 4, "lsh_attn_chunk_length": 4},
    # Block-sparse attention needs sequences of many blocks; on shorter ones BigBird switches to full
    # attention inside forward by making new query/key/value layers there, which export cannot trace.
    "big_bird": {"attention_type": "original_full"},
    "bigbird_pegasus": {"attention_type": "original_full"},
    # Its head's batch norm has hidden_dim channels, which must be what round_filters makes of 1280.
    "efficientnet": {"hidden_dim": 1280},
}


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_float(v) -> bool:
    return isinstance(v, float)


def _ints(v) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(_is_int(x) for x in v)


def _zero(v):
    """Dropout-like probabilities (a float, or one per stage) become 0."""
    if _is_float(v):
        return 0.0
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        return type(v)(0.0 for _ in v)
    return v


def _cap(limit: int | float):
    """A number (or each int of a list) made at most `limit`."""

    def cap(v):
        if _is_int(v) or _is_float(v):
            return min(v, limit)
        if _ints(v):
            return type(v)(min(x, limit) for x in v)
        return v

    return cap


def _set(value: int):
    """A positive int (or each of a per-layer list) made `value`: sizes the model does not constrain
    beyond being positive."""

    def set_(v):
        if _is_int(v):
            return value if v > 0 else v
        if _ints(v):
            return type(v)(value if x > 0 else x for x in v)
        return v

    return set_


def _stage_widths(v):
    """A width (WIDTH), or per-stage widths divided by one factor so the first is WIDTH // 2, each
    rounded to a multiple of HEAD_DIM: the ratios between stages stay (Swin's doubling keeps a
    stage's width divisible by its heads) and HEADS divides every width (MobileViT's)."""
    if _is_int(v):
        return WIDTH if v > WIDTH else v
    if _ints(v):
        factor = max(1, v[0] // (WIDTH // 2))
        return type(v)(max(HEAD_DIM, round(x / factor / HEAD_DIM) * HEAD_DIM) for x in v)
    return v


def _stage_heads(v):
    """Heads (HEADS), or per-stage heads divided by the first stage's (Swin's (3, 6, 12, 24) -> (1, 2, 4, 8))."""
    if _is_int(v):
        return HEADS if v > 0 else v
    if _ints(v):
        first = max(1, min(v))
        return type(v)(max(1, x // first) for x in v)
    return v


def _depths(v):
    """Blocks per stage: one each (the number of stages stays)."""
    return type(v)(1 for _ in v) if _ints(v) else _set(1)(v)


def _kv_heads(v):
    """Key/value heads: KV_HEADS (also where unset), or 1 where the model has one (multi-query
    attention stays)."""
    return (1 if v == 1 else KV_HEADS) if _is_int(v) or v is None else v


def _head_dim(v):
    """The head dim: HEAD_DIM, also where unset (WIDTH / HEADS, what configs derive)."""
    return HEAD_DIM if v is None or (_is_int(v) and v > 0) else v


def _square(size: int):
    """An image size: an int or a (height, width) pair."""

    def square(v):
        if _is_int(v):
            return size
        if _ints(v):
            return type(v)(size for _ in v)
        return v

    return square


def _audio_channels(v):
    return type(v)(AUDIO_CHANNELS for _ in v) if _ints(v) else v


_LAYERS_PATTERN = (r"(.*_)?(num_hidden_layers|num_layers|n_layer|n_layers|encoder_layers|decoder_layers|"
                   r"num_encoder_layers|num_decoder_layers)")
_LAYERS_RULE = re.compile(_LAYERS_PATTERN)
_KV_HEADS = re.compile(r"(.*_)?(num_key_value_heads|num_kv_heads|n_kv_heads|kv_n_heads)")
# Sizes set even where the default is None: configs derive them as the heads (kv heads) or
# WIDTH / HEADS (head dim) when they derive them at all, and some models read them unset.
_ALWAYS_SET = re.compile(f"{_KV_HEADS.pattern}|head_dim")

# (attribute-name pattern, transform); the first pattern that matches the whole name wins.
# Transforms leave values of other types unchanged (a bool named like a size is not a size).
_RULES = [
    (r".*(dropout|pdrop|drop_rate|drop_path_rate|layerdrop|drop_connect_rate|jitter_noise).*|.*_prob", _zero),
    (r"(.*_)?vocab_size(_per_layer_input)?|unpadded_vocab_size", _cap(VOCAB)),
    (r"type_vocab_size", _cap(2)),
    (_KV_HEADS.pattern, _kv_heads),
    (r"head_dim", _head_dim),
    (r"(.*_)?(head_dim|head_size|d_kv|kv_channels|dim_head|d_head|attention_head_dim)", _set(HEAD_DIM)),
    (r"(.*_)?(num_attention_heads|n_head|n_heads|num_heads|attention_heads|encoder_attention_heads|"
     r"decoder_attention_heads)", _stage_heads),
    (r"(q|kv|o)_lora_rank", _set(LOW_RANK)),
    (r"rotary_dim|rotary_emb_dim|rope_dim", _cap(HEAD_DIM)),
    (r"(.*_)?(intermediate_size|ffn_dim|d_ff|n_inner|dff|dim_ff|d_inner|ffn_hidden_size|hidden_dim|"
     r"intermediate_size_mlp|expert_ffn_hidden_size|feed_forward_size)", _set(FFN)),
    (_LAYERS_PATTERN, _cap(LAYERS)),
    (r"depths|depth", _depths),
    (r"hidden_sizes|embed_dims|neck_hidden_sizes", _stage_widths),
    (r"hidden_size|d_model|n_embd|dim|embed_dim|emb_dim|embedding_size|embedding_dim|word_embed_proj_dim|"
     r"projection_dim|output_hidden_size|d_latents|lru_width|attention_hidden_size|encoder_hidden_size|"
     r"audio_hidden_size|classifier_proj_size|projection_size|pooler_hidden_size|input_embedding_size",
     _stage_widths),
    (r"(.*_)?(max_position_embeddings|n_positions|n_ctx|max_source_positions|max_target_positions|max_seq_len|"
     r"context_length|max_length)", _cap(POSITIONS)),
    (r"sliding_window|local_attention|attention_window", _cap(POSITIONS)),
    (r"image_size|input_size|crop_size", _square(IMAGE)),
    (r"patch_size", _cap(PATCH)),
    (r"window_size", _cap(WINDOW)),
    (r"(num_experts|num_local_experts|n_routed_experts|moe_num_experts)", _cap(EXPERTS)),
    (r"(num_experts_per_tok|num_experts_per_token|moe_top_k|moe_k|top_k|moe_topk)", _cap(EXPERTS_PER_TOKEN)),
    (r"n_group|topk_group|num_expert_group", _cap(1)),
    # MoE stacks whose first layers are dense: one dense layer, then the experts.
    (r"first_k_dense_replace|num_dense_layers|moe_layer_start_index", _cap(1)),
    (r"num_groups", _cap(2)),  # group norm groups (BiT): they divide the shrunk channel counts
    (r"width_coefficient|depth_coefficient", _cap(1.0)),  # EfficientNet's scaling of its B0 sizes
    # Mamba's inner width is expand * hidden, split into heads of head_dim: with 1 it is HEADS * HEAD_DIM.
    (r"(mamba_)?expand", _cap(1)),
    (r"(mamba_)?n_groups|mamba_ngroups|mamba_n_groups", _cap(1)),  # Mamba-2's B/C groups divide its heads
    (r"conv_dim", _audio_channels),
    (r"num_mel_bins|feature_size", _cap(MEL_BINS)),
    (r"num_conv_pos_embeddings", _cap(16)),
    (r"num_conv_pos_embedding_groups", _cap(2)),
]
_COMPILED = [(re.compile(p), f) for p, f in _RULES]
_TOKEN_ID = re.compile(r".*_(token_id|token_index|token_ids)|(mask|unk|pad|bos|eos)_index")


def _shrunk_value(name: str, value, special_ids: list[str]):
    if _TOKEN_ID.fullmatch(name):
        return _token_id(name, value, special_ids)
    for pattern, transform in _COMPILED:
        if pattern.fullmatch(name):
            return transform(value)
    return value


def _token_id(name: str, value, special_ids: list[str]):
    """Special token ids past VOCAB move to the top of the tiny vocab, one id per name, so they stay
    distinct (the synthetic batches draw ordinary tokens below them)."""
    if name not in special_ids:
        special_ids.append(name)
    top = VOCAB - 1 - special_ids.index(name)
    if _is_int(value) and value >= VOCAB:
        return top
    if _ints(value):
        return type(value)(top if x >= VOCAB else x for x in value)
    return value


_ABSENT = object()


def _per_layer(value, layers: int | None) -> bool:
    """One entry per layer of a layer count the shrink cuts (layer_types, per-layer sizes)."""
    return bool(layers) and isinstance(value, (list, tuple)) and len(value) == layers


def _first_layers(value):
    """LAYERS entries of a per-layer list: the first of each distinct kind first (a hybrid's
    ['linear', 'linear', 'linear', 'full', ...] keeps both: ['linear', 'full']), then in order.
    Lists whose __init__ derives them are given so too, so that a hybrid keeps both kinds."""
    try:
        kinds = list(dict.fromkeys(value))
    except TypeError:  # unhashable entries (per-layer dicts)
        kinds = []
    picked = kinds[:LAYERS] if len(kinds) > 1 else []
    rest = [i for i, v in enumerate(value) if v not in picked] if picked else list(range(len(value)))
    chosen = [value.index(k) for k in picked] + rest[:LAYERS - len(picked)]
    return type(value)(value[i] for i in sorted(chosen))


def _get(config, name: str):
    """config.name, or _ABSENT where it has none or refuses a global value (per-layer attributes of
    configs with per_layer_config raise on access)."""
    try:
        return getattr(config, name)
    except Exception:  # noqa: BLE001  (AttributeError, or transformers' AmbiguousGlobalPerLayerAttributeError)
        return _ABSENT


def _layer_count(config, params) -> int | None:
    """The layer count the shrink cuts to LAYERS (the first __init__ argument the layer rule matches,
    when it is more than LAYERS): lists of that length are per-layer and are cut with it. None for
    models whose layer count is derived (ConvNeXt's is its number of stages)."""
    for name in params:
        value = _get(config, name)
        if _LAYERS_RULE.fullmatch(name) and _is_int(value) and value > LAYERS:
            return value
    return None


def shrink(config, special_ids: list[str] | None = None):
    """A config of config's class with tiny sizes (rules above), from `config`'s values: what its
    class derives (defaults None) is left to its __init__, sub-configs are shrunk too (with the
    special token ids of the whole tree kept distinct in `special_ids`)."""
    from transformers import PretrainedConfig

    cls = type(config)
    special_ids = [] if special_ids is None else special_ids
    params = inspect.signature(cls.__init__).parameters
    layers = _layer_count(config, params)
    kwargs = {}
    for name, param in params.items():
        if name == "self" or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        value = _get(config, name)
        if value is _ABSENT:
            continue
        if isinstance(value, PretrainedConfig):
            kwargs[name] = shrink(value, special_ids)
        elif param.default is None and value is not None and not _ALWAYS_SET.fullmatch(name) \
                and not _per_layer(value, layers):
            continue  # derived from the other arguments in __init__: recomputed from the shrunk ones
        else:
            value = _shrunk_value(name, value, special_ids)
            kwargs[name] = _first_layers(value) if _per_layer(value, layers) else value
    kwargs.update(OVERRIDES.get(getattr(cls, "model_type", ""), {}))
    if "kv_lora_rank" in kwargs and "num_key_value_heads" in kwargs:
        # Multi-head latent attention (DeepSeek) expands its latent to keys and values of every head.
        kwargs["num_key_value_heads"] = kwargs.get("num_attention_heads", HEADS)
    if kwargs.get("pad_token_id", 0) is None:
        # Decoder classifiers find each row's last token through the padding id; batches pad with it.
        kwargs["pad_token_id"] = 0
    if kwargs.get("num_experts_per_tok", 0) is None and any(_is_int(kwargs.get(n)) and kwargs[n] > 0 for n in
                                                            ("n_routed_experts", "num_experts", "num_local_experts")):
        # DeepSeek-V2's config has 64 routed experts and no top-k: its router calls topk(k=None).
        kwargs["num_experts_per_tok"] = EXPERTS_PER_TOKEN
    if kwargs.get("languages") and "default_language" in kwargs and kwargs["default_language"] is None:
        # X-MOD picks a language adapter per input; without a default its forward refuses inputs.
        kwargs["default_language"] = list(kwargs["languages"])[0]
    kv = [n for n in kwargs if _KV_HEADS.fullmatch(n) and _is_int(kwargs[n]) and kwargs[n] > 1]
    try:
        return cls(**kwargs)
    except Exception:  # noqa: BLE001  (the config's validators: retried once with one key/value per head)
        if not kv:
            raise
    # Models that refuse grouped-query attention (ESMC) validate kv heads == heads.
    return cls(**{**kwargs, **{n: kwargs.get("num_attention_heads", HEADS) for n in kv}})


def shrink_config(model_type: str, num_labels: int | None = None):
    """The tiny config of `model_type` (a CONFIG_MAPPING key); `num_labels` for classifier heads."""
    from transformers import CONFIG_MAPPING

    config = shrink(CONFIG_MAPPING[model_type]())
    if num_labels is not None:
        config.num_labels = num_labels
    if getattr(config, "is_encoder_decoder", False):
        # Encoder-decoders shift labels right behind a start token; T5's and the generic
        # EncoderDecoderConfig's configs leave it to the generation config (start with the pad id).
        if getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = 0
        if getattr(config, "decoder_start_token_id", None) is None:
            config.decoder_start_token_id = config.pad_token_id
    return config


def size_of(config, names: tuple[str, ...], default=None):
    """The first of `names` that `config` or one of its sub-configs sets (depth first), else default:
    e.g. the image size a vision tower reads, wherever the composite config keeps it."""
    from transformers import PretrainedConfig

    for name in names:
        value = getattr(config, name, None)
        if value is not None and not isinstance(value, PretrainedConfig):
            return value
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig) and (found := size_of(value, names)) is not None:
            return found
    return default
