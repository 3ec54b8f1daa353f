"""One line per profiled kernel launch of an Nsight Compute CSV (`ncu --csv --metrics ...`): its ID, the kernel's
short name and every metric as name=value, for the probes' scripts (table-l1-probe.sh, table-stream-probe.sh).

    python3 bench/device/ncu_metric_lines.py FILE.csv [--odd] [--strip PREFIX,SUFFIX]

--odd prints only the odd IDs (the probes run each kernel twice, a warm-up and the timed launch); --strip removes a
prefix and a suffix from the metric names (e.g. the stall metrics' smsp__average_warps_issue_stalled_ and
_per_issue_active.ratio).
"""
import argparse
import collections
import csv


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--odd", action="store_true", help="only the odd launch IDs")
    parser.add_argument("--strip", default="", help="PREFIX,SUFFIX to remove from metric names")
    args = parser.parse_args()
    prefix, _, suffix = args.strip.partition(",")
    with open(args.csv) as handle:
        rows = [r for r in csv.reader(handle) if len(r) > 10]
    if not rows:
        raise SystemExit(f"{args.csv}: no metric rows (see the .err file beside it)")
    head, rows = rows[0], rows[1:]
    k, name, metric, value = (head.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Value"))
    table = collections.OrderedDict()
    for r in rows:
        key = r[metric]
        if prefix and key.startswith(prefix):
            key = key[len(prefix):]
        if suffix and key.endswith(suffix):
            key = key[: -len(suffix)]
        table.setdefault((int(r[k]), r[name].split("(")[0].split("::")[-1]), {})[key] = r[value]
    for (i, kernel), m in table.items():
        if not args.odd or i % 2:
            print(i, kernel, " ".join(f"{key}={val}" for key, val in sorted(m.items())))


if __name__ == "__main__":
    main()
