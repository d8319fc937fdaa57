PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/servesim: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	@touch $(BIN)/servesim

demo: $(BIN)/servesim
	$(BIN)/servesim demo

test: $(BIN)/servesim
	$(BIN)/python -m pytest

lint: $(BIN)/servesim
	$(BIN)/ruff check src tests bench

bench: $(BIN)/servesim
	$(BIN)/python -m compileall -q src  # bytecode as an installed package has it, even under PYTHONDONTWRITEBYTECODE
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist src/*.egg-info
