"""The operations of kiln-bench's query cases, in CuPy on the same GPU, as its baseline.

    python3 scripts/cupy_baseline.py [--log2 N] [--json PATH]

Same inputs as kiln-bench (x[i] = (i * 2654435761 mod 2^64 mod 1000000) * 1e-3 as f32, u32 keys
i * 2654435761 mod 2^32, u8 levels: those keys' top byte), same cases, best of up to 7 runs after a warm-up, timed with CUDA events. Each answer is checked
against NumPy in float64 before it is timed, so a wrong baseline cannot pass.
"""

import argparse
import json

import cupy as cp
import numpy as np


def best_ms(f, reps=7):
    f()
    cp.cuda.Device().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    best = float("inf")
    for _ in range(reps):
        start.record()
        f()
        stop.record()
        stop.synchronize()
        best = min(best, cp.cuda.get_elapsed_time(start, stop))
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--log2", type=int, default=26)
    p.add_argument("--json")
    a = p.parse_args()
    n = 1 << a.log2
    i = np.arange(n, dtype=np.uint64)
    host = (((i * np.uint64(2654435761)) % np.uint64(1000000)).astype(np.float32) * np.float32(1e-3))
    x = cp.asarray(host)
    ref = host.astype(np.float64)

    def check(name, got, want, rel=1e-5):
        got = np.asarray(got, dtype=np.float64)
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1.0)
        if not err <= rel:
            raise SystemExit(f"{name}: CuPy's answer is off by {err:.2e} (relative)")

    check("map", cp.asnumpy(x * 2 + 1), ref * 2 + 1)
    check("sum", float(x.sum()), ref.sum())
    check("filter", cp.asnumpy(x[x < 500]), ref[ref < 500])
    y = x * 2
    check("map-filter-map-sum", float((y[y > 1000] + 100).sum()), (ref * 2)[ref * 2 > 1000].sum() + 100 * (ref * 2 > 1000).sum(), 1e-4)

    # One fused kernel writing into an array that already exists: what kiln's
    # write_to_buffer does (x * 2 + 1 above runs two kernels and allocates twice).
    twice_plus_one = cp.ElementwiseKernel("float32 x", "float32 y", "y = x * 2.0f + 1.0f", "twice_plus_one")
    into = cp.empty_like(x)
    twice_plus_one(x, into)
    check("map into an existing array", cp.asnumpy(into), ref * 2 + 1)

    # The same inputs as kiln-bench's sort, histogram and fused rows.
    keys = cp.asarray(((i * np.uint64(2654435761)) % np.uint64(1 << 32)).astype(np.uint32))
    host_levels = (((i * np.uint64(2654435761)) % np.uint64(1 << 32)) >> np.uint64(24)).astype(np.uint8)
    levels = cp.asarray(host_levels)

    @cp.fuse()
    def fused_chain(x):
        y = x * 2
        return cp.sum(cp.where(y > 1000, y + 100, cp.float32(0)))

    check("scan", cp.asnumpy(cp.cumsum(x)), np.cumsum(ref), 1e-3)
    check("sort u32", cp.asnumpy(cp.sort(keys)), np.sort(cp.asnumpy(keys)).astype(np.float64), 0)
    check("histogram", cp.asnumpy(cp.bincount(levels, minlength=256)), np.bincount(host_levels, minlength=256), 0)
    check("map-filter-map-sum (cupy.fuse)", float(fused_chain(x)), (ref * 2)[ref * 2 > 1000].sum() + 100 * (ref * 2 > 1000).sum(), 1e-4)

    dst = cp.empty_like(x)
    half = x[: n // 2].copy()
    half_dst = cp.empty_like(half)
    cases = [
        ("device copy", lambda: cp.copyto(dst, x)),
        ("device copy of n/2", lambda: cp.copyto(half_dst, half)),
        ("map Buffer→Buffer", lambda: x * 2 + 1),
        ("map write_to_buffer (one kernel into an existing array)", lambda: twice_plus_one(x, into)),
        ("sum Buffer", lambda: x.sum()),
        ("filter (50%)", lambda: x[x < 500]),
        ("map-filter-map-sum", lambda: ((x * 2)[(x * 2) > 1000] + 100).sum()),
        ("map-filter-map-sum (cupy.fuse)", lambda: fused_chain(x)),
        ("scan (cumsum)", lambda: cp.cumsum(x)),
        ("sort u32 (cupy.sort)", lambda: cp.sort(keys)),
        ("histogram of u8 (bincount, 256 bins)", lambda: cp.bincount(levels, minlength=256)),
        ("map to host", lambda: cp.asnumpy(x * 2 + 1)),
        ("upload n f32 (cupy.asarray, pageable)", lambda: cp.asarray(host)),
        ("download n f32 (cupy.asnumpy, pageable)", lambda: cp.asnumpy(x)),
    ]
    rows = []
    for name, f in cases:
        ms = best_ms(f)
        rows.append({"case": name, "backend": "cupy", "n": n, "ms": round(ms, 4)})
    copy_ms = rows[0]["ms"]
    print(f"n = 2^{a.log2}; CuPy {cp.__version__} on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print(f"device copy: {8 * n / copy_ms / 1e6:.1f} GB/s (read + write)")
    print("| case | CuPy ms |")
    print("|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['ms']:.4f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
