"""The repository explains itself: generated docs match their sources, the public API has docstrings
with examples, and links in the Markdown files lead somewhere."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

from trainrt import options

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _api_docs():
    """scripts/api_docs.py (`make docs`): PUBLIC_MODULES and the pdoc build."""
    spec = importlib.util.spec_from_file_location("api_docs", ROOT / "scripts" / "api_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


_EXAMPLE = re.compile(r"^\s*(Examples?:?\s*$|>>> )", re.MULTILINE)


def test_every_public_name_has_a_docstring_with_an_example():
    """Each name in the `__all__` of a public module (scripts/api_docs.py's PUBLIC_MODULES) has a
    docstring of its own, as pdoc renders it, with an Example section or `>>>` lines."""
    import pdoc.doc

    api = _api_docs()
    api.load_public_names()
    missing = []
    for name in api.PUBLIC_MODULES:
        module = pdoc.doc.Module(importlib.import_module(name))
        assert module.obj.__all__, name
        for member in module.obj.__all__:
            doc = module.get(member)
            if doc is None or not _EXAMPLE.search(doc.docstring or ""):
                missing.append(f"{name}.{member}")
    assert not missing, f"no docstring with an example: {', '.join(missing)}"


def test_make_docs_builds_the_api_reference_without_warnings(tmp_path):
    """What `make docs` runs: pdoc over the public modules, HTML out, no warning."""
    api = _api_docs()
    assert api.build(tmp_path) == []
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    assert {"index.html", "trainrt.html", "trainrt/optim.html", "trainrt/hf.html"} <= pages
    assert "trainrt/capture.html" not in pages  # not public
