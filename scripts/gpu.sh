#!/usr/bin/env bash
# Runs kiln's test suite and benchmarks on a machine with an NVIDIA GPU but no Rust toolchain.
#
#   scripts/gpu.sh pack   here: builds every test binary, the benchmark and the examples in
#                         release mode, strips them and packs them into target/gpu/kiln-gpu.tar.xz
#                         (about 40 MB; carry that path to the GPU machine)
#   scripts/gpu.sh run    there, from the repository root: unpacks, runs every test binary with
#                         KILN_REQUIRE=cpu,cuda, the examples on cuda, the full benchmark with
#                         --json and the CuPy baseline (scripts/cupy_baseline.py); logs and JSON
#                         go to $OUT (default target/gpu/out), and a summary is printed last.
#                         GPU_REQUIRE, GPU_BACKEND and BENCH_ARGS override the requirement, the
#                         examples' backend and the benchmark's arguments (to try it without one).
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=target/gpu/kiln-gpu.tar.xz

pack() {
    rm -rf target/gpu/bin
    mkdir -p target/gpu/bin
    cargo build --release --workspace --tests --examples --bins --message-format=json-render-diagnostics \
        | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    kind = "test" if m["profile"]["test"] else t["kind"][0]
    # trybuild runs cargo, and proc-macro tests link the libstd of the toolchain: neither is there.
    if t["name"] != "compile_fail" and "proc-macro" not in t["kind"]:
        shutil.copy(m["executable"], "target/gpu/bin/%s-%s" % (kind, t["name"]))
'
    strip target/gpu/bin/*
    tar -C target/gpu -cJf "$PACK" bin
    ls -la "$PACK"
    ls target/gpu/bin
}

run() {
    OUT="${OUT:-target/gpu/out}"
    mkdir -p "$OUT/logs"
    rm -rf target/gpu/bin
    tar -C target/gpu -xJf "$PACK"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt" \
        || echo "no nvidia-smi here"
    export PATH="$PATH:/usr/local/cuda/bin"
    if ! ls /usr/local/cuda/lib64/libnvrtc.so* >/dev/null 2>&1; then
        lib="$(python3 -c 'import nvidia.cu13, os; print(os.path.join(nvidia.cu13.__path__[0], "lib"))' 2>/dev/null || true)"
        export LD_LIBRARY_PATH="${lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    export KILN_REQUIRE="${GPU_REQUIRE:-cpu,cuda}" KILN_CACHE_DIR="$OUT/cache"
    local failed=0 summary=""
    for t in target/gpu/bin/test-*; do
        name="$(basename "$t")"
        if "$t" > "$OUT/logs/$name.log" 2>&1; then
            summary+="$name: $(grep -E '^test result' "$OUT/logs/$name.log" | tail -1)"$'\n'
        else
            failed=1
            summary+="$name: FAILED (see logs/$name.log)"$'\n'
            grep -E "^---- |panicked" "$OUT/logs/$name.log" | head -20 >> "$OUT/failures.txt" || true
        fi
    done
    for e in quickstart kernels devices; do
        KILN_BACKEND="${GPU_BACKEND:-cuda}" "target/gpu/bin/example-$e" > "$OUT/logs/example-$e.log" 2>&1 \
            && summary+="example $e on ${GPU_BACKEND:-cuda}: ok"$'\n' \
            || { failed=1; summary+="example $e on ${GPU_BACKEND:-cuda}: FAILED"$'\n'; }
    done
    target/gpu/bin/bin-kiln-bench ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/logs/bench.log" 2>&1 \
        || { failed=1; summary+="kiln-bench: FAILED"$'\n'; }
    python3 scripts/cupy_baseline.py --log2 26 --json "$OUT/cupy.json" > "$OUT/logs/cupy.log" 2>&1 \
        || { failed=1; summary+="cupy baseline: FAILED"$'\n'; }
    grep -E "^\| .* \| ${GPU_BACKEND:-cuda} \||GB/s" "$OUT/logs/bench.log" || true
    cat "$OUT/logs/cupy.log" || true
    printf '%s' "$summary"
    return $failed
}

case "${1:-}" in
    pack) pack ;;
    run) run ;;
    *) echo "usage: scripts/gpu.sh pack|run" >&2; exit 2 ;;
esac
