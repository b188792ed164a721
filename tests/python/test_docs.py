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


# Markdown links: [text](target "title"), ![alt](target), <https://...>, and [label]: target definitions.
_INLINE_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<((?:[a-z][a-z0-9+.-]*:)[^>\s]+)>", re.IGNORECASE)
_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)


def _markdown_files() -> list[pathlib.Path]:
    """README, CONTRIBUTING, CHANGELOG and every other Markdown file of the repository (not build/, the venvs)."""
    skip = {".git", ".venv", ".venv-peers", "build", "node_modules"}
    return sorted(p for p in ROOT.rglob("*.md") if not skip & set(p.relative_to(ROOT).parts))


def _links(text: str) -> list[str]:
    """The link targets of a Markdown text, outside code blocks and code spans."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", text))
    return _INLINE_LINK.findall(text) + _AUTOLINK.findall(text) + _DEFINITION.findall(text)


def _anchors(markdown: pathlib.Path) -> set[str]:
    """GitHub's anchors of a file's headings: lower case, punctuation dropped, spaces as hyphens."""
    anchors, seen = set(), {}
    for line in _FENCE.sub("", markdown.read_text()).splitlines():
        if m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m[1].lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _link_problem(source: pathlib.Path, target: str) -> str | None:
    """Why a link is not allowed, or None: a relative path must name a file or folder inside the
    repository (and a heading of a Markdown file, after '#'); http(s) links go to public docs."""
    if re.match(r"https?://", target, re.IGNORECASE):
        return None
    if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
        return "leaves the repository (only http(s) links to public docs are allowed)"
    path, _, anchor = target.partition("#")
    if path.startswith("/"):
        return "is an absolute path: link relative to the file"
    resolved = (source.parent / path).resolve() if path else source
    if ROOT.resolve() not in (resolved, *resolved.parents):
        return "leaves the repository"
    if not resolved.exists():
        return "names a file that does not exist"
    if anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
        return f"names a heading '#{anchor}' that {resolved.name} does not have"
    return None


def test_links_in_markdown_lead_to_files_of_the_repository_or_public_docs():
    problems = []
    for md in _markdown_files():
        for target in _links(md.read_text()):
            if (why := _link_problem(md, target)) is not None:
                problems.append(f"{md.relative_to(ROOT)}: ({target}) {why}")
    assert not problems, "\n".join(problems)


def test_the_link_check_sees_links_and_refuses_what_it_should():
    """The checker itself: links outside code are found, and each kind of bad target is refused."""
    text = "[a](docs/architecture.md) `[b](nowhere.md)` <https://onnx.ai/>\n[c]: CHANGELOG.md\n```\n[d](x.md)\n```\n"
    assert _links(text) == ["docs/architecture.md", "https://onnx.ai/", "CHANGELOG.md"]
    readme = ROOT / "README.md"
    assert _link_problem(readme, "docs/architecture.md#layers") is None
    assert _link_problem(readme, "https://pytorch.org/docs/stable/export.html") is None
    assert "does not exist" in _link_problem(readme, "docs/missing.md")
    assert "leaves the repository" in _link_problem(readme, "../shared/DESIGN.md")
    assert "leaves the repository" in _link_problem(readme, "file:///work/shared/DESIGN.md")
    assert "absolute" in _link_problem(readme, "/work/shared/DESIGN.md")
    assert "heading" in _link_problem(readme, "docs/architecture.md#no-such-heading")


def test_the_readme_points_at_the_architecture_and_nothing_outside():
    readme = (ROOT / "README.md").read_text()
    assert "docs/architecture.md" in _links(readme)
    assert "DESIGN.md" not in readme and "../" not in "".join(_links(readme))
