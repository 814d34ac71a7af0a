# One command each: `make demo` and `make test` set everything up from scratch (see README).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# torch 2.13.0 is the CPU build on this kind of machine; a bare `torch` would pull a CUDA build.
TORCH  ?= torch==2.13.0
SGLANG ?= 0.5.23

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml .ci/requirements-sglang.txt
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[torch,dev]"
	touch $@

# SGLang's real classes for the CPU tests of the SGLang hooks: sglang without its GPU dependencies.
$(VENV)/.installed-sglang: $(VENV)/.installed
	echo "$(TORCH)" > $(VENV)/torch-constraint.txt
	$(BIN)/pip install -q --no-deps "sglang==$(SGLANG)"
	$(BIN)/pip install -q -r .ci/requirements-sglang.txt -c $(VENV)/torch-constraint.txt
	touch $@

demo: $(VENV)/.installed
	$(BIN)/eagle3-top demo

test: $(VENV)/.installed-sglang
	$(BIN)/python -m pytest -q

lint: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy tracer tui hooks

bench: $(VENV)/.installed
	$(BIN)/python -m benchmarks.run_all

clean:
	rm -rf $(VENV) build *.egg-info
