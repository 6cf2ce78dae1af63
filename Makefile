# Two commands on a fresh machine: `make experiments` and `make test`.
# Each creates the virtualenv and installs kvsched into it first.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
OUT ?= results

.PHONY: install test experiments bench lint clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# pytest exits 5 when it collects no tests: say so instead of failing the build.
test: install
	@$(BIN)/python -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

experiments: install
	$(BIN)/kvsched run scenarios/*.yaml --out $(OUT) --plot

bench: install
	$(BIN)/python bench/bench_engine.py

lint: install
	$(BIN)/ruff check kvsched tests bench
	$(BIN)/mypy kvsched

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find results -mindepth 1 ! -name .gitkeep -exec rm -rf {} +
