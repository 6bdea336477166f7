# The two set-up commands of the README, plus helpers for working on the package.
#
#   make demo         .venv-demo: torch (CPU), the package; runs python -m infinigram_hf.demo
#   make venv-ray     adds the [ray] extra to .venv-test, so `make test` runs tests/distributed too
#   make test         .venv-test: torch (CPU), the package with [test]; checks the layer contracts
#                     (lint-imports, pyproject.toml's [tool.importlinter]), then runs the test suite
#   make ci           what CI runs (.ci/run): venv-ray, make test, then native-test, fuzz (fixed seeds) and
#                     sanitize (the whole suite under ASan + UBSan)
#   make test-latest  the suite on the newest release of every dependency (.venv-latest; the
#                     gate's venvs install the known-good versions in .ci/constraints.txt)
#   make native       rebuild the C core in place (into .venv-test's editable install)
#   make sdist-check  python -m build, then install the sdist into a scratch venv and use it
#   make native-test  the C tests (native/tests/) built with AddressSanitizer + UBSan
#   make sanitize     native-test, then the whole suite against the core built with ASan + UBSan
#                     (.venv-sanitize; tools/sanitize.sh)
#   make fuzz         deterministic fuzzing (CI): saved findings replayed, then a fixed number of
#                     executions per target from seed FUZZ_SEED (1) (fuzz/run.sh, fuzz/README.md)
#   make fuzz-long    random fuzzing for FUZZ_SECONDS (1800) per target, to find new bugs
#   make soak         the load tests for SOAK_SECONDS (60) instead of a few seconds
#   make clean        remove build outputs and the make-created virtualenvs
#
# Each target creates its own virtualenv on first use and reuses it afterwards (the package is
# reinstalled every time, which recompiles the C core). torch is pinned here, and installed
# first, because an unpinned torch pulls gigabytes of CUDA wheels; the package itself only asks
# for a range.

PYTHON ?= python3
TORCH_VERSION ?= 2.13.0
DEMO_ARGS ?=
PYTEST_ARGS ?=

DEMO_VENV := .venv-demo
TEST_VENV := .venv-test
SDIST_VENV := .venv-sdist
SAN_VENV := .venv-sanitize
FUZZ_SEED ?= 1
FUZZ_CAP_SECONDS ?= 300
FUZZ_SECONDS ?= 1800
SOAK_SECONDS ?= 60
PIP_FLAGS := --disable-pip-version-check $(if $(CI),--progress-bar off,)
LATEST_VENV := .venv-latest
# Every pip call below (and in tools/) installs the versions in .ci/constraints.txt: CI must pass
# or fail on the commit, not on whatever was released upstream that day. `make test-latest` is
# the unpinned run, outside the gate.
CONSTRAINTS ?= $(CURDIR)/.ci/constraints.txt
ifneq ($(CONSTRAINTS),)
export PIP_CONSTRAINT := $(CONSTRAINTS)
endif

.PHONY: test-latest _test-unpinned demo test ci native sdist-check clean venv-demo venv-test venv-ray native-test sanitize fuzz fuzz-long fuzz-deps soak
.PRECIOUS: %/.venv-ready

# A venv is made once; its marker file records that pip and torch are in.
%/.venv-ready:
	$(PYTHON) -m venv $*
	$*/bin/python -m pip install $(PIP_FLAGS) -q --upgrade pip
	$*/bin/python -m pip install $(PIP_FLAGS) -q "torch==$(TORCH_VERSION)"
	touch $@

venv-demo: $(DEMO_VENV)/.venv-ready
	$(DEMO_VENV)/bin/python -m pip install $(PIP_FLAGS) -q -e ".[hf]"

venv-test: $(TEST_VENV)/.venv-ready
	$(TEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -q -e ".[test]"

# The [ray] extra in the test venv: `make test` then runs tests/distributed (skipped without it).
venv-ray: venv-test
	$(TEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -q -e ".[test,ray]"

demo: venv-demo
	$(DEMO_VENV)/bin/python -m infinigram_hf.demo $(DEMO_ARGS)

# The layer contracts first (seconds; README "Architecture"). pytest exits 5 when it collected no
# tests: that is a failure here, said out loud.
test: venv-test
	$(TEST_VENV)/bin/lint-imports
	@$(TEST_VENV)/bin/python -m pytest -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; fi; exit $$rc

# The suite on the newest release of every dependency (not the gate: run it to refresh
# .ci/constraints.txt, or to see what the next upstream release breaks).
test-latest:
	env -u PIP_CONSTRAINT $(MAKE) --no-print-directory CONSTRAINTS= _test-unpinned

_test-unpinned:
	[ -x $(LATEST_VENV)/bin/python ] || $(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -q --upgrade pip "torch==$(TORCH_VERSION)"
	$(LATEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -q --upgrade --upgrade-strategy eager -e ".[test,ray]"
	$(LATEST_VENV)/bin/python -m pip freeze --exclude-editable | grep -v -i '^torch==' > $(LATEST_VENV)/versions.txt
	$(LATEST_VENV)/bin/lint-imports
	$(LATEST_VENV)/bin/python -m pytest -q $(PYTEST_ARGS)
	@echo "make test-latest: passed on the versions in $(LATEST_VENV)/versions.txt"

native: $(TEST_VENV)/.venv-ready
	$(TEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -q "setuptools>=77" wheel "cffi>=1.16"
	$(TEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -q --no-deps --no-build-isolation -e .

# Proves the C sources and headers travel in the sdist: build it, install it (compiling the core)
# into a scratch venv, and build + query a tiny index from outside the source tree.
sdist-check: venv-test $(SDIST_VENV)/.venv-ready
	rm -rf dist
	$(TEST_VENV)/bin/python -m build --outdir dist .
	@tar tzf dist/infinigram_hf-*.tar.gz | grep -q 'native/include/infinigram.h' \
	  && tar tzf dist/infinigram_hf-*.tar.gz | grep -q 'native/src/query.c' \
	  || { echo "sdist-check: the C sources are missing from the sdist" >&2; exit 1; }
	$(SDIST_VENV)/bin/python -m pip uninstall $(PIP_FLAGS) -q -y infinigram_hf
	$(SDIST_VENV)/bin/python -m pip install $(PIP_FLAGS) -q dist/infinigram_hf-*.tar.gz
	cd "$$(mktemp -d)" && $(CURDIR)/$(SDIST_VENV)/bin/python -c "$$SDIST_SMOKE" \
	  && $(CURDIR)/$(SDIST_VENV)/bin/infinigram-hf query idx --text 'hello ' --repeat 1 > /dev/null \
	  && echo "sdist-check: ok (installed from $$(ls $(CURDIR)/dist/*.tar.gz))"

define SDIST_SMOKE
import infinigram_hf, pathlib
assert "site-packages" in infinigram_hf.__file__, infinigram_hf.__file__
ix = infinigram_hf.build_index(["hello world", "hello there"], "idx", progress=False)
assert ix.count(list(b"hello")) == 2, ix.count(list(b"hello"))
assert ix.infgram_ntd(list(b"hello ")).as_dict() == {ord("t"): 1, ord("w"): 1}
print("sdist-check:", ix)
endef
export SDIST_SMOKE

# ---- reliability (RELIABILITY.md): sanitizers, fuzzing, load

# CI (.ci/run): the suite first (fails fast), then the C tests and deterministic fuzzing
# (fixed seeds and execution counts: a gate that fails on the change, never on chance; libFuzzer
# with clang, else the gcc driver), then the whole suite again against the sanitized core.
# Under 20 minutes on 2 cores (RELIABILITY.md has the measured parts).
ci: venv-ray test native-test fuzz sanitize

native-test:
	native/tests/run.sh

# The suite runs against a sanitized copy of the core installed into its own venv; the in-tree
# build used by the other venvs is left alone.
sanitize: native-test $(SAN_VENV)/.venv-ready
	tools/sanitize.sh $(SAN_VENV) $(PYTEST_ARGS)

# libFuzzer targets need clang with its runtime (apt-get install clang libclang-rt-dev, or
# clang-14 libclang-rt-14-dev); without it they run under a gcc driver (same sanitizers, not
# coverage-guided). The Python targets use atheris, installed into the test venv.
fuzz-deps: venv-test
	@$(TEST_VENV)/bin/python -m pip install $(PIP_FLAGS) -q atheris \
	  || echo "make fuzz: atheris did not install; the Python targets will be skipped" >&2

# The same executions on every run (FUZZ_CAP_SECONDS per target is only a safety cap).
fuzz: fuzz-deps
	fuzz/run.sh -s $(FUZZ_SEED) -t $(FUZZ_CAP_SECONDS) -p $(TEST_VENV)/bin/python

# Random runs that keep their corpus in build/fuzz/work/; a finding goes to fuzz/regressions/
# with a test (fuzz/README.md), so that `make fuzz` replays it from then on.
fuzz-long: fuzz-deps
	fuzz/run.sh -t $(FUZZ_SECONDS) -p $(TEST_VENV)/bin/python

soak: venv-test
	INFINIGRAM_SOAK_SECONDS=$(SOAK_SECONDS) $(TEST_VENV)/bin/python -m pytest -q -s -p no:cacheprovider \
	  tests/index/test_load.py $(PYTEST_ARGS)

clean:
	rm -rf build dist *.egg-info infinigram_hf/_core/_lib.c infinigram_hf/_core/_lib*.so \
	  .pytest_cache .hypothesis $(DEMO_VENV) $(TEST_VENV) $(SDIST_VENV) $(SAN_VENV) $(LATEST_VENV)
	find . -name __pycache__ -type d -not -path './.venv*' -prune -exec rm -rf {} +
