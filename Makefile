# shiftbench: two commands. `make demo` and `make test` each build .venv on first use.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
REPORT ?= shiftbench-report
# Debian's headless Chromium drives the HTML report's browser tests (tests/test_report_browser.py)
CHROMIUM := /usr/bin/chromium
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export MPLBACKEND := Agg

.PHONY: demo test venv clean bench

venv: $(STAMP)

# Installed only when missing (an order-only prerequisite: never a reason to rebuild .venv).
$(CHROMIUM):
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver

# torch/torchvision first and pinned, so no later package can pull another torch.
$(STAMP): pyproject.toml Makefile | $(CHROMIUM)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install --quiet -e '.[test,ray,hf]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/shiftbench demo -o $(REPORT)

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/bootstrap.py

clean:
	rm -rf $(VENV) $(REPORT)
