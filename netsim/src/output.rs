//! Results of a run: per-flow FCT and slowdown, PFC and drop summaries, port counters,
//! queue samples, goodput, and the ground truth; written as JSON for machines, the HPCC
//! `fct.txt` format, CSV for the large series, and a short text summary for people.

use crate::packet::FiveTuple;
use crate::sim::{PfcEvent, PortCounters, QueueSample, Simulation};
use crate::time::NS;
use crate::truth::{compute_spreading, Anomaly};
use hawkmesh_wire::topology::{FabricTopology, NodeId, PortNo, PortRef};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// One flow's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct FlowRecord {
    /// Flow index.
    pub id: u32,
    /// Sending host name.
    pub src: String,
    /// Receiving host name.
    pub dst: String,
    /// 5-tuple as `sip:sport->dip:dport`.
    pub tuple: String,
    /// The 5-tuple.
    #[serde(skip)]
    pub five_tuple: FiveTuple,
    /// Priority.
    pub priority: u8,
    /// Bytes.
    pub size: u64,
    /// Start, ns (None: an all-to-all round that never started).
    pub start_ns: Option<u64>,
    /// Completion (last byte acknowledged), ns.
    pub finish_ns: Option<u64>,
    /// Flow completion time, ns.
    pub fct_ns: Option<u64>,
    /// FCT of the flow alone on the fabric, ns.
    pub ideal_fct_ns: u64,
    /// fct / ideal.
    pub slowdown: Option<f64>,
    /// Base RTT of its path, ns.
    pub base_rtt_ns: u64,
    /// Bytes sent again (go-back-N).
    pub retransmitted_bytes: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// CNPs the receiver sent.
    pub cnps: u64,
    /// CE-marked packets received.
    pub ce_marked: u64,
    /// Workload index.
    pub workload: usize,
}

/// FCT slowdown statistics for one flow-size bin.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FctBin {
    /// Flows up to this size (bytes) and above the previous bin.
    pub max_size: u64,
    /// Completed flows in the bin.
    pub flows: usize,
    /// Mean slowdown.
    pub mean: f64,
    /// Median slowdown.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Counters of one port with its identity.
#[derive(Clone, Debug, Serialize)]
pub struct PortRecord {
    /// Node id.
    pub node: NodeId,
    /// Node name.
    pub name: String,
    /// Port.
    pub port: PortNo,
    /// Node at the other end.
    pub peer: String,
    /// The counters.
    #[serde(flatten)]
    pub counters: PortCounters,
}

/// Totals.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Totals {
    /// Flows defined.
    pub flows: usize,
    /// Flows started.
    pub flows_started: usize,
    /// Flows completed.
    pub flows_completed: usize,
    /// PAUSE frames with non-zero quanta sent by switches and NICs.
    pub pause_frames: u64,
    /// XON frames sent.
    pub resume_frames: u64,
    /// Ports whose transmitter was paused at some time.
    pub paused_ports: usize,
    /// Sum of pause durations over ports and priorities, ns.
    pub pause_duration_ns: u64,
    /// Packets dropped for lack of buffer.
    pub drops_buffer: u64,
    /// Packets lost on down links.
    pub drops_link_down: u64,
    /// Packets lost to random loss.
    pub drops_random_loss: u64,
    /// Packets dropped by ACL faults.
    pub drops_acl: u64,
    /// Packets dropped at TTL 0.
    pub drops_ttl: u64,
    /// Packets without a route.
    pub drops_no_route: u64,
    /// Packets dropped by pipelines.
    pub drops_pipeline: u64,
    /// ECN marks.
    pub ecn_marked: u64,
    /// Application bytes delivered in order.
    pub delivered_bytes: u64,
    /// Events processed.
    pub events: u64,
}

/// Everything a run produced.
#[derive(Clone, Debug, Serialize)]
pub struct SimResult {
    /// Scenario name.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Simulated time, ns.
    pub duration_ns: u64,
    /// Totals.
    pub totals: Totals,
    /// FCT slowdown per size bin.
    pub fct_bins: Vec<FctBin>,
    /// Injected anomalies with their PFC spreading trees.
    pub ground_truth: Vec<Anomaly>,
    /// Per-flow results.
    pub flows: Vec<FlowRecord>,
    /// Per-port counters.
    pub ports: Vec<PortRecord>,
    /// (time ns, cumulative delivered bytes) at every sample.
    pub goodput: Vec<(u64, u64)>,
    /// PFC frames sent (every frame when `output.pfc_events`, else XOFF only).
    #[serde(skip)]
    pub pfc_events: Vec<PfcEvent>,
    /// Queue-depth samples.
    #[serde(skip)]
    pub queue_samples: Vec<QueueSample>,
    /// The fabric.
    #[serde(skip)]
    pub topology: FabricTopology,
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

impl Simulation {
    /// Collects the results (call after [`Simulation::run`]).
    pub fn result(&self, scenario_name: &str, seed: u64, bins: &[u64]) -> SimResult {
        let end = self.now;
        let name = |nic: u32| {
            let host = self.nics[nic as usize].host;
            self.topo.nodes[host as usize].name.clone()
        };
        let flows: Vec<FlowRecord> = self
            .flows
            .iter()
            .enumerate()
            .map(|(id, f)| {
                let fct = f.finished_at.zip(f.start).map(|(done, start)| done - start);
                FlowRecord {
                    id: id as u32,
                    src: name(f.src_nic),
                    dst: name(f.dst_nic),
                    tuple: f.tuple.to_string(),
                    five_tuple: f.tuple,
                    priority: f.priority,
                    size: f.size,
                    start_ns: f.start.filter(|s| *s <= end).map(|s| s / NS),
                    finish_ns: f.finished_at.map(|t| t / NS),
                    fct_ns: fct.map(|t| t / NS),
                    ideal_fct_ns: f.ideal_fct / NS,
                    slowdown: fct.map(|t| (t as f64 / f.ideal_fct.max(1) as f64).max(1.0)),
                    base_rtt_ns: f.base_rtt / NS,
                    retransmitted_bytes: f.retransmitted_bytes,
                    timeouts: f.timeouts,
                    cnps: f.cnps_sent,
                    ce_marked: f.ce_received,
                    workload: f.workload,
                }
            })
            .collect();
        let mut fct_bins = Vec::new();
        let mut lower = 0;
        for max in bins {
            let mut slowdowns: Vec<f64> = flows
                .iter()
                .filter(|f| f.size > lower && f.size <= *max)
                .filter_map(|f| f.slowdown)
                .collect();
            slowdowns.sort_by(|a, b| a.total_cmp(b));
            let mean = if slowdowns.is_empty() {
                0.0
            } else {
                slowdowns.iter().sum::<f64>() / slowdowns.len() as f64
            };
            fct_bins.push(FctBin {
                max_size: *max,
                flows: slowdowns.len(),
                mean,
                p50: percentile(&slowdowns, 0.5),
                p95: percentile(&slowdowns, 0.95),
                p99: percentile(&slowdowns, 0.99),
            });
            lower = *max;
        }
        let mut totals = Totals {
            flows: flows.len(),
            flows_started: flows.iter().filter(|f| f.start_ns.is_some()).count(),
            flows_completed: flows.iter().filter(|f| f.fct_ns.is_some()).count(),
            delivered_bytes: self.delivered_bytes,
            events: self.events.processed(),
            ..Totals::default()
        };
        let mut ports = Vec::with_capacity(self.ports.len());
        for p in &self.ports {
            let counters = p.counters_at(end);
            let mut paused = false;
            for prio in 0..8 {
                let total = counters.pause_duration_ns[prio];
                paused |= total > 0;
                totals.pause_duration_ns += total;
            }
            totals.paused_ports += paused as usize;
            totals.drops_buffer += counters.drops_buffer;
            totals.drops_link_down += counters.drops_link_down;
            totals.drops_random_loss += counters.drops_random_loss;
            totals.drops_acl += counters.drops_acl;
            totals.drops_ttl += counters.drops_ttl;
            totals.drops_no_route += counters.drops_no_route;
            totals.drops_pipeline += counters.drops_pipeline;
            totals.ecn_marked += counters.ecn_marked;
            let peer = &self.ports[p.peer as usize];
            ports.push(PortRecord {
                node: p.node,
                name: self.topo.nodes[p.node as usize].name.clone(),
                port: p.local,
                peer: self.topo.nodes[peer.node as usize].name.clone(),
                counters,
            });
        }
        for event in &self.pfc_log {
            if event.quanta > 0 {
                totals.pause_frames += 1;
            } else {
                totals.resume_frames += 1;
            }
        }
        let mut ground_truth = self.anomalies.clone();
        for (anomaly, origins) in ground_truth.iter_mut().zip(&self.anomaly_origins) {
            if anomaly.kind == crate::truth::AnomalyKind::IncastBurst {
                let last = anomaly
                    .root_cause_flows
                    .iter()
                    .filter_map(|f| flows[*f as usize].finish_ns)
                    .max();
                let all_done = anomaly
                    .root_cause_flows
                    .iter()
                    .all(|f| flows[*f as usize].finish_ns.is_some());
                anomaly.end_ns = if all_done {
                    last.unwrap_or(end / NS)
                } else {
                    end / NS
                };
                if let Some(workload) = anomaly.workload {
                    let peaks: Vec<(PortRef, u64)> = self
                        .incast_queues
                        .iter()
                        .enumerate()
                        .filter_map(|(global, list)| {
                            let (_, _, peak) = list.iter().find(|e| e.0 == workload)?;
                            let p = &self.ports[global];
                            Some((
                                PortRef {
                                    node: p.node,
                                    port: p.local,
                                },
                                *peak,
                            ))
                        })
                        .collect();
                    anomaly.initial_ports =
                        crate::truth::incast_congestion_points(&anomaly.initial_ports, &peaks);
                    anomaly.queue_peaks = peaks;
                }
            }
            compute_spreading(anomaly, origins, &self.pfc_log, &self.topo);
        }
        SimResult {
            scenario: scenario_name.to_string(),
            seed,
            duration_ns: end / NS,
            totals,
            fct_bins,
            ground_truth,
            flows,
            ports,
            goodput: self.goodput.iter().map(|(t, b)| (t / NS, *b)).collect(),
            pfc_events: self
                .pfc_log
                .iter()
                .filter(|e| self.p.record_pfc_events || e.quanta > 0)
                .cloned()
                .collect(),
            queue_samples: self.queue_samples.clone(),
            topology: self.topo.clone(),
        }
    }
}

/// Why writing outputs failed.
#[derive(Debug, thiserror::Error)]
#[error("writing {path}: {source}")]
pub struct OutputError {
    /// The file.
    pub path: String,
    /// The I/O error.
    #[source]
    pub source: std::io::Error,
}

impl SimResult {
    /// A short text summary for people.
    pub fn summary(&self) -> String {
        let t = &self.totals;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "scenario {} (seed {}), {} µs simulated, {} events",
            self.scenario,
            self.seed,
            self.duration_ns / 1000,
            t.events
        );
        let _ = writeln!(
            s,
            "flows: {} defined, {} started, {} completed; {:.3} GB delivered",
            t.flows,
            t.flows_started,
            t.flows_completed,
            t.delivered_bytes as f64 / 1e9
        );
        let _ = writeln!(
            s,
            "PFC: {} PAUSE / {} RESUME frames, {} ports paused, {:.1} µs paused in total",
            t.pause_frames,
            t.resume_frames,
            t.paused_ports,
            t.pause_duration_ns as f64 / 1000.0
        );
        let _ = writeln!(
            s,
            "drops: buffer {}, link-down {}, random-loss {}, acl {}, ttl {}, no-route {}, pipeline {}; ECN marks {}",
            t.drops_buffer, t.drops_link_down, t.drops_random_loss, t.drops_acl, t.drops_ttl, t.drops_no_route, t.drops_pipeline, t.ecn_marked
        );
        let _ = writeln!(s, "FCT slowdown by flow size:");
        let _ = writeln!(
            s,
            "  {:>12} {:>7} {:>8} {:>8} {:>8} {:>8}",
            "size ≤", "flows", "mean", "p50", "p95", "p99"
        );
        for bin in &self.fct_bins {
            let label = if bin.max_size == u64::MAX {
                "∞".to_string()
            } else {
                bin.max_size.to_string()
            };
            let _ = writeln!(
                s,
                "  {:>12} {:>7} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                label, bin.flows, bin.mean, bin.p50, bin.p95, bin.p99
            );
        }
        for anomaly in &self.ground_truth {
            let _ = writeln!(
                s,
                "injected {:?} at {} µs: {} (PFC spread to {} ports)",
                anomaly.kind,
                anomaly.start_ns / 1000,
                anomaly.description,
                anomaly.paused_ports.len()
            );
        }
        s
    }

    /// The HPCC reference's `fct.txt` lines: `sip dip sport dport size start_ns fct_ns
    /// standalone_fct_ns` (IPs as 8 hex digits), completed flows only.
    pub fn fct_txt(&self) -> String {
        let mut s = String::new();
        for f in &self.flows {
            if let (Some(start), Some(fct)) = (f.start_ns, f.fct_ns) {
                let t = &f.five_tuple;
                let _ = writeln!(
                    s,
                    "{:08x} {:08x} {} {} {} {} {} {}",
                    u32::from_be_bytes(t.src_ip),
                    u32::from_be_bytes(t.dst_ip),
                    t.src_port,
                    t.dst_port,
                    f.size,
                    start,
                    fct,
                    f.ideal_fct_ns
                );
            }
        }
        s
    }

    /// Writes `result.json`, `summary.txt`, `fct.txt`, `pfc_events.csv`, `queue_samples.csv`,
    /// `ground_truth.json` and `topology.json` into `dir` (created if needed).
    pub fn write(&self, dir: &Path) -> Result<(), OutputError> {
        let wrap = |path: &Path| {
            let path = path.display().to_string();
            move |source| OutputError {
                path: path.clone(),
                source,
            }
        };
        std::fs::create_dir_all(dir).map_err(wrap(dir))?;
        let write = |name: &str, bytes: &[u8]| -> Result<(), OutputError> {
            let path = dir.join(name);
            let mut file = std::fs::File::create(&path).map_err(wrap(&path))?;
            file.write_all(bytes).map_err(wrap(&path))
        };
        let json = |value: &dyn erased::Json| value.to_json();
        write("result.json", json(self).as_bytes())?;
        write("ground_truth.json", json(&self.ground_truth).as_bytes())?;
        write("topology.json", json(&self.topology).as_bytes())?;
        write("summary.txt", self.summary().as_bytes())?;
        write("fct.txt", self.fct_txt().as_bytes())?;
        let mut csv = String::from("time_ns,node,name,port,priority,quanta\n");
        for e in &self.pfc_events {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{}",
                e.time_ns,
                e.node,
                self.topology.nodes[e.node as usize].name,
                e.port,
                e.priority,
                e.quanta
            );
        }
        write("pfc_events.csv", csv.as_bytes())?;
        let mut csv = String::from("time_ns,node,name,port,priority,bytes\n");
        for q in &self.queue_samples {
            let _ = writeln!(
                csv,
                "{},{},{},{},{},{}",
                q.time_ns,
                q.node,
                self.topology.nodes[q.node as usize].name,
                q.port,
                q.priority,
                q.bytes
            );
        }
        write("queue_samples.csv", csv.as_bytes())
    }
}

mod erased {
    /// Pretty JSON of anything serializable (serialization of these plain types cannot fail;
    /// a failure is reported inside the JSON rather than lost).
    pub trait Json {
        fn to_json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> String {
            serde_json::to_string_pretty(self)
                .unwrap_or_else(|e| format!("{{\"serialization_error\": \"{e}\"}}"))
        }
    }
}
