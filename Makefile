# Two commands on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-slow readme-check lint bench bench-lens bench-sae clean

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[dev,hf,leace,mlflow,wandb,tensorboard,slurm]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/nanolm demo

test: $(STAMP)
	$(BIN)/ruff check --output-format concise src tests bench examples scripts
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -m "not slow"

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow

# Every measured figure in the README, re-measured by the command shown beside it (also in test-slow).
readme-check: $(STAMP)
	$(BIN)/python -m pytest -q -m readme tests/test_readme.py

lint: $(STAMP)
	$(BIN)/ruff check --output-format concise src tests bench examples scripts
	$(BIN)/lint-imports --no-cache

# NANOGPT=path/to/nanoGPT (a clone of karpathy/nanoGPT, or its model.py) adds its GPT to the comparison.
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python bench/train_throughput.py $(if $(NANOGPT),--nanogpt $(NANOGPT))

# TransformerLens 2.x pins numpy<2 and transformers 4.x, so the lens benchmark gets its own venv.
BENCH_VENV ?= .venv-bench
bench-lens:
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BENCH_VENV)/bin/python -m pip install --quiet "transformer-lens>=2,<3" "datasets<4" "pyarrow<18"
	$(BENCH_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(BENCH_VENV)/bin/python bench/lens_speed.py

# SAELens 6 needs TransformerLens 3 and transformers 5 (the lens bench pins TransformerLens 2): a venv of its own.
# torch is named again beside sae-lens so that pip keeps the CPU wheel instead of fetching a CUDA build.
BENCH_SAE_VENV ?= .venv-bench-sae
bench-sae:
	test -x $(BENCH_SAE_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_SAE_VENV)
	$(BENCH_SAE_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BENCH_SAE_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)" "sae-lens>=6,<7"
	$(BENCH_SAE_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(BENCH_SAE_VENV)/bin/python -c "import torch, sae_lens; print('torch', torch.__version__, 'sae-lens', sae_lens.__version__)"
	$(BENCH_SAE_VENV)/bin/python bench/sae_speed.py --check-compat
	$(BENCH_SAE_VENV)/bin/python bench/sae_speed.py
	$(BENCH_SAE_VENV)/bin/python bench/sae_memory.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(BENCH_SAE_VENV) runs
