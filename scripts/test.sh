#!/usr/bin/env bash
# The whole kiln test suite: formatting, lints, unit/integration/doc tests, and the examples.
# Works on a fresh machine with the Rust toolchain; installs cargo-nextest if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Backends whose absence must fail the suite (the CPU backend is built in).
export KILN_REQUIRE="${KILN_REQUIRE:-cpu}"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"

if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
fi

cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo nextest run --release --workspace --no-fail-fast
cargo test --release --workspace --doc
cargo run --release --example quickstart > /tmp/kiln-quickstart.out
grep -q '^result map-filter-map-sum' /tmp/kiln-quickstart.out
cargo run --release -p kiln-bench -- --quick --json /tmp/kiln-bench.json
echo "kiln test suite passed"
