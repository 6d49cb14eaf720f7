#!/usr/bin/env python3
"""The pyiceberg peer of skade's `peers` bench arm (benches/skade-bench/peers.rs).

Appends the bench's synthetic table (read from an Arrow IPC file the bench wrote) the
way a pyiceberg user would: a ``SqlCatalog`` on sqlite with a local-filesystem
warehouse, zstd level 1 like skade's writer. One invocation is one run:

(a) one ``table.append()`` of the whole dataset into a new table: rows/s;
(b) on a second new table, ``--tiny`` appends of 10 rows each (one commit each):
    commits/s, p50/p99 latency, and the median latency of the first 10 vs the last 10.

Prints ONE JSON object on stdout (times in seconds unless the key says ``_ms``).

Usage: pyiceberg_peer.py IPC_FILE WORK_DIR [--tiny N]
"""

import argparse
import json
import os
import statistics
import sys
import time

import pyarrow as pa
import pyarrow.ipc
import pyiceberg
from pyiceberg.catalog.sql import SqlCatalog

TINY_ROWS = 10

# The same codec and level as skade's default writer (zstd level 1).
PROPERTIES = {
    "write.parquet.compression-codec": "zstd",
    "write.parquet.compression-level": "1",
}


def percentile(xs, p):
    """The p-th percentile (0 <= p <= 1) of xs, nearest rank, as the Rust bench does."""
    v = sorted(xs)
    return v[round((len(v) - 1) * p)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ipc_file", help="Arrow IPC file of the synthetic table")
    parser.add_argument("work_dir", help="empty directory for the catalog and warehouse")
    parser.add_argument(
        "--tiny", type=int, default=200, help="number of 10-row appends (default 200)"
    )
    args = parser.parse_args()

    # Read into memory (not a memory map) so the timed append does not page the file in.
    with pa.OSFile(args.ipc_file) as source:
        data = pa.ipc.open_file(source).read_all()

    work = os.path.abspath(args.work_dir)
    os.makedirs(os.path.join(work, "warehouse"), exist_ok=True)
    catalog = SqlCatalog(
        "bench",
        uri=f"sqlite:///{os.path.join(work, 'catalog.db')}",
        warehouse=f"file://{os.path.join(work, 'warehouse')}",
    )
    catalog.create_namespace("bench")

    # (a) one append of the whole dataset.
    table = catalog.create_table("bench.bulk", schema=data.schema, properties=PROPERTIES)
    started = time.perf_counter()
    table.append(data)
    append_s = time.perf_counter() - started
    files = len(table.inspect.files())

    # (b) tiny appends, one commit each, on a fresh table.
    tiny_table = catalog.create_table(
        "bench.tiny", schema=data.schema, properties=PROPERTIES
    )
    latencies = []
    started = time.perf_counter()
    for i in range(args.tiny):
        offset = (i * TINY_ROWS) % max(data.num_rows - TINY_ROWS, 1)
        piece = data.slice(offset, TINY_ROWS)
        t0 = time.perf_counter()
        tiny_table.append(piece)
        latencies.append(time.perf_counter() - t0)
    tiny_s = time.perf_counter() - started

    window = min(10, len(latencies))
    out = {
        "pyiceberg": pyiceberg.__version__,
        "pyarrow": pa.__version__,
        "rows": data.num_rows,
        "append_seconds": append_s,
        "rows_per_s": data.num_rows / append_s,
        "append_files": files,
        "tiny_commits": args.tiny,
        "tiny_rows": TINY_ROWS,
        "commits_per_s": args.tiny / tiny_s if tiny_s > 0 else 0.0,
        "p50_ms": percentile(latencies, 0.5) * 1e3 if latencies else 0.0,
        "p99_ms": percentile(latencies, 0.99) * 1e3 if latencies else 0.0,
        "first10_ms": statistics.median(latencies[:window]) * 1e3 if latencies else 0.0,
        "last10_ms": statistics.median(latencies[-window:]) * 1e3 if latencies else 0.0,
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
