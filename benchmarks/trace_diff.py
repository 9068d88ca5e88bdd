#!/usr/bin/python3
"""trace_diff.py — where a prediction and a run part ways, from their traces.

    pcgc simulate PLAN --machine M --profile DB --trace predicted.json
    pcgc run PLAN --steps 5 --trace measured.json
    /usr/bin/python3 benchmarks/trace_diff.py predicted.json measured.json [--device D] [--top N]

Both traces hold one event per instruction of the plan's program (codegen/predict.c,
`pcgc run --trace`), so they pair up one to one. Prints, for one device (default 0), the
busy time by instruction category and by operator (the sum of its events' durations),
predicted against measured, the largest differences first, and the step's span in each.
"""
import argparse
import collections
import json
import sys


def load(path, device):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    ev = [e for e in events if e.get("ph") == "X" and e.get("pid") == device]
    if not ev:
        sys.exit(f"trace_diff: {path} has no events of device {device}")
    return ev


def sums(events, key):
    out = collections.Counter()
    for e in events:
        out[key(e)] += e["dur"] / 1e3  # us -> ms
    return out


def span(events):
    return (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e3


def table(title, pred, meas, top):
    keys = sorted(set(pred) | set(meas), key=lambda k: -abs(meas.get(k, 0) - pred.get(k, 0)))
    print(f"\n{title:<40} {'predicted ms':>13} {'measured ms':>12} {'diff ms':>9}")
    for k in keys[:top]:
        p, m = pred.get(k, 0.0), meas.get(k, 0.0)
        print(f"{str(k)[:40]:<40} {p:13.3f} {m:12.3f} {m - p:+9.3f}")
    print(f"{'total':<40} {sum(pred.values()):13.3f} {sum(meas.values()):12.3f} "
          f"{sum(meas.values()) - sum(pred.values()):+9.3f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("predicted")
    ap.add_argument("measured")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    p, m = load(a.predicted, a.device), load(a.measured, a.device)
    print(f"device {a.device}: {len(p)} predicted and {len(m)} measured events; step span "
          f"{span(p):.3f} ms predicted, {span(m):.3f} ms measured")
    table("category", sums(p, lambda e: e.get("cat", "?")), sums(m, lambda e: e.get("cat", "?")), a.top)
    op = lambda e: f"{e.get('cat', '?')} {e.get('args', {}).get('op', e.get('name', '?'))}"
    table("category and operator", sums(p, op), sums(m, op), a.top)


if __name__ == "__main__":
    main()
