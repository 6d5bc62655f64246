# ablate — everything a user or CI runs goes through these targets.
PYTHON      ?= python3
VENV        ?= .venv
# torch first, pinned: an unpinned torch pulls several GB of CUDA wheels. Override for GPUs,
# e.g. `make install TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"`.
TORCH_SPEC  ?= torch==2.13.0
STUDY       ?= studies/norm_placement.yaml
# empty: the study's default_profile (auto: the gpu profile where CUDA is visible, else cpu)
PROFILE     ?=
STORE       ?= runs
# auto: one worker per core on a CPU (2 workers x 1 thread beat 1 worker x 2 threads on a 2-core
# CPU, reports/bench.md section 5), one per GPU (x --runs-per-gpu) on GPUs
WORKERS     ?= auto
# where registered datasets are found before any download (tiny shakespeare lives here)
ABLATE_DATA_DIR ?= $(abspath ../shared/data)
export ABLATE_DATA_DIR

BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-accept test-slurm run report bench bench-quick bench-section bench-gpu bench-chaos nanogpt-reference lint clean

install: $(STAMP)

# an empty TORCH_SPEC (`make install TORCH_SPEC=`) keeps the machine's torch: the venv is made
# with --system-site-packages and the torch install line is skipped
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(if $(strip $(TORCH_SPEC)),,--system-site-packages) $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(if $(strip $(TORCH_SPEC)),$(BIN)/python -m pip install -q $(TORCH_SPEC),@echo "TORCH_SPEC is empty: keeping the torch of $(PYTHON)")
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# the import-linter contracts in pyproject.toml (stage layers, no circles) run first; the long
# acceptance checks (marker `accept`) are left to test-accept
test: install
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -m "not accept"

# the long acceptance checks (marker `accept`): kill -9 of a driver and its real workers, and
# the GPU window rehearsed whole on this CPU (prepare.sh, then window.sh twice in a simulated
# GPU image; the probe with its compiled rows; ~6.5 min on 2 cores, with the quick bench)
test-accept: install
	$(BIN)/python -m pytest -q -m accept

# the SLURM acceptance test: a one-node cluster (munge, slurmctld, slurmd) started here by
# scripts/slurm/cluster.sh, a study through --executor slurm with one task requeued mid-run, the
# cluster stopped (~3 min). Needs root (apt-get installs the packages when missing); where no
# cluster can run it says why and exits 0
test-slurm: install
	PYTHON=$(BIN)/python scripts/slurm/test.sh

run: install
	$(BIN)/ablate run $(STUDY) $(if $(PROFILE),--profile $(PROFILE)) --store $(STORE) --workers $(WORKERS)

# a committed report is kept when this build is partial (its runs unfinished): the partial one
# goes to reports/<study>/partial/; `make report FORCE=1` replaces the committed one
report: install
	$(BIN)/ablate report --store $(STORE) $(if $(FORCE),--force)

bench: install
	$(BIN)/ablate bench

bench-quick: install
	$(BIN)/ablate bench --quick --out $(STORE)/bench-quick.md

# one section of reports/bench.md measured again, e.g. `make bench-section SECTION=data`
bench-section: install
	$(BIN)/ablate bench --section $(SECTION)

# the GPU acceptance bench (reports/bench_gpu.md); on a machine without CUDA it says so, exit 0
bench-gpu: install
	$(BIN)/ablate bench --gpu

# nanoGPT's own code at the reference study's settings -> reports/nanogpt_own.json, which the
# reference claim reads (~4-7 min per seed): `make nanogpt-reference NANOGPT=../nanoGPT`
nanogpt-reference: install
	$(BIN)/python -m ablate.bench.nanogpt_own --nanogpt $(NANOGPT)

# crash safety: kill -9 workers and drivers (local, Ray) until a 24-run study completes (~10 min)
bench-chaos: install
	$(BIN)/ablate bench --chaos

lint: install
	$(BIN)/ruff check ablate tests
	$(BIN)/ruff format --check ablate tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
