# kplane: `make run` starts a broker, `make test` runs every test. Both set up first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
APT_PACKAGES := kcat docker-compose zookeeper
JAVA_PACKAGE := openjdk-17-jre-headless
CONFIG ?= configs/server.properties

.PHONY: setup apt run test test-unit bench lint schemas clean

setup: $(STAMP) apt

$(STAMP): pyproject.toml
	@echo "setup: Python packages into $(VENV) (kplane with its dev and report extras; a minute or two the first time)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@# compat: the checkout on sys.path through a .pth line; setuptools' default editable finder
	@# costs every kplane command about 45 ms of imports at interpreter start-up
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,report]' --config-settings editable_mode=compat
	touch $(STAMP)
	@echo "setup: Python packages ready; put kplane on PATH with: source $(VENV)/bin/activate"

# Debian packages the tests drive, installed only when missing; Java 17 (for Spark in
# `kplane report`) only when no java is on PATH.
apt:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v java >/dev/null 2>&1 || missing="$$missing $(JAVA_PACKAGE)"; \
	if [ -n "$$missing" ]; then \
	  echo "setup: installing Debian packages:$$missing (apt-get; a minute or two)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	fi

run: setup
	$(BIN)/kplane serve $(CONFIG)

# KPLANE_REQUIRE_COMPOSE=1: a missing docker-compose fails the deployment-file tests.
# KPLANE_REQUIRE_ZOOKEEPER=1: a missing ZooKeeper (java, Debian zookeeper jar) fails its tests.
test: setup
	KPLANE_REQUIRE_COMPOSE=1 KPLANE_REQUIRE_ZOOKEEPER=1 $(BIN)/pytest -n 2 --dist loadgroup

test-unit: setup
	$(BIN)/pytest tests/unit

bench: setup
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/client.py
	$(BIN)/python bench/control_plane.py
	$(BIN)/python bench/startup.py

# The import contract: docs/ARCHITECTURE.md's layers, checked against every import.
lint: setup
	$(BIN)/ruff check kplane tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q -p no:cacheprovider tests/unit/test_readme.py -k layers

# Rewrites the controller schema packages (kplane/protocol/controller_schema/) from their JSON schemas.
schemas: $(STAMP)
	$(BIN)/python -m kplane.protocol.controller_schema.generate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
