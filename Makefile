PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

# the demo needs servesim and its core dependencies only; the tests, benchmarks and lint the dev extra
$(BIN)/.core: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	@touch $@

$(BIN)/.dev: $(BIN)/.core
	$(BIN)/pip install -q -e ".[dev]"
	@touch $@

demo: $(BIN)/.core
	$(BIN)/servesim demo

test: $(BIN)/.dev
	$(BIN)/python -m pytest

lint: $(BIN)/.dev
	$(BIN)/ruff check src tests bench

bench: $(BIN)/.dev
	$(BIN)/python -m compileall -q src  # bytecode as an installed package has it, even under PYTHONDONTWRITEBYTECODE
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist src/*.egg-info
