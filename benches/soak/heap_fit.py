"""What a soak run's live heap follows: per 10-minute window the medians of heap, RSS,
RSS less heap, files waiting out a cleanup grace and live data files, and a least-squares
fit of the heap on those two counts (and the rows in flight).

    .venv/bin/python benches/soak/heap_fit.py docs/soak/<run>/soak.csv [...]

Reads only the CSV `soak.py` writes (columns `t_s`, `heap_mib`, `rss_mib`,
`reserved_mib`, `waiting_files`, `waiting_mib`, `live_data_files`); samples of the first
minute are left out of the fit (the server starting). The fit is loose: the heap moves
by about 16 MiB between two samples 10 s apart (batches in flight, a maintenance pass
at work), so its per-file terms are a size, not a measurement of one structure.
"""

import csv
import sys

import numpy as np


def column(rows, key):
    return np.array([float(r[key]) if r.get(key) not in ("", None) else np.nan for r in rows])


def report(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    t = column(rows, "t_s")
    heap, rss = column(rows, "heap_mib"), column(rows, "rss_mib")
    reserved = column(rows, "reserved_mib")
    waiting, waiting_mib = column(rows, "waiting_files"), column(rows, "waiting_mib")
    live = column(rows, "live_data_files")
    usable = ~(np.isnan(heap) | np.isnan(waiting) | np.isnan(live) | np.isnan(reserved))
    usable &= t > 60
    terms = np.c_[np.ones(usable.sum()), waiting[usable], live[usable], reserved[usable]]
    coef, *_ = np.linalg.lstsq(terms, heap[usable], rcond=None)
    spread = np.std(heap[usable] - terms @ coef)
    print(
        f"{path}: heap ≈ {coef[0]:.1f} MiB + {coef[1] * 2**20:.0f} B per waiting file"
        f" + {coef[2] * 2**10:.1f} KiB per live data file + {coef[3]:.2f} × rows in flight"
        f" (residual sd {spread:.1f} MiB, {usable.sum()} samples)"
    )
    window = 600
    for start in range(0, int(np.nanmax(t)), window):
        inside = (t > start) & (t <= start + window)
        if not inside.any():
            continue
        med = lambda xs: np.nanmedian(xs[inside])  # noqa: E731
        print(
            f"  {start // 60:3d}-{(start + window) // 60:3d} min: heap {med(heap):6.1f}"
            f" RSS {med(rss):6.1f} RSS-heap {med(rss - heap):6.1f} MiB;"
            f" waiting {med(waiting):8.0f} files ({med(waiting_mib):5.0f} MiB);"
            f" live data files {med(live):6.0f}"
        )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        report(p)
