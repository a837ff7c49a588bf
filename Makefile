# Two commands on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
# The extras every install here has; requirements/dev.lock pins exactly this set.
EXTRAS := dev,hf,leace,mlflow,wandb,tensorboard,slurm,report,docs
# USE_LOCK=1: every package but torch at the hash-checked version of requirements/dev.lock (`make lock` writes it);
# USE_LOCK=0 (the default): the newest versions pyproject.toml allows. torch comes from TORCH_SPEC either way.
USE_LOCK ?= 0
LOCK := requirements/dev.lock
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp$(if $(filter 1,$(USE_LOCK)),-lock)

# make test runs the fast suite on this many processes (pytest-xdist): 2, the cores of a CI machine. The slow suite
# stays on one, since some of the README's figures it re-measures are speeds.
TEST_WORKERS ?= 2

.PHONY: demo test test-slow readme-check docs docs-serve lint lock bench bench-lens bench-sae bench-hta clean

$(STAMP): pyproject.toml Makefile $(if $(filter 1,$(USE_LOCK)),$(LOCK))
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
ifeq ($(USE_LOCK),1)
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m pip check
else
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
endif
	rm -f $(VENV)/.installed-stamp $(VENV)/.installed-stamp-lock
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/nanolm demo

test: $(STAMP)
	$(BIN)/ruff check --output-format concise src tests bench examples scripts
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m pytest -q -m "not slow" -n $(TEST_WORKERS)

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow --durations=15

# Every measured figure in the README and the docs pages, re-measured by the command shown beside it (also in test-slow).
readme-check: $(STAMP)
	$(BIN)/python -m pytest -q -m readme tests/test_readme.py

# The documentation site (mkdocs.yml, docs/): built into site/ with --strict, so a dead link, a page missing from the
# nav or an API path that does not resolve fails, naming it. The configuration reference is written at build time
# from TrainConfig (scripts/mkdocs_hooks.py), the command-line reference from the click commands.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs
docs: $(STAMP)
	$(MKDOCS) build --strict

docs-serve: $(STAMP)
	$(MKDOCS) serve

lint: $(STAMP)
	$(BIN)/ruff check --output-format concise src tests bench examples scripts
	$(BIN)/lint-imports --no-cache

# The hash-pinned locks: requirements/base.lock (pip install nanolm) and requirements/dev.lock (the EXTRAS), resolved by
# uv for CPython 3.11 on x86-64 Linux (these machines, CI, the Docker image). torch is resolved as its CPU build
# (TORCH_LOCK, found in TORCH_FIND_LINKS) so that no CUDA package enters the locks, and is left out of them: it comes
# from TORCH_SPEC. uv goes into a venv of its own (LOCK_VENV, under the ignored build/), not the project's.
UV_SPEC ?= uv==0.13.9
LOCK_VENV ?= build/lock-venv
TORCH_LOCK ?= $(TORCH_SPEC)+cpu
TORCH_FIND_LINKS ?= $(or $(PIP_FIND_LINKS),https://download.pytorch.org/whl/cpu/torch/)
comma := ,
LOCK_FLAGS = --quiet --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
	--no-emit-package torch --find-links $(TORCH_FIND_LINKS) -c $(LOCK_VENV)/torch.txt --custom-compile-command "make lock"
lock:
	test -x $(LOCK_VENV)/bin/uv || ($(PYTHON) -m venv $(LOCK_VENV) && $(LOCK_VENV)/bin/python -m pip install --quiet "$(UV_SPEC)")
	printf '%s\n' "$(TORCH_LOCK)" > $(LOCK_VENV)/torch.txt
	mkdir -p requirements
	$(LOCK_VENV)/bin/uv pip compile $(LOCK_FLAGS) -o requirements/base.lock pyproject.toml
	$(LOCK_VENV)/bin/uv pip compile $(LOCK_FLAGS) $(addprefix --extra=,$(subst $(comma), ,$(EXTRAS))) -o $(LOCK) pyproject.toml

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

# Holistic Trace Analysis pins its own pandas/numpy: nanolm's GPU trace analysis beside it, in a venv of its own.
BENCH_HTA_VENV ?= .venv-bench-hta
bench-hta: $(STAMP)
	test -x $(BENCH_HTA_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_HTA_VENV)
	$(BENCH_HTA_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BENCH_HTA_VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)" "HolisticTraceAnalysis>=0.5,<0.6" rich click msgspec
	$(BENCH_HTA_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(BENCH_HTA_VENV)/bin/python bench/trace_vs_hta.py
	$(BIN)/python bench/trace_scale.py --hta-python $(BENCH_HTA_VENV)/bin/python

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(BENCH_SAE_VENV) $(BENCH_HTA_VENV) $(LOCK_VENV) runs site
