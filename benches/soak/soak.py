#!/usr/bin/env python3
"""Soak run: a real ``skade serve`` under mixed load for a long time, with maintenance at
its defaults, sampled every 10 s (``benches/soak/README.md``).

Load, all at once for ``--duration``:

* one large stream: a single DoPut that stays open for the whole run, sending batches of
  ``--large-batch-rows`` rows as fast as the server takes them (``soak.large``);
* ``--tiny-streams`` (8) streams of tiny puts: each a DoPut of one 10-row batch, the next
  sent as soon as the last one's ack came (``soak.tiny_<i>``);
* one Flight SQL transaction (ADBC ``adbc-driver-flightsql``) a second, ingesting 10 rows
  into each of 4 tables and committing them at once (``soak.txn_<i>``);
* ``--readers`` pyiceberg readers polling the tiny tables through the REST catalog, each
  its share of them in turn: load-table, then a scan of the rows newer than what it saw;
  and one more reader for the large table, polling it every ``--large-poll`` seconds
  (its scans read whole 25 MiB files: in the tiny tables' rotation one took as long as
  a round of the others, and the tiny tables' freshness measured that).

Every row carries ``sent_ns``, the client's wall clock when its batch was sent; a
reader's scan that returns it for the first time gives that batch's **freshness**.

Every ``--sample`` seconds one CSV row: rows/s and commits/s (server metrics), tiny put
p50/p99, transaction p50, freshness p50/p99 (tiny tables, large stream), server RSS,
bytes on disk under the warehouse by kind, bytes and files waiting out a cleanup grace
(``skade_cleanup_waiting_*``), the largest current metadata JSON, metadata JSON files,
snapshots and live data files, maintenance pass time. At the end: one PNG per quantity
and ``summary.md`` (also printed): first-window / last-window ratios and the targets,
met or not met. ``--replot RUN_DIR`` draws a recorded run's PNGs again from its
``soak.csv`` (the repository keeps every run's CSV and summary, and one run's plots).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import multiprocessing as mp
import os
import queue
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "soak"
S3_BUCKET = "skade-soak"
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "skade-soak",
    "AWS_SECRET_ACCESS_KEY": "skade-soak",
    "AWS_REGION": "us-east-1",
}
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# Targets (the issue's): ratio of the last window's median to the first window's.
RATIO_TARGET = 1.2
TINY_FRESHNESS_P99_S = 1.0


def parse_duration(text: str) -> float:
    """``90s``, ``2m``, ``1h``, ``1h30m`` or plain seconds."""
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s|ms)", text)
    if not parts or "".join(a + b for a, b in parts) != text:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 2m, 1h)")
    unit = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(a) * unit[b] for a, b in parts)


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def http_get(url: str, timeout: float = 10) -> str:
    with NO_PROXY.open(url, timeout=timeout) as r:
        return r.read().decode()


def wait_http(url: str, proc: subprocess.Popen | None, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            http_get(url, timeout=2)
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            pass
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not answer at {url} within {timeout:.0f} s")
        time.sleep(0.2)


def parse_metrics(text: str) -> dict[str, float]:
    """Series (name with labels, as exposed) -> value."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def metric_sum(m: dict[str, float], name: str, where: str = "") -> float:
    """Sum of the series of ``name`` (every label set, or those containing ``where``)."""
    total = 0.0
    for series, v in m.items():
        base = series.split("{", 1)[0]
        if base == name and where in series:
            total += v
    return total


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[k]


def cpu_ticks(pid: int) -> int:
    """CPU time process `pid` has used (user + system, all threads), in clock ticks."""
    with open(f"/proc/{pid}/stat") as f:
        # The fields after the command name (in parentheses, may hold spaces): state is
        # the first, utime (field 14) and stime (15) the 12th and 13th.
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def machine_ticks() -> tuple[int, int, int]:
    """The machine's CPU time since boot, in clock ticks: (all, idle + iowait, steal)."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice, inside user]
    return sum(cpu[:8]), cpu[3] + cpu[4], cpu[7]


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


# ---------------------------------------------------------------------------------------
# Workers (each its own process, so the client's Python does not share one GIL).


def _flush(q, events: list) -> None:
    if events:
        q.put(list(events))
        events.clear()


def die_with_parent() -> None:
    """Asks the kernel to SIGTERM this process when its parent dies (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def worker(target, *args) -> None:
    """Runs one load process's ``target``, ended when the harness dies.

    Without it a harness stopped by a signal it cannot handle (SIGKILL) left its
    workers polling a stopped server, and they took CPU from every later run on the
    machine (seen: ≈ 30 % of a core from three interrupted runs).
    """
    die_with_parent()
    target(*args)


def stop_on_sigterm(_signum, _frame) -> None:
    """SIGTERM handler of the harness: stop as Ctrl-C does."""
    raise KeyboardInterrupt


def large_stream(flight_uri: str, batch_rows: int, rate: float, q, stop) -> None:
    """One DoPut for the whole run; batches as fast as the server takes them, or at most
    ``rate`` rows a second when it is not 0."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.flight as flight

    try:
        client = flight.FlightClient(flight_uri)
        rng = np.random.default_rng(7)
        value = pa.array(rng.random(batch_rows))
        tag = pa.array([f"tag-{i % 1000:04d}" for i in range(batch_rows)])
        schema = pa.schema(
            [("id", pa.int64()), ("sent_ns", pa.int64()), ("value", pa.float64()), ("tag", pa.string())]
        )
        writer, acks = client.do_put(flight.FlightDescriptor.for_path(NAMESPACE, "large"), schema)

        def drain():
            try:
                while acks.read() is not None:
                    pass
            except Exception:  # the stream ends with the put
                pass

        threading.Thread(target=drain, daemon=True).start()
        offset = 0
        events: list = []
        last_flush = time.monotonic()
        began = time.monotonic()
        while not stop.is_set():
            if rate:
                ahead = offset / rate - (time.monotonic() - began)
                if ahead > 0:
                    stop.wait(ahead)
                    continue
            ids = pa.array(np.arange(offset, offset + batch_rows, dtype=np.int64))
            sent = pa.array(np.full(batch_rows, time.time_ns(), dtype=np.int64))
            writer.write_batch(pa.record_batch([ids, sent, value, tag], schema=schema))
            offset += batch_rows
            events.append(("large_sent", time.time(), batch_rows))
            if time.monotonic() - last_flush > 1:
                _flush(q, events)
                last_flush = time.monotonic()
        _flush(q, events)
        writer.done_writing()
        writer.close()
    except Exception:
        q.put([("error", time.time(), "large stream: " + traceback.format_exc())])


def tiny_streams(flight_uri: str, streams: int, q, stop) -> None:
    """``streams`` threads, each putting 10 rows per DoPut, the next after the ack."""
    import pyarrow as pa
    import pyarrow.flight as flight

    schema = pa.schema([("id", pa.int64()), ("sent_ns", pa.int64()), ("value", pa.float64())])

    def one(i: int) -> None:
        try:
            client = flight.FlightClient(flight_uri)
            descriptor = flight.FlightDescriptor.for_path(NAMESPACE, f"tiny_{i}")
            n = 0
            events: list = []
            last_flush = time.monotonic()
            while not stop.is_set():
                started = time.perf_counter()
                batch = pa.record_batch(
                    [
                        pa.array(range(n, n + 10), pa.int64()),
                        pa.array([time.time_ns()] * 10, pa.int64()),
                        pa.array([float(n)] * 10, pa.float64()),
                    ],
                    schema=schema,
                )
                writer, acks = client.do_put(descriptor, schema)
                writer.write_batch(batch)
                writer.done_writing()
                while acks.read() is not None:
                    pass
                writer.close()
                n += 10
                events.append(("put", time.time(), time.perf_counter() - started))
                if time.monotonic() - last_flush > 1:
                    _flush(q, events)
                    last_flush = time.monotonic()
            _flush(q, events)
        except Exception:
            q.put([("error", time.time(), f"tiny stream {i}: " + traceback.format_exc())])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def transactions(flight_uri: str, tables: int, q, stop) -> None:
    """A Flight SQL transaction over ``tables`` tables every second."""
    import adbc_driver_flightsql.dbapi as flightsql
    import pyarrow as pa

    try:
        conn = flightsql.connect(flight_uri, autocommit=False)
        n = 0
        next_at = time.monotonic()
        while not stop.is_set():
            started = time.perf_counter()
            data = pa.table(
                {
                    "id": pa.array(range(n, n + 10), pa.int64()),
                    "sent_ns": pa.array([time.time_ns()] * 10, pa.int64()),
                }
            )
            with conn.cursor() as cur:
                for t in range(tables):
                    cur.adbc_ingest(f"txn_{t}", data, mode="create_append", db_schema_name=NAMESPACE)
            conn.commit()
            n += 10
            q.put([("txn", time.time(), time.perf_counter() - started)])
            next_at += 1.0
            delay = next_at - time.monotonic()
            if delay > 0:
                stop.wait(delay)
            else:
                next_at = time.monotonic()
        conn.close()
    except Exception:
        q.put([("error", time.time(), "transactions: " + traceback.format_exc())])


def reader(rest_url: str, tables: list[str], q, stop, period: float = 0.0) -> None:
    """Polls ``tables`` in turn: load-table, then a scan of ``sent_ns`` newer than the
    newest seen; each new ``sent_ns`` value is one batch's freshness. A round of the
    tables starts at most every ``period`` seconds (0: as soon as the last one ended)."""
    import pyarrow.compute as pc
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError
    from pyiceberg.expressions import GreaterThan

    catalog = load_catalog("skade", type="rest", uri=rest_url)
    newest = {name: -1 for name in tables}
    # Wall clock at the start of each table's last poll that loaded it: a batch the
    # next poll returns was not yet visible then.
    last_poll: dict[str, float] = {}
    events: list = []
    last_flush = time.monotonic()
    while not stop.is_set():
        round_started = time.monotonic()
        for name in tables:
            if stop.is_set():
                break
            started = time.perf_counter()
            polled = time.time()
            try:
                table = catalog.load_table(f"{NAMESPACE}.{name}")
                if table.current_snapshot() is None:
                    last_poll[name] = polled
                    continue
                got = table.scan(
                    row_filter=GreaterThan("sent_ns", newest[name]),
                    selected_fields=("sent_ns",),
                ).to_arrow()
            except NoSuchTableError:
                time.sleep(0.05)
                continue
            except Exception:
                events.append(("error", time.time(), f"reader {name}: " + traceback.format_exc()))
                time.sleep(0.5)
                continue
            seen = time.time()
            large = name == "large"
            events.append(("scan_large" if large else "scan", seen, time.perf_counter() - started))
            before = last_poll.get(name)
            if before is not None and not large:
                events.append(("poll_gap", seen, polled - before))
            if got.num_rows:
                sent = pc.unique(got.column("sent_ns")).to_pylist()
                kind = "fresh_large" if large else "fresh_tiny"
                events.append((kind, seen, [seen - s / 1e9 for s in sent]))
                if before is not None and not large:
                    # The poll before this one did not see these batches: each took at
                    # least this long to become visible, whatever the readers do.
                    events.append(("unseen_tiny", seen, [max(0.0, before - s / 1e9) for s in sent]))
                newest[name] = max(newest[name], max(sent))
            last_poll[name] = polled
            if time.monotonic() - last_flush > 1:
                _flush(q, events)
                last_flush = time.monotonic()
        rest = period - (time.monotonic() - round_started)
        if rest > 0:
            stop.wait(rest)
    _flush(q, events)


# ---------------------------------------------------------------------------------------
# The server and the warehouse.


class WarehouseFiles:
    """How to read what is in the warehouse (picklable: the disk walker's process gets one)."""

    def __init__(self, kind: str, data_dir: Path, endpoint: str | None, root: Path | None):
        self.kind, self.data_dir, self.endpoint, self.root = kind, data_dir, endpoint, root

    def s3(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=S3_CREDENTIALS["AWS_REGION"],
        )

    def files(self):
        """(path relative to the warehouse, bytes) of every file."""
        if self.kind == "s3" and self.root is not None:
            yield from self._walk(self.root / S3_BUCKET / "wh")
            return
        if self.kind == "s3":
            pages = self.s3().get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET, Prefix="wh/")
            for page in pages:
                for o in page.get("Contents", []):
                    yield o["Key"][3:], o["Size"]
            return
        yield from self._walk(self.data_dir / "warehouse")

    @staticmethod
    def _walk(root: Path):
        top = str(root)
        skip = len(top) + 1
        stack = [top]
        while stack:
            try:
                entries = os.scandir(stack.pop())
            except FileNotFoundError:  # a dropped table's directory
                continue
            with entries:
                for e in entries:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        else:
                            yield e.path[skip:], e.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:  # removed by cleanup while walking
                        pass

    def disk(self) -> dict:
        """Bytes on disk by kind, metadata JSON files, the largest current metadata JSON."""
        sizes = {"data": 0, "manifest": 0, "manifest_list": 0, "metadata": 0, "other": 0}
        metadata_files = 0
        newest: dict[str, tuple[int, int]] = {}  # table dir -> (version, bytes)
        for rel, size in self.files():
            parts = rel.split("/")
            name = parts[-1]
            if "data" in parts[:-1]:
                kind = "data"
            elif name.endswith(".metadata.json"):
                kind = "metadata"
                metadata_files += 1
                m = re.match(r"v?(\d+)-", name)
                if m:
                    table = "/".join(parts[:-2])
                    v = int(m.group(1))
                    if v >= newest.get(table, (-1, 0))[0]:
                        newest[table] = (v, size)
            elif name.startswith("snap-") and name.endswith(".avro"):
                kind = "manifest_list"
            elif name.endswith(".avro"):
                kind = "manifest"
            else:
                kind = "other"
            sizes[kind] += size
        largest = max((b for _, b in newest.values()), default=0)
        return {"sizes": sizes, "metadata_files": metadata_files, "metadata_json_bytes": largest}


def disk_walker(files: WarehouseFiles, every: float, q, stop) -> None:
    """Walks the warehouse every ``every`` seconds (or back to back when a walk takes
    longer) at the lowest CPU priority, putting each walk's figures on ``q``.

    At 300,000 files a walk took 3–4.5 s of CPU: done in the sampler at normal priority
    every 10 s it took a third of a core from the server, more as files piled up, and
    the run's put latency and commits/s measured that too."""
    os.nice(19)
    while not stop.is_set():
        started = time.monotonic()
        cpu = time.process_time()
        try:
            disk = files.disk()
        except Exception:
            q.put([("error", time.time(), "disk walk: " + traceback.format_exc())])
            stop.wait(every)
            continue
        q.put([("disk", time.time(), {**disk, "cpu_s": time.process_time() - cpu})])
        stop.wait(max(0.0, every - (time.monotonic() - started)))


class Warehouse(WarehouseFiles):
    """Where the tables live (and the moto server, when the run starts one)."""

    def __init__(self, kind: str, out: Path, endpoint: str | None = None, root: Path | None = None):
        data_dir = out / "data"
        data_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(kind, data_dir, endpoint, root)
        self.moto = None
        if kind == "s3" and endpoint is not None:
            # A server of the caller's (one that is not a Python process on the same
            # cores): it must take the soak's credentials.
            wait_http(endpoint, None, f"S3 server at {endpoint}", timeout=10)
            s3 = self.s3()
            if S3_BUCKET not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
                s3.create_bucket(Bucket=S3_BUCKET)
        elif kind == "s3":
            [port] = free_ports(1)
            self.endpoint = f"http://127.0.0.1:{port}"
            log = open(out / "moto.log", "wb")
            self.moto = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            wait_http(self.endpoint, self.moto, "moto_server")
            self.s3().create_bucket(Bucket=S3_BUCKET)

    def server_args(self) -> list[str]:
        if self.kind != "s3":
            return []
        return [
            "--warehouse", f"s3://{S3_BUCKET}/wh",
            "--s3-endpoint", self.endpoint,
            "--s3-path-style-access", "true",
            "--s3-vend-credentials", "true",
        ]

    def stop(self) -> None:
        if self.moto is not None:
            self.moto.terminate()
            self.moto.wait(timeout=20)


def start_server(binary: Path, wh: Warehouse, out: Path, extra: list[str]):
    flight_port, http_port = free_ports(2)
    cmd = [
        str(binary), "serve",
        "--data-dir", str(wh.data_dir),
        "--flight-addr", f"127.0.0.1:{flight_port}",
        "--metrics-addr", f"127.0.0.1:{http_port}",
        *wh.server_args(),
        *extra,
    ]
    log = open(out / "skade.log", "ab")
    log.write(("$ " + " ".join(cmd) + "\n").encode())
    log.flush()
    env = {**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")}
    if wh.kind == "s3":
        env.update(S3_CREDENTIALS)
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
        preexec_fn=die_with_parent,
    )
    http = f"http://127.0.0.1:{http_port}"
    wait_http(f"{http}/healthz", proc, "skade serve")
    return proc, f"grpc://127.0.0.1:{flight_port}", http


# ---------------------------------------------------------------------------------------
# Sampling, plots, summary.

COLUMNS = [
    ("t_s", "s since start"),
    ("rows_per_s", "rows committed per second (all tables)"),
    ("commits_per_s", "catalog commits per second (stream + multi lanes)"),
    ("put_p50_ms", "tiny put p50, ms"),
    ("put_p99_ms", "tiny put p99, ms"),
    ("txn_p50_ms", "Flight SQL transaction (4 tables) p50, ms"),
    ("fresh_tiny_p50_s", "freshness of tiny puts p50, s"),
    ("fresh_tiny_p99_s", "freshness of tiny puts p99, s"),
    ("fresh_large_p50_s", "freshness of the large stream p50, s"),
    ("unseen_tiny_p99_s", "tiny puts: least time to become visible p99 (send to the start of the last poll that did not see the batch), s"),
    ("poll_gap_tiny_p99_s", "tiny tables: time between the starts of two polls of one table p99 (the readers' rotation), s"),
    ("fresh_large_p99_s", "freshness of the large stream p99, s"),
    ("scan_p50_ms", "reader load-table + scan p50, tiny tables, ms"),
    ("scan_large_p50_ms", "reader load-table + scan p50, large table, ms"),
    ("rss_mib", "server RSS, MiB"),
    ("reserved_mib", "rows in flight held against --memory-budget (skade_memory_reserved_bytes), MiB"),
    ("rss_less_reserved_mib", "server RSS less the rows in flight, MiB"),
    ("heap_mib", "server live heap: bytes allocated and not freed (skade_heap_allocated_bytes), MiB"),
    ("disk_data_mib", "bytes on disk: data files, MiB"),
    ("disk_manifest_mib", "bytes on disk: manifests, MiB"),
    ("disk_manifest_list_mib", "bytes on disk: manifest lists, MiB"),
    ("disk_metadata_mib", "bytes on disk: metadata JSON, MiB"),
    ("disk_total_mib", "bytes on disk: all, MiB"),
    ("waiting_mib", "bytes waiting out a cleanup grace, MiB"),
    ("waiting_files", "files waiting out a cleanup grace"),
    ("early_deleted_files", "files removed early (over the cap), cumulative"),
    ("metadata_json_kib", "largest current metadata JSON, KiB"),
    ("metadata_json_files", "metadata JSON files on disk"),
    ("snapshots", "snapshots, all tables"),
    ("live_data_files", "live data files, all tables"),
    ("pass_mean_s", "maintenance pass time (mean over the sample), s"),
    ("rows_total", "rows committed, total"),
    ("disk_bytes_per_row", "bytes on disk per live row"),
    ("walk_cpu_s", "CPU of the harness's latest walk of the warehouse (at nice 19), s"),
    ("server_cpu_cores", "server CPU over the sample (user + system), cores"),
    ("other_cpu_cores", "the machine's other CPU over the sample (the harness, readers, kernel), cores"),
    ("steal_pct", "CPU steal over the sample (time the hypervisor ran others), % of all CPU time"),
    ("disk_age_s", "how long before the sample that walk ended (the disk and metadata JSON columns are its), s"),
]

# One figure per quantity: (file name, title, columns).
FIGURES = [
    ("rows_per_s", "Rows committed per second", ["rows_per_s"]),
    ("commits_per_s", "Commits per second", ["commits_per_s"]),
    ("put_latency", "Tiny put latency (ms)", ["put_p50_ms", "put_p99_ms"]),
    ("txn_latency", "Flight SQL transaction latency (ms)", ["txn_p50_ms"]),
    ("freshness_tiny", "Freshness, tiny puts (s)",
     ["fresh_tiny_p50_s", "fresh_tiny_p99_s", "unseen_tiny_p99_s", "poll_gap_tiny_p99_s"]),
    ("freshness_large", "Freshness, large stream (s)", ["fresh_large_p50_s", "fresh_large_p99_s"]),
    ("rss", "Server RSS (MiB)", ["rss_mib", "heap_mib", "reserved_mib", "rss_less_reserved_mib"]),
    ("disk", "Bytes on disk (MiB)", ["disk_data_mib", "disk_manifest_mib", "disk_manifest_list_mib", "disk_metadata_mib", "disk_total_mib"]),
    ("waiting", "Waiting out a cleanup grace (MiB)", ["waiting_mib"]),
    ("waiting_files", "Files waiting out a cleanup grace", ["waiting_files"]),
    ("metadata_json", "Largest current metadata JSON (KiB)", ["metadata_json_kib"]),
    ("metadata_json_files", "Metadata JSON files on disk", ["metadata_json_files"]),
    ("snapshots", "Snapshots (all tables)", ["snapshots"]),
    ("live_data_files", "Live data files (all tables)", ["live_data_files"]),
    ("maintenance_pass", "Maintenance pass time (s)", ["pass_mean_s"]),
    ("disk_per_row", "Bytes on disk per live row", ["disk_bytes_per_row"]),
    ("cpu", "CPU used (cores)", ["server_cpu_cores", "other_cpu_cores"]),
]


class Sampler:
    def __init__(self, http: str, pid: int):
        self.http, self.pid = http, pid
        # The latest walk of the warehouse (from `disk_walker`): (when it ended, figures).
        self.disk: tuple[float, dict] | None = None
        self.prev = None
        self.prev_t = None
        self.hz = os.sysconf("SC_CLK_TCK")
        self.all_fresh_tiny: list[float] = []
        self.all_fresh_large: list[float] = []
        self.all_unseen_tiny: list[float] = []
        self.all_poll_gaps: list[float] = []
        self.errors: list[str] = []

    def sample(self, t: float, events: list) -> dict:
        m = parse_metrics(http_get(f"{self.http}/metrics"))
        puts = [e[2] for e in events if e[0] == "put"]
        txns = [e[2] for e in events if e[0] == "txn"]
        scans = [e[2] for e in events if e[0] == "scan"]
        scans_large = [e[2] for e in events if e[0] == "scan_large"]
        tiny = [x for e in events if e[0] == "fresh_tiny" for x in e[2]]
        large = [x for e in events if e[0] == "fresh_large" for x in e[2]]
        unseen = [x for e in events if e[0] == "unseen_tiny" for x in e[2]]
        gaps = [e[2] for e in events if e[0] == "poll_gap"]
        self.errors += [e[2] for e in events if e[0] == "error"]
        self.all_fresh_tiny += [(t, x) for x in tiny]
        self.all_fresh_large += [(t, x) for x in large]
        self.all_unseen_tiny += [(t, x) for x in unseen]
        self.all_poll_gaps += [(t, x) for x in gaps]
        rows = metric_sum(m, "skade_rows_committed_total")
        commits = metric_sum(m, "skade_commit_duration_seconds_count", 'lane="stream"') + metric_sum(
            m, "skade_commit_duration_seconds_count", 'lane="multi"'
        )
        pass_sum = m.get("skade_maintenance_pass_duration_seconds_sum", 0.0)
        pass_count = m.get("skade_maintenance_pass_duration_seconds_count", 0.0)
        for e in events:
            if e[0] == "disk" and (self.disk is None or e[1] >= self.disk[0]):
                self.disk = (e[1], e[2])
        # No walk yet: the disk columns are left empty.
        walked_at, disk = self.disk or (None, None)
        total = sum(disk["sizes"].values()) if disk else None
        # RSS counts the rows in flight, up to --memory-budget (2 GiB by default): a fast
        # stream's share of it follows its speed of the moment, not the run's age.
        rss = rss_bytes(self.pid)
        reserved = m.get("skade_memory_reserved_bytes", 0.0)
        dt = (t - self.prev_t) if self.prev_t is not None else None
        prev = self.prev or {}

        def rate(now, key):
            return (now - prev[key]) / dt if dt and key in prev else None

        passes = pass_count - prev.get("pass_count", 0.0)
        server_ticks = cpu_ticks(self.pid)
        all_ticks, idle_ticks, steal_ticks = machine_ticks()
        busy_ticks = all_ticks - idle_ticks - steal_ticks
        server_rate, busy_rate = rate(server_ticks, "server_ticks"), rate(busy_ticks, "busy_ticks")
        server_cores = None if server_rate is None else server_rate / self.hz
        busy_cores = None if busy_rate is None else busy_rate / self.hz
        all_delta = all_ticks - prev.get("all_ticks", all_ticks)
        steal_pct = 100 * (steal_ticks - prev["steal_ticks"]) / all_delta if all_delta and "steal_ticks" in prev else None
        mib = 1 / (1 << 20)
        ms = lambda v: None if v is None else v * 1000  # noqa: E731
        row = {
            "t_s": round(t, 1),
            "rows_per_s": rate(rows, "rows"),
            "commits_per_s": rate(commits, "commits"),
            "put_p50_ms": ms(percentile(puts, 0.5)),
            "put_p99_ms": ms(percentile(puts, 0.99)),
            "txn_p50_ms": ms(percentile(txns, 0.5)),
            "fresh_tiny_p50_s": percentile(tiny, 0.5),
            "fresh_tiny_p99_s": percentile(tiny, 0.99),
            "fresh_large_p50_s": percentile(large, 0.5),
            "fresh_large_p99_s": percentile(large, 0.99),
            "unseen_tiny_p99_s": percentile(unseen, 0.99),
            "poll_gap_tiny_p99_s": percentile(gaps, 0.99),
            "scan_p50_ms": ms(percentile(scans, 0.5)),
            "scan_large_p50_ms": ms(percentile(scans_large, 0.5)),
            "rss_mib": rss * mib,
            "reserved_mib": reserved * mib,
            "rss_less_reserved_mib": max(0, rss - reserved) * mib,
            "heap_mib": m["skade_heap_allocated_bytes"] * mib if "skade_heap_allocated_bytes" in m else None,
            "disk_data_mib": disk["sizes"]["data"] * mib if disk else None,
            "disk_manifest_mib": disk["sizes"]["manifest"] * mib if disk else None,
            "disk_manifest_list_mib": disk["sizes"]["manifest_list"] * mib if disk else None,
            "disk_metadata_mib": disk["sizes"]["metadata"] * mib if disk else None,
            "disk_total_mib": total * mib if disk else None,
            "waiting_mib": m.get("skade_cleanup_waiting_bytes", 0.0) * mib,
            "waiting_files": m.get("skade_cleanup_waiting_files", 0.0),
            "early_deleted_files": metric_sum(m, "skade_files_deleted_early_total"),
            "metadata_json_kib": disk["metadata_json_bytes"] / 1024 if disk else None,
            "metadata_json_files": disk["metadata_files"] if disk else None,
            "snapshots": metric_sum(m, "skade_table_snapshots"),
            "live_data_files": metric_sum(m, "skade_table_data_files"),
            "pass_mean_s": (pass_sum - prev.get("pass_sum", 0.0)) / passes if passes else None,
            "rows_total": rows,
            "disk_bytes_per_row": total / rows if rows and disk else None,
            "walk_cpu_s": disk["cpu_s"] if disk else None,
            "disk_age_s": None if walked_at is None else max(0.0, time.time() - walked_at),
            "server_cpu_cores": server_cores,
            "other_cpu_cores": None if busy_cores is None else max(0.0, busy_cores - server_cores),
            "steal_pct": steal_pct,
        }
        self.prev = {"rows": rows, "commits": commits, "pass_sum": pass_sum, "pass_count": pass_count,
                     "server_ticks": server_ticks, "busy_ticks": busy_ticks, "all_ticks": all_ticks,
                     "steal_ticks": steal_ticks}
        self.prev_t = t
        return row


def window_median(rows: list[dict], key: str, lo: float, hi: float) -> float | None:
    vals = [r[key] for r in rows if lo <= r["t_s"] <= hi and r[key] is not None]
    return statistics.median(vals) if vals else None


def fmt(v, digits=3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def summarize(rows, sampler, args, duration, cap_bytes, commit_interval_s, grace_s, out) -> str:
    window = min(args.window, duration / 3)
    end = rows[-1]["t_s"] if rows else 0
    first = (0, window)
    last = (end - window, end)
    lines = [
        f"# Soak summary ({args.warehouse} warehouse"
        f"{'' if args.warehouse != 's3' else ' at ' + args.s3_endpoint if args.s3_endpoint else ' on moto'}, "
        f"{duration / 60:.1f} min, "
        f"windows of {window / 60:.1f} min)",
        "",
        f"Started {args.started} UTC; {len(rows)} samples every {args.sample:.0f} s; "
        f"server args: `{' '.join(args.server_args) or '(defaults)'}`; load: large stream "
        f"{'as fast as possible' if not args.large_rate else f'at {args.large_rate:,.0f} rows/s'}, "
        f"{args.tiny_streams} tiny-put streams, {args.txn_tables}-table transactions, "
        f"{args.readers} readers of the tiny tables and one of the large table (every "
        f"{args.large_poll:g} s); skade binary `{args.skade_bin}`.",
        "",
        "| quantity | first window | last window | last/first | target | |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    verdicts = []

    def ratio_line(key, label, target=True):
        a = window_median(rows, key, *first)
        b = window_median(rows, key, *last)
        r = b / a if a and b is not None else None
        ok = None if r is None else r <= RATIO_TARGET
        if target:
            verdicts.append((f"{label} last/first ≤ {RATIO_TARGET}", ok))
        lines.append(
            f"| {label} | {fmt(a)} | {fmt(b)} | {fmt(r)} | "
            f"{'≤ 1.2' if target else ''} | {'' if not target else ('met' if ok else 'not met' if ok is not None else 'n/a')} |"
        )

    ratio_line("put_p50_ms", "tiny put p50 (ms)")
    ratio_line("put_p99_ms", "tiny put p99 (ms)")
    ratio_line("fresh_tiny_p99_s", "freshness p99, tiny (s)")
    ratio_line("rss_mib", "server RSS (MiB)")
    ratio_line("disk_bytes_per_row", "disk bytes per live row")
    ratio_line("rss_less_reserved_mib", "server RSS less rows in flight (MiB)", target=False)
    ratio_line("heap_mib", "server live heap (MiB)", target=False)
    ratio_line("rows_per_s", "rows/s", target=False)
    ratio_line("commits_per_s", "commits/s", target=False)
    ratio_line("fresh_large_p99_s", "freshness p99, large (s)", target=False)
    ratio_line("waiting_mib", "waiting out a grace (MiB)", target=False)
    ratio_line("metadata_json_kib", "largest metadata JSON (KiB)", target=False)
    ratio_line("metadata_json_files", "metadata JSON files", target=False)
    ratio_line("snapshots", "snapshots", target=False)
    ratio_line("live_data_files", "live data files", target=False)
    ratio_line("pass_mean_s", "maintenance pass (s)", target=False)
    ratio_line("scan_p50_ms", "reader load-table + scan p50, tiny (ms)", target=False)
    ratio_line("scan_large_p50_ms", "reader load-table + scan p50, large (ms)", target=False)
    ratio_line("walk_cpu_s", "harness CPU per walk of the warehouse (s)", target=False)
    ratio_line("server_cpu_cores", "server CPU (cores)", target=False)
    ratio_line("other_cpu_cores", "the machine's other CPU: harness, readers, kernel (cores)", target=False)
    ratio_line("steal_pct", "CPU steal (%)", target=False)

    settled = 30.0  # the first seconds (tables being created) are left out

    def after_settled(series):
        return [x for t, x in series if t > settled]

    tiny = after_settled(sampler.all_fresh_tiny)
    large = after_settled(sampler.all_fresh_large)
    tiny_p99 = percentile(tiny, 0.99)
    large_p99 = percentile(large, 0.99)
    lines += ["", "| target | measured | |", "| --- | --- | --- |"]
    ok = None if tiny_p99 is None else tiny_p99 <= TINY_FRESHNESS_P99_S
    verdicts.append(("freshness p99 ≤ 1 s, tiny", ok))
    lines.append(
        f"| freshness p99 ≤ {TINY_FRESHNESS_P99_S:.0f} s, tiny tables (whole run after {settled:.0f} s, "
        f"{len(tiny)} batches) | {fmt(tiny_p99)} s | {'met' if ok else 'not met' if ok is not None else 'n/a'} |"
    )
    unseen_p99 = percentile(after_settled(sampler.all_unseen_tiny), 0.99)
    gap_p99 = percentile(after_settled(sampler.all_poll_gaps), 0.99)
    lines.append(
        f"| … of which the server's: least time to become visible p99 (send to the start of the last poll "
        f"that did not see the batch) | {fmt(unseen_p99)} s | |"
    )
    lines.append(
        f"| … and the readers' rotation: time between two polls of one tiny table p99 "
        f"({args.readers} readers) | {fmt(gap_p99)} s | |"
    )
    bound = 2 * commit_interval_s
    ok = None if large_p99 is None else large_p99 <= bound
    if args.warehouse == "local":
        verdicts.append((f"freshness p99 ≤ {bound:.0f} s, large", ok))
    lines.append(
        f"| freshness p99 ≤ 2 × --commit-interval = {bound:.0f} s, large stream ({len(large)} batches"
        f"{'' if args.warehouse == 'local' else '; the target is for a local warehouse'}) | {fmt(large_p99)} s | "
        f"{'met' if ok else 'not met' if ok is not None else 'n/a'} |"
    )
    worst = max((r["waiting_mib"] for r in rows), default=0.0)
    ok = bool(rows) and all(r["waiting_mib"] * (1 << 20) <= cap_bytes for r in rows)
    verdicts.append(("waiting ≤ --cleanup-max-waiting at every sample", ok))
    lines.append(
        f"| disk held for cleanup ≤ --cleanup-max-waiting ({cap_bytes / (1 << 20):.0f} MiB) at every "
        f"sample | max {worst:.1f} MiB | {'met' if ok else 'not met'} |"
    )
    # The targets compare the first window with the last, and with the default
    # --cleanup-grace the first window is the grace filling up (nothing unreferenced in
    # it is removed before it ends). Beside the targets, not instead of them: the last
    # window against the one right after the first grace, when the run is long enough.
    settled_window = (grace_s, grace_s + window)
    if settled_window[1] <= last[0]:
        lines += [
            "",
            f"After the first --cleanup-grace ({grace_s / 60:g} min; not a target): the window "
            f"{grace_s / 60:g}–{(grace_s + window) / 60:g} min against the last.",
            "",
            "| quantity | window after the grace | last window | last/after |",
            "| --- | --- | --- | --- |",
        ]
        for key, label in [
            ("put_p50_ms", "tiny put p50 (ms)"),
            ("put_p99_ms", "tiny put p99 (ms)"),
            ("fresh_tiny_p99_s", "freshness p99, tiny (s)"),
            ("rss_mib", "server RSS (MiB)"),
            ("heap_mib", "server live heap (MiB)"),
            ("disk_bytes_per_row", "disk bytes per live row"),
            ("server_cpu_cores", "server CPU (cores)"),
            ("live_data_files", "live data files"),
        ]:
            a = window_median(rows, key, *settled_window)
            b = window_median(rows, key, *last)
            lines.append(f"| {label} | {fmt(a)} | {fmt(b)} | {fmt(b / a if a and b is not None else None)} |")
    early = rows[-1]["early_deleted_files"] if rows else 0
    lines += [
        "",
        f"Files removed early (over the cap): {early:.0f}. Client errors: {len(sampler.errors)}.",
        "",
        "Verdict: " + ", ".join(f"{name}: {'met' if v else 'not met' if v is not None else 'n/a'}" for name, v in verdicts),
    ]
    if sampler.errors:
        lines += ["", "First client error:", "", "```", sampler.errors[0].strip()[-2000:], "```"]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


def plot(rows: list[dict], out: Path, label: str) -> list[Path]:
    """One PNG per figure of ``FIGURES`` in ``out``. A figure none of whose columns the
    rows have (a CSV of an older harness, read back by ``--replot``) is left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    desc = dict(COLUMNS)
    made = []
    for name, title, keys in FIGURES:
        keys = [k for k in keys if rows and k in rows[0]]
        if not keys:
            continue
        fig, ax = plt.subplots(figsize=(7, 3.2), dpi=100)
        for key in keys:
            xs = [r["t_s"] / 60 for r in rows if r[key] is not None]
            ys = [r[key] for r in rows if r[key] is not None]
            ax.plot(xs, ys, label=desc[key], linewidth=1.2)
        ax.set_title(f"{title} — {label}", fontsize=10)
        ax.set_xlabel("minutes")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        if len(keys) > 1:
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        made.append(path)
    return made


def read_rows(csv_path: Path) -> list[dict]:
    """The rows of a run's ``soak.csv`` as the sampler made them: numbers, ``None`` where
    a sample had no figure (an empty cell)."""
    with open(csv_path, newline="") as f:
        return [{k: (float(v) if v else None) for k, v in rec.items()} for rec in csv.DictReader(f)]


def replot(run: Path, out: Path | None) -> int:
    """Draws a recorded run's plots again from its ``soak.csv`` (into ``out``, else the
    run's directory), labelled as the run drew them: warehouse and start time, read from
    its ``summary.md`` when it has one, else the directory's name."""
    csv_path = run / "soak.csv"
    if not csv_path.is_file():
        raise SystemExit(f"no soak.csv in {run}")
    rows = read_rows(csv_path)
    if not rows:
        raise SystemExit(f"{csv_path} has no samples")
    label = run.resolve().name
    summary = run / "summary.md"
    if summary.is_file():
        text = summary.read_text()
        kind = re.search(r"^# Soak summary \((\w+) warehouse", text, re.M)
        started = re.search(r"^Started (\d{4}-\d\d-\d\d \d\d:\d\d) UTC", text, re.M)
        if kind and started:
            label = f"{kind.group(1)}, {started.group(1)} UTC"
    target = out or run
    target.mkdir(parents=True, exist_ok=True)
    plots = plot(rows, target, label)
    print(f"{len(rows)} samples from {csv_path}: {len(plots)} PNGs in {target}")
    return 0


def server_flag(args: list[str], flag: str, default: str) -> str:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return default


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=parse_duration, default=parse_duration("30m"))
    p.add_argument("--warehouse", choices=["local", "s3"], default="local")
    p.add_argument("--s3-endpoint",
                   help="with --warehouse s3: an S3 server already running (taking access key and secret "
                   f"{S3_CREDENTIALS['AWS_ACCESS_KEY_ID']!r}) instead of a moto server started for the run")
    p.add_argument("--s3-root", type=Path,
                   help="with --s3-endpoint: the directory that server keeps its buckets in (s3s-fs's ROOT); "
                   "the disk figures walk it instead of listing the bucket a page of 1,000 keys at a time")
    p.add_argument("--out", type=Path, help="output directory (default benches/soak/out/<warehouse>-<time>)")
    p.add_argument("--skade-bin", type=Path, default=REPO / "target" / "release" / "skade")
    p.add_argument("--sample", type=parse_duration, default=10.0, help="seconds between samples")
    p.add_argument("--window", type=parse_duration, default=600.0,
                   help="length of the first and last windows compared (at most a third of the run)")
    p.add_argument("--tiny-streams", type=int, default=8)
    p.add_argument("--txn-tables", type=int, default=4)
    p.add_argument("--readers", type=int, default=2,
                   help="pyiceberg readers of the tiny tables (each polls its share in turn)")
    p.add_argument("--large-poll", type=parse_duration, default=1.0,
                   help="seconds between the starts of two polls of the large table by its own reader")
    p.add_argument("--large-batch-rows", type=int, default=65536)
    p.add_argument("--large-rate", type=float, default=0.0,
                   help="most rows a second the large stream sends (0: as fast as the server takes them)")
    p.add_argument("--server-arg", dest="server_args", action="append", default=[],
                   help="extra `skade serve` argument (repeat; e.g. --server-arg=--commit-interval=5s)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless every load ran and each sample has its figures (the CI form)")
    p.add_argument("--replot", type=Path, metavar="RUN_DIR",
                   help="run nothing: draw the plots of a recorded run again from RUN_DIR/soak.csv "
                   "(into --out, else RUN_DIR)")
    args = p.parse_args()
    if args.replot:
        return replot(args.replot, args.out)
    args.started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
    if not args.skade_bin.is_file():
        raise SystemExit(f"no skade binary at {args.skade_bin} (cargo build --release, or --skade-bin)")
    out = args.out or REPO / "benches" / "soak" / "out" / (
        f"{args.warehouse}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"
    )
    out.mkdir(parents=True, exist_ok=True)
    cap = server_flag(args.server_args, "--cleanup-max-waiting", "1GiB")
    cap_bytes = parse_bytes(cap)
    commit_interval_s = parse_duration(server_flag(args.server_args, "--commit-interval", "10s"))
    grace_s = parse_duration(server_flag(args.server_args, "--cleanup-grace", "10m"))

    if args.s3_endpoint and args.warehouse != "s3":
        raise SystemExit("--s3-endpoint needs --warehouse s3")
    if args.s3_root and not args.s3_endpoint:
        raise SystemExit("--s3-root needs --s3-endpoint")
    wh = Warehouse(args.warehouse, out, args.s3_endpoint, args.s3_root)
    proc, flight_uri, http = start_server(args.skade_bin, wh, out, args.server_args)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    stop = ctx.Event()
    tiny = [f"tiny_{i}" for i in range(args.tiny_streams)]
    workers = [
        ctx.Process(target=worker, args=(large_stream, flight_uri, args.large_batch_rows, args.large_rate, q, stop), name="large"),
        ctx.Process(target=worker, args=(tiny_streams, flight_uri, args.tiny_streams, q, stop), name="tiny"),
        ctx.Process(target=worker, args=(transactions, flight_uri, args.txn_tables, q, stop), name="txn"),
    ]
    for r in range(args.readers):
        workers.append(ctx.Process(target=worker, args=(reader, http, tiny[r :: args.readers], q, stop), name=f"reader{r}"))
    workers.append(ctx.Process(target=worker, args=(reader, http, ["large"], q, stop, args.large_poll), name="reader_large"))
    workers.append(ctx.Process(
        target=worker,
        args=(disk_walker, WarehouseFiles(wh.kind, wh.data_dir, wh.endpoint, wh.root), args.sample, q, stop),
        name="disk_walker",
    ))
    sampler = Sampler(http, proc.pid)
    rows: list[dict] = []
    csv_path = out / "soak.csv"
    start = time.monotonic()
    interrupted = False
    # SIGTERM (a background run has SIGINT ignored) stops the run as Ctrl-C does: the
    # workers and the server are stopped and what was sampled is summarised.
    signal.signal(signal.SIGTERM, stop_on_sigterm)
    try:
        for w in workers:
            w.start()
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=[c for c, _ in COLUMNS])
            writer.writeheader()
            next_at = start + args.sample
            pending: list = []
            while True:
                while True:
                    timeout = next_at - time.monotonic()
                    if timeout <= 0:
                        break
                    try:
                        pending += q.get(timeout=timeout)
                    except queue.Empty:
                        break
                # Also what is queued when the sample is due already (the last sample
                # took longer than --sample: walking a warehouse of 300,000 files does):
                # without this a sampler that fell behind never read the queue again,
                # and every later sample had no put, scan or freshness figure.
                while True:
                    try:
                        pending += q.get_nowait()
                    except queue.Empty:
                        break
                if proc.poll() is not None:
                    raise SystemExit(f"skade exited with code {proc.returncode}; see {out / 'skade.log'}")
                t = time.monotonic() - start
                row = sampler.sample(t, pending)
                pending = []
                rows.append(row)
                writer.writerow({k: ("" if v is None else (round(v, 4) if isinstance(v, float) else v)) for k, v in row.items()})
                f.flush()
                print(
                    f"[{t / 60:5.1f} min] rows/s {fmt(row['rows_per_s'])} commits/s {fmt(row['commits_per_s'])} "
                    f"put p50/p99 {fmt(row['put_p50_ms'])}/{fmt(row['put_p99_ms'])} ms "
                    f"fresh tiny p99 {fmt(row['fresh_tiny_p99_s'])} s large p99 {fmt(row['fresh_large_p99_s'])} s "
                    f"RSS {row['rss_mib']:.0f} MiB heap {fmt(row['heap_mib'])} MiB disk {fmt(row['disk_total_mib'])} MiB "
                    f"waiting {row['waiting_mib']:.1f} MiB/{row['waiting_files']:.0f}",
                    flush=True,
                )
                # A sampler that fell behind samples again after a full interval, not at
                # once for every interval it missed.
                next_at = max(next_at + args.sample, time.monotonic() + args.sample / 2)
                if t >= args.duration:
                    break
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.set()
        # One minute for all of them together: a worker blocked in a put to a slow
        # store (moto under the unthrottled large stream) is terminated, not waited for.
        deadline = time.monotonic() + 60
        for w in workers:
            w.join(timeout=max(0.0, deadline - time.monotonic()))
        for w in workers:
            if w.is_alive():
                w.terminate()
        # Late events (errors of the workers' last moments).
        try:
            while True:
                sampler.errors += [e[2] for e in q.get(timeout=0.5) if e[0] == "error"]
        except queue.Empty:
            pass
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        wh.stop()
    duration = rows[-1]["t_s"] if rows else 0
    label = f"{args.warehouse}, {args.started} UTC"
    plots = plot(rows, out, label) if rows else []
    text = summarize(rows, sampler, args, duration, cap_bytes, commit_interval_s, grace_s, out)
    print()
    print(text)
    print(f"CSV: {csv_path}\nplots: {len(plots)} PNGs in {out}")
    if interrupted:
        return 130
    if args.check:
        problems = []
        if sampler.errors:
            problems.append(f"{len(sampler.errors)} client errors")
        for key in ["rows_per_s", "put_p50_ms", "txn_p50_ms", "fresh_tiny_p99_s", "fresh_large_p99_s", "rss_mib",
                    "disk_total_mib", "server_cpu_cores", "poll_gap_tiny_p99_s"]:
            if not any(r[key] for r in rows[1:]):
                problems.append(f"no {key} in any sample")
        if len(plots) != len(FIGURES):
            problems.append("plots missing")
        if problems:
            print("check failed: " + "; ".join(problems))
            return 1
        print("check: every load ran and was measured")
    return 0


def parse_bytes(text: str) -> int:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?", text.strip())
    if not m:
        raise SystemExit(f"not a byte size: {text!r}")
    unit = m.group(2) or "B"
    scale = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
             "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
    return int(float(m.group(1)) * scale)


if __name__ == "__main__":
    sys.exit(main())
