"""Pytree specs as JSON data (treespec_json.py) read back as the same spec, and reading never imports.

Round trips: Hugging Face outputs (GPT-2's CausalLMOutputWithCrossAttentions with a DynamicCache of
past keys and values, BERT's outputs), plain tuples, lists and dicts, and torch's other built-in
nodes; a namedtuple's class and a defaultdict's factory are contexts that are classes. Specs this
encoding cannot write are refused with the reason.
"""

import collections
import json
import sys

import pytest
import torch
from torch.utils import _pytree as pytree

from trainrt.capture.export import register_hf_cache_pytree
from trainrt.treespec_json import NotJSONData, spec_from_json, spec_to_json, value_from_json, value_to_json


def round_trip(tree):
    spec = pytree.tree_flatten(tree)[1]
    back = spec_from_json(json.loads(json.dumps(spec_to_json(spec))))
    assert back == spec
    leaves = pytree.tree_leaves(tree)
    assert type(pytree.tree_unflatten(leaves, back)) is type(pytree.tree_unflatten(leaves, spec))
    return back


def t():
    return torch.zeros(1)


@pytest.mark.parametrize("tree", [
    t(), (t(), t()), [t(), (t(),)], {"a": t(), "b": [t(), {"c": t()}]}, {(1, "x"): t(), 3: t(), None: t()},
    ((t(), {"labels": t()}), {}), collections.OrderedDict(b=t(), a=t()), collections.defaultdict(list, {"k": t()}),
    collections.deque([t(), t()], maxlen=4), torch.return_types.max((t(), t())),
], ids=lambda tree: type(tree).__name__)
def test_plain_structures_round_trip(tree):
    round_trip(tree)


def test_hugging_face_outputs_round_trip():
    transformers = pytest.importorskip("transformers")
    register_hf_cache_pytree()
    torch.manual_seed(0)
    ids = torch.randint(0, 64, (2, 8))
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64,
                                                                n_positions=16, bos_token_id=0, eos_token_id=0))
    out = gpt2(ids, labels=ids)
    assert type(out.past_key_values).__name__ == "DynamicCache"
    spec = round_trip(out)
    assert spec.type is type(out) and "DynamicCache" in str(spec)
    bert = transformers.BertForSequenceClassification(transformers.BertConfig(
        num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64, vocab_size=64))
    round_trip(bert(ids, labels=torch.tensor([0, 1]), output_hidden_states=True, output_attentions=True))


def test_a_class_context_is_written_by_name_and_an_unregistered_one_is_refused():
    assert value_to_json(int) == {"type": "builtins.int"}
    Point = collections.namedtuple("Point", "x y")
    with pytest.raises(NotJSONData, match="Point is not a type registered in torch's pytree"):
        spec_to_json(pytree.tree_flatten(Point(t(), t()))[1])
    with pytest.raises(NotJSONData, match="is not JSON data"):
        value_to_json(object())
    with pytest.raises(NotJSONData, match="is not JSON data"):
        value_to_json(torch.float32)


def test_values_keep_tuples_dicts_and_scalars():
    value = [1, 2.5, True, None, "s", (1, (2,)), {"a": (3,), 4: [5]}, float("inf")]
    assert value_from_json(json.loads(json.dumps(value_to_json(value)))) == value


def test_reading_resolves_names_among_registered_types_and_never_imports():
    assert "trainrt_never_imported" not in sys.modules
    for name in ("trainrt_never_imported.Payload", "os.system", "subprocess.Popen", "builtins.int"):
        with pytest.raises(ValueError, match="is not registered"):
            spec_from_json({"type": name, "context": None, "children": []})
    assert "trainrt_never_imported" not in sys.modules
    for data in ({"type": "trainrt_never_imported.Payload"}, {"tuple": "no"}, {"eval": "1"}, {"a": 1, "b": 2}):
        with pytest.raises(ValueError):
            value_from_json(data)
    assert "trainrt_never_imported" not in sys.modules
