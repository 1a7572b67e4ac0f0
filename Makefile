# ecntune — every entry point a user or CI needs.
#
#   make install   apt packages + .venv + `pip install -e .[dev]` pinned by constraints.txt
#                  (as root; idempotent)
#   make lock      resolve pyproject.toml's ranges afresh into constraints.txt
#   make test      pytest (tests that need root/BMv2 skip with a reason; the root ones run
#                  beside the rest) and ruff
#   make lint      ruff check + format check
#   make bench     every benchmark in bench/, one JSON object per result line (~45 min:
#                  bench_train.py trains ACC and PET until they beat static, ~35 of it)
#   make p4        compile p4src/ with p4c and refresh the committed artifacts + manifest
#   make demo      the main job: a small emulated fabric, static ECN vs a learned agent

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

VENV ?= .venv
PY := $(VENV)/bin/python
# Debian's interpreter: Mininet (a Debian package) is built for it.
SYSTEM_PY ?= /usr/bin/python3

APT_PACKAGES := python3 python3-venv python3-dev build-essential \
	mininet iputils-ping iproute2 tcpdump ethtool psmisc procps \
	libns3-dev pkg-config chromium openssl

.PHONY: install apt venv lock test lint bench p4 demo clean

install: apt venv

apt:
	@if [ "$$(id -u)" != 0 ]; then echo "make install needs root (apt-get, network namespaces)"; exit 1; fi
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(APT_PACKAGES)

venv:
	test -x $(PY) || $(SYSTEM_PY) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip "setuptools>=75"
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	@# Mininet ships as a Debian package for the system interpreter; expose just that
	@# package (pure Python) to the venv instead of all of Debian's site-packages.
	ln -sfn "$$($(SYSTEM_PY) -c 'import mininet, os; print(os.path.dirname(mininet.__file__))')" \
		"$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/mininet"
	$(PY) -c 'import mininet.net, ecntune; print("ecntune", ecntune.__version__, "installed in $(VENV)")'

# A clean venv without constraints: what pyproject.toml's ranges resolve to today. Run
# `make test` after it before committing the new constraints.txt.
lock:
	rm -rf .lock-venv
	$(SYSTEM_PY) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip "setuptools>=75"
	.lock-venv/bin/pip install --quiet -e '.[dev]'
	{ grep '^#' constraints.txt; .lock-venv/bin/pip freeze --exclude-editable; } > constraints.new
	mv constraints.new constraints.txt
	rm -rf .lock-venv

# The root tests (Mininet, veths, real TCP) mostly wait on emulated traffic and the others
# mostly compute, so they run side by side as two pytest processes: the root ones one after
# another in the background (two fabrics at once would meet in the host's namespace), their
# log printed when both are done; either failing fails the target. A shell ignores Ctrl-C
# in what it runs in the background, so the root run gets a job of its own (set -m) and the
# trap passes Ctrl-C (or a TERM) on: it tears its fabrics down instead of running on.
# The others are split over TEST_WORKERS pytest-xdist processes, a whole module each (a
# module's fixtures train or simulate once); TEST_WORKERS=0 runs them in one process.
ROOT_TEST_LOG ?= $(VENV)/pytest-root.log
TEST_WORKERS ?= 2

test:
	@echo "root tests run beside the others; their log: $(ROOT_TEST_LOG), printed at the end"
	set -m; $(PY) -m pytest -m root > $(ROOT_TEST_LOG) 2>&1 & root_pid=$$!; set +m; \
	trap 'kill -INT $$root_pid 2>/dev/null || true' INT TERM; \
	rest_rc=0; $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not root" || rest_rc=$$?; \
	root_rc=0; wait $$root_pid || root_rc=$$?; \
	echo "=== root tests (pytest -m root), run beside the above ==="; cat $(ROOT_TEST_LOG); \
	echo "pytest exit codes: not root $$rest_rc, root $$root_rc"; \
	test $$rest_rc = 0 && test $$root_rc = 0
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench:
	@ls bench/bench_*.py >/dev/null 2>&1 || { echo "no benchmarks in bench/ yet"; exit 1; }
	for b in bench/bench_*.py; do echo "# $$b" >&2; $(PY) "$$b"; done

p4:
	$(PY) -m ecntune.p4src.compile

demo:
	$(VENV)/bin/ecntune demo

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache
