# pymf: the two commands of the README.
#   make demo   installs everything (apt packages, a venv, pymf) and runs the main job
#   make test   installs everything and runs the whole test suite (what .ci/run calls)
# Both work on a fresh Debian machine as root (or with sudo).

PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
SUDO    = $(shell [ "$$(id -u)" = "0" ] || echo sudo)
APT_PACKAGES = libgsl-dev swig build-essential python3-dev python3-venv

.PHONY: demo test install system-deps bench clean

system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(PY):
	$(PYTHON) -m venv $(VENV)

# A regular (non-editable) install: the tests run against the built wheel, not the tree.
install: system-deps $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q ".[test,mpi]"

# 10 % of the entries held out; the step is chosen automatically (--step auto, the default);
# trace.png: the trace, held-out values against their posterior mean with 90 % intervals,
# and the calibration curve; the last line prints the coverage beside time and samples/s.
demo: install
	$(VENV)/bin/pymf sample --data demo --demo-size 256 --rank 32 --sampler psgld --blocks 8 \
	  --samples 12000 --burnin 4000 --thin 40 --test-fraction 0.1 --out results/demo --plot
	@echo "results: results/demo (summary.json, trace.png, W_mean.npy, H_mean.npy, samples)"

# The tests import the installed pymf: pytest's console script does not put the repository
# root on sys.path, and tests/ has no __init__.py.
test: install
	$(VENV)/bin/pytest -q -ra tests

bench: install
	$(PY) bench/psgld_synthetic.py

clean:
	rm -rf build $(VENV) results *.egg-info
	find pymf -name "*.so" -delete
	find pymf -name "_*.c" -delete
