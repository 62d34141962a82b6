#!/usr/bin/env python3
"""The VM scale comparison of `make bench` as one Markdown table and one SVG plot.

Reads the JSON each TestScaleVM run writes (KPI_SCALE_JSON; hack/bench.sh names
them _output/bench/vm-N.json), one file per Service count, and writes:

  - a Markdown table, sizes down; columns upstream ipvs / upstream nftables /
    ours (iptables backend) / ours (nftables backend) / the kernel's tools; each
    cell with its ratio (upstream / ours; ours / the tools);
  - an SVG: start to everything programmed and one-endpoint change p99 against
    the Service count, log-log, one line per column.

Usage: hack/bench-report.py -table OUT.md -svg OUT.svg vm-1000.json vm-10000.json ...
Standard library only.
"""
import argparse
import json
import math
import sys

COLS = [
    ("upstream", "upstream v1.37.2 ipvs", "#d62728"),
    ("upstream-nftables", "upstream v1.37.2 nftables", "#ff7f0e"),
    ("ours", "ours, iptables backend", "#1f77b4"),
    ("ours-nftables", "ours, nftables backend", "#2ca02c"),
]


def col(run, name):
    for c in run["columns"]:
        if c["name"] == name:
            return c
    return None


def secs(v):
    if v >= 10:
        return f"{v:.1f} s"
    return f"{v * 1000:,.0f} ms"


def floor_total(fl, sets):
    t = {x["Name"]: x for x in fl["Tools"]}
    return t["ipvsadm"]["Wall"] + t["ip"]["Wall"] + t[sets]["Wall"]


def cell(run, name):
    c = col(run, name)
    if c is None:
        return "not measured"
    ours = [col(run, "ours"), col(run, "ours-nftables")]
    lines = []
    if c.get("start_s"):
        s = f"**{secs(c['start_s'])}**"
        if name.startswith("upstream"):
            r = [f"{c['start_s'] / o['start_s']:.1f}x" for o in ours if o and o.get("start_s")]
            if r:
                s += f" ({' / '.join(r)} ours)"
        elif run.get("floor"):
            sets = "nft" if c.get("rules_backend") == "nftables" else "ipset"
            s += f" ({c['start_s'] / floor_total(run['floor'], sets):.2f}x the tools)"
        lines.append("start " + s)
    elif c.get("not_after_s"):
        s = f"**not after {c['not_after_s']:.0f} s**"
        r = [f"> {c['not_after_s'] / o['start_s']:.0f}x" for o in ours if o and o.get("start_s")]
        if r:
            s += f" ({' / '.join(r)} ours)"
        lines.append("start " + s)
    if c.get("changes") and c.get("change_p99_s"):
        s = f"change {secs(c['change_p50_s'])} / {secs(c['change_p99_s'])} / {secs(c['change_max_s'])}"
        if name.startswith("upstream"):
            r = [f"{c['change_p99_s'] / o['change_p99_s']:.0f}x" for o in ours if o and o.get("change_p99_s")]
            if r:
                s += f" (p99 {' / '.join(r)} ours)"
        lines.append(s)
    elif c.get("not_after_s"):
        lines.append("changes not measured (in its first sync)")
    if c.get("change_not_after_s"):
        lines.append(f"change {c['changes'] + 1} **not after {c['change_not_after_s']:.0f} s** (no further changes)")
    if c.get("full_resync_s"):
        lines.append(f"full resync {secs(c['full_resync_s'])}")
    cpu = c.get("cpu_to_programmed")
    if cpu and c.get("start_s"):
        u = cpu["User"] + cpu["ChildUser"]
        k = cpu["Sys"] + cpu["ChildSys"]
        lines.append(f"CPU user {u:.1f} s + system {k:.1f} s (system {100 * k / c['start_s']:.0f} % of the start)")
    elif cpu:
        u = cpu["User"] + cpu["ChildUser"]
        k = cpu["Sys"] + cpu["ChildSys"]
        lines.append(f"CPU by the bound: user {u:.1f} s + system {k:.1f} s")
    lines.append(f"RSS {c['rss_mib']:.0f} MiB")
    return "<br>".join(lines)


def floor_cell(run):
    fl = run.get("floor")
    if not fl:
        return "not measured"
    t = {x["Name"]: x for x in fl["Tools"]}
    lines = [
        f"**{floor_total(fl, 'ipset'):.1f} s** with ipset, **{floor_total(fl, 'nft'):.1f} s** with nft",
        f"ipvsadm -R {t['ipvsadm']['Wall']:.1f} s (system {t['ipvsadm']['Sys']:.1f} s)",
        f"ip -batch {t['ip']['Wall']:.1f} s (system {t['ip']['Sys']:.1f} s)",
        f"ipset restore {t['ipset']['Wall']:.1f} s, nft -f {t['nft']['Wall']:.1f} s",
    ]
    return "<br>".join(lines)


def table(runs):
    out = ["| Services x endpoints | " + " | ".join(label for _, label, _ in COLS) + " | kernel's tools, same content |",
           "| --- |" + " --- |" * (len(COLS) + 1)]
    for run in runs:
        row = [f"{run['services']:,} x {run['endpoints']}"]
        row += [cell(run, name) for name, _, _ in COLS]
        row.append(floor_cell(run))
        out.append("| " + " | ".join(row) + " |")
    out.append("")
    for run in runs:
        out.append(f"- {run['services']:,} x {run['endpoints']}: {run['date']}, commit {run.get('commit') or '?'}, "
                   f"VM {run['vm']}, host load {run['host_load']} (start / end), {run['changes']} changes per daemon")
    return "\n".join(out) + "\n"


def svg(runs):
    W, H = 900, 380
    panels = [("start to everything programmed (s)", "start"), ("one-endpoint change p99 (s)", "p99")]
    sizes = [r["services"] for r in runs]
    xs = (min(sizes) / 1.5, max(sizes) * 1.5)
    # Each panel its own range.
    ranges = {}
    for _, key in panels:
        vals = []
        for r in runs:
            for name, _, _ in COLS:
                c = col(r, name)
                if c:
                    keys = ("start_s", "not_after_s") if key == "start" else ("change_p99_s",)
                    vals += [c[k] for k in keys if c.get(k)]
            if key == "start" and r.get("floor"):
                vals.append(floor_total(r["floor"], "ipset"))
        vals = vals or [1]
        ranges[key] = (10 ** math.floor(math.log10(min(vals))), 10 ** math.ceil(math.log10(max(vals) * 1.5)))
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>']
    pw, ph, top, left = 340, 250, 40, 70

    def px(x, i):
        return left + i * 430 + (math.log10(x) - math.log10(xs[0])) / (math.log10(xs[1]) - math.log10(xs[0])) * pw

    def py(y):
        ys = ranges[key]
        return top + ph - (math.log10(y) - math.log10(ys[0])) / (math.log10(ys[1]) - math.log10(ys[0])) * ph

    for i, (title, key) in enumerate(panels):
        x0 = left + i * 430
        o.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
        o.append(f'<text x="{x0 + pw / 2}" y="{top - 12}" text-anchor="middle" font-size="13">{title}</text>')
        ys = ranges[key]
        e = math.floor(math.log10(ys[0]))
        while 10 ** e <= ys[1] * 1.001:
            if 10 ** e >= ys[0] * 0.999:
                y = py(10 ** e)
                o.append(f'<line x1="{x0}" x2="{x0 + pw}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
                lab = f"{10 ** e:g}"
                o.append(f'<text x="{x0 - 5}" y="{y + 4:.1f}" text-anchor="end">{lab}</text>')
            e += 1
        for s in sizes:
            x = px(s, i)
            o.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + ph}" stroke="#eee"/>')
            o.append(f'<text x="{x:.1f}" y="{top + ph + 15}" text-anchor="middle">{s:,}</text>')
        o.append(f'<text x="{x0 + pw / 2}" y="{top + ph + 32}" text-anchor="middle">Services (x {runs[0]["endpoints"]} endpoints)</text>')
        series = [(name, label, color) for name, label, color in COLS]
        if key == "start":
            series.append(("floor", "kernel's tools (ipvsadm, ip, ipset)", "#555"))
        for name, label, color in series:
            pts = []
            for r in runs:
                if name == "floor":
                    if r.get("floor"):
                        pts.append((r["services"], floor_total(r["floor"], "ipset"), False))
                    continue
                c = col(r, name)
                if not c:
                    continue
                if key == "start":
                    if c.get("start_s"):
                        pts.append((r["services"], c["start_s"], False))
                    elif c.get("not_after_s"):
                        pts.append((r["services"], c["not_after_s"], True))
                elif c.get("change_p99_s"):
                    pts.append((r["services"], c["change_p99_s"], False))
            dash = ' stroke-dasharray="4,3"' if name == "floor" else ""
            if len(pts) > 1:
                path = " ".join(f"{px(x, i):.1f},{py(y):.1f}" for x, y, _ in pts)
                o.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            for x, y, lower in pts:
                X, Y = px(x, i), py(y)
                if lower:  # not finished by the bound: an open marker and an arrow up
                    o.append(f'<circle cx="{X:.1f}" cy="{Y:.1f}" r="4" fill="white" stroke="{color}" stroke-width="2"/>')
                    o.append(f'<path d="M{X:.1f},{Y - 5:.1f} l0,-14 m-4,5 l4,-5 l4,5" stroke="{color}" fill="none" stroke-width="1.5"/>')
                else:
                    o.append(f'<circle cx="{X:.1f}" cy="{Y:.1f}" r="3.5" fill="{color}"/>')
    ly = top + ph + 50
    items = [(label, color) for _, label, color in COLS] + [("kernel's tools, same content (start only)", "#555"), ("open circle and arrow: not finished by the bound", "#999")]
    x = left
    for label, color in items:
        o.append(f'<rect x="{x}" y="{ly}" width="10" height="10" fill="{color}"/>')
        o.append(f'<text x="{x + 14}" y="{ly + 9}">{label}</text>')
        x += 14 + 6.2 * len(label) + 16
        if x > W - 200:
            x, ly = left, ly + 16
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-table", required=True)
    ap.add_argument("-svg", required=True)
    ap.add_argument("json", nargs="+")
    a = ap.parse_args()
    runs = []
    for p in a.json:
        with open(p) as f:
            runs.append(json.load(f))
    runs.sort(key=lambda r: r["services"])
    with open(a.table, "w") as f:
        f.write(table(runs))
    with open(a.svg, "w") as f:
        f.write(svg(runs))
    print(f"table: {a.table}; plot: {a.svg}", file=sys.stderr)


if __name__ == "__main__":
    main()
