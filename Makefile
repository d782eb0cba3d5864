# Two entry points, both doing all set-up on a fresh machine (see README.md):
#   make demo   builds the sample release and runs the pipeline on it
#   make test   runs the test suite (what .ci/run calls)
#   make check  the inner loop: unit and contract tests, no Ray and no Prefect server (a few minutes)
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
# --compile-bytecode: uv, unlike pip, leaves no .pyc behind, and where PYTHONDONTWRITEBYTECODE is set (as on
# these machines) every process then compiles torch, Ray and Prefect from source: 2.4 s instead of 1 s to
# import torch, in each worker and each test subprocess.
# torch: the CPU build. This machine kind carries the wheel in /opt/wheels; elsewhere it comes from
# the PyTorch CPU index (a plain `torch` would pull a multi-GB CUDA build).
TORCH_SOURCE := $(if $(wildcard /opt/wheels/torch-*),--find-links /opt/wheels,--extra-index-url https://download.pytorch.org/whl/cpu --index-strategy unsafe-best-match)

.PHONY: setup demo test check lint

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	@echo "installing vlmforge and its dependencies into $(VENV) (1-3 min the first time; quiet meanwhile)"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check uv
	$(UV) pip install -q --python $(PY) --compile-bytecode $(TORCH_SOURCE) -r requirements.lock
	$(UV) pip install -q --python $(PY) --no-deps -e .
	touch $@
	@echo "installed: call the CLI as $(VENV)/bin/vlmforge, or run: source $(VENV)/bin/activate"

demo: setup
	$(VENV)/bin/vlmforge sample-release sample-release --overwrite
	$(VENV)/bin/vlmforge run sample-release --out out/demo --max-reject-rate 0.9
	$(VENV)/bin/vlmforge query out/demo "SELECT subset, status, count(*) AS samples, sum(total_tokens) AS tokens FROM samples GROUP BY ALL ORDER BY ALL"
	@echo "next: $(VENV)/bin/vlmforge --help (or source $(VENV)/bin/activate, then vlmforge ...); README.md, 'Two commands'"

# Two workers (pytest-xdist): most tests wait on a subprocess, a server or Ray for part of their time, so
# two keep both cores busy; a module's tests run on one worker (tests/conftest.py groups them).
test: setup
	$(PY) -m pytest -q -n 2 --dist loadgroup

# The tests not marked slow; a test among them that starts Ray or a Prefect server fails, naming itself.
check: setup
	VLMFORGE_CHECK=1 $(PY) -m pytest -q -m "not slow" -n 2 --dist loadgroup

lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	bash .ci/typecheck
