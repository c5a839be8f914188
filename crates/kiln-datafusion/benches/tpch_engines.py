"""TPC-H Q1 and Q6 on DuckDB and Polars, for benches/tpch_bench.rs: lineitem at the scale factor
given, written as Parquet by tpchgen-cli (the same generator as tpchgen-arrow) and loaded
into memory before timing, only the columns Q1 and Q6 read (as tpch_bench.rs holds them).
Prints one line per engine and query: the cold run and the median of the timed runs, in
milliseconds. DuckDB runs the same SQL files as DataFusion;
Polars runs the queries in its DataFrame API, on the same Decimal columns.

    python3 tpch_engines.py SF RUNS
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date

import duckdb
import polars as pl

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = ["l_quantity", "l_extendedprice", "l_discount", "l_tax", "l_returnflag",
           "l_linestatus", "l_shipdate"]


def lineitem_parquet(sf):
    """The Parquet file of lineitem at `sf`, generated once into the temporary folder."""
    folder = os.path.join(tempfile.gettempdir(), f"kiln-tpch-sf{sf}")
    path = os.path.join(folder, "lineitem.parquet")
    if not os.path.exists(path):
        subprocess.run(
            ["tpchgen-cli", "parquet", "-s", str(sf), "--tables", "lineitem",
             "--output-dir", folder],
            check=True, stdout=subprocess.DEVNULL)
    return path


def timed(run, runs):
    start = time.perf_counter()
    run()
    cold = (time.perf_counter() - start) * 1e3
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1e3)
    return cold, statistics.median(times)


def polars_q1(li):
    disc = pl.col("l_extendedprice") * (1 - pl.col("l_discount"))
    return (
        li.filter(pl.col("l_shipdate") <= date(1998, 9, 2))
        .group_by("l_returnflag", "l_linestatus")
        .agg(
            pl.col("l_quantity").sum().alias("sum_qty"),
            pl.col("l_extendedprice").sum().alias("sum_base_price"),
            disc.sum().alias("sum_disc_price"),
            (disc * (1 + pl.col("l_tax"))).sum().alias("sum_charge"),
            pl.col("l_quantity").mean().alias("avg_qty"),
            pl.col("l_extendedprice").mean().alias("avg_price"),
            pl.col("l_discount").mean().alias("avg_disc"),
            pl.len().alias("count_order"),
        )
        .sort("l_returnflag", "l_linestatus")
        .collect()
    )


def polars_q6(li):
    return (
        li.filter(
            (pl.col("l_shipdate") >= date(1994, 1, 1))
            & (pl.col("l_shipdate") < date(1995, 1, 1))
            & pl.col("l_discount").is_between(0.05, 0.07)
            & (pl.col("l_quantity") < 24)
        )
        .select((pl.col("l_extendedprice") * pl.col("l_discount")).sum().alias("revenue"))
        .collect()
    )


def main():
    sf, runs = sys.argv[1], int(sys.argv[2])
    path = lineitem_parquet(sf)
    con = duckdb.connect()
    con.execute(f"create table lineitem as select {', '.join(COLUMNS)} "
                f"from read_parquet('{path}')")
    li = pl.read_parquet(path, columns=COLUMNS).lazy()
    for name in ("Q1", "Q6"):
        with open(os.path.join(HERE, "..", "tpch", name.lower() + ".sql")) as f:
            sql = f.read()
        cold, med = timed(lambda: con.execute(sql).fetchall(), runs)
        print(f"{name:<4} DuckDB {duckdb.__version__}: cold {cold:.1f}, median {med:.1f}")
        query = polars_q1 if name == "Q1" else polars_q6
        cold, med = timed(lambda: query(li), runs)
        print(f"{name:<4} Polars {pl.__version__}: cold {cold:.1f}, median {med:.1f}")


if __name__ == "__main__":
    main()
