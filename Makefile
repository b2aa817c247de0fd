PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test demo lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-test: $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e '.[test,spark,bench]'
	touch $@

test: $(VENV)/.installed-test
	$(BIN)/ruff check pbtree storage spark_loader tools tests
	$(BIN)/python -m pytest -q -n 2 tests

demo: $(VENV)/.installed-test
	$(BIN)/python -m tools.demo

lint: $(VENV)/.installed-test
	$(BIN)/ruff check pbtree storage spark_loader tools tests

clean:
	rm -rf $(VENV) demo-data
