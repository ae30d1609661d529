"""Compare two run folders: metrics without timings, trajectories' response ids and rewards."""
import json, sys, gzip
from pathlib import Path

TIMING = ("time", "wall", "_s", "per_s", "bytes", "latency", "rss", "memory", "started", "finished", "timestamp", "date")

def metrics(run):
    out = []
    for line in (Path(run) / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        out.append({k: v for k, v in r.items() if not any(t in k for t in TIMING)})
    return out

def trajectories(run):
    rows = []
    for f in sorted((Path(run)).rglob("trajectories*.jsonl*")):
        opener = gzip.open if f.suffix == ".gz" else open
        with opener(f, "rt") as fh:
            for line in fh:
                t = json.loads(line)
                rows.append((t.get("group_id"), t.get("task_id"), t.get("reward"),
                             [tuple(turn.get("response_ids") or []) for turn in t.get("turns", [])],
                             [turn.get("response_text") for turn in t.get("turns", [])]))
    return rows

a, b = sys.argv[1:3]
ma, mb = metrics(a), metrics(b)
diff = [(i, k, ra.get(k), rb.get(k)) for i, (ra, rb) in enumerate(zip(ma, mb)) for k in set(ra) | set(rb) if ra.get(k) != rb.get(k)]
print("metrics records", len(ma), len(mb), "differing fields", len(diff))
for d in diff[:15]:
    print("  ", d)
ta, tb = trajectories(a), trajectories(b)
print("trajectories", len(ta), len(tb), "identical", ta == tb, "same multiset", sorted(map(repr, ta)) == sorted(map(repr, tb)))
ea = (Path(a) / "eval_outcomes.jsonl").read_text(); eb = (Path(b) / "eval_outcomes.jsonl").read_text()
print("eval outcomes identical", ea == eb)
