# vsbench: `make demo` runs the ABID pipeline end to end; `make test` runs the tests.
# Both create and fill the virtual environment (.venv) on first use.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BINS   ?=
OUT    ?= demo-output

.PHONY: install demo demo-container test test-fast test-containers compile bench mutate lint clean mlflow-ui images image-cpu images-push screenshots

# The pins of the images (images/constraints.txt) hold here too, so a step computes the same
# numbers in the development environment and in the image.
# pip >= 25 shows the build backend's warnings, and setuptools warns on every editable install whose
# packages come from more than one folder (components/ and pipelines/ are packages of vsbench) that
# "folders with the same name as your package may take precedence": nothing to act on, so that one
# warning, matched by its first words, is not shown. Every other warning is.
$(STAMP): pyproject.toml images/constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" \
	  $(BIN)/python -m pip install --quiet -e ".[cpu,dev,models,trainjob]" -c images/constraints.txt
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/vsbench demo --out $(OUT) $(if $(BINS),--bins $(BINS))

# The same demo with every pipeline step inside the CPU image (built first when missing).
demo-container: image-cpu
	$(BIN)/vsbench demo --runner container --out $(OUT) $(if $(BINS),--bins $(BINS))

# The HTML report is checked in a real headless browser: Debian's chromium package.
CHROMIUM ?= /usr/bin/chromium
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
		echo "the browser test needs Debian's chromium: sudo apt-get install chromium" >&2; exit 1; \
	fi

# tests/containers/ run the pipelines inside the CPU image when an engine and the image are there
# and are skipped otherwise; VSBENCH_REQUIRE_CONTAINERS=1 (CI) makes that skip a failure.
# Two pytest processes (pytest-xdist), a test module per process at a time (--dist loadscope: a
# module's shared fixtures, such as a finished run several tests read, are made once): on 2 cores
# much of the suite waits on the processes it starts (steps, servers, the browser), and the other
# process uses that time. --no-loadscope-reorder keeps tests/conftest.py's order (modules with a slow
# test first) instead of xdist's (most tests first). TEST_WORKERS=0: one process. --durations: the 25 slowest.
TEST_WORKERS ?= 2
test: $(STAMP) $(CHROMIUM)
	$(BIN)/python -m pytest -q $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder) --durations=25

# The pictures in README.md, docs/tracking.md and docs/failures.md, taken by the browser tests from real runs in a
# real mlflow server, and the ABID sheet as logged to its score run (so a picture cannot show what the code no
# longer does).
screenshots: $(STAMP) $(CHROMIUM)
	VSBENCH_UPDATE_SCREENSHOT=1 $(BIN)/python -m pytest -q tests/integration/test_report_browser.py \
		tests/integration/test_mlflow_evaluations.py tests/integration/test_failure_pages.py \
		tests/integration/test_mlflow_as_read.py tests/integration/test_abid_failure_pages.py \
		-k "chromium or compare_page or failure_pages or as_read"

test-containers: image-cpu
	VSBENCH_REQUIRE_CONTAINERS=1 $(BIN)/python -m pytest -q tests/containers

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

compile: $(STAMP)
	$(BIN)/vsbench compile --out build/pipelines

bench: $(STAMP)
	$(BIN)/python bench/download.py
	$(BIN)/python bench/resize.py
	$(BIN)/python bench/metrics.py

# Mutation testing of the guard modules and the scorers (bench/mutate.py, docs/mutation.md):
# mutmut in a temporary copy of the tree, each mutant against the fast tests that cover it; prints
# the killed rate per module and the survivors. Not part of `test` (tens of minutes on 2 cores).
# MODULES="digests checkpoints" runs some modules only; CHANGED=1 the guards whose module or tests
# changed since the merge base with main (uncommitted work included), CHANGED=<ref> since any commit:
# the habit before resolving an issue that touches a guard, in minutes.
MUTATE_ARGS ?=
MODULES ?=
CHANGED ?=
mutate: $(STAMP)
	$(BIN)/python bench/mutate.py $(if $(MODULES),--modules $(MODULES)) \
		$(if $(filter-out 0,$(CHANGED)),--changed $(if $(filter 1,$(CHANGED)),main,$(CHANGED))) $(MUTATE_ARGS)

# Both images; with no docker, podman or buildah, root gets podman and buildah from Debian's
# packages. Layers are reused between builds on the same machine.
images: $(STAMP)
	images/build.sh

image-cpu: $(STAMP)
	images/build.sh --only cpu

images-push: $(STAMP)
	images/build.sh --push

lint: $(STAMP)
	$(BIN)/ruff check src components pipelines tests bench examples

mlflow-ui: $(STAMP)
	$(BIN)/mlflow ui --backend-store-uri sqlite:///$(abspath $(OUT))/mlflow.db --host 127.0.0.1 --port 5000

clean:
	rm -rf $(OUT) build .pytest_cache
