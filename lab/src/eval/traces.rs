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

use super::EvalError;
use hawkmesh_netsim::rng::Rng;
use hawkmesh_netsim::{LoadedScenario, Scenario};
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
}

impl AnomalyClass {
    /// Every class, in report order.
    pub const ALL: [AnomalyClass; 5] = [
        AnomalyClass::PfcBackpressure,
        AnomalyClass::PfcStorm,
        AnomalyClass::DeadlockInLoop,
        AnomalyClass::DeadlockOutOfLoop,
        AnomalyClass::FlowContention,
    ];

    /// Name on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            AnomalyClass::PfcBackpressure => "pfc-backpressure",
            AnomalyClass::PfcStorm => "pfc-storm",
            AnomalyClass::DeadlockInLoop => "deadlock-in-loop",
            AnomalyClass::DeadlockOutOfLoop => "deadlock-out-of-loop",
            AnomalyClass::FlowContention => "flow-contention",
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
}

/// A static route of the anomaly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RoutePart {
    /// Switch.
    pub switch: String,
    /// Destination host.
    pub dst: String,
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
    /// Switches of the routing loop, in order.
    pub loop_switches: Vec<String>,
    /// When the loop's routes take effect, µs.
    pub loop_start_us: u64,
    /// Out-of-loop deadlocks: what starts it.
    pub initiator: Option<Initiator>,
    /// One line for people.
    pub description: String,
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
    if !routes.iter().any(|r| r.switch == switch && r.dst == dst) {
        routes.push(RoutePart {
            switch,
            dst: dst.to_string(),
            via,
            start_us,
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
    let mut spec = TraceSpec {
        id: format!("{}-{index:03}", class.name()),
        class,
        index,
        attempt,
        seed,
        load,
        duration_us: TRACE_DURATION_US,
        buffer_mb: 3.0,
        anomaly_start_us: start,
        background_hosts: Vec::new(),
        incast: None,
        flows: Vec::new(),
        routes: Vec::new(),
        storm: None,
        loop_switches: Vec::new(),
        loop_start_us: 0,
        initiator: None,
        description: String::new(),
    };
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
            });
        }
        AnomalyClass::PfcStorm => {
            let injector = d.pick(&all);
            let others: Vec<u32> = all.iter().copied().filter(|h| *h != injector).collect();
            let count = d.int(2, 4) as usize;
            let duration = d.int(400, 900) as f64;
            for src in d.sample(&others, count) {
                let size = d.int(1000, 3000) * 1000;
                let lead = d.int(10, 60) as f64;
                spec.flows.push(FlowPart {
                    src: host(src),
                    dst: host(injector),
                    size_bytes: size,
                    start_us: start - lead,
                    congestion_control: true,
                });
            }
            spec.storm = Some(StormPart {
                host: host(injector),
                start_us: start,
                duration_us: duration,
            });
            spec.description = format!(
                "h{injector} sends PAUSE from {start} µs for {duration} µs while {count} flows head to it, background {:.0} %",
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
                });
                spec.flows.push(FlowPart {
                    src: host(steered),
                    dst: h_name.clone(),
                    size_bytes: 3_000_000,
                    start_us: start - 100.0,
                    congestion_control: true,
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
                });
                spec.flows.push(FlowPart {
                    src: host(steered),
                    dst: h_name.clone(),
                    size_bytes: 3_000_000,
                    start_us: start,
                    congestion_control: false,
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
    /// Workload index of the anomaly's incast (`None` without one).
    pub fn incast_workload(&self) -> Option<usize> {
        self.incast.as_ref().map(|_| 1)
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
        let _ = writeln!(t, "\n[topology]\nkind = \"fat_tree\"\nk = 4\nhost_gbps = 100\nfabric_gbps = 100\ndelay_ns = 2000");
        let _ = writeln!(t, "\n[switch]\nbuffer_mb = {}", self.buffer_mb);
        let _ = writeln!(t, "\n[output]\nqueue_sample_interval_us = 0");
        let _ = writeln!(
            t,
            "\n[[workload]]\nkind = \"poisson\"\nload = {}\ncdf = \"websearch\"\nduration_us = {}",
            self.load, self.duration_us
        );
        if !self.background_hosts.is_empty() {
            let _ = writeln!(t, "hosts = {}", quoted(&self.background_hosts));
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
        }
        if !self.flows.is_empty() {
            let _ = writeln!(t, "\n[[workload]]\nkind = \"flows\"\nflows = [");
            for flow in &self.flows {
                let _ = writeln!(
                    t,
                    "  {{ src = \"{}\", dst = \"{}\", size_bytes = {}, start_us = {}, congestion_control = {} }},",
                    flow.src, flow.dst, flow.size_bytes, flow.start_us, flow.congestion_control
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
        }
        if !self.loop_switches.is_empty() {
            let _ = writeln!(
                t,
                "\n[[fault]]\nkind = \"routing_loop\"\nswitches = {}\nstart_us = {}",
                quoted(&self.loop_switches),
                self.loop_start_us
            );
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
