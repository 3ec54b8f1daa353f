"""Per-kernel times of Nsight Compute CSVs side by side.

Each CSV is the output of

    ncu --metrics gpu__time_duration.sum --csv python bench/profile_kernels.py --evaluations E ...

(scripts/device-session.sh, bench/device/plugin-ab.sh).  Prints, for every kernel
name (template arguments and parameters dropped; a name launched several times
an evaluation is summed), the time of one evaluation in microseconds, one column
per CSV, and the total.  --evaluations must match the profiled run.
"""

from __future__ import annotations

import argparse
import csv
import re
import sys

_UNIT_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}


def kernel_times(path: str, evaluations: int) -> dict[str, float]:
    """Microseconds an evaluation, by short kernel name, in launch order."""
    try:
        with open(path, newline="") as stream:
            rows = [row for row in csv.reader(stream) if len(row) > 10]
    except OSError as error:
        raise SystemExit(f"{path}: cannot read the Nsight Compute CSV ({error.strerror})") from None
    if not rows or "Kernel Name" not in rows[0]:
        raise SystemExit(f"{path}: no Nsight Compute CSV header (\"Kernel Name\" column) found")
    header, rows = rows[0], rows[1:]
    name_col, unit_col, value_col = header.index("Kernel Name"), header.index("Metric Unit"), header.index("Metric Value")
    times: dict[str, float] = {}
    for row in rows:
        match = re.search(r"(\w+)\s*[<(]", re.sub(r"^void |\(anonymous namespace\)::|\w+::", "", row[name_col]))
        name = match.group(1) if match else row[name_col][:40]
        unit = row[unit_col].strip()
        if unit not in _UNIT_US:
            raise SystemExit(f"{path}: unknown time unit {unit!r} for {name}")
        times[name] = times.get(name, 0.0) + float(row[value_col].replace(",", "")) * _UNIT_US[unit] / evaluations
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="+", help="Nsight Compute CSV files (one column each)")
    parser.add_argument("--evaluations", type=int, default=2, help="evaluations each CSV profiled (default 2)")
    parser.add_argument("--labels", help="comma-separated column labels (default: the file names)")
    args = parser.parse_args()
    if args.evaluations < 1:
        parser.error("--evaluations must be at least 1")
    labels = args.labels.split(",") if args.labels else args.csv
    if len(labels) != len(args.csv):
        parser.error(f"--labels has {len(labels)} entries for {len(args.csv)} CSV files")
    tables = [kernel_times(path, args.evaluations) for path in args.csv]
    names: list[str] = []
    for table in tables:
        names += [name for name in table if name not in names]
    width = max(len(name) for name in names + ["total"])
    columns = [max(len(label), 10) for label in labels]
    write = sys.stdout.write
    write(f"{'kernel (us an evaluation)':<{width}}  " + "  ".join(f"{l:>{c}}" for l, c in zip(labels, columns)) + "\n")
    for name in names + ["total"]:
        cells = [sum(t.values()) if name == "total" else t.get(name) for t in tables]
        write(f"{name:<{width}}  " + "  ".join(f"{'-':>{c}}" if v is None else f"{v:>{c}.2f}" for v, c in zip(cells, columns)) + "\n")


if __name__ == "__main__":
    main()
