#!/usr/bin/env bash
# Runs kiln's test suite and benchmarks on a machine with an NVIDIA GPU but no Rust toolchain.
#
#   scripts/gpu.sh pack   here: builds every test binary, the benchmark and the examples in
#                         release mode (GPU_PROFILE names another Cargo profile: CI's dry run
#                         packs the suite's `ci` build), strips them and packs them into
#                         target/gpu/kiln-gpu.tar.xz
#                         (about 45 MB; carry that path to the GPU machine; CI runs both steps on the CPU alone)
#   scripts/gpu.sh run    there, from the repository root: unpacks, runs every test binary (each
#                         module of the integration tests' one binary apart) with
#                         KILN_REQUIRE=cpu,cuda on the CPU and CUDA only (KILN_TEST_ONLY), each
#                         with an empty disk cache; the examples on cuda, their results diffed
#                         against the CPU's; the full benchmark with --json, caches off; and the
#                         CuPy baseline (scripts/cupy_baseline.py). Logs and JSON go to $OUT
#                         (default target/gpu/out); one summary line per test binary and example
#                         is printed last; a test binary taking over GPU_TEST_TIMEOUT seconds
#                         (default 300) is stopped and fails. GPU_REQUIRE, GPU_ONLY, GPU_BACKEND, GPU_PARTS (a subset
#                         of tests,examples,bench,cupy), GPU_TESTS (the test parts to run, by the
#                         names the summary gives them, comma-separated; all when unset) and
#                         BENCH_ARGS override the requirement, the backends tested, the examples'
#                         backend, what runs and the benchmark's arguments (GPU_REQUIRE=cpu
#                         GPU_BACKEND=cpu tries it here).
set -euo pipefail
cd "$(dirname "$0")/.."
PACK=target/gpu/kiln-gpu.tar.xz

pack() {
    rm -rf target/gpu/bin
    mkdir -p target/gpu/bin
    cargo build --profile "${GPU_PROFILE:-release}" --workspace --tests --examples --bins \
        --message-format=json-render-diagnostics \
        | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    kind = "test" if m["profile"]["test"] else t["kind"][0]
    # trybuild runs cargo, and proc-macro tests link the libstd of the toolchain: neither is there.
    # The tpch example links DataFusion (over 100 MB) a second time, and kiln-ballista links it
    # with Ballista; the tpch test binary runs the same queries, so the pack stays under the
    # 64 MiB a device call carries. The kiln command line comes without its test, which runs
    # the binary from this machine'"'"'s build folder; `run` runs its doctor instead.
    skip = (t["name"] == "compile_fail" or "proc-macro" in t["kind"]
            or (kind, t["name"]) == ("example", "tpch") or "/kiln-ballista#" in m["package_id"]
            or (kind, t["name"]) == ("test", "cli"))
    if not skip:
        shutil.copy(m["executable"], "target/gpu/bin/%s-%s" % (kind, t["name"]))
'
    strip target/gpu/bin/*
    # xz on every core (it compresses blocks apart; the pack stays about the same size).
    XZ_OPT="${XZ_OPT:--T0}" tar -C target/gpu -cJf "$PACK" bin
    ls -la "$PACK"
    ls target/gpu/bin
}

run() {
    OUT="${OUT:-target/gpu/out}"
    mkdir -p "$OUT/logs"
    rm -f "$OUT/failures.txt"
    rm -rf target/gpu/bin
    tar -C target/gpu -xJf "$PACK"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt" \
        || echo "no nvidia-smi here"
    export PATH="$PATH:/usr/local/cuda/bin"
    if ls /usr/local/cuda/lib64/libnvrtc.so.* >/dev/null 2>&1; then
        export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
        # The NVRTC wheels of CUDA 13 and 12, where pip put them; kiln picks the newest whose
        # major the driver supports.
        lib="$(python3 -c '
import os, nvidia
for root in nvidia.__path__:
    for sub in ("cu13/lib", "cuda_nvrtc/lib"):
        if os.path.isdir(os.path.join(root, sub)):
            print(os.path.join(root, sub))' 2>/dev/null | paste -sd: || true)"
        if [ -n "$lib" ]; then export LD_LIBRARY_PATH="${lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
    fi
    # Only the backends named are tested (an NVIDIA OpenCL ICD or Vulkan driver there is tried
    # deliberately, with GPU_ONLY=cpu,cuda,opencl, never by accident).
    export KILN_REQUIRE="${GPU_REQUIRE:-cpu,cuda}" KILN_TEST_ONLY="${GPU_ONLY:-cpu,cuda}"
    local backend="${GPU_BACKEND:-cuda}" parts="${GPU_PARTS:-tests,examples,bench,cupy}"
    local cache="${TMPDIR:-/tmp}/kiln-gpu-cache"
    local failed=0 summary=""
    if [[ ",$parts," == *,tests,* ]]; then
        for t in target/gpu/bin/test-*; do
            # The integration tests are one binary (tests/it): each of its modules runs as a
            # part of its own, with its own log, timeout and empty cache.
            local modules="-"
            if [ "$(basename "$t")" = test-it ]; then
                modules="$("$t" --list 2>/dev/null | sed -n 's/^\([a-z_]*\)::.*: test$/\1/p' | sort -u)"
            fi
            for module in $modules; do
                local name filter=()
                name="$(basename "$t")"
                if [ "$module" != - ]; then
                    name="$name-$module"
                    filter=("$module::")
                    # A filter matches anywhere in a name: `cache::` skips `disk_cache::`.
                    for other in $modules; do
                        if [ "$other" != "$module" ] && [[ "$other" == *"$module"* ]]; then
                            filter+=(--skip "$other::")
                        fi
                    done
                fi
                if [ -n "${GPU_TESTS:-}" ] && [[ ",$GPU_TESTS," != *",$name,"* ]]; then
                    continue
                fi
                rm -rf "$cache"
                local start=$SECONDS
                if KILN_CACHE_DIR="$cache" timeout "${GPU_TEST_TIMEOUT:-300}" "$t" ${filter[@]+"${filter[@]}"} > "$OUT/logs/$name.log" 2>&1; then
                    summary+="$name ($((SECONDS - start)) s): $(grep -E '^test result' "$OUT/logs/$name.log" | tail -1)"$'\n'
                else
                    failed=1
                    summary+="$name ($((SECONDS - start)) s): FAILED (see logs/$name.log)"$'\n'
                    grep -E "^---- |panicked" "$OUT/logs/$name.log" | head -40 >> "$OUT/failures.txt" || true
                fi
            done
        done
    fi
    if [[ ",$parts," == *,examples,* ]]; then
        # The command line's installation check on the backends required.
        if KILN_CACHE_DIR="$cache" target/gpu/bin/bin-kiln doctor --require "$KILN_REQUIRE" --only "$KILN_TEST_ONLY" > "$OUT/logs/kiln-doctor.log" 2>&1; then
            summary+="kiln doctor --require $KILN_REQUIRE: ok"$'\n'
        else
            failed=1
            summary+="kiln doctor --require $KILN_REQUIRE: FAILED (see logs/kiln-doctor.log)"$'\n'
        fi
        rm -rf "$cache"
        export KILN_CACHE_DIR="$cache"
        # Each example's `result` lines on the GPU must equal those on the CPU, and its checks
        # must print `: ok` (as scripts/test.sh checks them).
        for e in quickstart kernels devices; do
            local ok=1
            KILN_BACKEND=cpu "target/gpu/bin/example-$e" > "$OUT/logs/example-$e-cpu.log" 2>&1 || ok=0
            KILN_BACKEND="$backend" "target/gpu/bin/example-$e" > "$OUT/logs/example-$e.log" 2>&1 || ok=0
            diff <(grep '^result' "$OUT/logs/example-$e-cpu.log") <(grep '^result' "$OUT/logs/example-$e.log") \
                >> "$OUT/logs/example-$e.log" 2>&1 || ok=0
            case $e in
                quickstart) grep -q '^result map-filter-map-sum within 1e-5 of an f64 loop: true$' "$OUT/logs/example-$e.log" || ok=0 ;;
                kernels) for c in saxpy histogram 'particle step'; do
                        grep -q "^$c .*: ok\$" "$OUT/logs/example-$e.log" || ok=0
                    done ;;
                devices) grep -q '^sum of .* device(s): .*: ok$' "$OUT/logs/example-$e.log" || ok=0 ;;
            esac
            if [ $ok = 1 ]; then
                summary+="example $e on $backend: ok"$'\n'
            else
                failed=1
                summary+="example $e on $backend: FAILED (see logs/example-$e.log)"$'\n'
            fi
        done
    fi
    if [[ ",$parts," == *,bench,* ]]; then
        # Cold-compile rows are measured with every cache off.
        KILN_CACHE_DIR=off target/gpu/bin/bin-kiln bench ${BENCH_ARGS:-} --json "$OUT/bench.json" --svg "$OUT/bench.svg" \
            > "$OUT/logs/bench.log" 2>&1 || { failed=1; summary+="kiln bench: FAILED"$'\n'; }
        grep -E "^\| .* \| $backend \||GB/s|device-resident|cached call|cold compile" "$OUT/logs/bench.log" || true
    fi
    if [[ ",$parts," == *,cupy,* ]]; then
        python3 scripts/cupy_baseline.py --log2 26 --json "$OUT/cupy.json" > "$OUT/logs/cupy.log" 2>&1 \
            || { failed=1; summary+="cupy baseline: FAILED"$'\n'; }
        cat "$OUT/logs/cupy.log" || true
    fi
    [ -s "$OUT/failures.txt" ] && head -60 "$OUT/failures.txt"
    printf '%s' "$summary"
    return $failed
}

case "${1:-}" in
    pack) pack ;;
    run) run ;;
    *) echo "usage: scripts/gpu.sh pack|run" >&2; exit 2 ;;
esac
