#!/usr/bin/env python3
"""Renders the page of `make conformance` (test/conformance/run.sh).

    report.py OUT                        writes OUT/results.md
    report.py OUT --doc F                and F (docs/CONFORMANCE.md) when it is the record
    report.py --export OUT/COLUMN FILE   the column as one JSON file (docs/conformance/)
    report.py --tsv OUT/COLUMN           the column's specs, NAME<TAB>STATUS<TAB>SECONDS
    report.py --names JUNIT REGEX        a regex of the exact names of JUNIT's specs
                                         (a dry run's) that REGEX matches (alone.txt)

Every column of OUT (upstream-ipvs, ours-iptables, ours-nftables) counts,
whichever run wrote it: a folder with run.json, or an exported COLUMN.json (how
the record's columns are kept in the repository, docs/conformance/). In a folder, run.json says the column's command,
commit, start, time, focus, skip list and the patterns of the specs run alone;
junit_01.xml is its ginkgo report (a column without one, whose cluster or suite
did not finish, shows "no report"), alone/junit_01.xml that of the specs run
alone after the others (test/conformance/passes.sh) and three/junit_01.xml that
of the specs run on a cluster of three nodes (three-nodes.txt), each of which
replaces the first report's entry (a skip there) for each spec it ran.
The columns shown are those with the newest column's focus and address
families; any other is named and left out. The page is the record, written to
F, when all three columns ran the whole default focus and have a report.

The page leads with the totals, then the specs whose result differs between
columns, every failure's first line, every skip with its reason (skip.txt's
patterns and the suite's own skip messages), and last the whole table.
"""
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

COLUMNS = ["upstream-ipvs", "ours-iptables", "ours-nftables"]


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


def sync_failures(coldir):
    """Our daemons' failed syncs in a column folder: kubeproxy_ipvs_sync_failures_total
    at teardown, summed over the nodes of both clusters (cluster/metrics-NODE.txt,
    three/cluster/metrics-NODE.txt); None when no node served it (upstream)."""
    total = None
    for f in sorted(glob.glob(os.path.join(coldir, "cluster", "metrics-*.txt"))
                    + glob.glob(os.path.join(coldir, "three", "cluster", "metrics-*.txt"))):
        for line in open(f, errors="replace"):
            if line.startswith("kubeproxy_ipvs_sync_failures_total "):
                total = (total or 0) + int(float(line.split()[1]))
    return total


def column(out, c):
    """(meta, specs or None) of column c in out: a column folder (run.json and
    junit_01.xml, as run.sh leaves it) or an exported COLUMN.json (the record
    kept in the repository); (None, None) when out has neither."""
    p = os.path.join(out, c + ".json")
    if os.path.exists(p):
        rec = json.load(open(p))
        return rec["meta"], {n: tuple(v) for n, v in rec["specs"].items()}
    p = os.path.join(out, c, "run.json")
    if not os.path.exists(p):
        return None, None
    meta = json.load(open(p))
    meta.setdefault("sync_failures", sync_failures(os.path.join(out, c)))
    junit = os.path.join(out, c, "junit_01.xml")
    specs = read_column(junit, re.compile(meta["focus"])) if os.path.exists(junit) else None
    three = os.path.join(out, c, "three", "junit_01.xml")
    if specs is None and meta.get("two_nodes") is False and os.path.exists(three):
        specs = {}  # the focus held only specs of three-nodes.txt
    for extra in (os.path.join(out, c, "alone", "junit_01.xml"), three):
        if specs is not None and os.path.exists(extra):
            for n, v in read_column(extra, re.compile(meta["focus"])).items():
                if v[0] != "skip" or n not in specs:
                    specs[n] = v
    return meta, specs


def names(junit, regex):
    """The specs of a dry run's junit report that regex matches, as one regular
    expression of their exact names (Go's RE2 syntax), "" for none."""
    rx = re.compile(regex)
    found = []
    for tc in ET.parse(junit).getroot().iter("testcase"):
        name = tc.get("name", "")
        if name.startswith("[It] ") and tc.find("skipped") is None and rx.search(name[5:]):
            found.append(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", name[5:]))
    return "|".join(sorted(found))


def load(out):
    """({column: (meta, specs)} shown, names of those left out)."""
    found = {}
    for c in COLUMNS:
        meta, specs = column(out, c)
        if meta is not None:
            found[c] = (meta, specs)
    if not found:
        raise SystemExit("report.py: no column (a folder with run.json, or COLUMN.json) in %s" % out)
    newest = max((m for m, _ in found.values()), key=lambda m: m["started"])
    key = lambda m: (m["focus"], m.get("families", "ipv4"))
    shown = {c: v for c, v in found.items() if key(v[0]) == key(newest)}
    return shown, [c for c in found if c not in shown]


def export(coldir, path):
    """Writes column folder coldir (run.json, junit_01.xml) as one JSON file."""
    c = os.path.basename(os.path.normpath(coldir))
    meta, specs = column(os.path.dirname(os.path.normpath(coldir)), c)
    if meta is None or specs is None:
        raise SystemExit("report.py: %s has no run.json or no junit_01.xml" % coldir)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump({"meta": meta, "specs": {n: list(v) for n, v in sorted(specs.items())}}, f, indent=0)
        f.write("\n")


def patterns(w, intro, pairs):
    """Appends intro and a list of (pattern, reason) pairs to the lines w."""
    w.append(intro)
    w.append("")
    for rx, reason in pairs:
        w.append("- `%s`: %s" % (rx, md(reason)))
    w.append("")


def listed_patterns(shown, key):
    """The (pattern, reason) lines of one of the run's lists as the shown columns
    ran it (key "skips": skip.txt, "alone": alone.txt, "three_nodes":
    three-nodes.txt; columns kept from runs of different days may have run with
    different lists, and one older than a file has none): each pattern once, with
    the newest column's reason, and only those that match a spec of the page (the
    others changed nothing)."""
    names = {n for _, specs in shown.values() if specs for n in specs}
    out, seen = [], set()
    for m, _ in sorted(shown.values(), key=lambda v: v[0]["started"], reverse=True):
        for x in m.get(key) or []:
            if x[0] not in seen and any(re.search(x[0], n) for n in names):
                seen.add(x[0])
                out.append(tuple(x))
    return out


def header(shown, left_out, skips):
    first = next(iter(shown.values()))[0]
    w = []
    w.append("Upstream's e2e suite (%s v1.37.2, ginkgo %s) on the conformance cluster"
             % (first["e2e"], first.get("ginkgo", "?")))
    w.append("(test/conformance/cluster/README.md: a control plane and two node VMs with kubelet,")
    w.append("containerd and the CNI bridge plugin; %s), a fresh cluster per column."
             % ("dual-stack, IPv4 first" if first.get("families") == "dual" else "IPv4"))
    w.append("")
    w.append("- focus: `%s`; skipped by the run: test/conformance/skip.txt (%d pattern%s, below)"
             % (first["focus"], len(skips), "" if len(skips) == 1 else "s"))
    alone = listed_patterns(shown, "alone")
    if alone:
        w.append("- run alone, after the others and with one ginkgo process: test/conformance/alone.txt"
                 " (%d pattern%s, below)" % (len(alone), "" if len(alone) == 1 else "s"))
    three = listed_patterns(shown, "three_nodes")
    if three:
        w.append("- run on a second fresh cluster of three nodes: test/conformance/three-nodes.txt"
                 " (%d pattern%s, below)" % (len(three), "" if len(three) == 1 else "s"))
    w.append("- columns: upstream-ipvs is upstream kube-proxy v1.37.2 `--proxy-mode=ipvs` from kubeadm's")
    w.append("  addon; ours-iptables and ours-nftables are our image with kubeadm's addon objects and")
    w.append("  deploy/kubeadm-extras, `rulesBackend` iptables and nftables")
    w.append("")
    w.append("| column | command | commit (our image) | started | took | ginkgo processes | failed syncs |")
    w.append("| --- | --- | --- | --- | --- | --- | --- |")
    for c, (m, _) in shown.items():
        together = " (columns at the same time)" if m.get("parallel") else ""
        failed = m.get("sync_failures")
        w.append("| %s | `%s`%s | %s%s (%s) | %s | %s s | %s | %s |" % (
            c, md(m["command"]), together, m["commit"], m.get("commit_note", ""), m.get("proxy_version", "?"),
            m["started"], m["took"], m["procs"], "-" if failed is None else failed))
    w.append("")
    w.append("Failed syncs: `kubeproxy_ipvs_sync_failures_total` of our daemon at teardown, summed")
    w.append("over the nodes (each failure is retried as a full sync); \"-\" where it was not read")
    w.append("(upstream has no such counter, and columns kept before it was read).")
    if left_out:
        w.append("")
        w.append("Left out (run with another focus or address family): %s." % ", ".join(left_out))
    w.append("")
    return w


def render(out):
    shown, left_out = load(out)
    first = next(iter(shown.values()))[0]
    cols = list(shown)
    data = {c: specs for c, (_, specs) in shown.items()}
    names = sorted({n for d in data.values() if d for n in d})
    skips = listed_patterns(shown, "skips")
    w = header(shown, left_out, skips)
    w.append("## Totals")
    w.append("")
    w.append("| column | pass | fail | skip |")
    w.append("| --- | --- | --- | --- |")
    for c in cols:
        d = data[c]
        if d is None:
            w.append("| %s | no report | | |" % c)
            continue
        n = {"pass": 0, "fail": 0, "skip": 0}
        for st, _, _ in d.values():
            n[st] += 1
        w.append("| %s | %d | %d | %d |" % (c, n["pass"], n["fail"], n["skip"]))
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
        w.append("Every spec has the same result in every column with a report.")
    else:
        w.append("| spec | " + " | ".join(cols) + " |")
        w.append("| --- |" + " --- |" * len(cols))
        for n in diff:
            w.append("| %s | %s |" % (md(n), " | ".join(cell(c, n) for c in cols)))
    w.append("")

    w.append("## Failures")
    w.append("")
    fails = [(c, n, data[c][n][2]) for c in have for n in sorted(data[c]) if data[c][n][0] == "fail"]
    if not fails:
        w.append("None.")
    for c, n, msg in fails:
        w.append("- %s, %s: %s" % (c, md(n), md(msg) or "(no message)"))
    w.append("")

    w.append("## Skipped, and why")
    w.append("")
    patterns(w, "By the run (test/conformance/skip.txt; `[Conformance]` specs are never skipped):", skips)
    w.append("By the suite itself (its own skip message; the column(s) where it skipped):")
    w.append("")
    by_reason = {}
    for c in have:
        own = [x[0] for x in shown[c][0].get("skips", [])]
        for n, (st, _, msg) in sorted(data[c].items()):
            if st != "skip" or any(re.search(rx, n) for rx in own):
                continue
            by_reason.setdefault(msg or "(no message)", {}).setdefault(n, []).append(c)
    if not by_reason:
        w.append("None.")
    for reason in sorted(by_reason):
        w.append("- %s" % md(reason))
        for n, cs in sorted(by_reason[reason].items()):
            w.append("  - %s (%s)" % (md(n), ", ".join(cs)))
    w.append("")

    alone = listed_patterns(shown, "alone")
    if alone:
        w.append("## Run alone, and why")
        w.append("")
        patterns(w, "On the same cluster after the others, with one ginkgo process (test/conformance/alone.txt):", alone)
    three = listed_patterns(shown, "three_nodes")
    if three:
        w.append("## Run on three nodes, and why")
        w.append("")
        patterns(w, "On a second fresh cluster of three nodes, after the two-node one, with one ginkgo process"
                 " (test/conformance/three-nodes.txt):", three)

    w.append("## Every spec")
    w.append("")
    w.append("| spec | " + " | ".join(cols) + " |")
    w.append("| --- |" + " --- |" * len(cols))
    for n in names:
        w.append("| %s | %s |" % (md(n), " | ".join(cell(c, n) for c in cols)))
    record = (len(shown) == len(COLUMNS) and all(m.get("record") for m, _ in shown.values())
              and all(data[c] is not None for c in cols))
    return "\n".join(w) + "\n", record, first


def tsv(coldir):
    """Prints column folder coldir's specs of its focus, a line each:
    NAME<TAB>pass|fail|skip<TAB>SECONDS."""
    c = os.path.basename(os.path.normpath(coldir))
    _, specs = column(os.path.dirname(os.path.normpath(coldir)), c)
    if specs is None:
        raise SystemExit("report.py: %s has no run.json or no junit_01.xml" % coldir)
    for n, (st, t, _) in sorted(specs.items()):
        print("%s\t%s\t%.0f" % (n, st, t))


def main(argv):
    if len(argv) == 4 and argv[1] == "--export":
        export(argv[2], argv[3])
        return 0
    if len(argv) == 4 and argv[1] == "--names":
        print(names(argv[2], argv[3]))
        return 0
    if len(argv) == 3 and argv[1] == "--tsv":
        tsv(argv[2])
        return 0
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--doc"):
        sys.stderr.write("usage: report.py OUT [--doc FILE] | --export OUT/COLUMN FILE | --tsv OUT/COLUMN"
                         " | --names JUNIT REGEX\n")
        return 2
    out = argv[1]
    page, record, first = render(out)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(page)
    if len(argv) == 4:
        if not record:
            sys.stderr.write("[conformance] %s not written: not every column has a report of the whole focus in %s\n"
                             % (argv[3], out))
            return 0
        with open(argv[3], "w") as f:
            f.write("# Conformance: upstream's [sig-network] e2e suite%s\n\n"
                    % (" on a dual-stack cluster" if first.get("families") == "dual" else ""))
            f.write("Written by `make conformance` (test/conformance/run.sh, report.py); do not edit.\n\n")
            f.write(page)
        sys.stderr.write("[conformance] wrote %s\n" % argv[3])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
