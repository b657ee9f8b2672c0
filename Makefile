# Two commands from a fresh clone: `make demo` (the main job on the built-in corpus) and `make test`.
# `make help` lists the targets, one line each: the `## ` text after each target's name below.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
REQS := requirements/requirements.txt requirements/requirements-wandb.txt \
        requirements/requirements-tensorboard.txt requirements/requirements-dev.txt
DEMO_DATA := data/stdlib/stdlib_text_document

.PHONY: help venv data demo test test-fast test-slow reproduce clean gpu-wheels gpu-check

# TORCH_CUDA=cu128 (or another CUDA tag PyTorch publishes for the pinned torch): install requirements.txt's
# torch pin from PyTorch's index of that CUDA build first; the requirements' `torch==X` then holds (X+cu128 is X).
TORCH_CUDA ?=
TORCH_PIN := $(shell grep -m1 '^torch==' requirements/requirements.txt)
TORCH_INDEX := https://download.pytorch.org/whl/$(TORCH_CUDA)
venv: $(VENV)/.installed  ## .venv/ with the pinned requirements (every target makes it first)
$(VENV)/.installed: $(REQS)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(TORCH_CUDA),$(PY) -m pip install --quiet $(TORCH_PIN) --index-url $(TORCH_INDEX))
	$(PY) -m pip install --quiet $(addprefix -r ,$(REQS))
	touch $@

# The built-in default corpus: the CPython standard library of this interpreter, byte-level tokens.
data: venv $(DEMO_DATA).bin  ## the built-in corpus (this Python's standard library, byte-level tokens) in data/stdlib/
$(DEMO_DATA).bin:
	$(PY) tools/datasets/build_default_corpus.py

# Train tiny KERPLE-log and sinusoidal models on CPU (configs/tiny.yml), each into checkpoints/tiny/<method>,
# evaluate both at 1x-32x their training length (configs/eval/tiny.yml), print the table and draw perplexity
# against length (sinusoidal blows up past the training length; KERPLE-log stays flat).
# Training logs go to tensorboard/tiny/<method> (docs/evaluation.md's Table 4 command reads them).
# DEMO_TRAIN_ARGS and DEMO_EVAL_ARGS append --set options (tests/e2e/docs/test_docs_commands.py runs the demo at a
# few steps).
# One torch thread per process: on a busy 2-core machine two threads made the same evaluation 4-5x slower
# (L=2048, 128 chunks: 18-22 s with 2 threads, 3.4-5.3 s with 1, alternating runs at load ~4).
# train.py trains in one process: deepy.py's launcher adds two more processes, and their start-up doubled the CPU
# time of a short training (8 steps: 4.1 s with train.py, 8.2 s through deepy.py; the same weights, torch.equal).
DEMO_METHODS := kerple_log sinusoidal
DEMO_FIGURE := eval_results/tiny/ppl_vs_length
DEMO_TRAIN_ARGS :=
DEMO_EVAL_ARGS :=
DEMO_THREADS := 1
demo: data  ## train tiny KERPLE-log and sinusoidal models, evaluate them at 1x-32x, print the table, draw the figure
	for method in $(DEMO_METHODS); do \
	  OMP_NUM_THREADS=$(DEMO_THREADS) $(PY) train.py configs/tiny.yml --set pos-emb=$$method \
	    --set save=checkpoints/tiny/$$method --set load=checkpoints/tiny/$$method \
	    --set tensorboard-dir=tensorboard/tiny/$$method $(DEMO_TRAIN_ARGS) || exit 1; \
	  OMP_NUM_THREADS=$(DEMO_THREADS) $(PY) evaluate.py configs/tiny.yml configs/eval/tiny.yml \
	    --set pos-emb=$$method --set load=checkpoints/tiny/$$method $(DEMO_EVAL_ARGS) || exit 1; \
	done
	$(PY) -m tools.analysis.make_tables eval_results/tiny --reference kerple_log
	$(PY) -m tools.analysis.plot_lengths eval_results/tiny --out $(DEMO_FIGURE) > /dev/null
	@echo "perplexity against evaluation length: $(DEMO_FIGURE).png"

# The KERPLE paper's experiment at CPU scale: 7 methods x 3 seeds on the stdlib corpus through deepy.py,
# report in runs/reproduce/cpu-mini/report/ (REPRODUCE_ARGS=--publish: the published docs/reproduction/).
# Resumable: re-run to continue. The published report used
# make reproduce REPRODUCE_ARGS="--datasets stdlib prose --publish"
reproduce: venv  ## the KERPLE paper's experiment at CPU scale (7 methods x 3 seeds), resumable
	$(PY) -m tools.reproduce configs/reproduce/cpu-mini.yml $(REPRODUCE_ARGS)

# The tests marked cpu_isa depend on torch's CPU kernels, which differ between AVX2 and AVX-512
# machines: they run a second time on the AVX2 code path, so a developer's AVX-512 machine catches
# what an AVX2 CI machine would. The two runs never share compiled kernels: every process keeps
# inductor's cache in a folder of its own CPU code path (megatron/compiled_code.py).
# Test files are spread over TEST_WORKERS processes (pytest-xdist), one file to one process, since
# most tests wait on single-threaded child processes; TEST_WORKERS=0 runs them in this one. A file is one
# work unit (`--dist loadgroup` with tests/conftest.py's units), so its module fixtures are built once, as
# under loadfile, while the docs commands are a unit a page. Units run in tests/conftest.py's order (longest
# first; --no-loadscope-reorder keeps xdist from reordering them), and the 30 slowest tests are listed at the
# end: where CI time goes.
# The AVX2 run collects only the test files that name the marker (CPU_ISA_FILES): collecting the whole suite to
# select them took 39-41 s, these files 5-8 s (one after the other on the shared 2-core machine at load 5-6,
# 2026-11-29). A test marked cpu_isa other than in its own file (a folder's conftest) would need its file listed.
TEST_WORKERS ?= 2
CPU_ISA_FILES = $(shell grep -rl --include='test_*.py' cpu_isa tests)
test: venv  ## the whole test suite on CPU (then the cpu_isa tests again on the AVX2 code path)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder --durations=30
	ATEN_CPU_CAPABILITY=avx2 $(PY) -m pytest -q -m cpu_isa $(CPU_ISA_FILES)

# The inner loop: the tests that start no process (not marked `launches`: tests/e2e/ is, whole): 4,330 of the
# 4,638 that `make test` collects (2026-11-29); 2.5 minutes on a quiet 2-core machine, 4-7 on a busy one (docs/performance.md, "How long the quick start takes").
test-fast: venv  ## the tests that start no process: the inner loop
	$(PY) -m pytest -q -m "not slow and not cuda and not launches"

test-slow: venv  ## the tests marked slow
	$(PY) -m pytest -q -m slow

clean:  ## remove what make data and make demo wrote (never runs/, your own runs)
	rm -rf data/stdlib checkpoints/tiny eval_results/tiny tensorboard/tiny

# GPU machines (docs/gpu/README.md). Here: the wheels an offline GPU node lacks, into .whl/ (never committed).
# There: install them, run the CUDA tests and benchmarks (parts' limits: about 19 minutes), report in runs/gpu-check/<device>-...
# (or GPU_CHECK_ARGS="--out DIR"; a folder holding another device's report is refused without --force).
# Without CUDA gpu-check says so in one line and fails. The GPU image has no .venv: its python3 has torch.
GPU_PY = $(if $(wildcard $(PY)),$(PY),python3)
gpu-wheels: venv  ## the wheels a GPU machine without internet needs, into .whl/
	$(PY) -m tools.gpu_check.wheels

gpu-check:  ## on a GPU machine: the CUDA tests, benchmarks and a real training; report in runs/gpu-check/
	@$(GPU_PY) -m tools.gpu_check $(GPU_CHECK_ARGS)

help:  ## these lines
	@awk -F ':.*## ' '/^[a-z-]+:.*## / {printf "make %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)
