//! PARALEON in netsim (issue 26): every ToR's Elastic Sketch read and reset each monitor
//! interval λ_MI, the ternary flow states and the network-wide flow-size distribution
//! (FSD), the runtime metrics, the controller's KL trigger and guided annealing, and its
//! settings dispatched to every NIC and switch while the fabric runs.
//!
//! - The sketch is [`ElasticReference`] (the published algorithm the generated data plane
//!   implements, checked against it in `hawkmesh-dataplane`), one per ToR, fed by a
//!   [`SwitchPipeline`] with the RoCE data packets that enter the fabric at that ToR: the
//!   insert-once rule of PARALEON §III-B (only the first switch on the path counts a packet),
//!   which makes the network-wide FSD the plain sum of the ToRs' ([`Fsd::sum`]).
//! - Readout: the heavy part's flows and their packet estimates, times the ToR's mean data
//!   packet size in the interval (a switch counts bytes per port), into the ToR's
//!   [`TorMonitor`]; then the sketch is cleared.
//! - Metrics of an interval ([`IntervalMetrics`], PARALEON Eq. 1): the utilisation of each
//!   active host uplink (its NIC port's transmitted bytes), the normalised RTT of each NIC
//!   pair (the path's unloaded RTT over the RTT the transport measured, from the ACKs), and
//!   each device's PFC pause time as a share of the interval (the largest of its ports').
//! - Baselines beside PARALEON's FSD: naive Elastic Sketch (each interval alone) and sampled
//!   NetFlow (1 in N packets at the ToR, flows exported every export interval), both against
//!   the ground truth: the flows active in the interval classified by their real sizes.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use hawkmesh_dataplane::setup::{host_ports, is_tor};
use hawkmesh_dataplane::sketch::{distinct_flows, fingerprint, ElasticReference, SketchGeometry};
use hawkmesh_knobs::PARALEON_EXPERT;
use hawkmesh_netsim::hooks::{
    EgressActions, EgressMeta, HostEmit, HostHook, IngressActions, IngressMeta, RttSample,
    SwitchPipeline,
};
use hawkmesh_netsim::packet::{Packet, PacketKind};
use hawkmesh_netsim::scenario::WorkloadSpec;
use hawkmesh_netsim::time::NS;
use hawkmesh_netsim::{FlowRecord, LoadedScenario, PortCounters, SimResult, Simulation};
use hawkmesh_switch_agent::sketch::deployed_geometry;
use hawkmesh_tuner::controller::{Controller, ControllerConfig};
use hawkmesh_tuner::fsd::{accuracy, naive_fsd, truth_fsd, Fsd, MonitorConfig, TorMonitor};
use hawkmesh_tuner::sa::{defaults, SaConfig, Setting, Space, StepKind};
use hawkmesh_tuner::utility::IntervalMetrics;
use hawkmesh_wire::rng::SplitMix64;
use hawkmesh_wire::topology::{NodeId, NodeKind, PortNo};
use serde::Serialize;

/// How the knobs are chosen during a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Policy {
    /// A fixed setting, set at time 0: the NVIDIA defaults, the expert setting, a
    /// pretrained one.
    Static {
        /// Its name in reports.
        name: String,
        /// Knob values over the defaults.
        values: Vec<(String, f64)>,
    },
    /// The controller with PARALEON's annealing (guided, relaxed temperature).
    Paraleon,
    /// The controller with naive annealing (no guidance, standard schedule).
    NaiveSa,
}

impl Policy {
    /// The NVIDIA defaults.
    pub fn nvidia_default() -> Policy {
        Policy::Static {
            name: "nvidia-default".into(),
            values: Vec::new(),
        }
    }

    /// PARALEON Table I's expert setting.
    pub fn expert() -> Policy {
        Policy::Static {
            name: "expert".into(),
            values: PARALEON_EXPERT
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect(),
        }
    }

    /// Its name in reports.
    pub fn name(&self) -> String {
        match self {
            Policy::Static { name, .. } => name.clone(),
            Policy::Paraleon => "paraleon".into(),
            Policy::NaiveSa => "naive-sa".into(),
        }
    }
}

/// Settings of a tuned run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TuneConfig {
    /// λ_MI, ns.
    pub interval_ns: u64,
    /// The knobs' policy.
    pub policy: Policy,
    /// Seed of the annealing and of NetFlow's sampling.
    pub seed: u64,
    /// The monitor (τ, δ).
    pub monitor: MonitorConfig,
    /// The annealing schedule of [`Policy::Paraleon`] (Table III by default).
    pub sa: SaConfig,
    /// Elastic Sketch geometry (the generated program's by default).
    #[serde(skip)]
    pub sketch: SketchGeometry,
    /// NetFlow: one packet in this many is sampled.
    pub netflow_one_in: u64,
    /// NetFlow's export interval, ns (1 s; a shorter run exports at its end).
    pub netflow_export_ns: u64,
}

impl TuneConfig {
    /// PARALEON's settings (Table III) at monitor interval `interval_ns` for `policy`.
    pub fn new(policy: Policy, interval_ns: u64, seed: u64) -> Self {
        TuneConfig {
            interval_ns: interval_ns.max(1_000),
            sa: match policy {
                Policy::NaiveSa => SaConfig::naive(),
                _ => SaConfig::paraleon(),
            },
            policy,
            seed,
            monitor: MonitorConfig::default(),
            // The deployed program's sizes (generated constants), not a copy of them.
            sketch: deployed_geometry(),
            netflow_one_in: 100,
            netflow_export_ns: 1_000_000_000,
        }
    }
}

/// One monitor interval of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntervalRecord {
    /// The interval's end, µs.
    pub t_us: f64,
    /// KL(R_t, R_{t−1}) of the network-wide FSD.
    pub kl: f64,
    /// KL(R_t, settled): distance from what the setting in force was tuned for (None
    /// before a search has settled one).
    pub drift: Option<f64>,
    /// A search started.
    pub triggered: bool,
    /// No traffic: the controller skipped it.
    pub idle: bool,
    /// The utility measured (0–1), while tuning.
    pub utility: Option<f64>,
    /// The setting dispatched at its end, and why (None: the one in force stays).
    pub dispatched: Option<StepKind>,
    /// Data delivered to receivers, Gbit/s over the interval.
    pub goodput_gbps: f64,
    /// Mean RTT the transport measured, µs (None: no sample).
    pub mean_rtt_us: Option<f64>,
    /// Flows the ToRs' monitors saw (network-wide FSD).
    pub flows: f64,
    /// Elephant share of the FSD: PARALEON, naive Elastic Sketch, truth.
    pub elephant_share: (f64, f64, f64),
}

/// FCT slowdown of a flow-size bin.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlowdownBin {
    /// Flows up to this size, bytes.
    pub max_size: u64,
    /// Completed flows in the bin.
    pub flows: usize,
    /// Mean slowdown.
    pub mean: f64,
    /// 99.9th-percentile slowdown.
    pub p999: f64,
}

/// FSD accuracy (PARALEON §IV-B3: 1 − |elephant share − true share|) averaged over the
/// intervals with flows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct FsdAccuracy {
    /// PARALEON (ternary states over δ intervals).
    pub paraleon: f64,
    /// Naive Elastic Sketch (each interval alone).
    pub naive: f64,
    /// Sampled NetFlow at its export interval.
    pub netflow: f64,
    /// Intervals averaged.
    pub intervals: usize,
}

/// What a run measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TuneRun {
    /// The policy.
    pub policy: String,
    /// Every monitor interval.
    pub intervals: Vec<IntervalRecord>,
    /// Flows defined and completed.
    pub flows: (usize, usize),
    /// Mean FCT slowdown of the flows that started (unfinished ones at the slowdown they
    /// had reached when the run ended).
    pub mean_slowdown: f64,
    /// 99.9th-percentile FCT slowdown, over the same flows.
    pub p999_slowdown: f64,
    /// Per size bin.
    pub bins: Vec<SlowdownBin>,
    /// FSD accuracy.
    pub fsd: FsdAccuracy,
    /// Searches the controller started.
    pub searches: u64,
    /// The setting in force at the end, by knob.
    pub final_setting: Vec<(String, f64)>,
    /// The controller's best setting for the traffic at the end (None: a static policy).
    pub best_setting: Option<Vec<(String, f64)>>,
    /// The all-to-all workloads' rounds (a training job's collective steps).
    pub rounds: Rounds,
}

/// The collective's view of an all-to-all workload: a training step waits for its round's
/// last flow, so the round's completion time (first byte sent to last byte acknowledged)
/// is what the job sees, whatever the flows' own slowdowns.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Rounds {
    /// Rounds that started in the run.
    pub started: usize,
    /// Completion time of each round that finished, ms, in start order (several all-to-all
    /// workloads: the first's rounds, then the next's).
    pub done_ms: Vec<f64>,
}

impl Rounds {
    /// The rounds of the all-to-all `workloads` (indices into the scenario's) among
    /// `flows`: flows of one workload that started together are one round.
    pub fn of(flows: &[FlowRecord], workloads: &[usize]) -> Rounds {
        let mut rounds = Rounds::default();
        for &w in workloads {
            // start → (flows, flows finished, last finish)
            let mut by_start: BTreeMap<u64, (usize, usize, u64)> = BTreeMap::new();
            for f in flows.iter().filter(|f| f.workload == w) {
                if let Some(start) = f.start_ns {
                    let e = by_start.entry(start).or_default();
                    e.0 += 1;
                    if let Some(finish) = f.finish_ns {
                        e.1 += 1;
                        e.2 = e.2.max(finish);
                    }
                }
            }
            rounds.started += by_start.len();
            rounds.done_ms.extend(
                by_start
                    .iter()
                    .filter(|(_, (n, done, _))| n == done)
                    .map(|(start, (_, _, last))| last.saturating_sub(*start) as f64 / 1e6),
            );
        }
        rounds
    }

    /// Mean completion time of the first `n` rounds, ms (None: fewer finished).
    pub fn mean_of_first(&self, n: usize) -> Option<f64> {
        (n > 0 && self.done_ms.len() >= n).then(|| self.done_ms[..n].iter().sum::<f64>() / n as f64)
    }
}

/// Why a run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    /// The scenario does not build.
    #[error("scenario: {0}")]
    Scenario(String),
    /// The tuner refused its settings.
    #[error("tuner: {0}")]
    Tuner(String),
    /// netsim refused a setting.
    #[error("knobs: {0}")]
    Knobs(String),
}

/// What a ToR's pipeline saw in the current interval.
#[derive(Debug)]
struct TorState {
    sketch: ElasticReference,
    host_ports: HashSet<PortNo>,
    packets: u64,
    bytes: u64,
    /// netsim flow ids seen (ground truth: their sizes are known).
    active: HashSet<u32>,
    /// NetFlow: sampled packets per flow, and the flows' ids, in the export window.
    sampled: HashMap<u32, u64>,
    rng: SplitMix64,
    one_in: u64,
}

struct TorPipe(Rc<RefCell<TorState>>);

impl SwitchPipeline for TorPipe {
    fn ingress(&mut self, meta: &IngressMeta, packet: &mut Packet, _actions: &mut IngressActions) {
        if packet.kind != PacketKind::Data {
            return;
        }
        let mut s = self.0.borrow_mut();
        // Insert once: at the ToR, on the way in from a host (PARALEON §III-B).
        if !s.host_ports.contains(&meta.ingress_port) {
            return;
        }
        let t = packet.tuple;
        s.sketch
            .insert(fingerprint(t.src_ip, t.dst_ip, t.src_port, t.dst_port));
        s.packets += 1;
        s.bytes += u64::from(packet.payload);
        s.active.insert(packet.flow);
        let one_in = s.one_in;
        if s.rng.below(one_in) == 0 {
            *s.sampled.entry(packet.flow).or_insert(0) += 1;
        }
    }

    fn egress(&mut self, _meta: &EgressMeta, _packet: &mut Packet, _actions: &mut EgressActions) {}
}

/// The transport's RTT samples of the interval, per NIC pair.
#[derive(Debug, Default)]
struct RttLog {
    pairs: BTreeMap<(u32, u32), (f64, u32)>,
    sum_ns: f64,
    count: u64,
}

struct RttHook(Rc<RefCell<RttLog>>);

impl HostHook for RttHook {
    fn on_rtt_sample(&mut self, sample: &RttSample, _emit: &mut Vec<HostEmit>) {
        let rtt = sample.now.saturating_sub(sample.sent_at);
        if rtt == 0 {
            return;
        }
        let mut log = self.0.borrow_mut();
        let normalised = (sample.base_rtt as f64 / rtt as f64).min(1.0);
        let e = log
            .pairs
            .entry((sample.src_nic, sample.dst_nic))
            .or_insert((0.0, 0));
        e.0 += normalised;
        e.1 += 1;
        log.sum_ns += rtt as f64 / NS as f64;
        log.count += 1;
    }
}

/// Runs `loaded` with `config`'s policy; every ToR (a switch with host links) gets a sketch.
pub fn run(loaded: &LoadedScenario, config: &TuneConfig) -> Result<TuneRun, TuneError> {
    let mut sim = Simulation::new(loaded).map_err(|e| TuneError::Scenario(e.to_string()))?;
    let topology = sim.topology().clone();
    // The ToRs' pipelines.
    let mut tors: Vec<(NodeId, Rc<RefCell<TorState>>, TorMonitor)> = Vec::new();
    let mut seeds = SplitMix64::new(config.seed ^ 0x5EED_F10E);
    for node in topology.nodes.iter().filter(|n| n.kind == NodeKind::Switch) {
        if !is_tor(&topology, node.id) {
            continue;
        }
        let state = Rc::new(RefCell::new(TorState {
            sketch: ElasticReference::new(config.sketch),
            host_ports: host_ports(&topology, node.id).into_iter().collect(),
            packets: 0,
            bytes: 0,
            active: HashSet::new(),
            sampled: HashMap::new(),
            rng: SplitMix64::new(seeds.next_u64()),
            one_in: config.netflow_one_in.max(1),
        }));
        sim.set_pipeline(node.id, Box::new(TorPipe(state.clone())));
        tors.push((node.id, state, TorMonitor::new(config.monitor)));
    }
    let rtts = Rc::new(RefCell::new(RttLog::default()));
    sim.set_host_hook(Box::new(RttHook(rtts.clone())));
    // Devices and their ports; host uplinks with their speeds.
    let mut device_ports: BTreeMap<NodeId, Vec<PortNo>> = BTreeMap::new();
    let mut uplinks: Vec<(NodeId, PortNo, f64)> = Vec::new();
    for link in &topology.links {
        for end in [link.a, link.b] {
            device_ports.entry(end.node).or_default().push(end.port);
            if topology.nodes[end.node as usize].kind == NodeKind::Host {
                uplinks.push((end.node, end.port, link.gbps));
            }
        }
    }
    let gbps = uplinks.iter().map(|u| u.2).fold(0.0, f64::max).max(1.0);
    let space = Space::paraleon().map_err(|e| TuneError::Tuner(e.to_string()))?;
    let base = defaults(&space, gbps, &[]).map_err(|e| TuneError::Tuner(e.to_string()))?;
    let mut controller = match &config.policy {
        Policy::Static { values, .. } => {
            let pairs: Vec<(&str, f64)> = values.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            let setting = space
                .setting(&base, &pairs)
                .map_err(|e| TuneError::Tuner(e.to_string()))?;
            apply(&mut sim, &space, &setting)?;
            None
        }
        Policy::Paraleon | Policy::NaiveSa => {
            apply(&mut sim, &space, &base)?;
            let cc = ControllerConfig {
                sa: config.sa,
                ..ControllerConfig::default()
            };
            Some(
                Controller::new(cc, space.clone(), base.clone(), config.seed)
                    .map_err(|e| TuneError::Tuner(e.to_string()))?,
            )
        }
    };
    let s = &loaded.scenario;
    let end_ns = (s.duration_us * 1_000.0) as u64;
    // Counters at the previous interval's end: host uplinks (bytes) and every port (pauses).
    let mut previous: Counters = HashMap::new();
    let mut previous_pause: Counters = HashMap::new();
    let mut intervals = Vec::new();
    let mut delivered = sim.delivered_bytes();
    let mut accuracy_sum = FsdAccuracy::default();
    let mut netflow_window: HashMap<u32, u64> = HashMap::new();
    let mut netflow_truth: HashSet<u32> = HashSet::new();
    let mut netflow_next = config.netflow_export_ns;
    let mut netflow_scores: Vec<f64> = Vec::new();
    let interval_s = config.interval_ns as f64 / 1e9;
    let mut t = 0u64;
    while t < end_ns {
        t = (t + config.interval_ns).min(end_ns);
        sim.run_until(t * NS);
        // The ToRs' readouts and monitors.
        let mut parts = Vec::with_capacity(tors.len());
        let mut naive_parts = Vec::with_capacity(tors.len());
        let mut active: Vec<u32> = Vec::new();
        for (_, state, monitor) in tors.iter_mut() {
            let mut st = state.borrow_mut();
            let per_packet = if st.packets > 0 {
                st.bytes as f64 / st.packets as f64
            } else {
                0.0
            };
            let heavy = st.sketch.heavy_flows();
            let mut readout: Vec<(u64, u64)> = heavy
                .iter()
                .map(|(fp, packets)| (u64::from(*fp), (f64::from(*packets) * per_packet) as u64))
                .collect();
            // Naive Elastic Sketch has no memory: the heavy part alone.
            naive_parts.push(naive_fsd(readout.iter().copied(), config.monitor.tau_bytes));
            // The flows the monitor remembers that lost their heavy bucket this interval.
            for id in monitor.remembered() {
                let Ok(fp) = u32::try_from(id) else { continue };
                if heavy.contains_key(&fp) {
                    continue;
                }
                let packets = st.sketch.displaced(fp);
                if packets > 0 {
                    readout.push((id, (f64::from(packets) * per_packet) as u64));
                }
            }
            // And the flows that reached the heavy part but are neither held nor remembered.
            let reached = distinct_flows(1 << config.sketch.heavy_bits, st.sketch.empty_buckets());
            parts.push(monitor.update_sketch(readout, reached, st.bytes));
            st.sketch = ElasticReference::new(config.sketch);
            st.packets = 0;
            st.bytes = 0;
            active.extend(st.active.drain());
            let sampled: Vec<(u32, u64)> = st.sampled.drain().collect();
            for (flow, n) in sampled {
                *netflow_window.entry(flow).or_insert(0) += n;
            }
        }
        let fsd = Fsd::sum(&parts);
        let naive = Fsd::sum(&naive_parts);
        let sizes = active
            .iter()
            .filter_map(|f| sim.flow_posting(*f).map(|p| p.size));
        let truth = truth_fsd(sizes, config.monitor.tau_bytes);
        netflow_truth.extend(active.iter().copied());
        if !active.is_empty() {
            accuracy_sum.paraleon += accuracy(&fsd, &truth);
            accuracy_sum.naive += accuracy(&naive, &truth);
            accuracy_sum.intervals += 1;
        }
        if t >= netflow_next || t >= end_ns {
            netflow_next = netflow_next.saturating_add(config.netflow_export_ns);
            if !netflow_truth.is_empty() {
                // Sampled packets × the sampling rate × the payload per packet.
                let per_packet = u64::from(s.nic.mtu_payload_bytes.max(1));
                let estimated = netflow_window
                    .iter()
                    .map(|(f, n)| (u64::from(*f), n * config.netflow_one_in * per_packet));
                let measured = naive_fsd(estimated, config.monitor.tau_bytes);
                let sizes = netflow_truth
                    .iter()
                    .filter_map(|f| sim.flow_posting(*f).map(|p| p.size));
                let truth = truth_fsd(sizes, config.monitor.tau_bytes);
                netflow_scores.push(accuracy(&measured, &truth));
            }
            netflow_window.clear();
            netflow_truth.clear();
        }
        // Runtime metrics.
        let mut metrics = IntervalMetrics::default();
        for (node, port, link_gbps) in &uplinks {
            let (before, now) = read(&sim, &mut previous, *node, *port);
            let sent = now.tx_bytes.saturating_sub(before.tx_bytes);
            if sent > 0 {
                let u = sent as f64 * 8.0 / (link_gbps * 1e9 * interval_s);
                metrics.uplink_utilisation.push(u.min(1.0));
            }
        }
        for (node, ports) in &device_ports {
            let mut worst: f64 = 0.0;
            for port in ports {
                let (before, now) = read(&sim, &mut previous_pause, *node, *port);
                let paused: u64 = (0..8)
                    .map(|p| now.pause_duration_ns[p].saturating_sub(before.pause_duration_ns[p]))
                    .max()
                    .unwrap_or(0);
                worst = worst.max(paused as f64 / config.interval_ns as f64);
            }
            metrics.pause_fraction.push(worst.min(1.0));
        }
        let (mean_rtt_us, pairs) = {
            let mut log = rtts.borrow_mut();
            let mean = (log.count > 0).then(|| log.sum_ns / log.count as f64 / 1_000.0);
            let pairs: Vec<f64> = log
                .pairs
                .values()
                .map(|(sum, n)| sum / f64::from(*n))
                .collect();
            *log = RttLog::default();
            (mean, pairs)
        };
        metrics.normalised_rtt = pairs;
        let now_delivered = sim.delivered_bytes();
        let goodput_gbps = (now_delivered - delivered) as f64 * 8.0 / interval_s / 1e9;
        delivered = now_delivered;
        let mut record = IntervalRecord {
            t_us: t as f64 / 1_000.0,
            kl: 0.0,
            drift: None,
            triggered: false,
            idle: false,
            utility: None,
            dispatched: None,
            goodput_gbps,
            mean_rtt_us,
            flows: fsd.flows(),
            elephant_share: (
                fsd.elephant_share(),
                naive.elephant_share(),
                truth.elephant_share(),
            ),
        };
        if let Some(c) = controller.as_mut() {
            let outcome = c
                .interval(&fsd, &metrics)
                .map_err(|e| TuneError::Tuner(e.to_string()))?;
            record.kl = outcome.kl;
            record.drift = outcome.drift;
            record.triggered = outcome.triggered;
            record.idle = outcome.idle;
            record.utility = outcome.utility.map(|u| u.value);
            if let Some(step) = outcome.dispatch {
                apply(&mut sim, &space, &step.setting)?;
                record.dispatched = Some(step.kind);
            }
        }
        intervals.push(record);
    }
    let result = sim.result(&s.name, s.seed, &s.output.fct_bins);
    if accuracy_sum.intervals > 0 {
        let n = accuracy_sum.intervals as f64;
        accuracy_sum.paraleon /= n;
        accuracy_sum.naive /= n;
    }
    if !netflow_scores.is_empty() {
        accuracy_sum.netflow = netflow_scores.iter().sum::<f64>() / netflow_scores.len() as f64;
    }
    let best = controller.as_ref().and_then(|c| c.best());
    let final_setting = match &controller {
        Some(c) => c.in_force().clone(),
        None => match &config.policy {
            Policy::Static { values, .. } => {
                let pairs: Vec<(&str, f64)> =
                    values.iter().map(|(k, v)| (k.as_str(), *v)).collect();
                space
                    .setting(&base, &pairs)
                    .map_err(|e| TuneError::Tuner(e.to_string()))?
            }
            _ => base.clone(),
        },
    };
    let best_setting = best.map(|(b, _)| {
        space
            .named(&b)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
    });
    let alltoall: Vec<usize> = loaded
        .scenario
        .workload
        .iter()
        .enumerate()
        .filter(|(_, w)| matches!(w, WorkloadSpec::Alltoall { .. }))
        .map(|(i, _)| i)
        .collect();
    Ok(summarise(
        config.policy.name(),
        &alltoall,
        best_setting,
        intervals,
        &result,
        accuracy_sum,
        controller.as_ref().map_or(0, |c| c.searches()),
        space
            .named(&final_setting)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    ))
}

type Counters = HashMap<(NodeId, PortNo), PortCounters>;

/// A port's counters before (as last read) and now; remembers now.
fn read(
    sim: &Simulation,
    previous: &mut Counters,
    node: NodeId,
    port: PortNo,
) -> (PortCounters, PortCounters) {
    let now = sim.port_counters(node, port).unwrap_or_default();
    let before = previous
        .insert((node, port), now.clone())
        .unwrap_or_default();
    (before, now)
}

fn apply(sim: &mut Simulation, space: &Space, setting: &Setting) -> Result<(), TuneError> {
    sim.set_knobs(&space.named(setting))
        .map_err(TuneError::Knobs)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// The FCT slowdown a flow is scored with in a run that ended at `end_ns`: a finished
/// flow's own, an unfinished one's the slowdown it had reached at the end (a lower bound),
/// none for a flow that never started. Scoring only the finished flows would reward a
/// setting that leaves its worst flows stuck.
pub fn scored_slowdown(f: &FlowRecord, end_ns: u64) -> Option<f64> {
    f.slowdown.or_else(|| {
        f.start_ns.map(|start| {
            (end_ns.saturating_sub(start) as f64 / f.ideal_fct_ns.max(1) as f64).max(1.0)
        })
    })
}

#[allow(clippy::too_many_arguments)]
fn summarise(
    policy: String,
    alltoall: &[usize],
    best_setting: Option<Vec<(String, f64)>>,
    intervals: Vec<IntervalRecord>,
    result: &SimResult,
    fsd: FsdAccuracy,
    searches: u64,
    final_setting: Vec<(String, f64)>,
) -> TuneRun {
    let end = result.duration_ns;
    let scored = |f: &FlowRecord| scored_slowdown(f, end);
    let mut all: Vec<f64> = result.flows.iter().filter_map(scored).collect();
    all.sort_by(f64::total_cmp);
    let mean = if all.is_empty() {
        0.0
    } else {
        all.iter().sum::<f64>() / all.len() as f64
    };
    let mut bins = Vec::new();
    let mut lower = 0;
    for max in result.fct_bins.iter().map(|b| b.max_size) {
        let mut s: Vec<f64> = result
            .flows
            .iter()
            .filter(|f| f.size > lower && f.size <= max)
            .filter_map(scored)
            .collect();
        s.sort_by(f64::total_cmp);
        bins.push(SlowdownBin {
            max_size: max,
            flows: s.len(),
            mean: if s.is_empty() {
                0.0
            } else {
                s.iter().sum::<f64>() / s.len() as f64
            },
            p999: percentile(&s, 0.999),
        });
        lower = max;
    }
    TuneRun {
        policy,
        intervals,
        flows: (result.totals.flows, result.totals.flows_completed),
        mean_slowdown: mean,
        p999_slowdown: percentile(&all, 0.999),
        bins,
        fsd,
        searches,
        final_setting,
        best_setting,
        rounds: Rounds::of(&result.flows, alltoall),
    }
}
