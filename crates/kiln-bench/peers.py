"""The engines a data user would pick instead of kiln, on the inputs `kiln bench` measures
kiln on: numpy, Polars and DuckDB, each where it is installed. The bench writes its inputs
as raw little-endian files into a folder and runs

    python3 peers.py FOLDER REPS CASE...

which prints one tab-separated line per engine and case it runs,

    row  CASE  ENGINE VERSION  BEST_MS  ROWS

(ROWS: the rows or groups the result holds, -1 for a single value, so the bench can check
that each engine did the work kiln did), and `missing  ENGINE  WHY` for each engine that
does not import. Each case is timed as the bench times kiln: one warm-up, then the best of
up to REPS runs, stopping after 3 s. Results are materialized (a numpy array, a Polars
Series or DataFrame, DuckDB's result fetched as numpy), as kiln's `to_vec` is.
"""

import os
import sys
import time

try:
    import numpy as np
except ImportError as missing_numpy:
    np = None
    MISSING_NUMPY = str(missing_numpy)


def best(run, reps):
    """The best time of `run` in milliseconds, and its result's row count."""
    out = run()
    best_ms = float("inf")
    start = time.perf_counter()
    for _ in range(reps):
        t = time.perf_counter()
        out = run()
        best_ms = min(best_ms, (time.perf_counter() - t) * 1e3)
        if time.perf_counter() - start > 3.0:
            break
    return best_ms, rows(out)


def rows(out):
    """The rows (or groups) `out` holds; -1 for a single value."""
    if isinstance(out, tuple):
        return rows(out[0])
    if hasattr(out, "shape") and len(getattr(out, "shape")) > 0:
        return int(out.shape[0])
    if hasattr(out, "__len__") and not isinstance(out, (str, bytes)):
        return len(out)
    return -1


def numpy_cases(d):
    xs, levels, ids = d["xs"], d["levels"], d["ids"]
    return {
        "map to_vec": lambda: xs * np.float32(2) + np.float32(1),
        "map-filter-map-sum": lambda: _fused_numpy(xs),
        "sum": lambda: xs.sum(),
        "max": lambda: xs.max(),
        "argmax": lambda: xs.argmax(),
        "filter to_vec (50%)": lambda: xs[xs < np.float32(500)],
        "scan (running sum) to_vec": lambda: np.cumsum(xs),
        "histogram (256 bins of u8)": lambda: np.bincount(levels, minlength=256),
        "sort to_vec (radix, stable)": lambda: np.sort(xs, kind="stable"),
        "group_by sum (256 u8 keys, dense)": lambda: _dense_sum_numpy(levels, xs),
        "group_by sum (65521 u32 keys, dense)": lambda: _dense_sum_numpy(ids, xs),
        "group_by count (65521 u32 keys, dense)": lambda: _dense_count_numpy(ids),
        "distinct to_vec (65521 u32 values)": lambda: np.unique(ids),
    }


def _fused_numpy(xs):
    y = xs * np.float32(2)
    return (y[y > np.float32(1000)] + np.float32(100)).sum()


def _dense_sum_numpy(keys, xs):
    sums = np.bincount(keys, weights=xs)
    return sums[np.bincount(keys) > 0]


def _dense_count_numpy(ids):
    counts = np.bincount(ids)
    return counts[counts > 0]


def polars_cases(d):
    import polars as pl

    xs = pl.Series("x", d["xs"])
    frame = pl.DataFrame({"k": d["levels"], "x": d["xs"]})
    ids = pl.DataFrame({"k": d["ids"]})
    id_rows = pl.DataFrame({"k": d["ids"], "x": d["xs"]})
    levels = pl.DataFrame({"k": d["levels"]})
    return {
        "map to_vec": lambda: xs * 2.0 + 1.0,
        "map-filter-map-sum": lambda: _fused_polars(pl, xs),
        "sum": lambda: xs.sum(),
        "max": lambda: xs.max(),
        "argmax": lambda: xs.arg_max(),
        "filter to_vec (50%)": lambda: xs.filter(xs < 500.0),
        "scan (running sum) to_vec": lambda: xs.cum_sum(),
        "histogram (256 bins of u8)": lambda: levels.group_by("k").len(),
        "sort to_vec (radix, stable)": lambda: xs.sort(),
        "group_by sum (256 u8 keys, dense)": lambda: frame.group_by("k").agg(pl.col("x").sum()),
        "group_by sum (65521 u32 keys, dense)": lambda: id_rows.group_by("k").agg(pl.col("x").sum()),
        "group_by count (65521 u32 keys, dense)": lambda: ids.group_by("k").len(),
        "distinct to_vec (65521 u32 values)": lambda: ids["k"].unique(),
    }


def _fused_polars(pl, xs):
    y = xs * 2.0
    return (y.filter(y > 1000.0) + 100.0).sum()


def duckdb_cases(d):
    import duckdb

    con = duckdb.connect()
    con.register("xs", {"x": d["xs"]})
    con.register("levels", {"k": d["levels"], "x": d["xs"]})
    con.register("ids", {"k": d["ids"]})
    con.register("id_rows", {"k": d["ids"], "x": d["xs"]})

    def query(sql):
        return lambda: next(iter(con.execute(sql).fetchnumpy().values()))

    def one(sql):
        rows = query(sql)
        return lambda: rows()[0]

    return {
        "map to_vec": query("SELECT x * 2 + 1 AS y FROM xs"),
        "map-filter-map-sum": one("SELECT sum(x * 2 + 100) AS s FROM xs WHERE x * 2 > 1000"),
        "sum": one("SELECT sum(x) AS s FROM xs"),
        "max": one("SELECT max(x) AS m FROM xs"),
        "filter to_vec (50%)": query("SELECT x FROM xs WHERE x < 500"),
        "histogram (256 bins of u8)": query("SELECT count(*) AS c FROM levels GROUP BY k"),
        "sort to_vec (radix, stable)": query("SELECT x FROM xs ORDER BY x"),
        "group_by sum (256 u8 keys, dense)": query("SELECT sum(x) AS s FROM levels GROUP BY k"),
        "group_by sum (65521 u32 keys, dense)": query("SELECT sum(x) AS s FROM id_rows GROUP BY k"),
        "group_by count (65521 u32 keys, dense)": query("SELECT count(*) AS c FROM ids GROUP BY k"),
        "distinct to_vec (65521 u32 values)": query("SELECT DISTINCT k FROM ids"),
    }


def version(module):
    __import__(module)
    return sys.modules[module].__version__


def main():
    folder, reps, wanted = sys.argv[1], int(sys.argv[2]), set(sys.argv[3:])
    if np is None:
        for name in ("numpy", "polars", "duckdb"):
            print(f"missing\t{name}\tnumpy, which the inputs are read with: {MISSING_NUMPY}")
        return
    data = {
        "xs": np.fromfile(os.path.join(folder, "xs.f32"), dtype="<f4"),
        "levels": np.fromfile(os.path.join(folder, "levels.u8"), dtype=np.uint8),
        "ids": np.fromfile(os.path.join(folder, "ids.u32"), dtype="<u4"),
    }
    engines = [("numpy", numpy_cases), ("polars", polars_cases), ("duckdb", duckdb_cases)]
    for name, cases in engines:
        try:
            label = f"{name} {version(name)}"
            table = cases(data)
        except ImportError as e:
            print(f"missing\t{name}\t{e}", flush=True)
            continue
        for case, run in table.items():
            if case in wanted:
                ms, count = best(run, reps)
                print(f"row\t{case}\t{label}\t{ms:.6f}\t{count}", flush=True)


if __name__ == "__main__":
    main()
