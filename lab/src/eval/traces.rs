//! Randomised evaluation traces (HAWKEYE §4.1): the K=4 fat-tree (20 switches, 16 hosts,
//! 100 Gbit/s, 2 µs links), WebSearch Poisson background at a load drawn per trace, and one
//! injected anomaly of a class per trace.
//!
//! A trace is a [`TraceSpec`]: everything random is drawn from the master seed, the class,
//! the trace index and the attempt (so the same seed always gives the same traces), and the
//! spec is written out as a scenario file ([`TraceSpec::to_toml`]) which is what runs — the
//! file can be run again with `hawkmesh sim run`.
//!
//! Fat-tree naming (netsim's `fat_tree`, k = 4): host `h{i}` hangs off `tor{i/2}`; pod `p`
//! has `tor{2p}`, `tor{2p+1}`, `agg{2p}`, `agg{2p+1}`; `agg{2p+j}` links to `core{2j}` and
//! `core{2j+1}`.
//!
//! How each class is built:
//! - **PFC backpressure**: 4–12 random senders burst 100–500 KB each into a random receiver
//!   at line rate (no congestion control), 3 MB switch buffers: the receiver's ToR port is
//!   the initial congestion point and PFC spreads up the tree.
//! - **PFC storm**: a random host keeps sending PAUSE for 400–900 µs while 2–4 flows head
//!   to it (started just before).
//! - **In-loop deadlock**: static routes for a destination host D bounce its traffic between
//!   an aggregation and a core switch (or around agg→core→agg→core, four switches); 2–4
//!   flows to D are steered into the loop and congest it themselves.
//! - **Out-of-loop deadlock**: the same kind of two-switch loop for D, and a congestion point
//!   outside it — an incast into, or a PAUSE-injecting, host H in another pod — whose PFC
//!   reaches the loop through one flow to H steered over the loop's agg→core link; flows to D
//!   enter the loop from a third pod only after that pause has arrived, so the cyclic
//!   dependency closes because of the outside initiator.
//! - **Flow contention**: 4–12 senders send 150–500 KB each to a random receiver with DCQCN
//!   and 32 MB buffers: the queue builds at the receiver's ToR port without PFC.
//!
//! The host D of a routing loop takes no part in the background traffic (a loop amplifies
//! every packet ~32-fold until its TTL runs out, which would make any background flow to D a
//! second anomaly).

use super::fabrics::{FabricSpec, FabricView, Family};
use super::EvalError;
use hawkmesh_netsim::rng::Rng;
use hawkmesh_netsim::{LoadedScenario, Scenario};
use hawkmesh_wire::topology::NodeId;
use serde::Serialize;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

/// Hosts of the K=4 fat-tree.
pub const HOSTS: u32 = 16;
/// Pods of the K=4 fat-tree.
pub const PODS: u32 = 4;
/// Simulated time of every trace, µs.
pub const TRACE_DURATION_US: f64 = 2000.0;

/// The anomaly classes of the evaluation (HAWKEYE Table 2 / §4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnomalyClass {
    /// PFC backpressure from a micro-burst incast.
    PfcBackpressure,
    /// PFC storm from host PAUSE injection.
    PfcStorm,
    /// Deadlock whose initiator is in the loop.
    DeadlockInLoop,
    /// Deadlock whose initiator is outside the loop.
    DeadlockOutOfLoop,
    /// Normal flow contention (queueing without PFC).
    FlowContention,
    /// A receiver NIC draining below line rate, pausing its ToR (not an injection).
    SlowReceiver,
}

impl AnomalyClass {
    /// Every class, in report order.
    pub const ALL: [AnomalyClass; 6] = [
        AnomalyClass::PfcBackpressure,
        AnomalyClass::PfcStorm,
        AnomalyClass::DeadlockInLoop,
        AnomalyClass::DeadlockOutOfLoop,
        AnomalyClass::FlowContention,
        AnomalyClass::SlowReceiver,
    ];

    /// Name on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            AnomalyClass::PfcBackpressure => "pfc-backpressure",
            AnomalyClass::PfcStorm => "pfc-storm",
            AnomalyClass::DeadlockInLoop => "deadlock-in-loop",
            AnomalyClass::DeadlockOutOfLoop => "deadlock-out-of-loop",
            AnomalyClass::FlowContention => "flow-contention",
            AnomalyClass::SlowReceiver => "slow-receiver",
        }
    }

    /// Human title.
    pub fn title(self) -> &'static str {
        match self {
            AnomalyClass::PfcBackpressure => "PFC backpressure (micro-burst incast)",
            AnomalyClass::PfcStorm => "PFC storm (host PAUSE injection)",
            AnomalyClass::DeadlockInLoop => "deadlock, initiator in loop",
            AnomalyClass::DeadlockOutOfLoop => "deadlock, initiator out of loop",
            AnomalyClass::FlowContention => "normal flow contention",
            AnomalyClass::SlowReceiver => "slow receiver (drain-rate limit)",
        }
    }

    /// Parses a class name (`pfc-backpressure`, ...).
    pub fn parse(text: &str) -> Result<AnomalyClass, EvalError> {
        let wanted = text.trim().to_ascii_lowercase().replace('_', "-");
        AnomalyClass::ALL
            .into_iter()
            .find(|c| c.name() == wanted)
            .ok_or_else(|| {
                EvalError::Config(format!(
                    "unknown anomaly class {text:?}; the classes are {}",
                    AnomalyClass::ALL.map(AnomalyClass::name).join(", ")
                ))
            })
    }

    fn stream(self) -> u64 {
        match self {
            AnomalyClass::PfcBackpressure => 1,
            AnomalyClass::PfcStorm => 2,
            AnomalyClass::DeadlockInLoop => 3,
            AnomalyClass::DeadlockOutOfLoop => 4,
            AnomalyClass::FlowContention => 5,
            AnomalyClass::SlowReceiver => 6,
        }
    }
}

impl std::fmt::Display for AnomalyClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The anomaly's incast workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IncastPart {
    /// Sender hosts.
    pub senders: Vec<String>,
    /// Receiver host.
    pub receiver: String,
    /// Bytes per sender.
    pub size_bytes: u64,
    /// Start, µs.
    pub start_us: f64,
    /// DCQCN on these flows.
    pub congestion_control: bool,
    /// NIC (rail) of the senders and the receiver.
    #[serde(skip_serializing_if = "is_zero")]
    pub nic: u32,
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// One extra flow of the anomaly (victims of a storm, loop traffic, a steered flow).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FlowPart {
    /// Sender host.
    pub src: String,
    /// Receiver host.
    pub dst: String,
    /// Bytes.
    pub size_bytes: u64,
    /// Start, µs.
    pub start_us: f64,
    /// DCQCN on this flow.
    pub congestion_control: bool,
    /// Sender NIC.
    #[serde(skip_serializing_if = "is_zero")]
    pub src_nic: u32,
    /// Receiver NIC.
    #[serde(skip_serializing_if = "is_zero")]
    pub dst_nic: u32,
}

/// A static route of the anomaly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoutePart {
    /// Switch.
    pub switch: String,
    /// Destination host.
    pub dst: String,
    /// Only traffic to this NIC of the destination (its rail); every NIC when `None`.
    pub nic: Option<u32>,
    /// Next hop.
    pub via: String,
    /// When it takes effect, µs.
    pub start_us: u64,
}

/// A host injecting PAUSE frames.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StormPart {
    /// The host.
    pub host: String,
    /// Start, µs.
    pub start_us: f64,
    /// Duration, µs.
    pub duration_us: f64,
    /// The NIC.
    #[serde(skip_serializing_if = "is_zero")]
    pub nic: u32,
}

/// A receiver NIC draining below line rate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlowPart {
    /// The host.
    pub host: String,
    /// The NIC.
    pub nic: u32,
    /// Drain rate, Gbit/s.
    pub drain_gbps: f64,
    /// Start, µs.
    pub start_us: f64,
    /// Duration, µs.
    pub duration_us: f64,
}

/// A second anomaly running at the same time elsewhere in the fabric (drawn families only):
/// its own flows and fault, not judged — the analyzer must keep it apart from the trace's
/// anomaly.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConcurrentPart {
    /// `storm` (the host injects PAUSE) or `incast` (the flows burst into the host at line
    /// rate).
    pub kind: String,
    /// The host.
    pub host: String,
    /// Its NIC.
    pub nic: u32,
    /// The flows toward it.
    pub flows: Vec<FlowPart>,
    /// Start, µs.
    pub start_us: f64,
    /// Duration of a storm, µs.
    pub duration_us: f64,
}

/// What starts an out-of-loop deadlock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Initiator {
    /// An incast (flow contention) outside the loop.
    Incast,
    /// A host injecting PAUSE outside the loop.
    Storm,
}

/// One randomised trace.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceSpec {
    /// `<class>-<index>`, e.g. `pfc-storm-003`.
    pub id: String,
    /// The class.
    pub class: AnomalyClass,
    /// Index within the class.
    pub index: u32,
    /// The fabric.
    pub fabric: FabricSpec,
    /// Attempt (a trace whose anomaly did not materialise is drawn again).
    pub attempt: u32,
    /// Scenario seed (background traffic, ECMP hashing, ECN marking).
    pub seed: u64,
    /// Background WebSearch load.
    pub load: f64,
    /// Simulated time, µs.
    pub duration_us: f64,
    /// Switch buffer, MB.
    pub buffer_mb: f64,
    /// When the anomaly starts, µs.
    pub anomaly_start_us: f64,
    /// Hosts of the background traffic (empty = all).
    pub background_hosts: Vec<String>,
    /// The anomaly's incast.
    pub incast: Option<IncastPart>,
    /// Extra flows.
    pub flows: Vec<FlowPart>,
    /// Static routes.
    pub routes: Vec<RoutePart>,
    /// PAUSE injection.
    pub storm: Option<StormPart>,
    /// A slow receiver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow: Option<SlowPart>,
    /// Switches of the routing loop, in order.
    pub loop_switches: Vec<String>,
    /// When the loop's routes take effect, µs.
    pub loop_start_us: u64,
    /// Out-of-loop deadlocks: what starts it.
    pub initiator: Option<Initiator>,
    /// One line for people.
    pub description: String,
    /// A concurrent anomaly elsewhere (not judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrent: Option<ConcurrentPart>,
    /// Why the anomaly could not be placed on the drawn fabric (the attempt is drawn again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unplaced: Option<String>,
}

fn host(i: u32) -> String {
    format!("h{i}")
}
fn pod_of(h: u32) -> u32 {
    h / 4
}
fn tor_of(h: u32) -> String {
    format!("tor{}", h / 2)
}
fn agg(pod: u32, j: u32) -> String {
    format!("agg{}", 2 * pod + j)
}
fn core(j: u32, c: u32) -> String {
    format!("core{}", 2 * j + c)
}

/// Random choices for one trace.
struct Draw {
    rng: Rng,
}

impl Draw {
    fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.rng.next_f64()
    }
    /// Integer in `low..=high`.
    fn int(&mut self, low: u64, high: u64) -> u64 {
        low + self.rng.below(high - low + 1)
    }
    fn pick(&mut self, from: &[u32]) -> u32 {
        from[self.rng.below(from.len() as u64) as usize]
    }
    /// `count` distinct elements of `from`, in drawing order.
    fn sample(&mut self, from: &[u32], count: usize) -> Vec<u32> {
        let mut pool = from.to_vec();
        let mut out = Vec::new();
        while out.len() < count && !pool.is_empty() {
            let i = self.rng.below(pool.len() as u64) as usize;
            out.push(pool.remove(i));
        }
        out
    }
    fn pod_except(&mut self, except: &[u32]) -> u32 {
        let pods: Vec<u32> = (0..PODS).filter(|p| !except.contains(p)).collect();
        self.pick(&pods)
    }
    fn hosts_of_pod(pod: u32) -> Vec<u32> {
        (pod * 4..pod * 4 + 4).collect()
    }
}

/// Adds a route unless one for the same (switch, destination) exists.
fn add_route(routes: &mut Vec<RoutePart>, switch: String, dst: &str, via: String, start_us: u64) {
    add_nic_route(routes, switch, (dst, None), via, start_us);
}

/// Adds a route to one NIC of a host (`None`: all of them) unless one for the same
/// (switch, destination, NIC) exists.
fn add_nic_route(
    routes: &mut Vec<RoutePart>,
    switch: String,
    (dst, nic): (&str, Option<u32>),
    via: String,
    start_us: u64,
) {
    if !routes
        .iter()
        .any(|r| r.switch == switch && r.dst == dst && r.nic == nic)
    {
        routes.push(RoutePart {
            switch,
            dst: dst.to_string(),
            nic,
            via,
            start_us,
        });
    }
}

/// `count` of `senders` each start a 1–3 MB flow to `dst` 10–60 µs before `start` (the
/// traffic a storm or a slow receiver meets), on NIC 0 of the K=4 fabric.
fn flows_toward(
    spec: &mut TraceSpec,
    d: &mut Draw,
    senders: &[u32],
    dst: u32,
    count: usize,
    start: f64,
) {
    for src in d.sample(senders, count) {
        let size = d.int(1000, 3000) * 1000;
        let lead = d.int(10, 60) as f64;
        spec.flows.push(FlowPart {
            src: host(src),
            dst: host(dst),
            size_bytes: size,
            start_us: start - lead,
            congestion_control: true,
            src_nic: 0,
            dst_nic: 0,
        });
    }
}

/// Draws trace `index` of `class` from `master_seed` (attempt `attempt`).
pub fn generate(class: AnomalyClass, index: u32, attempt: u32, master_seed: u64) -> TraceSpec {
    let stream = (class.stream() << 48) ^ (u64::from(index) << 16) ^ u64::from(attempt);
    let mut d = Draw {
        rng: Rng::derive(master_seed, stream),
    };
    let seed = d.rng.next_u64() % 1_000_000_000;
    let load = (d.uniform(0.2, 0.5) * 100.0).round() / 100.0;
    let start = d.int(600, 900) as f64;
    let all: Vec<u32> = (0..HOSTS).collect();
    let mut spec = TraceSpec::empty(
        format!("{}-{index:03}", class.name()),
        class,
        (index, attempt),
        FabricSpec::k4(),
        (seed, load),
        3.0,
        start,
    );
    match class {
        AnomalyClass::PfcBackpressure | AnomalyClass::FlowContention => {
            let receiver = d.pick(&all);
            let others: Vec<u32> = all.iter().copied().filter(|h| *h != receiver).collect();
            let count = d.int(4, 12) as usize;
            let senders = d.sample(&others, count);
            let (size, cc, buffer) = if class == AnomalyClass::PfcBackpressure {
                (d.int(100, 500) * 1000, false, 3.0)
            } else {
                (d.int(150, 500) * 1000, true, 32.0)
            };
            spec.buffer_mb = buffer;
            spec.description = format!(
                "{} senders × {} KB{} into h{receiver} at {start} µs, background {:.0} %",
                senders.len(),
                size / 1000,
                if cc { " with DCQCN" } else { " at line rate" },
                load * 100.0
            );
            spec.incast = Some(IncastPart {
                senders: senders.into_iter().map(host).collect(),
                receiver: host(receiver),
                size_bytes: size,
                start_us: start,
                congestion_control: cc,
                nic: 0,
            });
        }
        AnomalyClass::PfcStorm => {
            let injector = d.pick(&all);
            let others: Vec<u32> = all.iter().copied().filter(|h| *h != injector).collect();
            let count = d.int(2, 4) as usize;
            let duration = d.int(400, 900) as f64;
            flows_toward(&mut spec, &mut d, &others, injector, count, start);
            spec.storm = Some(StormPart {
                host: host(injector),
                start_us: start,
                duration_us: duration,
                nic: 0,
            });
            spec.description = format!(
                "h{injector} sends PAUSE from {start} µs for {duration} µs while {count} flows head to it, background {:.0} %",
                load * 100.0
            );
        }
        AnomalyClass::SlowReceiver => {
            let receiver = d.pick(&all);
            let others: Vec<u32> = all.iter().copied().filter(|h| *h != receiver).collect();
            let count = d.int(2, 4) as usize;
            let duration = d.int(400, 900) as f64;
            let drain = d.int(5, 40) as f64;
            flows_toward(&mut spec, &mut d, &others, receiver, count, start);
            spec.slow = Some(SlowPart {
                host: host(receiver),
                nic: 0,
                drain_gbps: drain,
                start_us: start,
                duration_us: duration,
            });
            spec.description = format!(
                "h{receiver} drains at {drain} Gbit/s from {start} µs for {duration} µs while {count} flows head to it, background {:.0} %",
                load * 100.0
            );
        }
        AnomalyClass::DeadlockInLoop => {
            let dst = d.pick(&all);
            let pd = pod_of(dst);
            let j = d.int(0, 1) as u32;
            let c = d.int(0, 1) as u32;
            let px = d.pod_except(&[pd]);
            let a = agg(px, j);
            let core_c = core(j, c);
            let four = d.int(0, 1) == 1;
            let loop_start = start as u64;
            let d_name = host(dst);
            if four {
                let py = d.pod_except(&[pd, px]);
                let b = agg(py, j);
                let core_o = core(j, 1 - c);
                spec.loop_switches = vec![a.clone(), core_c.clone(), b.clone(), core_o.clone()];
            } else {
                spec.loop_switches = vec![a.clone(), core_c.clone()];
            }
            let ring = spec.loop_switches.clone();
            for (i, switch) in ring.iter().enumerate() {
                let next = ring[(i + 1) % ring.len()].clone();
                add_route(&mut spec.routes, switch.clone(), &d_name, next, loop_start);
            }
            let candidates: Vec<u32> = all.iter().copied().filter(|h| pod_of(*h) != pd).collect();
            let count = d.int(2, 4) as usize;
            for src in d.sample(&candidates, count) {
                let q = pod_of(src);
                // Steer the flow into the loop: up to agg(q, j), then (if that agg is not in
                // the loop) up to the loop's core.
                add_route(&mut spec.routes, tor_of(src), &d_name, agg(q, j), 0);
                if !ring.contains(&agg(q, j)) {
                    add_route(&mut spec.routes, agg(q, j), &d_name, core_c.clone(), 0);
                }
                let size = d.int(1000, 4000) * 1000;
                let delay = d.int(0, 20) as f64;
                spec.flows.push(FlowPart {
                    src: host(src),
                    dst: d_name.clone(),
                    size_bytes: size,
                    start_us: start + delay,
                    congestion_control: true,
                    src_nic: 0,
                    dst_nic: 0,
                });
            }
            spec.loop_start_us = loop_start;
            spec.background_hosts = all
                .iter()
                .copied()
                .filter(|h| *h != dst)
                .map(host)
                .collect();
            spec.description = format!(
                "routing loop {} for {d_name} from {loop_start} µs, {count} flows to {d_name} enter it, background {:.0} %",
                ring.join(" → "),
                load * 100.0
            );
        }
        AnomalyClass::DeadlockOutOfLoop => {
            let dst = d.pick(&all);
            let pd = pod_of(dst);
            let j = d.int(0, 1) as u32;
            let c = d.int(0, 1) as u32;
            let px = d.pod_except(&[pd]);
            let pz = d.pod_except(&[pd, px]);
            let pw = d.pod_except(&[pd, px, pz]);
            let a = agg(px, j);
            let core_c = core(j, c);
            let d_name = host(dst);
            let target = d.pick(&Draw::hosts_of_pod(pz));
            let h_name = host(target);
            spec.loop_switches = vec![a.clone(), core_c.clone()];
            add_route(&mut spec.routes, core_c.clone(), &d_name, a.clone(), 0);
            add_route(&mut spec.routes, a.clone(), &d_name, core_c.clone(), 0);
            // One flow to H over the loop's agg→core link carries the outside congestion
            // into the loop.
            let steered = d.pick(&Draw::hosts_of_pod(px));
            add_route(&mut spec.routes, tor_of(steered), &h_name, a.clone(), 0);
            add_route(&mut spec.routes, a.clone(), &h_name, core_c.clone(), 0);
            let storm = d.int(0, 1) == 1;
            if storm {
                let duration = d.int(600, 900) as f64;
                spec.initiator = Some(Initiator::Storm);
                spec.storm = Some(StormPart {
                    host: h_name.clone(),
                    start_us: start,
                    duration_us: duration,
                    nic: 0,
                });
                spec.flows.push(FlowPart {
                    src: host(steered),
                    dst: h_name.clone(),
                    size_bytes: 3_000_000,
                    start_us: start - 100.0,
                    congestion_control: true,
                    src_nic: 0,
                    dst_nic: 0,
                });
            } else {
                spec.initiator = Some(Initiator::Incast);
                let excluded: BTreeSet<u32> = [target, dst].into_iter().collect();
                let candidates: Vec<u32> = all
                    .iter()
                    .copied()
                    .filter(|h| pod_of(*h) != px && pod_of(*h) != pw && !excluded.contains(h))
                    .collect();
                let count = d.int(3, 5) as usize;
                let senders = d.sample(&candidates, count);
                let size = d.int(500, 1000) * 1000;
                spec.incast = Some(IncastPart {
                    senders: senders.into_iter().map(host).collect(),
                    receiver: h_name.clone(),
                    size_bytes: size,
                    start_us: start,
                    congestion_control: false,
                    nic: 0,
                });
                spec.flows.push(FlowPart {
                    src: host(steered),
                    dst: h_name.clone(),
                    size_bytes: 3_000_000,
                    start_us: start,
                    congestion_control: false,
                    src_nic: 0,
                    dst_nic: 0,
                });
            }
            // Flows to D enter the loop from the fourth pod once the pause has arrived.
            let count = d.int(2, 3) as usize;
            let delay = d.int(150, 250) as f64;
            for src in d.sample(&Draw::hosts_of_pod(pw), count) {
                add_route(&mut spec.routes, tor_of(src), &d_name, agg(pw, j), 0);
                add_route(&mut spec.routes, agg(pw, j), &d_name, core_c.clone(), 0);
                spec.flows.push(FlowPart {
                    src: host(src),
                    dst: d_name.clone(),
                    size_bytes: d.int(1000, 2000) * 1000,
                    start_us: start + delay,
                    congestion_control: true,
                    src_nic: 0,
                    dst_nic: 0,
                });
            }
            spec.background_hosts = all
                .iter()
                .copied()
                .filter(|h| *h != dst)
                .map(host)
                .collect();
            spec.description = format!(
                "routing loop {a} → {core_c} for {d_name}; {} at {h_name} from {start} µs reaches it through h{steered}'s flow; flows to {d_name} enter the loop {delay} µs later; background {:.0} %",
                if storm { "PAUSE injection" } else { "an incast" },
                load * 100.0
            );
        }
    }
    spec
}

impl TraceSpec {
    /// A trace with its fabric and draws and no anomaly yet.
    fn empty(
        id: String,
        class: AnomalyClass,
        (index, attempt): (u32, u32),
        fabric: FabricSpec,
        (seed, load): (u64, f64),
        buffer_mb: f64,
        start: f64,
    ) -> TraceSpec {
        TraceSpec {
            id,
            class,
            index,
            fabric,
            attempt,
            seed,
            load,
            duration_us: TRACE_DURATION_US,
            buffer_mb,
            anomaly_start_us: start,
            background_hosts: Vec::new(),
            incast: None,
            flows: Vec::new(),
            routes: Vec::new(),
            storm: None,
            slow: None,
            loop_switches: Vec::new(),
            loop_start_us: 0,
            initiator: None,
            description: String::new(),
            concurrent: None,
            unplaced: None,
        }
    }

    /// Background workloads (one Poisson workload per rail); the anomaly's come after.
    pub fn background_workloads(&self) -> usize {
        self.fabric.rails.max(1) as usize
    }

    /// Workload index of the anomaly's incast (`None` without one).
    pub fn incast_workload(&self) -> Option<usize> {
        self.incast.as_ref().map(|_| self.background_workloads())
    }

    /// Workload index of the concurrent anomaly's flows (`None` without one); it comes after
    /// the trace's own workloads.
    pub fn concurrent_workload(&self) -> Option<usize> {
        self.concurrent.as_ref().map(|_| {
            self.background_workloads()
                + usize::from(self.incast.is_some())
                + usize::from(!self.flows.is_empty())
        })
    }

    /// The scenario file of this trace.
    pub fn to_toml(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "# hawkmesh eval trace {} ({}), attempt {}: {}",
            self.id,
            self.class.title(),
            self.attempt,
            self.description
        );
        let _ = writeln!(t, "version = 1");
        let _ = writeln!(t, "name = \"{}\"", self.id);
        let _ = writeln!(t, "seed = {}", self.seed);
        let _ = writeln!(t, "duration_us = {}", self.duration_us);
        let _ = writeln!(t, "\n{}", self.fabric.topology_toml());
        let _ = write!(
            t,
            "\n[switch]\nbuffer_mb = {}\n{}",
            self.buffer_mb,
            self.fabric.switch_toml()
        );
        let _ = writeln!(t, "\n[output]\nqueue_sample_interval_us = 0");
        // Background traffic on every rail (one workload per NIC index).
        for nic in 0..self.background_workloads() {
            let _ = writeln!(
                t,
                "\n[[workload]]\nkind = \"poisson\"\nload = {}\ncdf = \"websearch\"\nduration_us = {}",
                self.load, self.duration_us
            );
            if !self.background_hosts.is_empty() {
                let _ = writeln!(t, "hosts = {}", quoted(&self.background_hosts));
            }
            if nic > 0 {
                let _ = writeln!(t, "nic = {nic}");
            }
        }
        if let Some(incast) = &self.incast {
            let _ = writeln!(
                t,
                "\n[[workload]]\nkind = \"incast\"\nsenders = {}\nreceiver = \"{}\"\nsize_bytes = {}\nstart_us = {}\ncongestion_control = {}",
                quoted(&incast.senders),
                incast.receiver,
                incast.size_bytes,
                incast.start_us,
                incast.congestion_control
            );
            if incast.nic > 0 {
                let _ = writeln!(t, "nic = {}", incast.nic);
            }
        }
        if !self.flows.is_empty() {
            let _ = writeln!(t, "\n[[workload]]\nkind = \"flows\"\nflows = [");
            for flow in &self.flows {
                let nics = if flow.src_nic > 0 || flow.dst_nic > 0 {
                    format!(", src_nic = {}, dst_nic = {}", flow.src_nic, flow.dst_nic)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    t,
                    "  {{ src = \"{}\", dst = \"{}\", size_bytes = {}, start_us = {}, congestion_control = {}{nics} }},",
                    flow.src, flow.dst, flow.size_bytes, flow.start_us, flow.congestion_control
                );
            }
            let _ = writeln!(t, "]");
        }
        if let Some(concurrent) = &self.concurrent {
            let _ = writeln!(t, "\n[[workload]]\nkind = \"flows\"\nflows = [");
            for flow in &concurrent.flows {
                let _ = writeln!(
                    t,
                    "  {{ src = \"{}\", dst = \"{}\", size_bytes = {}, start_us = {}, congestion_control = {}, src_nic = {}, dst_nic = {} }},",
                    flow.src,
                    flow.dst,
                    flow.size_bytes,
                    flow.start_us,
                    flow.congestion_control,
                    flow.src_nic,
                    flow.dst_nic
                );
            }
            let _ = writeln!(t, "]");
        }
        for route in &self.routes {
            let _ = writeln!(
                t,
                "\n[[route]]\nswitch = \"{}\"\ndst = \"{}\"\nvia = [\"{}\"]\nstart_us = {}",
                route.switch, route.dst, route.via, route.start_us
            );
            if let Some(nic) = route.nic {
                let _ = writeln!(t, "nic = {nic}");
            }
        }
        if let Some(workload) = self.incast_workload() {
            let _ = writeln!(
                t,
                "\n[[fault]]\nkind = \"incast_burst\"\nworkload = {workload}"
            );
        }
        if let Some(storm) = &self.storm {
            let _ = writeln!(
                t,
                "\n[[fault]]\nkind = \"pfc_injection\"\nhost = \"{}\"\nstart_us = {}\nduration_us = {}",
                storm.host, storm.start_us, storm.duration_us
            );
            if storm.nic > 0 {
                let _ = writeln!(t, "nic = {}", storm.nic);
            }
        }
        if let Some(slow) = &self.slow {
            let _ = writeln!(
                t,
                "\n[[fault]]\nkind = \"slow_receiver\"\nhost = \"{}\"\nnic = {}\ndrain_gbps = {}\nstart_us = {}\nduration_us = {}",
                slow.host, slow.nic, slow.drain_gbps, slow.start_us, slow.duration_us
            );
        }
        if !self.loop_switches.is_empty() {
            let _ = writeln!(
                t,
                "\n[[fault]]\nkind = \"routing_loop\"\nswitches = {}\nstart_us = {}",
                quoted(&self.loop_switches),
                self.loop_start_us
            );
        }
        if let (Some(concurrent), Some(workload)) = (&self.concurrent, self.concurrent_workload()) {
            if concurrent.kind == "storm" {
                let _ = writeln!(
                    t,
                    "\n[[fault]]\nkind = \"pfc_injection\"\nhost = \"{}\"\nnic = {}\nstart_us = {}\nduration_us = {}",
                    concurrent.host, concurrent.nic, concurrent.start_us, concurrent.duration_us
                );
            } else {
                let _ = writeln!(
                    t,
                    "\n[[fault]]\nkind = \"incast_burst\"\nworkload = {workload}"
                );
            }
        }
        t
    }

    /// The scenario, parsed and validated as `hawkmesh sim run` would.
    pub fn scenario(&self) -> Result<LoadedScenario, EvalError> {
        Scenario::parse(
            &self.to_toml(),
            &format!("{}.toml", self.id),
            PathBuf::from("."),
        )
        .map_err(|e| EvalError::Trace {
            trace: self.id.clone(),
            reason: e.to_string(),
        })
    }
}

fn quoted(names: &[String]) -> String {
    let items: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    format!("[{}]", items.join(", "))
}

/// Draws trace `index` of `class` on a fabric of `family` (attempt `attempt`). The K=4
/// family is the paper's ([`generate`]); the others draw the fabric first (from the same
/// stream) and place the anomaly by the fabric's graph: any host and NIC (rail), sources
/// under other ToRs, loops of 2–5 switches wherever the fabric has such cycles, routes that
/// steer flows into them along shortest paths.
pub fn generate_on(
    family: Family,
    class: AnomalyClass,
    index: u32,
    attempt: u32,
    master_seed: u64,
) -> Result<TraceSpec, EvalError> {
    if family == Family::K4 {
        return Ok(generate(class, index, attempt, master_seed));
    }
    let stream = (family.stream() << 56)
        ^ (class.stream() << 48)
        ^ (u64::from(index) << 16)
        ^ u64::from(attempt);
    let mut d = Draw {
        rng: Rng::derive(master_seed, stream),
    };
    let fabric = FabricSpec::draw(family, class == AnomalyClass::DeadlockOutOfLoop, &mut d.rng);
    let view = fabric.view()?;
    let seed = d.rng.next_u64() % 1_000_000_000;
    // The background loads the first tier's uplinks at 10–50 %: each host offers that over
    // the oversubscription (at 4:1, 50 % of every host link would be twice the uplinks'
    // capacity — a fabric in congestion collapse, not a background).
    let uplink_load = d.uniform(0.1, 0.5);
    let load = ((uplink_load / fabric.oversubscription.max(1.0)) * 100.0)
        .round()
        .max(2.0)
        / 100.0;
    let start = d.int(600, 900) as f64;
    // PFC classes run on a shallow shared buffer (1.5–4 MiB besides headroom and reserves),
    // contention on a deep one (16–48 MiB): the buffers of deployed switch chips.
    let shared = if class == AnomalyClass::FlowContention {
        d.int(16, 48) as f64
    } else {
        d.int(3, 8) as f64 / 2.0
    };
    let buffer_mb = fabric.buffer_with_shared(&view, shared);
    let id = format!("{}-{}-{index:03}", family.name(), class.name());
    let mut spec = TraceSpec::empty(
        id,
        class,
        (index, attempt),
        fabric.clone(),
        (seed, load),
        buffer_mb,
        start,
    );
    if let Err(reason) = place(&mut spec, &view, &mut d, start) {
        spec.unplaced = Some(format!("{reason} on {}", fabric.describe()));
    } else if d.int(0, 2) == 0 {
        place_concurrent(&mut spec, &view, &mut d, start);
    }
    spec.description = format!("{}; {}", spec.description, fabric.describe());
    Ok(spec)
}

/// Hosts of the fabric by index, and the NIC (rail) an anomaly uses.
struct Placement<'a> {
    view: &'a FabricView,
    nic: u32,
}

impl Placement<'_> {
    /// The destination of a route: on a fabric with several rails, only the anomaly's NIC
    /// of the host (a route is per address: the host's other NICs sit on other rails).
    fn dst<'d>(&self, host: &'d str) -> (&'d str, Option<u32>) {
        (host, (self.view.rails() > 1).then_some(self.nic))
    }
}

impl Placement<'_> {
    fn host(&self, h: usize) -> String {
        self.view.hosts[h].name.clone()
    }
    fn tor(&self, h: usize) -> NodeId {
        self.view.tor(h, self.nic)
    }
    fn all(&self) -> Vec<u32> {
        (0..self.view.hosts.len() as u32).collect()
    }
    /// Hosts whose NIC hangs off none of `tors`.
    fn not_under(&self, tors: &BTreeSet<NodeId>) -> Vec<u32> {
        self.all()
            .into_iter()
            .filter(|h| !tors.contains(&self.tor(*h as usize)))
            .collect()
    }
    fn flow(&self, src: u32, dst: u32, size: u64, start_us: f64, cc: bool) -> FlowPart {
        FlowPart {
            src: self.host(src as usize),
            dst: self.host(dst as usize),
            size_bytes: size,
            start_us,
            congestion_control: cc,
            src_nic: self.nic,
            dst_nic: self.nic,
        }
    }
    fn name(&self, node: NodeId) -> String {
        self.view.name(node)
    }
    /// Routes for `dst` along `path` (each switch → the next), unless one exists.
    fn steer(&self, routes: &mut Vec<RoutePart>, path: &[NodeId], dst: &str, start_us: u64) {
        for pair in path.windows(2) {
            add_nic_route(
                routes,
                self.name(pair[0]),
                self.dst(dst),
                self.name(pair[1]),
                start_us,
            );
        }
    }
}

/// Sizes scale with the host speed so that bursts last as long on 25G as on 100G hosts.
fn scaled(bytes: u64, host_gbps: f64) -> u64 {
    ((bytes as f64 * host_gbps / 100.0).round() as u64).max(10_000)
}

fn place(spec: &mut TraceSpec, view: &FabricView, d: &mut Draw, start: f64) -> Result<(), String> {
    let rails = view.rails();
    let nic = d.int(0, u64::from(rails) - 1) as u32;
    let p = Placement { view, nic };
    let all = p.all();
    let gbps = spec.fabric.host_gbps;
    let load = spec.load;
    match spec.class {
        AnomalyClass::PfcBackpressure | AnomalyClass::FlowContention => {
            let receiver = d.pick(&all);
            let others: Vec<u32> = all.iter().copied().filter(|h| *h != receiver).collect();
            let count = (d.int(4, 12) as usize).min(others.len());
            let senders = d.sample(&others, count);
            let backpressure = spec.class == AnomalyClass::PfcBackpressure;
            let size = if backpressure {
                scaled(d.int(100, 500) * 1000, gbps)
            } else {
                scaled(d.int(150, 500) * 1000, gbps)
            };
            spec.description = format!(
                "{} senders × {} KB{} into {} NIC {nic} at {start} µs, background {:.0} %",
                senders.len(),
                size / 1000,
                if backpressure {
                    " at line rate"
                } else {
                    " with DCQCN"
                },
                p.host(receiver as usize),
                load * 100.0
            );
            spec.incast = Some(IncastPart {
                senders: senders.iter().map(|h| p.host(*h as usize)).collect(),
                receiver: p.host(receiver as usize),
                size_bytes: size,
                start_us: start,
                congestion_control: !backpressure,
                nic,
            });
        }
        AnomalyClass::PfcStorm | AnomalyClass::SlowReceiver => {
            let target = d.pick(&all);
            // Victims from hosts under other ToRs where there are enough of them.
            let mut sources = p.not_under(&[p.tor(target as usize)].into_iter().collect());
            if sources.len() < 2 {
                sources = all.iter().copied().filter(|h| *h != target).collect();
            }
            let count = (d.int(2, 4) as usize).min(sources.len());
            let duration = d.int(400, 900) as f64;
            for src in d.sample(&sources, count) {
                let size = scaled(d.int(1000, 3000) * 1000, gbps);
                let lead = d.int(10, 60) as f64;
                spec.flows
                    .push(p.flow(src, target, size, start - lead, true));
            }
            let name = p.host(target as usize);
            if spec.class == AnomalyClass::PfcStorm {
                spec.storm = Some(StormPart {
                    host: name.clone(),
                    start_us: start,
                    duration_us: duration,
                    nic,
                });
                spec.description = format!(
                    "{name} NIC {nic} sends PAUSE from {start} µs for {duration} µs while {count} flows head to it, background {:.0} %",
                    load * 100.0
                );
            } else {
                // Drains at 5–40 % of its link.
                let drain = (gbps * d.int(5, 40) as f64 / 100.0 * 10.0).round() / 10.0;
                spec.slow = Some(SlowPart {
                    host: name.clone(),
                    nic,
                    drain_gbps: drain.max(0.5),
                    start_us: start,
                    duration_us: duration,
                });
                spec.description = format!(
                    "{name} NIC {nic} drains at {drain} Gbit/s from {start} µs for {duration} µs while {count} flows head to it, background {:.0} %",
                    load * 100.0
                );
            }
        }
        AnomalyClass::DeadlockInLoop => {
            // Loop lengths the fabric has (a bipartite Clos has only even ones).
            let lengths: Vec<u32> = (2..=5u32)
                .filter(|len| !view.cycles(*len as usize, 1).is_empty())
                .collect();
            let len = d.pick(&lengths) as usize;
            let cycles = view.cycles(len, 256);
            let ring = cycles[d.rng.below(cycles.len() as u64) as usize].clone();
            let members: BTreeSet<NodeId> = ring.iter().copied().collect();
            // The destination hangs off no loop switch.
            let dsts = p.not_under(&members);
            if dsts.is_empty() {
                return Err(format!("no host outside the loop {ring:?}"));
            }
            let dst = d.pick(&dsts);
            let dst_tor = p.tor(dst as usize);
            let d_name = p.host(dst as usize);
            let loop_start = start as u64;
            for (i, switch) in ring.iter().enumerate() {
                let next = ring[(i + 1) % ring.len()];
                add_nic_route(
                    &mut spec.routes,
                    p.name(*switch),
                    p.dst(&d_name),
                    p.name(next),
                    loop_start,
                );
            }
            let candidates = p.not_under(&[dst_tor].into_iter().collect());
            let count = (d.int(2, 4) as usize).min(candidates.len());
            let avoid: BTreeSet<NodeId> = [dst_tor].into_iter().collect();
            let mut entered = 0;
            for src in d.sample(&candidates, count) {
                let Some(path) = view.path_to_any(p.tor(src as usize), &members, &avoid) else {
                    continue;
                };
                p.steer(&mut spec.routes, &path, &d_name, 0);
                let size = scaled(d.int(1000, 4000) * 1000, gbps);
                let delay = d.int(0, 20) as f64;
                spec.flows.push(p.flow(src, dst, size, start + delay, true));
                entered += 1;
            }
            if entered == 0 {
                return Err("no flow can be steered into the loop".into());
            }
            spec.loop_switches = ring.iter().map(|n| p.name(*n)).collect();
            spec.loop_start_us = loop_start;
            spec.background_hosts = all
                .iter()
                .filter(|h| **h != dst)
                .map(|h| p.host(*h as usize))
                .collect();
            spec.description = format!(
                "routing loop {} for {d_name} from {loop_start} µs, {entered} flows to {d_name} enter it, background {:.0} %",
                spec.loop_switches.join(" → "),
                load * 100.0
            );
        }
        AnomalyClass::DeadlockOutOfLoop => {
            let links = view.cycles(2, usize::MAX);
            let pair = links[d.rng.below(links.len() as u64) as usize].clone();
            // The loop link the initiator's pause arrives on is x → y.
            let (x, y) = if d.int(0, 1) == 0 {
                (pair[0], pair[1])
            } else {
                (pair[1], pair[0])
            };
            let members: BTreeSet<NodeId> = [x, y].into_iter().collect();
            let outside = p.not_under(&members);
            if outside.len() < 2 {
                return Err("too few hosts outside the loop".into());
            }
            let dst = d.pick(&outside);
            let dst_tor = p.tor(dst as usize);
            let targets: Vec<u32> = outside
                .iter()
                .copied()
                .filter(|h| p.tor(*h as usize) != dst_tor)
                .collect();
            if targets.is_empty() {
                return Err("no initiator host away from the destination".into());
            }
            let target = d.pick(&targets);
            let h_tor = p.tor(target as usize);
            let d_name = p.host(dst as usize);
            let h_name = p.host(target as usize);
            // The steered flow: its ToR → x → y → the initiator's ToR.
            let steer_from: Vec<u32> = all
                .iter()
                .copied()
                .filter(|h| ![dst_tor, h_tor, y].contains(&p.tor(*h as usize)) && *h != dst)
                .collect();
            let mut steered_path = None;
            for _ in 0..8 {
                if steer_from.is_empty() {
                    break;
                }
                let s = d.pick(&steer_from);
                let avoid1: BTreeSet<NodeId> = [y, h_tor, dst_tor].into_iter().collect();
                let Some(first) = view.path(p.tor(s as usize), x, &avoid1) else {
                    continue;
                };
                let mut avoid2: BTreeSet<NodeId> = first.iter().copied().collect();
                avoid2.insert(dst_tor);
                let Some(second) = view.path(y, h_tor, &avoid2) else {
                    continue;
                };
                let mut path = first;
                path.extend(second);
                steered_path = Some((s, path));
                break;
            }
            let Some((steered, path)) = steered_path else {
                return Err("no path steers a flow over the loop link".into());
            };
            spec.loop_switches = vec![p.name(x), p.name(y)];
            add_nic_route(&mut spec.routes, p.name(y), p.dst(&d_name), p.name(x), 0);
            add_nic_route(&mut spec.routes, p.name(x), p.dst(&d_name), p.name(y), 0);
            p.steer(&mut spec.routes, &path, &h_name, 0);
            let storm = d.int(0, 1) == 1;
            if storm {
                let duration = d.int(600, 900) as f64;
                spec.initiator = Some(Initiator::Storm);
                spec.storm = Some(StormPart {
                    host: h_name.clone(),
                    start_us: start,
                    duration_us: duration,
                    nic,
                });
                spec.flows.push(p.flow(
                    steered,
                    target,
                    scaled(3_000_000, gbps),
                    start - 100.0,
                    true,
                ));
            } else {
                spec.initiator = Some(Initiator::Incast);
                let excluded: BTreeSet<NodeId> =
                    [p.tor(steered as usize), h_tor, x, y].into_iter().collect();
                let candidates: Vec<u32> = p
                    .not_under(&excluded)
                    .into_iter()
                    .filter(|h| *h != dst && *h != target)
                    .collect();
                if candidates.is_empty() {
                    return Err("no incast senders outside the loop".into());
                }
                let count = (d.int(3, 5) as usize).min(candidates.len());
                let senders = d.sample(&candidates, count);
                spec.incast = Some(IncastPart {
                    senders: senders.iter().map(|h| p.host(*h as usize)).collect(),
                    receiver: h_name.clone(),
                    size_bytes: scaled(d.int(500, 1000) * 1000, gbps),
                    start_us: start,
                    congestion_control: false,
                    nic,
                });
                spec.flows
                    .push(p.flow(steered, target, scaled(3_000_000, gbps), start, false));
            }
            // Flows to D enter the loop at y once the pause has arrived.
            let avoid3: BTreeSet<NodeId> = [x, dst_tor, h_tor].into_iter().collect();
            let entrants: Vec<u32> = all
                .iter()
                .copied()
                .filter(|h| {
                    *h != dst
                        && *h != target
                        && *h != steered
                        && ![dst_tor, h_tor, x].contains(&p.tor(*h as usize))
                })
                .collect();
            let count = (d.int(2, 3) as usize).min(entrants.len());
            let delay = d.int(150, 250) as f64;
            let mut entered = 0;
            for src in d.sample(&entrants, count) {
                let Some(path) = view.path(p.tor(src as usize), y, &avoid3) else {
                    continue;
                };
                p.steer(&mut spec.routes, &path, &d_name, 0);
                spec.flows.push(p.flow(
                    src,
                    dst,
                    scaled(d.int(1000, 2000) * 1000, gbps),
                    start + delay,
                    true,
                ));
                entered += 1;
            }
            if entered == 0 {
                return Err("no flow to the destination can enter the loop".into());
            }
            spec.background_hosts = all
                .iter()
                .filter(|h| **h != dst)
                .map(|h| p.host(*h as usize))
                .collect();
            spec.description = format!(
                "routing loop {} → {} for {d_name}; {} at {h_name} from {start} µs reaches it through {}'s flow; flows to {d_name} enter the loop {delay} µs later; background {:.0} %",
                p.name(x),
                p.name(y),
                if storm { "PAUSE injection" } else { "an incast" },
                p.host(steered as usize),
                load * 100.0
            );
        }
    }
    Ok(())
}

/// Adds a concurrent anomaly — a PAUSE storm or a line-rate incast — at a host whose ToR
/// none of the trace's own hosts and switches use, with senders from other such ToRs. Where
/// the fabric has no such place, the trace keeps one anomaly.
fn place_concurrent(spec: &mut TraceSpec, view: &FabricView, d: &mut Draw, start: f64) {
    let nic = d.int(0, u64::from(view.rails()) - 1) as u32;
    let p = Placement { view, nic };
    let mut used: BTreeSet<NodeId> = BTreeSet::new();
    let by_name = |name: &str| view.hosts.iter().position(|h| h.name == name);
    let mut hosts: Vec<&str> = Vec::new();
    if let Some(incast) = &spec.incast {
        hosts.extend(incast.senders.iter().map(String::as_str));
        hosts.push(&incast.receiver);
    }
    for flow in &spec.flows {
        hosts.push(&flow.src);
        hosts.push(&flow.dst);
    }
    if let Some(storm) = &spec.storm {
        hosts.push(&storm.host);
    }
    if let Some(slow) = &spec.slow {
        hosts.push(&slow.host);
    }
    for name in hosts {
        if let Some(h) = by_name(name) {
            used.extend(view.hosts[h].tors.iter().copied());
        }
    }
    for name in &spec.loop_switches {
        if let Some(node) = view.topo.node_by_name(name) {
            used.insert(node.id);
        }
    }
    let free = p.not_under(&used);
    if free.len() < 3 {
        return;
    }
    let target = d.pick(&free);
    let target_tor = p.tor(target as usize);
    let sources: Vec<u32> = free
        .iter()
        .copied()
        .filter(|h| p.tor(*h as usize) != target_tor)
        .collect();
    if sources.is_empty() {
        return;
    }
    let gbps = spec.fabric.host_gbps;
    let at = start + d.int(0, 200) as f64 - 100.0;
    let storm = d.int(0, 1) == 1;
    let count =
        (d.int(if storm { 1 } else { 3 }, if storm { 2 } else { 6 }) as usize).min(sources.len());
    let mut flows = Vec::new();
    for src in d.sample(&sources, count) {
        let (size, begin, cc) = if storm {
            (scaled(d.int(1000, 2000) * 1000, gbps), at - 20.0, true)
        } else {
            (scaled(d.int(200, 500) * 1000, gbps), at, false)
        };
        flows.push(p.flow(src, target, size, begin, cc));
    }
    let host = p.host(target as usize);
    let duration = d.int(300, 600) as f64;
    spec.description = format!(
        "{}; concurrently {} at {host} NIC {nic} from {at} µs",
        spec.description,
        if storm {
            format!("a PAUSE storm for {duration} µs")
        } else {
            format!("an incast of {} senders", flows.len())
        }
    );
    spec.concurrent = Some(ConcurrentPart {
        kind: if storm { "storm" } else { "incast" }.into(),
        host,
        nic,
        flows,
        start_us: at,
        duration_us: duration,
    });
}
