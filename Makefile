# Two commands on a fresh machine: `make experiments` and `make test`.
# Each creates the virtualenv and installs kvsched into it first.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
OUT ?= results

.PHONY: install test explore experiments bench lint clean conformance conformance-install \
	conformance-v0 conformance-v0-install conformance-sglang conformance-sglang-install

install: $(STAMP)

# The compiled build (setup.py): rebuilt when a compiled module's source or types change.
PXD := $(wildcard kvsched/*.pxd kvsched/*/*.pxd kvsched/*/*/*.pxd)
$(STAMP): pyproject.toml setup.py kvsched/_fastcore.c kvsched/compiled.py $(PXD) $(PXD:.pxd=.py)
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m compileall -q kvsched > /dev/null  # what a regular install does
	touch $(STAMP)

# pytest exits 5 when it collects no tests: say so instead of failing the build.
test: install
	@$(BIN)/python -m pytest; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; exit 0; fi; exit $$rc

# The property tests under fresh random draws, SEEDS times (make test's draw is fixed).
SEEDS ?= 3
explore: install
	@for i in $$(seq 1 $(SEEDS)); do seed=$$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); \
	echo "== hypothesis seed $$seed"; \
	KVSCHED_HYPOTHESIS=explore $(BIN)/python -m pytest -q -p no:cacheprovider \
		--hypothesis-seed=$$seed $$(grep -l '@given' tests/test_*.py) || exit 1; done

# Every shipped scenario with its pictures, JOBS processes at a time: two thirds of the time
# is drawing the PNGs, one core per process (tools/experiments.py prints each scenario's
# report whole, PNG paths included, once it is done).
JOBS ?= 2
experiments: install
	$(BIN)/python tools/experiments.py --jobs $(JOBS) --out $(OUT) scenarios/*.yaml

# The engine's speed (results/bench.csv), the C text code against pyarrow's path
# (results/bench_text.csv), then report.html's size and its open and zoom times in headless
# Chromium (results/bench_report.csv; needs Debian's chromium).
bench: install
	$(BIN)/python bench/bench_engine.py
	$(BIN)/python bench/bench_text.py
	$(BIN)/python bench/report_open.py

lint: install
	$(BIN)/ruff check kvsched tests bench conformance
	$(BIN)/mypy kvsched conformance

# Proof harness against the real vLLM V1 scheduler (issue 9). Not part of `make test`:
# it needs its own virtualenv with vllm==0.33.0 (pip pulls the CUDA torch wheels, about
# 9 minutes and 9.6 GB; they import fine without a GPU). vllm pins torch==2.14.0, which the
# machine's pip cap (torch<=2.14.1) admits. The driver runs in .venv-conformance, the
# comparison in .venv (no vLLM there).
CVENV := .venv-conformance
CBIN := $(CVENV)/bin
CSTAMP := $(CVENV)/.installed-stamp
VLLM_VERSION := 0.33.0
CONFORMANCE_OUT ?= $(OUT)/conformance
CONFORMANCE_N ?= 200
CONFORMANCE_SEED ?= 1
KVSCHED_FN ?= kvsched.decisions:vllm_v1_decisions

conformance-install: $(CSTAMP)

$(CSTAMP):
	$(PY) -m venv $(CVENV)
	$(CBIN)/python -m pip install -q --upgrade pip
	HF_HUB_OFFLINE=1 $(CBIN)/python -m pip install 'vllm==$(VLLM_VERSION)'
	$(CBIN)/python -m pip install -q -e .
	touch $(CSTAMP)

conformance: install $(CSTAMP)
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --random $(CONFORMANCE_N) \
		--seed $(CONFORMANCE_SEED) --out-dir $(CONFORMANCE_OUT)/random
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --random 100 --watermark-prob 0.5 \
		--seed $$(($(CONFORMANCE_SEED) + 1)) --out-dir $(CONFORMANCE_OUT)/watermark
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --cases \
		--out-dir $(CONFORMANCE_OUT)/cases
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --random $(CONFORMANCE_N) --ties \
		--seed $$(($(CONFORMANCE_SEED) + 2)) --out-dir $(CONFORMANCE_OUT)/ties
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --random-prefix $(CONFORMANCE_N) \
		--random-sessions $$(($(CONFORMANCE_N) / 2)) --seed $(CONFORMANCE_SEED) \
		--out-dir $(CONFORMANCE_OUT)/prefix
	@echo "== RULES.md as code (conformance/v1_rules_model.py) vs vLLM"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/random $(CONFORMANCE_OUT)/watermark \
		$(CONFORMANCE_OUT)/cases $(CONFORMANCE_OUT)/ties --kvsched conformance.v1_rules_model:decisions \
		--quiet
	@echo "== RULES.md as code vs vLLM, prefix caching on"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/prefix \
		--kvsched conformance.v1_rules_model:decisions --quiet
	@echo "== kvsched ($(KVSCHED_FN)) vs vLLM"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/random $(CONFORMANCE_OUT)/watermark \
		$(CONFORMANCE_OUT)/cases $(CONFORMANCE_OUT)/ties --kvsched $(KVSCHED_FN) --quiet \
		--allow-missing
	@echo "== kvsched ($(KVSCHED_FN)) vs vLLM, prefix caching on"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/prefix \
		--kvsched $(KVSCHED_FN) --quiet --allow-missing
	@echo "== the same families through vLLM's AsyncScheduler and the engine core's batch queue"
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --async --random $(CONFORMANCE_N) \
		--seed $(CONFORMANCE_SEED) --out-dir $(CONFORMANCE_OUT)/async-random
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --async --random 100 \
		--watermark-prob 0.5 --seed $$(($(CONFORMANCE_SEED) + 1)) \
		--out-dir $(CONFORMANCE_OUT)/async-watermark
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --async --cases \
		--out-dir $(CONFORMANCE_OUT)/async-cases
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --async --random $(CONFORMANCE_N) \
		--ties --seed $$(($(CONFORMANCE_SEED) + 2)) --out-dir $(CONFORMANCE_OUT)/async-ties
	HF_HUB_OFFLINE=1 $(CBIN)/python conformance/vllm_driver.py --async \
		--random-prefix $(CONFORMANCE_N) --random-sessions $$(($(CONFORMANCE_N) / 2)) \
		--seed $(CONFORMANCE_SEED) --out-dir $(CONFORMANCE_OUT)/async-prefix
	@echo "== RULES.md as code (conformance/v1_rules_model.py) vs vLLM, async scheduling"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/async-random \
		$(CONFORMANCE_OUT)/async-watermark $(CONFORMANCE_OUT)/async-cases \
		$(CONFORMANCE_OUT)/async-ties $(CONFORMANCE_OUT)/async-prefix \
		--kvsched conformance.v1_rules_model:decisions --quiet
	@echo "== kvsched ($(KVSCHED_FN)) vs vLLM, async scheduling"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/async-random \
		$(CONFORMANCE_OUT)/async-watermark $(CONFORMANCE_OUT)/async-cases \
		$(CONFORMANCE_OUT)/async-ties --kvsched $(KVSCHED_FN) --quiet --allow-missing
	@echo "== kvsched ($(KVSCHED_FN)) vs vLLM, async scheduling, prefix caching on"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/async-prefix \
		--kvsched $(KVSCHED_FN) --quiet --allow-missing

# Proof harness against the real vLLM 0.8.5 V0 scheduler (issue 9). Not part of `make test`.
# vllm 0.8.5 pins the CUDA torch 2.6.0, over the machine's pip cap: it is installed without its
# dependencies, on the CPU torch 2.13 wheel and the few pure-Python packages its
# `vllm.core.scheduler` import chain needs (conformance/requirements-v0.txt): about 2.2 GB.
CVENV0 := .venv-conformance-v0
CBIN0 := $(CVENV0)/bin
CSTAMP0 := $(CVENV0)/.installed-stamp
VLLM_V0_VERSION := 0.8.5
V0_FN ?= kvsched.decisions:vllm_v0_decisions

conformance-v0-install: $(CSTAMP0)

$(CSTAMP0): conformance/requirements-v0.txt
	$(PY) -m venv $(CVENV0)
	$(CBIN0)/python -m pip install -q 'vllm==$(VLLM_V0_VERSION)' --no-deps
	$(CBIN0)/python -m pip install -q -r conformance/requirements-v0.txt
	$(CBIN0)/python -c "import vllm.core.scheduler"
	touch $(CSTAMP0)

conformance-v0: install $(CSTAMP0)
	$(CBIN0)/python conformance/vllm_v0_driver.py --random $(CONFORMANCE_N) \
		--seed $(CONFORMANCE_SEED) --out-dir $(CONFORMANCE_OUT)/v0-random
	$(CBIN0)/python conformance/vllm_v0_driver.py --cases --out-dir $(CONFORMANCE_OUT)/v0-cases
	$(CBIN0)/python conformance/vllm_v0_driver.py --random $(CONFORMANCE_N) --ties \
		--seed $$(($(CONFORMANCE_SEED) + 2)) --out-dir $(CONFORMANCE_OUT)/v0-ties
	$(CBIN0)/python conformance/vllm_v0_driver.py --random-prefix $(CONFORMANCE_N) \
		--seed $(CONFORMANCE_SEED) --out-dir $(CONFORMANCE_OUT)/v0-prefix
	@echo "== kvsched ($(V0_FN)) vs vLLM 0.8.5 V0"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/v0-random \
		$(CONFORMANCE_OUT)/v0-cases $(CONFORMANCE_OUT)/v0-ties --kvsched $(V0_FN) --quiet
	@echo "== kvsched ($(V0_FN)) vs vLLM 0.8.5 V0, prefix caching on (about 96%: V0's LRU"
	@echo "   evictor order is not modelled, RULES.md V0-10; reported, not required)"
	-$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/v0-prefix --kvsched $(V0_FN) --quiet
# Proof harness against SGLang 0.5.23's real admission code (issue 9), round by round on the
# CPU, and its scheduling loop step by step (issue 22: conformance/sglang_loop_driver.py).
# Not part of `make test` (which checks the committed tests/fixtures/sglang/). Its own
# virtualenv: sglang==0.5.23 with --no-deps, torch 2.13.0 CPU, and the pinned import-time
# dependencies of conformance/sglang-requirements.txt (about 7 minutes, 2.5 GB).
SGVENV := .venv-conformance-sglang
SGBIN := $(SGVENV)/bin
SGSTAMP := $(SGVENV)/.installed-stamp
SGLANG_VERSION := 0.5.23
SGLANG_ROUNDS ?= 2000
SGLANG_SEED ?= 2
SGLANG_LOOPS ?= 100
SGLANG_PREFIX_LOOPS ?= 100
SGLANG_RADIX ?= 1000

conformance-sglang-install: $(SGSTAMP)

$(SGSTAMP): conformance/sglang-requirements.txt
	$(PY) -m venv $(SGVENV)
	$(SGBIN)/python -m pip install -q --no-deps 'sglang==$(SGLANG_VERSION)' 'torch==2.13.0' \
		-r conformance/sglang-requirements.txt
	touch $(SGSTAMP)

conformance-sglang: install $(SGSTAMP)
	HF_HUB_OFFLINE=1 $(SGBIN)/python conformance/sglang_driver.py --rounds $(SGLANG_ROUNDS) \
		--tie-rounds $$(($(SGLANG_ROUNDS) / 2)) --seed $(SGLANG_SEED) \
		--out $(CONFORMANCE_OUT)/sglang/rounds-s$(SGLANG_SEED).json
	HF_HUB_OFFLINE=1 $(SGBIN)/python conformance/sglang_loop_driver.py --random $(SGLANG_LOOPS) \
		--random-prefix $(SGLANG_PREFIX_LOOPS) \
		--seed $(SGLANG_SEED) --out-dir $(CONFORMANCE_OUT)/sglang/loop-s$(SGLANG_SEED)
	HF_HUB_OFFLINE=1 $(SGBIN)/python conformance/sglang_radix_driver.py --random $(SGLANG_RADIX) \
		--seed $(SGLANG_SEED) --out $(CONFORMANCE_OUT)/sglang/radix-s$(SGLANG_SEED).json
	$(BIN)/python -m conformance.sglang_compare $(CONFORMANCE_OUT)/sglang/rounds-s$(SGLANG_SEED).json \
		$(CONFORMANCE_OUT)/sglang/radix-s$(SGLANG_SEED).json
	@echo "== kvsched (kvsched.decisions:sglang_decisions) vs SGLang's scheduling loop"
	$(BIN)/python -m conformance.compare $(CONFORMANCE_OUT)/sglang/loop-s$(SGLANG_SEED) \
		--kvsched kvsched.decisions:sglang_decisions --quiet

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find results -mindepth 1 ! -name .gitkeep -exec rm -rf {} +
