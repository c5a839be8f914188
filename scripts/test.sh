#!/usr/bin/env bash
# The whole kiln test suite: formatting, lints, the conformance suite on every backend
# (CPU built in; OpenCL through PoCL, installed here when missing), doc tests, the examples and
# a quick benchmark. Works on a fresh machine with the Rust toolchain, as root or with sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
# Backends whose absence must fail the suite.
export KILN_REQUIRE="${KILN_REQUIRE:-cpu,opencl}"

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! [ -e /etc/OpenCL/vendors/pocl.icd ] || ! ldconfig -p | grep -q libOpenCL.so.1; then
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1 clinfo >/dev/null
fi
if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
fi

cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
cargo nextest run --release --workspace --no-fail-fast
cargo test --release --workspace --doc
cargo run --release --example quickstart > /tmp/kiln-quickstart.out
grep -q '^result map-filter-map-sum' /tmp/kiln-quickstart.out
KILN_BACKEND=opencl cargo run --release --example quickstart > /tmp/kiln-quickstart-opencl.out
diff <(grep '^result' /tmp/kiln-quickstart.out) <(grep '^result' /tmp/kiln-quickstart-opencl.out)
cargo run --release -p kiln-bench -- --quick --json /tmp/kiln-bench.json
echo "kiln test suite passed"
