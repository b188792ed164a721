# TrainRT set-up, build and test. The two commands a user needs:
#   make demo   - set everything up and run the main end-to-end job
#   make test   - set everything up and run every test (C++ units, Python, ONNX conformance)
# Both create .venv, install what is missing (Debian packages, PyPI), build incrementally.
VENV    := .venv
PY      := $(VENV)/bin/python
BUILD   := build/release
JOBS    ?= 2
STAMP   := $(VENV)/.trainrt-deps
SYSDEPS := $(VENV)/.trainrt-sysdeps

.PHONY: all demo test test-quick build deps cpp-test py-test conformance coverage docs fuzz clean bench-peers

all: build

$(SYSDEPS): scripts/install_system_deps.sh
	bash scripts/install_system_deps.sh
	@mkdir -p $(VENV) && touch $@

$(STAMP): requirements.txt $(SYSDEPS)
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	# Developer install: the in-tree package is importable from the venv (see README).
	echo "$(CURDIR)/python" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/trainrt-dev.pth"
	touch $@

deps: $(STAMP)

$(BUILD)/build.ninja: $(STAMP) CMakeLists.txt
	$(VENV)/bin/cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_MAKE_PROGRAM=$(CURDIR)/$(VENV)/bin/ninja -DPython_EXECUTABLE=$(CURDIR)/$(PY) \
	  $$(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

build: $(BUILD)/build.ninja
	$(VENV)/bin/ninja -C $(BUILD) -j$(JOBS)

cpp-test: build
	$(VENV)/bin/ctest --test-dir $(BUILD) --output-on-failure

py-test: build
	TRAINRT_CLI=$(CURDIR)/$(BUILD)/trainrt $(PY) -m pytest tests/python -q -m "not slow"

conformance: build
	$(PY) -m trainrt.conformance

# Everything: C++ units, Python tests (slow ones included), ONNX conformance.
test: build
	$(VENV)/bin/ctest --test-dir $(BUILD) --output-on-failure
	TRAINRT_CLI=$(CURDIR)/$(BUILD)/trainrt $(PY) -m pytest tests/python -q
	$(PY) -m trainrt.conformance

# The coverage sweep: every architecture transformers registers for the six tasks, built tiny and
# trained 3 steps in eager and through RTModule (fallback disabled); rewrites the backlog of those that
# do not pass, docs/coverage_backlog.md (python/trainrt/coverage/; about 1.5 h on the 2-core machine).
coverage: build
	$(PY) -m trainrt.coverage --json build/coverage.json --markdown docs/coverage_backlog.md

# ONNX Runtime's training stacks as benchmark peers (not part of `make test`): a venv of their own,
# .venv-peers (torch 2.4.1, onnxruntime-training-cpu 1.19.2, ORTModule's C++ extensions built by its
# install step; about 3 GB), times ORTModule and eager torch 2.4 on the quick suite's models and ORT's
# on-device training API on two ONNX files (python/trainrt/bench/peers.py), then the suite prints
# TrainRT's ratio to each (peer_report.py; TrainingSession timed on the same files).
PEERS := .venv-peers
$(PEERS)/.trainrt-peers: scripts/peers_requirements.txt
	test -x $(PEERS)/bin/python || python3 -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q -r scripts/peers_requirements.txt
	$(PEERS)/bin/python -m onnxruntime.training.ortmodule.torch_cpp_extensions.install
	touch $@

bench-peers: build $(PEERS)/.trainrt-peers
	$(PEERS)/bin/python python/trainrt/bench/peers.py --out build/bench-peers
	$(PY) -m trainrt.bench --modes eager,rtmodule --no-micro --no-trainer --no-sparsity \
	  --peers build/bench-peers/peers.json --markdown build/bench-peers/report.md

# The quick subset for iteration: C++ units and the Python tests not marked slow.
test-quick: cpp-test py-test

demo: build
	$(PY) -m trainrt.demo

# API reference of the public Python modules (scripts/api_docs.py says which), from their docstrings
# with pdoc: build/docs/index.html. Any pdoc warning fails it. docs/options.md is generated apart:
# $(PY) -m trainrt.options --markdown > docs/options.md
docs: build
	$(PY) scripts/api_docs.py build/docs

# libFuzzer run of the ONNX importer, bounded in time (needs clang; installed if missing).
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	bash scripts/install_system_deps.sh clang libclang-rt-14-dev
	$(VENV)/bin/cmake -S . -B build/fuzz -G Ninja -DCMAKE_MAKE_PROGRAM=$(CURDIR)/$(VENV)/bin/ninja \
	  -DCMAKE_CXX_COMPILER=clang++ -DTRAINRT_BUILD_FUZZERS=ON -DTRAINRT_BUILD_TESTS=OFF \
	  -DTRAINRT_BUILD_PYTHON=OFF -DPython_EXECUTABLE=$(CURDIR)/$(PY)
	$(VENV)/bin/ninja -C build/fuzz -j$(JOBS) onnx_import_fuzz
	mkdir -p build/fuzz/corpus && $(PY) fuzz/make_corpus.py build/fuzz/corpus
	build/fuzz/fuzz/onnx_import_fuzz -max_total_time=$(FUZZ_SECONDS) build/fuzz/corpus

clean:
	rm -rf build python/trainrt/_C*.so
