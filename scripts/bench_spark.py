#!/usr/bin/env python3
"""Throughput of `python -m bertflow.spark` at local[1] and local[2] against the
single-process CLI (`bertflow encode`) on the same sentences, in one run.

Usage (after scripts/setup.sh; a quiet machine: check `uptime`):

    .venv/bin/python scripts/bench_spark.py [--limit N] [--scored-only] [--rounds R]
        [--pooling last-avg]

The corpus is every distinct sentence of the STS data folder (47,423: scored
and unscored pairs, every split; `--scored-only`: the 26,126 of the scored
test pairs that `bertflow compare` encodes), distinct because `bertflow
encode` encodes a repeated sentence once even without its cache, as a text
file for the CLI and as Parquet (text only: the job adds the ids) for Spark. One untimed Spark run on 200 of
them first writes the local JVM's class archive (bertflow.spark._jvm; every
later local session starts from it, as a user's second run does). Then each
round runs, back to back, the CLI at 1 thread, Spark at local[1], the CLI at 2
threads and Spark at local[2], each timed end to end (process start to exit);
the ratio of a round is the CLI's wall time over Spark's at the same number of
cores, and the table gives the median round. The Spark command reports its own
split: Python's start and imports, session (JVM) start, the ids, the job, the
driver's peak RSS, and per task (BERTFLOW_SPARK_STATS=1) the worker's start,
model loads, encoder threads, OS threads, encode seconds and peak RSS; from
local[1] the report derives the scale model of docs/spark.md (a per-job fixed
cost and a per-sentence cost per core). The largest process of each tree (the
JVM for Spark) is polled from /proc
(VmHWM). Prints Markdown.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu():
    info = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.*)", info).group(1).strip()
    flags = set(re.search(r"flags\s*:\s*(.*)", info).group(1).split())
    keep = [f for f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16") if f in flags]
    return f"{model}, {os.cpu_count()} cores, flags {' '.join(keep)}"


def _tree_peaks(root, peaks):
    """Adds the VmHWM (peak RSS, kB) of every live descendant of ``root`` to
    ``peaks`` (pid -> (name, kB))."""
    children = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            st = (d / "status").read_text()
        except OSError:
            continue
        ppid = int(re.search(r"PPid:\s*(\d+)", st).group(1))
        children.setdefault(ppid, []).append((int(d.name), st))
    todo = [root]
    while todo:
        for pid, st in children.get(todo.pop(), []):
            todo.append(pid)
            hwm = re.search(r"VmHWM:\s*(\d+)", st)
            name = re.search(r"Name:\s*(\S+)", st).group(1)
            if hwm:
                peaks[pid] = (name, max(int(hwm.group(1)), peaks.get(pid, ("", 0))[1]))


def run(cmd, env=None):
    """(wall seconds, stderr, {pid: (name, peak RSS MB)} of the child and every
    descendant, polled from /proc every 0.2 s)."""
    t = time.perf_counter()
    peaks = {}
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
                             text=True)
        while p.poll() is None:
            _tree_peaks(os.getpid(), peaks)
            time.sleep(0.2)
        wall = time.perf_counter() - t
        err.seek(0)
        text = err.read()
    if p.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{text[-4000:]}")
    return wall, text, {pid: (name, kb / 1024) for pid, (name, kb) in peaks.items()}


def data_sentences(data):
    """Every sentence of the STS data folder's files, scored or not, in
    every split (README.md there: STS12-16 inputs' first two tab-separated
    columns, STS Benchmark's sixth and seventh, SICK's second and third
    after its header). bertflow's loader keeps only scored pairs, and the
    test splits for `bertflow eval`; a throughput corpus wants them all."""
    data = Path(data)
    for f in sorted(data.glob("STS1[2-6]/STS.input.*.txt")):
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            yield from line.split("\t")[:2]
    for f in sorted(data.glob("STSBenchmark/*.csv")):
        for line in f.read_text(encoding="utf-8").splitlines():
            yield from line.split("\t")[5:7]
    for f in sorted(data.glob("SICK/SICK_*.txt")):
        for line in f.read_text(encoding="utf-8").splitlines()[1:]:
            yield from line.split("\t")[1:3]


def corpus(folder, limit, scored_only=False):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import bertflow

    if scored_only:
        found = (s for t in bertflow.sts.tasks() for s in t.sentences())
    else:
        found = data_sentences(os.environ.get("BERTFLOW_DATA") or bertflow.defaults()["data"])
    seen, out = set(), []
    for s in found:
        s = s.strip()
        if s and "\n" not in s and s not in seen:
            seen.add(s)
            out.append(s)
    out = out[:limit] if limit else out
    (folder / "corpus.txt").write_text("".join(s + "\n" for s in out), encoding="utf-8")
    pq.write_table(pa.table({"text": out}), folder / "corpus.parquet")
    pq.write_table(pa.table({"text": out[:200]}), folder / "warm.parquet")
    return len(out)


def spark_run(folder, master, pooling, corpus="corpus.parquet"):
    env = dict(os.environ, BERTFLOW_SPARK_STATS="1")
    out = folder / f"out-{master.strip('local[]')}.parquet"
    cmd = [sys.executable, "-m", "bertflow.spark", "--input", str(folder / corpus),
           "--output", str(out), "--overwrite", "--pooling", pooling, "--master", master]
    wall, err, peaks = run(cmd, env)
    m = re.search(r"start ([\d.-]+) s, session ([\d.]+) s, ids ([\d.]+) s, job ([\d.]+) s, "
                  r"driver peak RSS (\d+) MB", err)
    if m is None:
        sys.exit(f"no timing line from {' '.join(cmd)}:\n{err[-4000:]}")
    keys = ("pid", "rows", "age", "load", "encode", "task", "threads", "loads", "os_threads",
            "pandas", "rss")
    tasks = [dict(zip(keys, (int(v[0]), int(v[1]), *map(float, v[2:6]), *map(int, v[6:]))))
             for v in re.findall(
                 r"task: pid (\d+) rows (\d+) age_s ([\d.-]+) load_s ([\d.]+) encode_s "
                 r"([\d.]+) task_s ([\d.]+) threads (\d+) loads (\d+) os_threads (-?\d+) "
                 r"pandas (\d) peak_rss_mb (\d+)", err)]
    start, session, ids, job, rss = m.groups()
    return {"cmd": " ".join(cmd[1:]), "wall": wall, "start": float(start),
            "session": float(session), "ids": float(ids), "job": float(job),
            "driver_rss": int(rss), "tasks": tasks,
            "jvm_rss": max((mb for name, mb in peaks.values() if name == "java"), default=0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None, help="use the first N sentences")
    ap.add_argument("--scored-only", action="store_true",
                    help="only the sentences of scored test pairs (26,126; the set `bertflow "
                    "compare` encodes) instead of every sentence of the data folder (47,423)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the four runs")
    ap.add_argument("--pooling", default="last-avg")
    a = ap.parse_args()
    exe = os.environ.get("BERTFLOW_BIN") or str(ROOT / "target" / "release" / "bertflow")
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp:
        folder = Path(tmp)
        n = corpus(folder, a.limit, a.scored_only)
        load_before = os.getloadavg()[0]
        print(f"{n} sentences; load before: {load_before:.2f}", file=sys.stderr)
        # 200 sentences: the first local session writes the JVM's class archive.
        warm = spark_run(folder, "local[1]", a.pooling, "warm.parquet")
        print(f"warm-up spark local[1]: {warm['wall']:.1f} s", file=sys.stderr)
        rounds = []
        for r in range(a.rounds):
            res = {}
            for threads, master in ((1, "local[1]"), (2, "local[2]")):
                cmd = [exe, "--quiet", "encode", "--no-cache", "--threads", str(threads),
                       "--pooling", a.pooling, "--input", str(folder / "corpus.txt"),
                       "--output", str(folder / f"cli{threads}.npy")]
                wall, _, peaks = run(cmd)
                res[f"cli{threads}"] = {"cmd": " ".join(cmd[2:]), "wall": wall,
                                        "rss": max(mb for _, mb in peaks.values())}
                res[master] = spark_run(folder, master, a.pooling)
                print(f"round {r + 1}: cli {threads} thread(s) {wall:.1f} s, spark {master} "
                      f"{res[master]['wall']:.1f} s, ratio "
                      f"{wall / res[master]['wall']:.2f}", file=sys.stderr)
            rounds.append(res)
        load_after = os.getloadavg()[0]
    report(n, rounds, warm, (load_before, load_after))


def report(n, rounds, warm, loads):
    ratios = {m: [r[c]["wall"] / r[m]["wall"] for r in rounds]
              for m, c in (("local[1]", "cli1"), ("local[2]", "cli2"))}
    # The median round of local[1] (ties: the first) gives the detailed numbers.
    mid = sorted(range(len(rounds)), key=lambda i: ratios["local[1]"][i])[(len(rounds) - 1) // 2]
    res = rounds[mid]
    print(f"Machine: {cpu()}; load average {loads[0]:.2f} before the run, {loads[1]:.2f} "
          "after.\n")
    pooling = res["local[2]"]["cmd"].split("--pooling ")[1].split()[0]
    print(f"{n:,} distinct STS sentences, `{pooling}`, batch 32, no embedding cache; wall "
          f"time from process start to exit; {len(rounds)} rounds of the four runs back to "
          f"back, the table from round {mid + 1} (the median local[1] ratio).\n")
    print("| run | wall s | sentences/s | ratio | ratio in every round |")
    print("|---|---:|---:|---:|---|")
    for key, label, peer in (("cli1", "`bertflow encode --threads 1`", None),
                             ("local[1]", "`python -m bertflow.spark --master local[1]`", "cli1"),
                             ("cli2", "`bertflow encode --threads 2`", None),
                             ("local[2]", "`python -m bertflow.spark --master local[2]`", "cli2")):
        r = res[key]
        ratio = f"**{res[peer]['wall'] / r['wall']:.2f}x** the CLI" if peer else ""
        every = ", ".join(f"{x:.2f}" for x in ratios[key]) if peer else ""
        print(f"| {label} | {r['wall']:.1f} | {n / r['wall']:.0f} | {ratio} | {every} |")
    print()
    for master in ("local[1]", "local[2]"):
        r = res[master]
        t = r["tasks"]
        enc = sum(x["encode"] * x["threads"] for x in t)  # core-seconds
        load = [x["load"] for x in t if x["loads"] > 0]
        pids = {x["pid"] for x in t}
        slots = int(master.strip("local[]"))
        first = {}
        for x in t:  # each worker's first task: its age (fork, imports, a warm-up's load)
            first[x["pid"]] = min(first.get(x["pid"], x["age"]), x["age"])
        cli = res["cli" + str(slots)]["wall"]
        rest = r["wall"] - r["start"] - r["session"] - r["ids"] - r["job"]
        print(f"- {master}: wall {r['wall']:.1f} s = Python start and imports {r['start']:.2f} s"
              f" + session (JVM) start {r['session']:.1f} s + ids {r['ids']:.2f} s + job "
              f"{r['job']:.1f} s + exit {rest:.1f} s. The job: {len(t)} tasks in {len(pids)} "
              f"worker processes (worker's age at its first task "
              f"{statistics.mean(first.values()):.2f} s, model loads in the job {len(load)} x "
              f"{statistics.mean(load) if load else 0:.2f} s; 0 when the command's warm-up "
              f"job started the worker and loaded the model during the session's start; "
              f"encoder threads "
              f"{sorted({x['threads'] for x in t})}, OS threads per worker "
              f"{sorted({x['os_threads'] for x in t})}, pandas imported in "
              f"{sum(x['pandas'] for x in t)}); encoder busy {enc:.1f} core-s in total = "
              f"{n / enc:.0f} sentences/s per core; everything but the encoder: "
              f"{r['wall'] - enc / slots:.1f} s of wall time (the CLI: {cli:.1f} s in all). Peak "
              f"RSS: driver {r['driver_rss']} MB, workers {min(x['rss'] for x in t)}-"
              f"{max(x['rss'] for x in t)} MB, JVM {r['jvm_rss']:.0f} MB, the CLI "
              f"{res['cli' + str(slots)]['rss']:.0f} MB.")
    print(f"- the untimed first run (200 sentences, writing the JVM's class archive when "
          f"there was none): {warm['wall']:.1f} s, session {warm['session']:.1f} s")
    one = res["local[1]"]
    # Per sentence on one core, end to end inside the job (encoder, Arrow, Parquet,
    # scheduling): the job less its worker's start and model load.
    w1 = one["tasks"]
    per = (one["job"] - min(x["age"] for x in w1) - sum(x["load"] for x in w1)) / n
    fixed = one["wall"] - n * per
    print(f"\nScale model (docs/spark.md): wall(N cores) = F + n * t / N with, from local[1], "
          f"t = {per * 1e3:.2f} ms per sentence per core (the encoder alone "
          f"{sum(x['encode'] for x in w1) / n * 1e3:.2f} ms) and F = {fixed:.1f} s per job; "
          "100M sentences: " + "; ".join(
              f"{c} cores {(fixed + 1e8 * per / c) / 3600:.1f} h" for c in (8, 40, 200, 800))
          + ".")
    print(f"\nCommands: `{res['cli2']['cmd']}`; `python {res['local[2]']['cmd']}`.")


if __name__ == "__main__":
    main()
