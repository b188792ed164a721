"""The repository explains itself: generated docs match their sources, the public API has docstrings
with examples, and links in the Markdown files lead somewhere."""

from __future__ import annotations

import pathlib

from trainrt import options

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_options_md_is_generated_from_the_option_definitions():
    """docs/options.md is `python -m trainrt.options --markdown`; regenerate it after changing OPTIONS."""
    committed = (ROOT / "docs" / "options.md").read_text()
    assert committed == options.markdown(), \
        "docs/options.md is stale: run `python -m trainrt.options --markdown > docs/options.md`"


def test_every_option_has_its_variables_type_default_and_effect():
    names = [o.name for o in options.OPTIONS]
    assert len(names) == len(set(names))
    for o in options.OPTIONS:
        assert o.type and o.effect and o.default_text(), o.name
        assert o.field is None or any(f.name == o.field for f in options.dataclasses.fields(o.owner)), o.name


def test_the_environment_reaches_the_options_through_the_table(monkeypatch):
    """Each variable (and its ORTMODULE_ alias) sets the field its Option names; TRAINRT_ wins."""
    monkeypatch.setenv("ORTMODULE_CACHE_DIR", "/from/alias")
    assert options.RuntimeOptions().cache_dir == "/from/alias"
    monkeypatch.setenv("TRAINRT_CACHE_DIR", "/from/trainrt")
    assert options.RuntimeOptions().cache_dir == "/from/trainrt"
    monkeypatch.setenv("TRAINRT_SKIPPED_AUTOGRAD_FUNCTIONS", "b.F, a.G,b.F")
    monkeypatch.setenv("TRAINRT_PROFILE", "1")
    monkeypatch.setenv("TRAINRT_SAVE_ONNX_PATH", "/tmp/graphs")
    runtime, debug = options.RuntimeOptions(), options.DebugOptions()
    assert runtime.skipped_autograd_functions == ("a.G", "b.F") and runtime.profile
    assert debug.save_onnx and debug.save_path == "/tmp/graphs"
