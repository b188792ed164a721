"""Generated elementwise kernels (TRAINRT_USE_CODEGEN, src/trainrt/kernels/codegen/) against eager.

A tiny Llama (RMSNorm, SiLU MLP, rotary embeddings: the elementwise chains fusion is for) and GELU
GPT-2 train 3 SGD-momentum steps with fallback disabled: losses within 1e-5 relative and parameters
within 1e-5 of each tensor's largest element of eager's, with FusedElementwise nodes in both
programs. Also: the disk cache is reused by a second process (nothing compiled), the debug folder
holds the subgraphs and sources, and ORTModule's names work.
"""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import trainrt

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def engine_only(monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINRT_FALLBACK_POLICY", "FALLBACK_DISABLE")
    monkeypatch.setenv("TRAINRT_USE_CODEGEN", "1")
    monkeypatch.setenv("TRAINRT_CACHE_DIR", str(tmp_path / "cache"))


def _llama():
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=88, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    return transformers.LlamaForCausalLM(cfg)


def _gpt2():
    cfg = transformers.GPT2Config(vocab_size=96, n_embd=32, n_layer=2, n_head=2, n_positions=32,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(cfg)


def _fused_nodes(rt) -> dict[str, int]:
    rows = [row for engines in rt._engines.values() for e in engines for row in e.programs.forward_pass_report]
    return {row["pass"]: row["nodes_removed"] for row in rows if row["pass"].startswith("ElementwiseFusion")}


def _train(model, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(step)
        ids = torch.randint(0, 96, (3, 16), generator=g)
        loss = model(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("make", [_llama, _gpt2], ids=["llama", "gpt2"])
def test_generated_kernels_train_as_eager(make):
    torch.manual_seed(0)
    eager = make()
    rt = trainrt.RTModule(copy.deepcopy(eager))
    want, got = _train(eager), _train(rt)
    assert got == pytest.approx(want, rel=1e-5)
    for (name, p), q in zip(eager.named_parameters(), rt.parameters()):
        assert (p - q).abs().max() <= 1e-5 * max(p.abs().max().item(), 1e-3), name
    fused = _fused_nodes(rt)
    assert fused["ElementwiseFusion"] > 0 and fused["ElementwiseFusion (backward)"] > 0, fused


def test_generated_kernels_off_by_default(monkeypatch):
    monkeypatch.delenv("TRAINRT_USE_CODEGEN")
    rt = trainrt.RTModule(_llama())
    _train(rt, steps=1)
    assert _fused_nodes(rt) == {}


_CHILD = textwrap.dedent("""
    import json, torch, transformers, trainrt
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=88, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    rt = trainrt.RTModule(transformers.LlamaForCausalLM(cfg))
    ids = torch.randint(0, 96, (2, 8))
    loss = rt(input_ids=ids, labels=ids).loss
    loss.backward()
    print(json.dumps({"loss": loss.item(), **trainrt._C.codegen_stats()}))
""")


def _child(env_extra: dict, cwd) -> dict:
    """Runs _CHILD with these variables (None: unset) in `cwd`; its loss and codegen_stats()."""
    import json

    env = {k: v for k, v in {**os.environ, **env_extra}.items() if v is not None}  # None: unset
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "stderr": out.stderr}


def test_a_second_process_compiles_nothing_and_the_debug_folder_holds_sources(tmp_path):
    cache = tmp_path / "cache"
    first = _child({"TRAINRT_CACHE_DIR": str(cache), "ORTMODULE_TRITON_DEBUG": "1"}, tmp_path)
    assert first["units_compiled"] >= 1 and first["units_from_cache"] == 0
    second = _child({"TRAINRT_CACHE_DIR": str(cache)}, tmp_path)
    assert second["units_compiled"] == 0 and second["units_from_cache"] >= 1
    assert second["loss"] == first["loss"]
    debug = tmp_path / "codegen_debug"
    subgraphs = list(debug.glob("trainrt_ew_*.txt"))
    assert subgraphs and list(debug.glob("ew_*.cc"))
    text = subgraphs[0].read_text()
    assert "graph" in text and 'extern "C" void trainrt_ew_' in text
    assert oct((cache / "codegen").stat().st_mode & 0o777) == "0o700"


def test_ortmodule_alias_turns_it_on(tmp_path):
    """ORTMODULE_USE_TRITON turns code generation on; TRAINRT_USE_CODEGEN=0 leaves it off (same loss).
    A missing compiler is kernels/codegen/fused_elementwise_kernel_test.cc's case."""
    on = _child({"TRAINRT_USE_CODEGEN": None, "ORTMODULE_USE_TRITON": "1", "TRAINRT_CACHE_DIR": str(tmp_path / "c1")},
                tmp_path)
    assert on["units_compiled"] >= 1
    off = _child({"TRAINRT_USE_CODEGEN": "0", "TRAINRT_CACHE_DIR": str(tmp_path / "c2")}, tmp_path)
    assert off["units_compiled"] == 0 and off["loss"] == pytest.approx(on["loss"], rel=1e-5)


def test_saved_programs_keep_the_fused_bodies(tmp_path, monkeypatch):
    """TRAINRT_SAVE_ONNX_PATH writes FusedElementwise nodes with their bodies as graph attributes,
    which the engine reads back."""
    import onnx

    monkeypatch.setenv("TRAINRT_SAVE_ONNX_PATH", str(tmp_path / "onnx"))
    rt = trainrt.RTModule(_llama())
    _train(rt, steps=1)
    saved = onnx.load(str(tmp_path / "onnx" / "trainrt_optimized_backward.onnx"))
    fused = [n for n in saved.graph.node if n.op_type == "FusedElementwise"]
    assert fused and all(a.name == "body" and a.type == onnx.AttributeProto.GRAPH for n in fused for a in n.attribute)
    session = trainrt.Session(saved.SerializeToString())  # imports the bodies
    assert len(session.input_names) == len(saved.graph.input)


def test_training_session_with_generated_kernels_trains_as_without():
    """TrainingSession(codegen=True) (the C++ path; `trainrt train --codegen`): the same losses over
    3 SGD steps on an ONNX GPT as without."""
    import numpy as np
    from onnx_gpt import transformer_model

    model = transformer_model(layers=2, hidden=32, heads=2, vocab=64, seq=16)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 64, (4, 16)), rng.standard_normal((4, 16, 64)).astype(np.float32)) for _ in range(3)]
    losses = {}
    before = trainrt._C.codegen_stats()
    for codegen in (False, True):
        session = trainrt.TrainingSession(model, append_loss="mse", output="logits", label="labels",
                                          optimizer="sgd", lr=0.1, momentum=0.9, codegen=codegen)
        losses[codegen] = [session.train_step([tokens, labels]) for tokens, labels in batches]
    assert losses[True] == pytest.approx(losses[False], rel=1e-5)
    after = trainrt._C.codegen_stats()  # the joint graph had groups: a unit was compiled or loaded
    assert after["units_compiled"] + after["units_from_cache"] > before["units_compiled"] + before["units_from_cache"]
