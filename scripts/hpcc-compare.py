#!/usr/bin/env python3
"""Runs netsim and the HPCC reference simulator (ns-3) on the same inputs and compares them.

Usage:
    scripts/hpcc-compare.py --ref /path/to/High-Precision-Congestion-Control/simulation
    HPCC_REF=/path/to/.../simulation scripts/hpcc-compare.py [--case fat|incast|all]

The reference is never part of this project: build it beside the project (see
docs/netsim-reference.md) and point this script at its `simulation/` folder (the one holding
`build/scratch/third`). Without it the script says so and runs nothing.

Two comparisons, each with one topology file and one flow file in the reference's formats,
written by this script and read unchanged by both simulators (netsim through `hpcc_file` and
`hpcc_flow_file`):

- `fat`: the 320-host fat-tree of the reference's `mix/fat.txt` (16 hosts per ToR, 20 ToR /
  20 Agg / 16 Core, 100G hosts, 400G fabric, 1 us links), WebSearch at 30 % load for 10 ms
  (Poisson arrivals per host, uniform destinations), 20 ms simulated, DCQCN as the
  reference's `run.py --cc dcqcn --bw 100`.
- `incast`: one switch and 16 hosts; ten rounds of 15-to-1 incasts of 8 KB, 64 KB and 400 KB
  flows, one every millisecond (each round ends before the next).

Both runs end at 100 ms and the flows start 20 ms (fat) or 10 ms (incast) before (the
reference dumps its queue-length histogram only at multiples of 100 ms). Both FCT files are
matched flow by flow (source, destination, size, start) and every flow's slowdown is its FCT over the reference's `standalone_fct` for it (one
ideal for both, so that only the FCTs are compared). Printed: per size bin, p50/p95/p99 of
the slowdown in each simulator and the relative difference; per class of switch port, the
distribution of the egress queue (bytes, all priorities); PFC pause frames. ECN marks, CNPs
and rate decreases are not exposed by the reference without its per-packet trace, so only
netsim's counts are printed.

Python 3 standard library only.
"""

import argparse
import bisect
import csv
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
END_S = 0.1  # both runs end at 100 ms, the flows start `stop` before (see the module docs)
BINS = [10_000, 100_000, 1_000_000, 10_000_000, 1 << 62]
BIN_NAMES = ["<=10KB", "<=100KB", "<=1MB", "<=10MB", ">10MB"]

WEBSEARCH = [(0, 0), (10000, 15), (20000, 20), (30000, 30), (50000, 40), (80000, 53),
             (200000, 60), (1000000, 70), (2000000, 80), (5000000, 90), (10000000, 97),
             (30000000, 100)]

# The reference's `run.py` template for `--cc dcqcn --bw 100` (mode 1), with its outputs
# redirected and the queue monitor over the flows' window.
REF_CONFIG = """ENABLE_QCN 1
USE_DYNAMIC_PFC_THRESHOLD 1
PACKET_PAYLOAD_SIZE 1000
TOPOLOGY_FILE {dir}/topology.txt
FLOW_FILE {dir}/flow.txt
TRACE_FILE {dir}/trace.txt
TRACE_OUTPUT_FILE {out}/mix.tr
FCT_OUTPUT_FILE {out}/fct.txt
PFC_OUTPUT_FILE {out}/pfc.txt
SIMULATOR_STOP_TIME {stop}
CC_MODE 1
ALPHA_RESUME_INTERVAL 1
RATE_DECREASE_INTERVAL 4
CLAMP_TARGET_RATE 0
RP_TIMER 300
EWMA_GAIN 0.00390625
FAST_RECOVERY_TIMES 1
RATE_AI 20Mb/s
RATE_HAI 200Mb/s
MIN_RATE 1000Mb/s
DCTCP_RATE_AI 1000Mb/s
ERROR_RATE_PER_LINK 0.0000
L2_CHUNK_SIZE 4000
L2_ACK_INTERVAL 1
L2_BACK_TO_ZERO 0
HAS_WIN 0
GLOBAL_T 1
VAR_WIN 0
FAST_REACT 0
U_TARGET 0.95
MI_THRESH 0
INT_MULTI 1
MULTI_RATE 0
SAMPLE_FEEDBACK 0
PINT_LOG_BASE 1.01
PINT_PROB 1.0
RATE_BOUND 1
ACK_HIGH_PRIO 1
LINK_DOWN 0 0 0
ENABLE_TRACE 0
KMAX_MAP 2 100000000000 1600 400000000000 6400
KMIN_MAP 2 100000000000 400 400000000000 1600
PMAX_MAP 2 100000000000 0.20 400000000000 0.20
BUFFER_SIZE 32
QLEN_MON_FILE {out}/qlen.txt
QLEN_MON_START {mon_start}
QLEN_MON_END {mon_end}
"""

# The same settings in netsim's terms (docs/scenario.md; scenarios/hpcc-fat320-websearch.toml).
NETSIM_SCENARIO = """version = 1
name = "hpcc-compare-{case}"
seed = {seed}
duration_us = {duration_us}

[topology]
kind = "hpcc_file"
path = "topology.txt"

[switch]
buffer_mb = 32

[nic]
mtu_payload_bytes = 1000
{ack_priority}
[nic.dcqcn]
rpg_time_reset = 300
rpg_byte_reset = 0
rpg_threshold = 1
rpg_ai_rate = 20
rpg_hai_rate = 200
rpg_min_rate = 1000
dce_tcp_g = 1020
dce_tcp_rtt = 1
rate_reduce_monitor_period = 4
min_time_between_cnps = 0
{cnp_priority}
[[workload]]
kind = "hpcc_flow_file"
path = "flow.txt"

[output]
queue_sample_interval_us = {sample_us}
pfc_events = true
"""


def websearch_size(rng):
    """A size from the WebSearch CDF, linear between its points (as the reference's
    traffic_gen does)."""
    u = rng.random() * 100
    for (s0, c0), (s1, c1) in zip(WEBSEARCH, WEBSEARCH[1:]):
        if u <= c1:
            if c1 == c0:
                return max(1, int(s1))
            return max(1, int(s0 + (s1 - s0) * (u - c0) / (c1 - c0)))
    return WEBSEARCH[-1][0]


def mean_websearch():
    return sum((s0 + s1) / 2 * (c1 - c0) / 100
               for (s0, c0), (s1, c1) in zip(WEBSEARCH, WEBSEARCH[1:]))


def fat_tree():
    """Nodes and links of the reference's mix/fat.txt (320 hosts)."""
    hosts, tors, aggs, cores = 320, 20, 20, 16
    tor0, agg0, core0 = hosts, hosts + tors, hosts + tors + aggs
    links = []
    for h in range(hosts):
        links.append((h, tor0 + h // 16, "100Gbps"))
    for t in range(tors):
        pod = t // 4
        for a in range(4):
            links.append((tor0 + t, agg0 + pod * 4 + a, "400Gbps"))
    for a in range(aggs):
        j = a % 4
        for c in range(4):
            links.append((agg0 + a, core0 + j * 4 + c, "400Gbps"))
    return hosts + tors + aggs + cores, list(range(hosts, core0 + cores)), links


def write_topology(path, nodes, switches, links):
    lines = [f"{nodes} {len(switches)} {len(links)}", " ".join(map(str, switches))]
    lines += [f"{a} {b} {rate} 1000ns 0.000000" for a, b, rate in links]
    path.write_text("\n".join(lines) + "\n")


def write_flows(path, flows):
    flows = sorted(flows, key=lambda f: f[3])
    lines = [str(len(flows))]
    lines += [f"{s} {d} 3 100 {size} {start:.9f}" for s, d, size, start in flows]
    path.write_text("\n".join(lines) + "\n")


def fat_case(d, seed):
    offset = END_S - 0.020
    nodes, switches, links = fat_tree()
    write_topology(d / "topology.txt", nodes, switches, links)
    rng = random.Random(seed)
    hosts, load, gbps, window_s = 320, 0.3, 100, 0.010
    mean_gap_s = mean_websearch() * 8 / (load * gbps * 1e9)
    flows = []
    for src in range(hosts):
        t = rng.expovariate(1 / mean_gap_s)
        while t < window_s:
            dst = rng.randrange(hosts - 1)
            dst += dst >= src
            flows.append((src, dst, websearch_size(rng), offset + t))
            t += rng.expovariate(1 / mean_gap_s)
    write_flows(d / "flow.txt", flows)
    return 0.020


def incast_case(d, _seed):
    offset = END_S - 0.010
    hosts = 16
    links = [(h, hosts, "100Gbps") for h in range(hosts)]
    write_topology(d / "topology.txt", hosts + 1, [hosts], links)
    flows = []
    for r in range(10):
        size = [8000, 64000, 400000][r % 3]
        for s in range(1, hosts):
            flows.append((s, 0, size, offset + r * 1e-3 + s * 1e-9))
    write_flows(d / "flow.txt", flows)
    return 0.010


CASES = {"fat": fat_case, "incast": incast_case}


def find_reference(arg):
    ref = arg or os.environ.get("HPCC_REF")
    if not ref:
        return None, ("no reference given: pass --ref DIR or set HPCC_REF to the `simulation/` "
                      "folder of a built High-Precision-Congestion-Control (see "
                      "docs/netsim-reference.md)")
    ref = Path(ref).resolve()
    for cand in (ref, ref / "simulation"):
        binary = cand / "build" / "scratch" / "third"
        if binary.exists():
            return cand, None
    return None, f"{ref}: no build/scratch/third there; build the reference first (docs/netsim-reference.md)"


def run_reference(ref, d, stop_s):
    out = d / "ref"
    out.mkdir(exist_ok=True)
    (d / "trace.txt").write_text("0\n")
    mon_start = int(round((END_S - stop_s) * 1e9))
    (out / "config.txt").write_text(REF_CONFIG.format(
        dir=d, out=out, stop=f"{END_S + 1e-6:.6f}", mon_start=mon_start,
        mon_end=int(round(END_S * 1e9))))
    env = dict(os.environ, LD_LIBRARY_PATH=str(ref / "build"))
    started = time.time()
    with open(out / "stdout.txt", "w") as log:
        subprocess.run([str(ref / "build" / "scratch" / "third"), str(out / "config.txt")],
                       cwd=ref, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    return time.time() - started


def hawkmesh_binary(arg):
    if arg:
        return Path(arg)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "hawkmesh"


def run_netsim(binary, d, stop_s, case, seed, netsim_defaults):
    out = d / "netsim"
    # The reference's switches queue ACKs (and the CNP flag they carry) with the data.
    ack = "" if netsim_defaults else 'ack_priority = "data"\n'
    cnp = "" if netsim_defaults else "cnp_802p_prio = 3\n"
    (d / "scenario.toml").write_text(NETSIM_SCENARIO.format(
        ack_priority=ack, cnp_priority=cnp,
        case=case, seed=seed, duration_us=int(round(END_S * 1e6)) + 1,
        sample_us=1 if case == "incast" else 10))
    started = time.time()
    with open(d / "netsim-stdout.txt", "w") as log:
        subprocess.run([str(binary), "sim", "run", str(d / "scenario.toml"), "--out", str(out)],
                       stdout=log, stderr=subprocess.STDOUT, check=True)
    return time.time() - started


def read_fct(path):
    """{(sip, dip, size, start_ns): (fct_ns, standalone_ns)}"""
    flows = {}
    for line in open(path):
        f = line.split()
        if len(f) < 8:
            continue
        key = (int(f[0], 16), int(f[1], 16), int(f[4]), int(f[5]))
        flows[key] = (int(f[6]), int(f[7]))
    return flows


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def bin_of(size):
    return bisect.bisect_left(BINS, size)


def compare_fct(d):
    ref = read_fct(d / "ref" / "fct.txt")
    ours = read_fct(d / "netsim" / "fct.txt")
    # netsim rounds start times to ps, the reference truncates them to ns: match within 1 ns.
    ours_by = ours
    per_bin = {i: ([], []) for i in range(len(BINS))}
    matched = 0
    for key, (fct, ideal) in ref.items():
        mine = ours_by.get(key)
        if mine is None:
            s, t, size, start = key
            mine = ours_by.get((s, t, size, start - 1)) or ours_by.get((s, t, size, start + 1))
        if mine is None:
            continue
        matched += 1
        b = bin_of(key[2])
        per_bin[b][0].append(fct / ideal)
        per_bin[b][1].append(mine[0] / ideal)
    rows = []
    for b, (r, n) in per_bin.items():
        if not r:
            continue
        row = {"bin": BIN_NAMES[b], "flows": len(r)}
        for q in (0.5, 0.95, 0.99):
            pr, pn = percentile(r, q), percentile(n, q)
            row[f"p{int(q * 100)}"] = (pr, pn, (pn - pr) / pr * 100)
        rows.append(row)
    return rows, {"reference": len(ref), "netsim": len(ours), "matched": matched}


def ref_queues(d):
    """{(node, port0): {kb: count}} from the reference's qlen file (last dump)."""
    dist = {}
    text = (d / "ref" / "qlen.txt").read_text().split("time: ")
    if not text or not text[-1].strip():
        return dist
    for line in text[-1].splitlines()[1:]:
        f = list(map(int, line.split()))
        dist[(f[0], f[1] - 1)] = {kb: c for kb, c in enumerate(f[2:]) if c}
    return dist


def netsim_queues(d, stop_s):
    """{(node, port): {kb: count}} over the flows' window, zeros included."""
    samples = {}
    times = set()
    start_ns = int(round((END_S - stop_s) * 1e9))
    with open(d / "netsim" / "queue_samples.csv") as f:
        for row in csv.DictReader(f):
            t = int(row["time_ns"])
            if t < start_ns:
                continue
            times.add(t)
            key = (int(row["node"]), int(row["port"]), t)
            samples[key] = samples.get(key, 0) + int(row["bytes"])
    return samples, times


def port_classes(d):
    """port class per (node, port0) from the topology file: tor-down, tor-up, agg-down, ..."""
    lines = (d / "topology.txt").read_text().split("\n")
    nodes, _, n_links = map(int, lines[0].split())
    switches = set(map(int, lines[1].split()))
    next_port = {}
    tier = {}
    links = [tuple(map(int, l.split()[:2])) for l in lines[2:2 + n_links]]
    for a, b in links:  # tier: 0 ToR (has hosts), else by distance
        if a not in switches:
            tier[b] = 0
        if b not in switches:
            tier[a] = 0
    for _ in range(3):
        for a, b in links:
            if a in switches and b in switches:
                if a in tier and b not in tier:
                    tier[b] = tier[a] + 1
                if b in tier and a not in tier:
                    tier[a] = tier[b] + 1
    names = {0: "tor", 1: "agg", 2: "core"}
    classes = {}
    for a, b in links:
        for x, y in ((a, b), (b, a)):
            p = next_port.get(x, 0)
            next_port[x] = p + 1
            if x in switches:
                up = y in switches and tier.get(y, 0) > tier.get(x, 0)
                classes[(x, p)] = f"{names.get(tier.get(x), 'sw')}-{'up' if up else 'down'}"
    return classes


def dist_stats(hist):
    total = sum(hist.values())
    if not total:
        return (0, 0, 0, 0)
    mean = sum(k * c for k, c in hist.items()) / total
    out = [mean]
    for q in (0.5, 0.99, 0.999):
        acc, target = 0, q * total
        for k in sorted(hist):
            acc += hist[k]
            if acc >= target:
                out.append(k)
                break
    return tuple(out)


def compare_queues(d, interval_ns, stop_s):
    classes = port_classes(d)
    ref = ref_queues(d)
    samples, times = netsim_queues(d, stop_s)
    n_times = max(len(times), int(round(stop_s * 1e9 / interval_ns)))
    ours = {}
    for (node, port, _t), b in samples.items():
        ours.setdefault((node, port), {}).setdefault(b // 1000, 0)
        ours[(node, port)][b // 1000] += 1
    per_class = {}
    for key, cls in classes.items():
        r = per_class.setdefault(cls, ({}, {}))
        for k, c in ref.get(key, {}).items():
            r[0][k] = r[0].get(k, 0) + c
        h = ours.get(key, {})
        nonzero = sum(h.values())
        for k, c in h.items():
            r[1][k] = r[1].get(k, 0) + c
        r[1][0] = r[1].get(0, 0) + max(0, n_times - nonzero)
    classes_out = {cls: (dist_stats(r), dist_stats(n)) for cls, (r, n) in sorted(per_class.items())}
    # Per port: the busiest ports of the reference, with netsim's figures for the same ports
    # (the same flows take the same paths, see docs/netsim-reference.md).
    def with_zeros(h):
        h = dict(h)
        h[0] = h.get(0, 0) + max(0, n_times - sum(h.values()))
        return h
    busiest = sorted((k for k in ref if dist_stats(ref[k])[0] > 0), key=lambda k: -dist_stats(ref[k])[0])[:8]
    ports = [(k, classes.get(k, "?"), dist_stats(ref[k]), dist_stats(with_zeros(ours.get(k, {}))))
             for k in busiest]
    return classes_out, ports


def compare_pfc(d):
    ref_pauses = 0
    for line in open(d / "ref" / "pfc.txt"):
        f = line.split()
        if len(f) == 5 and f[4] == "1":
            ref_pauses += 1
    ours = 0
    with open(d / "netsim" / "pfc_events.csv") as f:
        for row in csv.DictReader(f):
            if int(row["quanta"]) > 0:
                ours += 1
    return ref_pauses, ours


def netsim_counters(d):
    result = json.loads((d / "netsim" / "result.json").read_text())
    totals = result.get("totals", {})
    keep = {k: v for k, v in totals.items()
            if any(w in k for w in ("ecn", "cnp", "decrease", "pfc", "drop", "events"))}
    return keep


def report(case, d, timings, stop_s):
    rows, counts = compare_fct(d)
    print(f"\n## {case}: {counts['matched']} flows matched "
          f"(reference {counts['reference']} completed, netsim {counts['netsim']})")
    print(f"wall: reference {timings.get('ref', float('nan')):.1f} s, "
          f"netsim {timings.get('netsim', float('nan')):.1f} s\n")
    print("| bin | flows | p50 ref | p50 netsim | Δ | p95 ref | p95 netsim | Δ | p99 ref | p99 netsim | Δ |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for row in rows:
        cells = [row["bin"], str(row["flows"])]
        for q in ("p50", "p95", "p99"):
            r, n, delta = row[q]
            cells += [f"{r:.2f}", f"{n:.2f}", f"{delta:+.0f} %"]
            if row["flows"] >= 20:
                worst = max(worst, abs(delta))
        print("| " + " | ".join(cells) + " |")
    print(f"\nlargest |Δ| over bins with ≥ 20 flows: {worst:.1f} %")
    interval = 1000 if case == "incast" else 10000
    print("\nqueue (bytes of all priorities, KB; reference every 100 ns, netsim every "
          f"{interval // 1000} µs): mean / p50 / p99 / p99.9")
    print("| ports | reference | netsim |")
    print("|---|---|---|")
    classes, ports = compare_queues(d, interval, stop_s)
    fmt = lambda s: " / ".join(f"{x:.1f}" if isinstance(x, float) else str(x) for x in s)
    for cls, (r, n) in classes.items():
        print(f"| {cls} | {fmt(r)} | {fmt(n)} |")
    print("\nthe reference's busiest ports (node, port from 0), same statistics:")
    print("| port | class | reference | netsim |")
    print("|---|---|---|---|")
    for (node, port), cls, r, n in ports:
        print(f"| {node}:{port} | {cls} | {fmt(r)} | {fmt(n)} |")
    ref_p, our_p = compare_pfc(d)
    print(f"\nPFC pause frames: reference {ref_p} (received), netsim {our_p} (sent)")
    print(f"netsim counters (the reference exposes none without its packet trace): "
          f"{json.dumps(netsim_counters(d))}")
    return worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", help="the reference's simulation/ folder (or env HPCC_REF)")
    ap.add_argument("--hawkmesh", help="the hawkmesh binary (default $CARGO_TARGET_DIR/release/hawkmesh)")
    ap.add_argument("--out", default="out/hpcc-compare", help="work folder (default out/hpcc-compare)")
    ap.add_argument("--case", choices=["fat", "incast", "all"], default="all")
    ap.add_argument("--seed", type=int, default=1, help="seed of the generated flows and of netsim")
    ap.add_argument("--netsim-seed", type=int,
                    help="netsim's seed (ECN marking draws) if not --seed; the flows stay those of --seed")
    ap.add_argument("--reuse-ref", action="store_true",
                    help="keep the reference's results of an earlier run of the same inputs")
    ap.add_argument("--netsim-defaults", action="store_true",
                    help="leave netsim's ACK and CNP priorities at their defaults (control "
                         "priority) instead of the reference's (data priority); also for "
                         "hawkmesh builds older than nic.ack_priority")
    args = ap.parse_args()

    ref, why = find_reference(args.ref)
    if ref is None:
        print(f"hpcc-compare: {why}", file=sys.stderr)
        return 2
    binary = hawkmesh_binary(args.hawkmesh)
    if not binary.exists():
        print(f"hpcc-compare: {binary} not found: cargo build --release -p hawkmesh "
              "(or pass --hawkmesh)", file=sys.stderr)
        return 2
    cases = ["fat", "incast"] if args.case == "all" else [args.case]
    for case in cases:
        d = Path(args.out).resolve() / case
        d.mkdir(parents=True, exist_ok=True)
        stop_s = CASES[case](d, args.seed)
        timings = {}
        if not (args.reuse_ref and (d / "ref" / "fct.txt").exists()):
            if (d / "ref").exists():
                shutil.rmtree(d / "ref")
            timings["ref"] = run_reference(ref, d, stop_s)
        netsim_seed = args.seed if args.netsim_seed is None else args.netsim_seed
        timings["netsim"] = run_netsim(binary, d, stop_s, case, netsim_seed, args.netsim_defaults)
        report(case, d, timings, stop_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
