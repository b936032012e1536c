#!/usr/bin/env python3
"""Per clone of a cost-profile bench run (#42): its run time, the looks that saw it running,
the last of them, and the first answer after its end that holds it (a status read of its
UPID, or a listing of its node's tasks since its start): the lag, as
tests/provider/create_spans.rs counts it, per clone instead of summed.

    python3 scripts/clone-lag.py target/bench-fleet
"""
import json, sys, glob, statistics
d = sys.argv[1] if len(sys.argv) > 1 else "target/bench-fleet"
for jf in sorted(glob.glob(f"{d}/cost-*.journal.json")):
    tf = jf.replace(".journal.json", ".tasks.json")
    try:
        journal = json.load(open(jf)); tasks = json.load(open(tf))
    except Exception as e:
        print(jf, e); continue
    if isinstance(tasks, dict): tasks = tasks.get("tasks", tasks)
    clones = [t for t in tasks if t["type"] == "qmclone" and t.get("ended_ms")]
    if not clones: continue
    def covers(e, t):
        p = e["path"]
        if p.endswith(f"/tasks/{t['upid']}/status"): return True
        if p == f"/nodes/{t['node']}/tasks" and e.get("params", {}).get("source") == "all":
            since = e["params"].get("since")
            start = int(t["upid"].split(":")[4], 16)
            return since is not None and int(since) <= start
        return False
    durs = [t["ended_ms"] - t["started_ms"] for t in clones]
    med = statistics.median(durs)
    rows = []
    for t in clones:
        looks = sorted((e["received_ms"], e["answered_ms"]) for e in journal
                       if e.get("status") == 200 and e["received_ms"] >= t["started_ms"] and covers(e, t))
        before = [a for r, a in looks if a < t["ended_ms"]]
        after = [a for r, a in looks if r >= t["ended_ms"]]
        lag = (min(after) - t["ended_ms"]) if after else None
        rows.append((t["ended_ms"] - t["started_ms"], len(before), lag,
                     (before[-1] - t["started_ms"]) if before else None,
                     (min(after) - t["started_ms"]) if after else None))
    print(f"== {jf.split('/')[-1]}: {len(rows)} clones, median {med} ms, mean lag {statistics.mean(r[2] for r in rows if r[2] is not None):.0f} ms")
    for r in sorted(rows):
        print(f"  dur {r[0]:5d}  looks-before {r[1]:2d}  last-running-at {r[3]}  seen-at {r[4]}  lag {r[2]}")
