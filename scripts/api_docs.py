"""`make docs`: the API reference of TrainRT's public Python modules, as HTML, with pdoc.

    .venv/bin/python scripts/api_docs.py build/docs      # build/docs/index.html

PUBLIC_MODULES is the public API: what a training script imports. Their `__all__` lists what they
offer (pdoc documents those names, and no submodule that `__all__` leaves out), and
tests/python/test_docs.py checks that each name there has a docstring with an example.
The other modules are the front end's implementation (capture, rtmodule, session, python_op,
export_cache, ...; docs/architecture.md says what each holds) and the command-line tools
(`python -m trainrt.bench`, `trainrt.demo`, `trainrt.conformance`), documented by their --help.

Any warning pdoc raises (an import that fails, a docstring it cannot parse) fails the build.
"""

from __future__ import annotations

import pathlib
import sys
import warnings

PUBLIC_MODULES = ("trainrt", "trainrt.optim", "trainrt.hf", "trainrt.optimum", "trainrt.ortmodule",
                  "trainrt.options", "trainrt.data")


def load_public_names() -> None:
    """Imports the public modules and loads the names `trainrt` imports on first use (RTModule,
    DebugOptions, ...), so pdoc, which reads a module's namespace, finds every name of `__all__`."""
    import importlib

    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for member in module.__all__:
            getattr(module, member)


def build(output: pathlib.Path) -> list[str]:
    """Writes the HTML into `output`; returns pdoc's warnings (empty when clean)."""
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="markdown", footer_text="TrainRT", search=True, show_source=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_public_names()
        pdoc.pdoc(*PUBLIC_MODULES, output_directory=output)
    # Warnings raised while pdoc imports our modules that come from other libraries (torch's,
    # transformers' deprecations) are theirs, not the documentation's.
    return [f"{w.category.__name__}: {w.message}" for w in caught if "pdoc" in (w.filename or "")]


def main(argv: list[str]) -> int:
    output = pathlib.Path(argv[1] if len(argv) > 1 else "build/docs")
    problems = build(output)
    for p in problems:
        print(f"pdoc: {p}", file=sys.stderr)
    print(f"API reference: {output / 'index.html'} ({len(PUBLIC_MODULES)} modules, {len(problems)} warnings)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
