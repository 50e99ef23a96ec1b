# raftlock — developer entry points.
#   make run    a local 3-node dev cluster (prints a key and a curl line)
#   make test   fmt check, clippy -D warnings, every test (unit, property, integration)

CARGO ?= cargo

.PHONY: run test build fmt lint unit integration bench clean

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

integration:
	$(CARGO) build --bin raftlock
	RAFTLOCK_BIN=$(CURDIR)/target/debug/raftlock $(CARGO) test -p raftlock-tests -- --test-threads=2

test: fmt lint unit integration

bench:
	$(CARGO) bench -p raftlock-core

clean:
	rm -rf ./data
