# raftlock — developer entry points.
#   make run    a local 3-node dev cluster (prints a key and a curl line)
#   make test   fmt check, clippy -D warnings, every test (unit, property, integration)
#   make chaos  the long chaos suite (>= 10 min, >= 100 leader kills; CHAOS_SEED replays)
#   make bench  raftlock vs etcd on this machine; writes docs/benchmarks.md
#   make bench-core  the criterion benches of raftlock-core
#   make bench-ab AB_REV=<rev>  this build against <rev>'s, two capped clusters loaded at once
#   make bench-wal  one synced WAL write, preallocated segment vs growing file (CPU and wall time)
#   make bench-scaleout  shards: memory per node (1 group on 3 nodes vs 2 shards on 6) and capped-CPU write rate (1 vs 3 shards on 3 nodes)
#   make soak        a fixed-rate mixed load for SOAK_MINUTES (30) at half this machine's
#                    maximum (probed first), minute by minute
#   make openapi     regenerate docs/openapi.json from the code (a test fails when it is stale)

CARGO ?= cargo

.PHONY: run test build fmt lint rules unit integration pyenv openapi bench bench-scaleout bench-wal bench-ab bench-primitives bench-cost bench-core soak clean chaos chaos-short

run:
	$(CARGO) build --release --bin raftlock
	./target/release/raftlock dev --nodes 3 --base-port 7001 --data-dir ./data/dev

build:
	$(CARGO) build --workspace --all-targets

fmt:
	$(CARGO) fmt --all -- --check

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace --exclude raftlock-tests

integration: pyenv
	$(CARGO) build --bin raftlock
	$(CARGO) build --release --bin raftlock
	RAFTLOCK_BIN=$(CURDIR)/target/debug/raftlock RAFTLOCK_RELEASE_BIN=$(CURDIR)/target/release/raftlock \
		RAFTLOCK_PY_VENV=$(PY_VENV) \
		$(CARGO) test -p raftlock-tests --no-fail-fast -- --test-threads=2

# The Python tools of the OpenAPI tests (schemathesis, a spec validator, a client
# generator), pinned in tests/python/requirements.txt.
PY_VENV ?= $(CURDIR)/target/py-venv
pyenv: $(PY_VENV)/.installed
$(PY_VENV)/.installed: tests/python/requirements.txt
	python3 -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
	touch $@

# docs/openapi.json is generated: the document every node serves at GET /openapi.json.
openapi:
	$(CARGO) run --quiet --bin raftlock -- openapi > docs/openapi.json

# The Prometheus alert rules (deploy/prometheus/alerts.yml) must load.
rules:
	@command -v promtool >/dev/null || { echo "promtool missing: apt-get install prometheus (.ci/run does)"; exit 1; }
	promtool check rules deploy/prometheus/alerts.yml

test: fmt lint rules unit integration

# The short chaos run is part of `integration` (tests/tests/chaos.rs, chaos_short); this
# target runs it alone. CHAOS_SEED=<seed> replays a fault plan.
chaos-short:
	$(CARGO) build --bin raftlock
	RAFTLOCK_BIN=$(CURDIR)/target/debug/raftlock $(CARGO) test -p raftlock-tests --test chaos -- --nocapture chaos_short

# The long chaos run: CHAOS_DURATION_SECS (default 600) and at least 100 leader kills.
CHAOS_DURATION_SECS ?= 600
chaos:
	$(CARGO) build --bin raftlock
	CHAOS_DURATION_SECS=$(CHAOS_DURATION_SECS) RAFTLOCK_BIN=$(CURDIR)/target/debug/raftlock \
		$(CARGO) test -p raftlock-tests --test chaos -- --ignored --nocapture chaos_long

bench:
	./crates/raftlock-bench/run.sh

soak:
	./crates/raftlock-bench/soak.sh

# Memory per node with data shards: one group on 3 nodes against two shards on 6 nodes.
bench-scaleout:
	./crates/raftlock-bench/scaleout.sh

bench-wal:
	cargo run --release -p raftlock-raft --example wal_sync

bench-ab:
	AB_REV=$(AB_REV) ./crates/raftlock-bench/ab.sh

bench-primitives:
	./crates/raftlock-bench/primitives.sh

# CPU time and context switches per acquire, per setting, next to etcd.
bench-cost:
	./crates/raftlock-bench/cost.sh

bench-core:
	$(CARGO) bench -p raftlock-core

clean:
	rm -rf ./data
