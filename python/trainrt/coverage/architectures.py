"""Which architectures the sweep walks: the classes the installed transformers registers per task.

Each task is one of transformers' auto-model mappings, model type -> class name
(`modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES` and its siblings), so a new transformers brings
its new architectures into the sweep by itself. Model types that map to the same model class and
the same config class within a task (gpt-sw3 is GPT2LMHeadModel over GPT2Config, as gpt2 is) are
run once, under the config class's own model type where it is one of them (gpt2), with the others
kept as aliases.

    archs = architectures(["causal-lm"], only={"llama", "gpt2"})
    archs[0].name, archs[0].class_name        # 'causal-lm/gpt2', 'GPT2LMHeadModel'
"""

from __future__ import annotations

from dataclasses import dataclass

# Sweep task -> transformers' mapping of model type -> model class name for it.
TASKS = {
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq-cls": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "image-cls": "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES",
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "audio-cls": "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES",
}


@dataclass(frozen=True)
class Architecture:
    """One model class of one task, built from the config class of `model_type`."""

    task: str  # a key of TASKS
    model_type: str  # the mapping's key, e.g. 'llama' (transformers' CONFIG_MAPPING key too)
    class_name: str  # e.g. 'LlamaForCausalLM'
    aliases: tuple[str, ...] = ()  # other model types of the task with the same model and config classes

    @property
    def name(self) -> str:
        return f"{self.task}/{self.model_type}"

    def matches(self, names: set[str]) -> bool:
        """True when `names` (lower case) holds its model type, an alias, its class or a task/type name."""
        types = (self.model_type, *self.aliases)
        own = {self.class_name, *types, *(f"{self.task}/{t}" for t in types)}
        return bool({n.lower() for n in own} & names)


def architectures(tasks: list[str], only: set[str] | None = None) -> list[Architecture]:
    """The architectures of `tasks`, in task then mapping order; `only` (lower-case model types, class
    names or task/type names) keeps those that match one of them."""
    from transformers.models.auto import modeling_auto
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING, CONFIG_MAPPING_NAMES

    found = []
    for task in tasks:
        by_classes: dict[tuple[str, str], list[str]] = {}
        for model_type, class_name in getattr(modeling_auto, TASKS[task]).items():
            if isinstance(class_name, (tuple, list)):  # e.g. DeiT: (the classifier, the one with a teacher)
                class_name = class_name[0]
            key = (class_name, CONFIG_MAPPING_NAMES.get(model_type, model_type))
            by_classes.setdefault(key, []).append(model_type)
        for (class_name, _), types in by_classes.items():
            if len(types) > 1:  # the config class's own type first
                own = CONFIG_MAPPING[types[0]].model_type
                types.sort(key=lambda t: t != own)
            arch = Architecture(task, types[0], class_name, tuple(types[1:]))
            if only is None or arch.matches(only):
                found.append(arch)
    return found
