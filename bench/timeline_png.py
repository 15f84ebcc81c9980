#!/usr/bin/env python3
"""Draws a timeline written by `clshim report --chrome FILE` as a PNG, one lane per
process row (rank), one bar per build, compile, link, binary query and first launch,
coloured by kind.
It reads only the trace-event file, so the picture shows exactly what Perfetto or
chrome://tracing would load. Needs matplotlib (`python3 -m pip install matplotlib`).

    python3 bench/timeline_png.py TIMELINE.json OUT.png [--title TEXT]
"""
import argparse
import json
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

COLOURS = {
    "build": "#4c72b0",
    "compile": "#64b5cd",
    "link": "#8172b2",
    "binary_query": "#dd8452",
    "binary_load": "#55a868",
    "first_launch": "#c44e52",
}


def kind(ev):
    """The clshim event kind of a slice: its category, else a word of its name."""
    cat = ev.get("cat", "")
    if cat in COLOURS:
        return cat
    for k in COLOURS:
        if k in cat or k.replace("_", " ") in ev.get("name", ""):
            return k
    return "build"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timeline")
    ap.add_argument("png")
    ap.add_argument("--title", default="clshim timeline")
    args = ap.parse_args()
    with open(args.timeline) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {}
    slices = defaultdict(list)
    for ev in events:
        if ev.get("ph") == "M" and ev.get("name") == "process_name":
            names[ev["pid"]] = ev["args"]["name"]
        elif ev.get("ph") == "X":
            slices[ev["pid"]].append(ev)
    pids = sorted(slices, key=lambda p: names.get(p, str(p)))
    fig, ax = plt.subplots(figsize=(11, 0.55 * len(pids) + 1.6), dpi=110)
    for lane, pid in enumerate(pids):
        for ev in slices[pid]:
            start, dur = ev["ts"] / 1e6, max(ev.get("dur", 0) / 1e6, 0.002)
            ax.broken_barh([(start, dur)], (lane - 0.35, 0.7), facecolors=COLOURS[kind(ev)],
                           edgecolor="white", linewidth=0.4)
    ax.set_yticks(range(len(pids)))
    ax.set_yticklabels([names.get(p, str(p)) for p in pids])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first record")
    ax.set_title(args.title)
    ax.grid(axis="x", alpha=0.3)
    used = sorted({kind(e) for s in slices.values() for e in s}, key=list(COLOURS).index)
    ax.legend(handles=[Patch(color=COLOURS[k], label=k.replace("_", " ")) for k in used],
              loc="upper center", bbox_to_anchor=(0.5, -0.18 if len(pids) > 2 else -0.3),
              ncol=len(used), frameon=False)
    fig.tight_layout()
    fig.savefig(args.png)
    print(f"wrote {args.png}: {len(pids)} rows, {sum(len(s) for s in slices.values())} slices")


if __name__ == "__main__":
    main()
