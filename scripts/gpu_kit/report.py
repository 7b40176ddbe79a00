"""The GPU kit's table: each row of results.csv against the same model's
synthetic rate, the loaders alone, and the loader cores needed for 97% of
it, as markdown. usage: report.py RESULTS_CSV MACHINE_TXT > gpu_results.md"""
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("# GPU check\n")
print("```\n" + open(sys.argv[2]).read().strip() + "\n```\n")
ceiling = {(r["model"], r["amp"]): float(r["images_per_s"]) for r in rows if r["loader"] == "synthetic"}
alone = [r for r in rows if r["model"] == "-"]
rows = [r for r in rows if r["model"] != "-"]
if alone:
    # What the cores decode with no model and no GPU: the most any row below can get.
    by = {}
    for r in alone:
        by.setdefault(int(r["workers"]), {})[r["loader"]] = float(r["images_per_s"])
    print("The loaders alone (train transform, no model, no GPU):\n")
    print("| workers | shardkit loader images/s | DataLoader images/s | shardkit / DataLoader |")
    print("|---:|---:|---:|---:|")
    for w in sorted(by):
        s, d = by[w].get("shardkit loader alone"), by[w].get("DataLoader alone")
        print("| %d | %s | %s | %s |" % (w, "%.0f" % s if s else "-", "%.0f" % d if d else "-",
                                         "%.2f" % (s / d) if s and d else "-"))
    print()
# loader busy: shardkit-train's workers' decode time over their capacity
# (near 1: the cores are the bound; low with a large wait: something else).
print("| model | amp | loader | workers | images/s | of synthetic | data wait | epoch start | loader busy |")
print("|---|---|---|---:|---:|---:|---:|---:|---:|")
for r in rows:
    c = ceiling.get((r["model"], r["amp"])) or ceiling.get((r["model"], "bf16"))
    ips = float(r["images_per_s"])
    start = r.get("epoch_start_s") or ""
    busy = r.get("loader_busy") or ""
    print("| %s | %s | %s | %s | %.0f | %s | %.0f%% | %s | %s |" % (
        r["model"], r["amp"], r["loader"], r["workers"] if r["loader"] != "synthetic" else "-", ips,
        "%.2f" % (ips / c) if c else "-", 100 * float(r["data_wait_fraction"]),
        "%.3f s" % float(start) if start else "-", "%.0f%%" % (100 * float(busy)) if busy else "-"))
# Loader cores needed for 97% of the synthetic rate.
print("\n| model | amp | loader | workers for 97% of synthetic |\n|---|---|---|---|")
for key, c in ceiling.items():
    for loader in ("shardkit-train", "DataLoader", "shardkit (Python)"):
        ok = [int(r["workers"]) for r in rows if (r["model"], r["amp"]) == key and r["loader"] == loader
              and float(r["images_per_s"]) >= 0.97 * c]
        seen = [r for r in rows if (r["model"], r["amp"]) == key and r["loader"] == loader]
        if seen:
            print("| %s | %s | %s | %s |" % (key[0], key[1], loader, min(ok) if ok else "more than tried"))
