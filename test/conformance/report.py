#!/usr/bin/env python3
"""Renders the table of a `make conformance` run (test/conformance/run.sh).

    report.py OUT            writes OUT/results.md
    report.py OUT --doc F    writes F too, with a heading (docs/CONFORMANCE.md)

OUT/run.json holds what run.sh knew of the run (command, commit, date, focus,
columns, ...); OUT/COLUMN/junit_01.xml is each column's ginkgo report. A
column without a report is shown as "no report" (its cluster or suite did not
finish). The page leads with the totals, then the specs whose result differs
between columns, every failure's first line, every skip with its reason
(skip.txt's patterns and the suite's own skip messages), and last the whole
table.
"""
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def read_column(path, focus):
    """{spec: (status, seconds, message)} of one junit report, [It] specs in focus."""
    specs = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        name = tc.get("name", "")
        if not name.startswith("[It] "):
            continue
        name = name[5:]
        if not focus.search(name):
            continue
        status, msg = "pass", ""
        for tag in ("failure", "error"):
            el = tc.find(tag)
            if el is not None:
                status = "fail"
                msg = el.get("message") or (el.text or "")
        if status == "pass" and tc.find("skipped") is not None:
            status = "skip"
            msg = tc.find("skipped").get("message") or ""
        specs[name] = (status, float(tc.get("time", "0")), first_line(msg))
    return specs


def first_line(msg):
    msg = re.sub(r"^\s*skipped\s*-\s*", "", msg.strip())
    line = next((l.strip() for l in msg.splitlines() if l.strip()), "")
    return line[:220] + ("..." if len(line) > 220 else "")


def md(s):
    return s.replace("|", "\\|")


def render(out, meta):
    focus = re.compile(meta["focus"])
    cols = meta["columns"]
    data = {}
    for c in cols:
        p = os.path.join(out, c, "junit_01.xml")
        data[c] = read_column(p, focus) if os.path.exists(p) else None
    names = sorted({n for d in data.values() if d for n in d})
    skips = [tuple(x) for x in meta.get("skips", [])]

    w = []
    w.append("Upstream's e2e suite (%s v1.37.2, ginkgo %s, %s processes) on the conformance cluster"
             % (meta["e2e"], meta.get("ginkgo", "?"), meta["procs"]))
    w.append("(test/conformance/cluster/README.md: a control plane and two node VMs with kubelet,")
    w.append("containerd and the CNI bridge plugin), a fresh cluster per column.")
    w.append("")
    w.append("- command: `%s`" % meta["command"])
    w.append("- commit: %s when the run started%s; our image kube-proxy-ipvs %s"
             % (meta["commit"], meta.get("commit_note", ""), meta.get("proxy_version", "?")))
    w.append("- date: %s, took %s s%s" % (meta["date"], meta["took"],
                                        ", the columns at the same time" if meta.get("parallel") else ""))
    w.append("- focus: `%s`; skipped by the run: test/conformance/skip.txt (%d pattern%s, below)"
             % (meta["focus"], len(skips), "" if len(skips) == 1 else "s"))
    w.append("- columns: upstream-ipvs is upstream kube-proxy v1.37.2 `--proxy-mode=ipvs` from kubeadm's")
    w.append("  addon; ours-iptables and ours-nftables are our image with kubeadm's addon objects and")
    w.append("  deploy/kubeadm-extras, `rulesBackend` iptables and nftables")
    w.append("")

    w.append("## Totals")
    w.append("")
    w.append("| column | pass | fail | skip | time |")
    w.append("| --- | --- | --- | --- | --- |")
    for c in cols:
        d = data[c]
        took = meta.get("took_per_column", {}).get(c, "?")
        if d is None:
            w.append("| %s | no report | | | %s s |" % (c, took))
            continue
        n = {"pass": 0, "fail": 0, "skip": 0}
        for st, _, _ in d.values():
            n[st] += 1
        w.append("| %s | %d | %d | %d | %s s |" % (c, n["pass"], n["fail"], n["skip"], took))
    w.append("")

    def cell(c, name):
        d = data[c]
        if d is None:
            return "no report"
        if name not in d:
            return "-"
        st, t, _ = d[name]
        return "skip" if st == "skip" else "%s %.0fs" % (st, t)

    w.append("## Where the columns differ")
    w.append("")
    # A column without a report differs from nothing: it has no results.
    have = [c for c in cols if data[c] is not None]
    diff = [n for n in names if len({data[c].get(n, ("-",))[0] for c in have}) > 1]
    if not diff:
        w.append("Every spec has the same result in every column.")
    else:
        w.append("| spec | " + " | ".join(cols) + " |")
        w.append("| --- |" + " --- |" * len(cols))
        for n in diff:
            w.append("| %s | %s |" % (md(n), " | ".join(cell(c, n) for c in cols)))
    w.append("")

    w.append("## Failures")
    w.append("")
    fails = [(c, n, d[n][2]) for c in cols for d in [data[c]] if d for n in sorted(d) if d[n][0] == "fail"]
    if not fails:
        w.append("None.")
    for c, n, msg in fails:
        w.append("- %s, %s: %s" % (c, md(n), md(msg) or "(no message)"))
    w.append("")

    w.append("## Skipped, and why")
    w.append("")
    w.append("By the run (test/conformance/skip.txt; `[Conformance]` specs are never skipped):")
    w.append("")
    for rx, reason in skips:
        w.append("- `%s`: %s" % (rx, md(reason)))
    w.append("")
    w.append("By the suite itself (its own skip message; the column(s) where it skipped):")
    w.append("")
    by_reason = {}
    for c in cols:
        for n, (st, _, msg) in sorted((data[c] or {}).items()):
            if st != "skip":
                continue
            if any(re.search(rx, n) for rx, _ in skips):
                continue
            by_reason.setdefault(msg or "(no message)", {}).setdefault(n, []).append(c)
    if not by_reason:
        w.append("None.")
    for reason in sorted(by_reason):
        w.append("- %s" % md(reason))
        for n, cs in sorted(by_reason[reason].items()):
            w.append("  - %s (%s)" % (md(n), ", ".join(cs)))
    w.append("")

    w.append("## Every spec")
    w.append("")
    w.append("| spec | " + " | ".join(cols) + " |")
    w.append("| --- |" + " --- |" * len(cols))
    for n in names:
        w.append("| %s | %s |" % (md(n), " | ".join(cell(c, n) for c in cols)))
    return "\n".join(w) + "\n"


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--doc"):
        sys.stderr.write("usage: report.py OUT [--doc FILE]\n")
        return 2
    out = argv[1]
    meta = json.load(open(os.path.join(out, "run.json")))
    page = render(out, meta)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(page)
    if len(argv) == 4:
        with open(argv[3], "w") as f:
            f.write("# Conformance: upstream's [sig-network] e2e suite\n\n")
            f.write("Written by `make conformance` (test/conformance/run.sh, report.py); do not edit.\n\n")
            f.write(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
