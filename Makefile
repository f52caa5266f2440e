# shiftbench: two commands. `make demo` and `make test` each build .venv on first use.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
REPORT ?= shiftbench-report

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export MPLBACKEND := Agg

.PHONY: demo test venv clean bench

venv: $(STAMP)

# torch/torchvision first and pinned, so no later package can pull another torch.
$(STAMP): pyproject.toml Makefile
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
