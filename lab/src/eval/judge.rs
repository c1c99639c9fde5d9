//! Ground truth of a trace and the judging of diagnoses against it (definitions in
//! `docs/eval.md`).
//!
//! - A **report** is a diagnosed incident attributed to the injected anomaly that names at
//!   least one anomaly affecting its victim. It is **correct** when one of those anomalies has
//!   the expected type *and* the expected root cause (HAWKEYE §4.2: "a true positive iff it
//!   identifies both the exact anomaly case and the corresponding root causes"); otherwise it
//!   is a false positive.
//! - The anomaly of a trace is **detected** when at least one report is correct; otherwise it
//!   is a false negative. A trace whose only report names the wrong root cause thus counts
//!   one false positive and one false negative.
//! - An incident is **attributed** to the anomaly when its polling trigger fell inside the
//!   anomaly's window (start to end + netsim's 500 µs spreading slack) and its victim is one
//!   of the anomaly's own flows or crosses one of its causal ports (initial congestion ports
//!   until the end of what congested them + the slack, loop ports, ports its PFC held paused
//!   while the triggering RTT sample was in flight).
//!   Incidents about unrelated background congestion are counted but not judged.
//! - Root cause: the initial congestion port (backpressure, contention), the injecting host
//!   or its ToR port (storm), a loop port (in-loop deadlock), the outside initiator's port or
//!   host (out-of-loop deadlock).

use super::traces::{AnomalyClass, Initiator, TraceSpec};
use hawkmesh_netsim::truth::{AnomalyKind, SpreadEdge, SPREAD_SLACK_NS};
use hawkmesh_netsim::SimResult;
use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortRef};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What the diagnosis must say about one trace's anomaly.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Truth {
    /// The class.
    pub class: AnomalyClass,
    /// The expected `type` in the diagnosis JSON.
    pub expected_type: String,
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns (incidents up to `end_ns` + 500 µs are attributed).
    pub end_ns: u64,
    /// The root-cause ports (initial congestion point(s); loop ports for in-loop deadlocks).
    pub root_ports: Vec<PortRef>,
    /// The loop (deadlocks).
    pub loop_ports: Vec<PortRef>,
    /// The injecting host (storms, storm-initiated deadlocks).
    pub injector: Option<String>,
    /// 5-tuples of the anomaly's own flows (every non-background flow).
    pub anomaly_flows: BTreeSet<String>,
    /// Until when (plus [`SPREAD_SLACK_NS`]) the root ports are causal: the anomaly's end,
    /// or for an out-of-loop deadlock its initiator's — an incast that drained long ago did
    /// not slow a later victim that crosses the port it once congested (the loop ports stay
    /// causal to the deadlock's end, and ports its PFC holds count while held).
    pub roots_end_ns: u64,
    /// The PFC spreading tree(s), first XOFF per edge.
    pub spreading: Vec<SpreadEdge>,
    /// Whether the simulation produced the anomaly the class calls for.
    pub realized: bool,
    /// Why not, or what was seen.
    pub realization: String,
}

/// When a victim met the anomaly: the RTT sample that fired its trigger at `at_ns` was a
/// packet in the network from `since_ns` (sent at `at_ns` − RTT) to `at_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// When the sampled packet was sent, ns.
    pub since_ns: u64,
    /// The trigger, ns.
    pub at_ns: u64,
}

impl Window {
    /// The window of an RTT sample of `rtt_ns` that fired at `at_ns`.
    pub fn of_sample(at_ns: u64, rtt_ns: u64) -> Window {
        Window {
            since_ns: at_ns.saturating_sub(rtt_ns),
            at_ns,
        }
    }

    /// Everything up to `at_ns` (any pause that ended before it still counts).
    pub fn until(at_ns: u64) -> Window {
        Window { since_ns: 0, at_ns }
    }
}

impl Truth {
    /// What `port` waited for during `window`: the spreading edges whose pause was in force
    /// at its end (first XOFF with that cause before it, pause not yet ended) or, if none
    /// was, those whose pause ended last within the window (the sampled packet met that
    /// pause on its way). A pause that ended before the sampled packet was sent did not
    /// delay it, and an early pause for another reason does not make the port wait for
    /// that reason for the rest of the run.
    fn causes_in(&self, port: PortRef, window: Window) -> Vec<&SpreadEdge> {
        let pausing: Vec<&SpreadEdge> = self
            .spreading
            .iter()
            .filter(|e| e.paused == port && e.time_ns <= window.at_ns)
            .collect();
        let current: Vec<&SpreadEdge> = pausing
            .iter()
            .filter(|e| e.until_ns >= window.at_ns)
            .copied()
            .collect();
        if !current.is_empty() {
            return current;
        }
        let latest = pausing
            .iter()
            .map(|e| e.until_ns)
            .filter(|until| *until >= window.since_ns)
            .max();
        pausing
            .into_iter()
            .filter(|e| Some(e.until_ns) == latest)
            .collect()
    }

    /// Whether the deadlock's cycle was closed during `window`: every loop port paused and
    /// waiting for a loop port (a cyclic buffer dependency). Loop ports all paused while one
    /// of them waits for a queue outside the loop are a chain into that queue, not a cycle.
    fn loop_closed(&self, window: Window) -> bool {
        !self.loop_ports.is_empty()
            && self.loop_ports.iter().all(|l| {
                self.causes_in(*l, window)
                    .iter()
                    .any(|e| self.loop_ports.contains(&e.cause))
            })
    }

    /// Whether `port` is one of the anomaly's own ports at `time_ns`: a loop port, or a root
    /// port until [`Truth::roots_end_ns`] + [`SPREAD_SLACK_NS`].
    pub fn origin_port_at(&self, port: &PortRef, time_ns: u64) -> bool {
        self.loop_ports.contains(port)
            || (self.root_ports.contains(port)
                && time_ns <= self.roots_end_ns.saturating_add(SPREAD_SLACK_NS))
    }

    /// Switches causally relevant to a victim triggered in `window` (HAWKEYE Fig. 11): the
    /// switches of its path and every switch on the PFC spreading paths from the victim's
    /// paused ports back to the origin — the PAUSE sender of a paused port, then the sender
    /// that paused the port it waited for, and so on (the pauses the sampled packet could
    /// have met: [`Truth::causes_in`]) — and, when
    /// that chain enters a deadlock's loop whose cycle is closed, every loop switch (before
    /// it closes the loop's ports are congestion like any other, causal only on the chain). Branches of the spreading tree
    /// that never reach the victim's path are not causal for it, and neither is an origin
    /// the victim's chain never reaches (an incast congesting several ports: a victim behind
    /// one of them waits for that one only). Chains start at switch ports, as in
    /// [`Truth::exposure`].
    pub fn causal_switches_for(
        &self,
        victim_path: &BTreeSet<PortRef>,
        window: Window,
        topology: &FabricTopology,
    ) -> BTreeSet<NodeId> {
        let mut nodes: BTreeSet<NodeId> = victim_path.iter().map(|p| p.node).collect();
        // From each paused switch port of the path, what it waited for, port by port. As in
        // [`Truth::exposure`], the sender's own NIC port does not start a chain (its ToR
        // pausing it for another egress is head-of-line blocking at the sender, which no
        // switch's view of the victim's path shows).
        let mut frontier: Vec<PortRef> = victim_path
            .iter()
            .filter(|p| is_switch(topology, p.node))
            .copied()
            .collect();
        let mut seen: BTreeSet<PortRef> = BTreeSet::new();
        while let Some(port) = frontier.pop() {
            if !seen.insert(port) {
                continue;
            }
            for edge in self.causes_in(port, window) {
                nodes.insert(edge.sender.node);
                // A PAUSE a host sent starts the chain (its receive side, or an
                // injection); the host's own transmit port being paused is the other
                // direction and did not make it pause.
                if is_switch(topology, edge.cause.node) {
                    frontier.push(edge.cause);
                }
            }
        }
        if self.loop_closed(window) && seen.iter().any(|p| self.loop_ports.contains(p)) {
            nodes.extend(self.loop_ports.iter().map(|p| p.node));
        }
        nodes.retain(|n| is_switch(topology, *n));
        nodes
    }

    /// How the anomaly reached a victim with the egress ports `victim_path`, triggered in
    /// `window`: whether the anomaly's PFC held one of its ports paused during the window, and whether
    /// the chain of PAUSE senders from its paused switch ports reaches the loop (deadlocks).
    /// The sender's own NIC port does not start a chain: a ToR pausing the host for another
    /// egress (head-of-line blocking at the sender) is outside what any switch's data plane
    /// sees of the victim's path.
    pub fn exposure(
        &self,
        victim_path: &BTreeSet<PortRef>,
        window: Window,
        topology: &FabricTopology,
    ) -> Exposure {
        // The pauses the sampled packet could have met.
        let edges: Vec<&SpreadEdge> = self
            .spreading
            .iter()
            .filter(|e| e.time_ns <= window.at_ns && e.until_ns >= window.since_ns)
            .collect();
        // A host's own NIC held by its ToR for an egress the victim then crosses is the
        // victim's contention at that egress (its packets queue there once released), not
        // PFC spreading toward it; held for another egress it is (head-of-line blocking).
        let paused = edges.iter().any(|e| {
            victim_path.contains(&e.paused)
                && (is_switch(topology, e.paused.node) || !victim_path.contains(&e.cause))
        });
        let loop_closed = self.loop_closed(window);
        // Follow what each paused port of the path waited for, port by port, back to the
        // origin; the victim met the deadlock if that chain enters the closed loop.
        let mut reaches_loop = false;
        let mut frontier: Vec<PortRef> = victim_path
            .iter()
            .filter(|p| is_switch(topology, p.node) && edges.iter().any(|e| e.paused == **p))
            .copied()
            .collect();
        let mut seen: BTreeSet<PortRef> = BTreeSet::new();
        while let Some(port) = frontier.pop() {
            if !seen.insert(port) {
                continue;
            }
            reaches_loop |= loop_closed && self.loop_ports.contains(&port);
            frontier.extend(
                self.causes_in(port, window)
                    .into_iter()
                    .map(|e| e.cause)
                    .filter(|cause| is_switch(topology, cause.node)),
            );
        }
        Exposure {
            paused,
            reaches_loop,
        }
    }

    /// Whether an incident triggered at `time_ns` falls in the anomaly's window.
    pub fn in_window(&self, time_ns: u64) -> bool {
        time_ns >= self.start_ns && time_ns <= self.end_ns.saturating_add(SPREAD_SLACK_NS)
    }
}

/// How an anomaly reached one victim (ground truth at its trigger time). A victim that was
/// never paused met the anomaly only as contention at its origin; a victim whose PFC chain
/// never reaches a deadlock's loop met only the initiator's backpressure. What a correct
/// diagnosis may name for it follows (see [`judge_victim`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Exposure {
    /// A port of the victim's path had been paused by the anomaly's PFC (its own NIC port
    /// counts only when held for an egress off its path).
    pub paused: bool,
    /// The PAUSE chain from the victim's paused ports (or its path) reaches a loop port.
    pub reaches_loop: bool,
}

impl Exposure {
    /// Paused, and through the loop (the strict reading: only the class's own type counts).
    pub const FULL: Exposure = Exposure {
        paused: true,
        reaches_loop: true,
    };
}

/// Whether a node is a switch.
pub fn is_switch(topology: &FabricTopology, node: NodeId) -> bool {
    topology
        .nodes
        .get(node as usize)
        .is_some_and(|n| n.kind == NodeKind::Switch)
}

/// Builds the truth of a trace from its spec and the run's ground truth, and checks that the
/// anomaly the class calls for happened.
pub fn truth_of(spec: &TraceSpec, sim: &SimResult) -> Truth {
    let find = |kind: AnomalyKind| sim.ground_truth.iter().find(|a| a.kind == kind);
    let incast = find(AnomalyKind::IncastBurst);
    let storm = find(AnomalyKind::PfcStorm);
    let looped = find(AnomalyKind::RoutingLoop);
    let slow = find(AnomalyKind::SlowReceiver);
    let background = spec.background_workloads();
    let concurrent = spec.concurrent_workload();
    let anomaly_flows: BTreeSet<String> = sim
        .flows
        .iter()
        .filter(|f| f.workload >= background && Some(f.workload) != concurrent)
        .map(|f| f.tuple.clone())
        .collect();
    let mut truth = Truth {
        class: spec.class,
        expected_type: String::new(),
        start_ns: 0,
        end_ns: 0,
        root_ports: Vec::new(),
        loop_ports: Vec::new(),
        injector: None,
        anomaly_flows,
        roots_end_ns: 0,
        spreading: Vec::new(),
        realized: false,
        realization: String::new(),
    };
    let missing = |truth: &mut Truth, what: &str| {
        truth.realization = format!("the simulation has no {what} ground truth");
    };
    match spec.class {
        AnomalyClass::PfcBackpressure | AnomalyClass::FlowContention => {
            let Some(a) = incast else {
                missing(&mut truth, "incast");
                return truth;
            };
            truth.expected_type = if spec.class == AnomalyClass::PfcBackpressure {
                "pfc_backpressure".into()
            } else {
                "normal_flow_contention".into()
            };
            truth.start_ns = a.start_ns;
            truth.end_ns = a.end_ns;
            truth.roots_end_ns = a.end_ns;
            truth.root_ports = a.initial_ports.clone();
            truth.spreading = a.pfc_spreading.clone();
            if spec.class == AnomalyClass::PfcBackpressure {
                truth.realized = !a.pfc_spreading.is_empty();
                truth.realization = if truth.realized {
                    format!("PFC spread to {} ports", a.paused_ports.len())
                } else {
                    "the incast caused no PFC".into()
                };
            } else {
                let flows: Vec<_> = a
                    .root_cause_flows
                    .iter()
                    .filter_map(|f| sim.flows.get(*f as usize))
                    .collect();
                let slowed = flows
                    .iter()
                    .filter(|f| f.slowdown.is_none_or(|s| s >= 1.5))
                    .count();
                let queued = !flows.is_empty() && slowed * 2 >= flows.len();
                truth.realized = a.pfc_spreading.is_empty() && queued;
                truth.realization = if !a.pfc_spreading.is_empty() {
                    format!(
                        "the incast caused PFC ({} ports paused)",
                        a.paused_ports.len()
                    )
                } else if !queued {
                    format!(
                        "only {slowed} of {} incast flows were slowed 1.5× or more",
                        flows.len()
                    )
                } else {
                    format!("{slowed} of {} incast flows slowed, no PFC", flows.len())
                };
            }
        }
        AnomalyClass::PfcStorm => {
            let Some(a) = storm else {
                missing(&mut truth, "PFC storm");
                return truth;
            };
            let edges = host_origin(
                &mut truth,
                "pfc_storm",
                a,
                &spec.storm.as_ref().map(|s| s.host.clone()),
            );
            truth.realized = edges >= 2;
            truth.realization = format!(
                "PAUSE spread over {edges} edges to {} ports",
                a.paused_ports.len()
            );
        }
        AnomalyClass::SlowReceiver => {
            let Some(a) = slow else {
                missing(&mut truth, "slow receiver");
                return truth;
            };
            let edges = host_origin(
                &mut truth,
                "slow_receiver",
                a,
                &spec.slow.as_ref().map(|s| s.host.clone()),
            );
            // The receiver paused its ToR port (its drain limit reached the network).
            truth.realized = edges > 0;
            truth.realization = if truth.realized {
                format!(
                    "the receiver's pauses spread over {edges} edges to {} ports",
                    a.paused_ports.len()
                )
            } else {
                "the receiver never paused its ToR".into()
            };
        }
        AnomalyClass::DeadlockInLoop => {
            let Some(a) = looped else {
                missing(&mut truth, "routing loop");
                return truth;
            };
            truth.expected_type = "deadlock_initiator_in_loop".into();
            truth.start_ns = a.start_ns;
            truth.end_ns = a.end_ns;
            truth.roots_end_ns = a.end_ns;
            truth.root_ports = a.loop_ports.clone();
            truth.loop_ports = a.loop_ports.clone();
            truth.spreading = a.pfc_spreading.clone();
            let paused: BTreeSet<PortRef> = a.paused_ports.iter().copied().collect();
            let loop_paused = a.loop_ports.iter().filter(|p| paused.contains(p)).count();
            truth.realized = !a.loop_ports.is_empty() && loop_paused == a.loop_ports.len();
            truth.realization =
                format!("{loop_paused} of {} loop ports paused", a.loop_ports.len());
        }
        AnomalyClass::DeadlockOutOfLoop => {
            let Some(l) = looped else {
                missing(&mut truth, "routing loop");
                return truth;
            };
            let initiator = match spec.initiator {
                Some(Initiator::Storm) => storm,
                _ => incast,
            };
            let Some(a) = initiator else {
                missing(&mut truth, "initiator");
                return truth;
            };
            truth.expected_type = match spec.initiator {
                Some(Initiator::Storm) => "deadlock_initiator_out_of_loop_host_injection".into(),
                _ => "deadlock_initiator_out_of_loop_flow_contention".into(),
            };
            truth.injector = match spec.initiator {
                Some(Initiator::Storm) => spec.storm.as_ref().map(|s| s.host.clone()),
                _ => None,
            };
            truth.start_ns = a.start_ns;
            truth.end_ns = a.end_ns.max(l.end_ns);
            truth.roots_end_ns = a.end_ns;
            truth.root_ports = a.initial_ports.clone();
            truth.loop_ports = l.loop_ports.clone();
            truth.spreading = a.pfc_spreading.clone();
            truth.spreading.extend(l.pfc_spreading.iter().copied());
            // One edge per (sender, paused, priority, cause) over both anomalies: the
            // earliest first XOFF and the latest last one.
            let mut merged: BTreeMap<(PortRef, PortRef, u8, PortRef), SpreadEdge> = BTreeMap::new();
            for edge in &truth.spreading {
                merged
                    .entry((edge.sender, edge.paused, edge.priority, edge.cause))
                    .and_modify(|m| {
                        m.time_ns = m.time_ns.min(edge.time_ns);
                        m.last_ns = m.last_ns.max(edge.last_ns);
                    })
                    .or_insert(*edge);
            }
            truth.spreading = merged.into_values().collect();
            truth
                .spreading
                .sort_by_key(|e| (e.time_ns, e.sender, e.paused));
            let reached: BTreeSet<PortRef> = a.paused_ports.iter().copied().collect();
            let covered = l.loop_ports.iter().filter(|p| reached.contains(p)).count();
            let early = l
                .pfc_spreading
                .iter()
                .filter(|e| l.loop_ports.contains(&e.paused) && e.time_ns < a.start_ns)
                .count();
            truth.realized =
                !l.loop_ports.is_empty() && covered == l.loop_ports.len() && early == 0;
            truth.realization = if early > 0 {
                format!("{early} loop ports were paused before the initiator started")
            } else {
                format!(
                    "the initiator's PFC reached {covered} of {} loop ports",
                    l.loop_ports.len()
                )
            };
        }
    }
    truth
}

/// Fills the truth of an anomaly whose origin is a host (a storm's injector, a slow
/// receiver) and returns its distinct spreading edges (sender, paused port, priority).
fn host_origin(
    truth: &mut Truth,
    expected_type: &str,
    a: &hawkmesh_netsim::truth::Anomaly,
    host: &Option<String>,
) -> usize {
    truth.expected_type = expected_type.into();
    truth.start_ns = a.start_ns;
    truth.end_ns = a.end_ns;
    truth.roots_end_ns = a.end_ns;
    truth.root_ports = a.initial_ports.clone();
    truth.injector = host.clone();
    truth.spreading = a.pfc_spreading.clone();
    a.pfc_spreading
        .iter()
        .map(|e| (e.sender, e.paused, e.priority))
        .collect::<BTreeSet<_>>()
        .len()
}

/// How one attributed incident's diagnosis compares with the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// An anomaly affecting the victim has the expected type and root cause (TP).
    Correct,
    /// The expected type is named, but not with the expected root cause (FP).
    WrongRootCause,
    /// Anomalies affecting the victim are named, none of the expected type (FP).
    WrongType,
    /// Diagnosed, but no anomaly affecting the victim was found (no report).
    Silent,
    /// Not diagnosed (the telemetry could not be diagnosed) (no report).
    Undiagnosed,
}

impl Verdict {
    /// Whether the incident is a report (it names an anomaly).
    pub fn is_report(self) -> bool {
        matches!(
            self,
            Verdict::Correct | Verdict::WrongRootCause | Verdict::WrongType
        )
    }

    /// Name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Correct => "correct",
            Verdict::WrongRootCause => "wrong_root_cause",
            Verdict::WrongType => "wrong_type",
            Verdict::Silent => "silent",
            Verdict::Undiagnosed => "undiagnosed",
        }
    }
}

/// The judgement of one diagnosis.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Judgement {
    /// The verdict.
    pub verdict: Verdict,
    /// The victim-affecting anomalies as `type@port,port` (or `type@host`), in diagnosis
    /// order.
    pub claims: Vec<String>,
    /// For a correct report: whether the largest root-cause flow is one of the anomaly's own
    /// flows (`None` when the root cause names no flows).
    pub top_flow_injected: Option<bool>,
}

fn port_of(value: &serde_json::Value) -> Option<PortRef> {
    Some(PortRef {
        node: u32::try_from(value["switch"].as_u64()?).ok()?,
        port: u16::try_from(value["port"].as_u64()?).ok()?,
    })
}

fn ports_of(value: &serde_json::Value) -> Vec<PortRef> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(port_of)
        .collect()
}

fn claim_text(anomaly: &serde_json::Value) -> String {
    let kind = anomaly["type"].as_str().unwrap_or("?");
    let root = &anomaly["root_cause"];
    let mut at: Vec<String> = root["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p["label"].as_str().unwrap_or("?").to_string())
        .collect();
    if let Some(injector) = root["injector"].as_str() {
        at.push(format!("by {injector}"));
    }
    if let Some(receiver) = root["receiver"].as_str() {
        at.push(format!("at {receiver}"));
    }
    format!("{kind}@{}", at.join(","))
}

/// How a claim's root cause is checked against the truth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RootRule {
    /// Names one of the initial congestion ports.
    Ports,
    /// Names the injecting host or one of the initial ports.
    PortsOrInjector,
    /// Names loop ports only.
    LoopPorts,
    /// Names loop ports only, one of them an initial congestion port.
    LoopRootPorts,
}

/// Whether one anomaly of a diagnosis names the truth's root cause.
fn root_cause_matches(truth: &Truth, rule: RootRule, anomaly: &serde_json::Value) -> bool {
    let root = &anomaly["root_cause"];
    let ports = ports_of(&root["ports"]);
    // The host at the root: the injector of a storm, the receiver of a slow receiver.
    let injector = root["injector"].as_str().or(root["receiver"].as_str());
    match rule {
        RootRule::Ports => ports.iter().any(|p| truth.root_ports.contains(p)),
        RootRule::PortsOrInjector => {
            let by_host = truth.injector.is_some() && injector == truth.injector.as_deref();
            by_host || ports.iter().any(|p| truth.root_ports.contains(p))
        }
        RootRule::LoopPorts => {
            !ports.is_empty() && ports.iter().all(|p| truth.loop_ports.contains(p))
        }
        RootRule::LoopRootPorts => {
            !ports.is_empty()
                && ports.iter().all(|p| truth.loop_ports.contains(p))
                && ports.iter().any(|p| truth.root_ports.contains(p))
        }
    }
}

/// The (type, root rule) pairs that are a correct report for a victim with `exposure`: the
/// class's own anomaly always; for a victim the PFC never reached (not paused), contention
/// at the origin of an incast-started anomaly; for a victim of an out-of-loop deadlock
/// whose PAUSE chain does not reach the loop, the initiator's own anomaly.
fn accepted(truth: &Truth, exposure: Exposure) -> Vec<(&str, RootRule)> {
    let own = truth.expected_type.as_str();
    let storm_initiated = truth.injector.is_some();
    let mut out = Vec::new();
    match truth.class {
        AnomalyClass::PfcBackpressure => {
            out.push((own, RootRule::Ports));
            if !exposure.paused {
                out.push(("normal_flow_contention", RootRule::Ports));
            }
        }
        AnomalyClass::FlowContention => out.push((own, RootRule::Ports)),
        AnomalyClass::PfcStorm | AnomalyClass::SlowReceiver => {
            out.push((own, RootRule::PortsOrInjector))
        }
        AnomalyClass::DeadlockInLoop => {
            out.push((own, RootRule::LoopPorts));
            // Before the cycle closes (or outside its chain) the loop's own traffic is
            // congestion at a loop port, spreading PFC like any backpressure.
            if !exposure.reaches_loop {
                out.push(("pfc_backpressure", RootRule::LoopPorts));
                if !exposure.paused {
                    out.push(("normal_flow_contention", RootRule::LoopPorts));
                }
            }
        }
        AnomalyClass::DeadlockOutOfLoop => {
            out.push((own, RootRule::PortsOrInjector));
            // The initiator congested a loop port itself (an incast whose path crosses the
            // loop link queues there too): by Table 2 that is contention inside the loop,
            // so an in-loop initiator at that port names the same cause.
            if truth
                .root_ports
                .iter()
                .any(|p| truth.loop_ports.contains(p))
            {
                out.push(("deadlock_initiator_in_loop", RootRule::LoopRootPorts));
            }
            if !exposure.reaches_loop {
                if storm_initiated {
                    out.push(("pfc_storm", RootRule::PortsOrInjector));
                } else {
                    out.push(("pfc_backpressure", RootRule::Ports));
                    if !exposure.paused {
                        out.push(("normal_flow_contention", RootRule::Ports));
                    }
                }
            }
        }
    }
    out
}

/// Judges one diagnosis (JSON schema of analyzer/README.md; `None` = not diagnosed) of a
/// victim the anomaly reached fully (paused, through the loop): only the class's own type
/// with its root cause is correct.
pub fn judge(truth: &Truth, diagnosis: Option<&serde_json::Value>) -> Judgement {
    judge_victim(truth, Exposure::FULL, diagnosis)
}

/// Judges one diagnosis of a victim the anomaly reached as `exposure` says (ground truth):
/// a claim is correct when it has one of the types the exposure admits with its root cause
/// (a never-paused victim of an incast met contention at the incast's port; a victim of an
/// out-of-loop deadlock's initiator that is not behind the loop met the initiator's
/// backpressure or storm). Otherwise `WrongRootCause` when the class's own type is named,
/// `WrongType` when not.
pub fn judge_victim(
    truth: &Truth,
    exposure: Exposure,
    diagnosis: Option<&serde_json::Value>,
) -> Judgement {
    let Some(diagnosis) = diagnosis else {
        return Judgement {
            verdict: Verdict::Undiagnosed,
            claims: Vec::new(),
            top_flow_injected: None,
        };
    };
    let claims: Vec<&serde_json::Value> = diagnosis["anomalies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["affects_victim"].as_bool() == Some(true))
        .collect();
    let texts = claims.iter().map(|a| claim_text(a)).collect();
    let typed: Vec<&&serde_json::Value> = claims
        .iter()
        .filter(|a| a["type"].as_str() == Some(truth.expected_type.as_str()))
        .collect();
    let accepted = accepted(truth, exposure);
    let correct = claims.iter().find(|a| {
        accepted.iter().any(|(kind, rule)| {
            a["type"].as_str() == Some(kind) && root_cause_matches(truth, *rule, a)
        })
    });
    let verdict = if claims.is_empty() {
        Verdict::Silent
    } else if correct.is_some() {
        Verdict::Correct
    } else if !typed.is_empty() {
        Verdict::WrongRootCause
    } else {
        Verdict::WrongType
    };
    let top_flow_injected = correct.and_then(|a| {
        a["root_cause"]["flows"]
            .as_array()
            .and_then(|flows| flows.first())
            .and_then(|f| f["flow"].as_str())
            .map(|flow| truth.anomaly_flows.contains(flow))
    });
    Judgement {
        verdict,
        claims: texts,
        top_flow_injected,
    }
}

/// Counts over a set of judged runs (one class, one parameter point, one method).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Score {
    /// Traces whose anomaly materialised (judged).
    pub traces: usize,
    /// Traces whose anomaly did not materialise in this run (not judged).
    pub unrealized: usize,
    /// Reports (attributed incidents naming an anomaly that affects the victim).
    pub reports: usize,
    /// Correct reports (true positives).
    pub correct: usize,
    /// Wrong reports (false positives).
    pub wrong: usize,
    /// Traces with at least one correct report.
    pub detected: usize,
    /// Traces without (false negatives).
    pub missed: usize,
    /// Attributed incidents that named no victim-affecting anomaly or were not diagnosed.
    pub silent: usize,
    /// Precision = correct / reports (`None` without reports).
    pub precision: Option<f64>,
    /// Recall = detected / traces (`None` without traces).
    pub recall: Option<f64>,
    /// Harmonic mean of the two (`None` if either is missing).
    pub f1: Option<f64>,
}

impl Score {
    /// Adds one trace's verdicts (`realized = false`: counted as unrealized only).
    pub fn add_trace(&mut self, realized: bool, verdicts: &[Verdict]) {
        if !realized {
            self.unrealized += 1;
            return;
        }
        self.traces += 1;
        let mut detected = false;
        for verdict in verdicts {
            if verdict.is_report() {
                self.reports += 1;
            } else {
                self.silent += 1;
            }
            if *verdict == Verdict::Correct {
                self.correct += 1;
                detected = true;
            } else if verdict.is_report() {
                self.wrong += 1;
            }
        }
        if detected {
            self.detected += 1;
        } else {
            self.missed += 1;
        }
        self.finish();
    }

    /// Recomputes the ratios.
    pub fn finish(&mut self) {
        self.precision =
            (self.reports > 0).then(|| round4(self.correct as f64 / self.reports as f64));
        self.recall = (self.traces > 0).then(|| round4(self.detected as f64 / self.traces as f64));
        self.f1 = match (self.precision, self.recall) {
            (Some(p), Some(r)) if p + r > 0.0 => Some(round4(2.0 * p * r / (p + r))),
            (Some(_), Some(_)) => Some(0.0),
            _ => None,
        };
    }

    /// Sums two scores.
    pub fn merge(&mut self, other: &Score) {
        self.traces += other.traces;
        self.unrealized += other.unrealized;
        self.reports += other.reports;
        self.correct += other.correct;
        self.wrong += other.wrong;
        self.detected += other.detected;
        self.missed += other.missed;
        self.silent += other.silent;
        self.finish();
    }
}

/// Rounds to 4 decimals (stable JSON).
pub fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Victim paths of a trace's flows, by 5-tuple text: the egress ports each flow crosses under
/// each routing the trace's static routes (routing loops) put in force over time.
#[derive(Debug, Default)]
pub struct FlowPaths {
    /// Every routing together (attribution: a victim crossing any of them).
    paths: BTreeMap<String, BTreeSet<PortRef>>,
    /// From each time a set of static routes takes effect (ns, ascending), the paths then.
    phases: Vec<(u64, BTreeMap<String, BTreeSet<PortRef>>)>,
}

impl FlowPaths {
    /// Computes the paths of every flow of a scenario, once per routing phase.
    pub fn of(
        loaded: &hawkmesh_netsim::LoadedScenario,
    ) -> Result<FlowPaths, hawkmesh_netsim::ScenarioError> {
        let ns = |us: f64| (us * 1000.0).round() as u64;
        let mut starts: Vec<u64> = loaded
            .scenario
            .route
            .iter()
            .map(|r| ns(r.start_us))
            .collect();
        starts.push(0);
        starts.sort_unstable();
        starts.dedup();
        let mut paths: BTreeMap<String, BTreeSet<PortRef>> = BTreeMap::new();
        let mut phases = Vec::new();
        for start in starts {
            // The routes in force from `start` on, installed from the beginning.
            let mut phase = loaded.clone();
            phase.scenario.route.retain(|r| ns(r.start_us) <= start);
            for route in &mut phase.scenario.route {
                route.start_us = 0.0;
            }
            let sim = hawkmesh_netsim::Simulation::new(&phase)?;
            let records = sim.result("paths", loaded.scenario.seed, &[u64::MAX]);
            let mut now = BTreeMap::new();
            for flow in &records.flows {
                let ports: BTreeSet<PortRef> = sim.flow_path(flow.id).into_iter().collect();
                paths
                    .entry(flow.tuple.clone())
                    .or_default()
                    .extend(ports.iter().copied());
                now.insert(flow.tuple.clone(), ports);
            }
            phases.push((start, now));
        }
        Ok(FlowPaths { paths, phases })
    }

    /// Paths given directly (tests, other fabrics), the same at all times.
    pub fn from_paths(paths: BTreeMap<String, BTreeSet<PortRef>>) -> FlowPaths {
        FlowPaths {
            phases: vec![(0, paths.clone())],
            paths,
        }
    }

    /// The ports of a flow under any of the routings (`None` if unknown).
    pub fn ports(&self, tuple: &str) -> Option<&BTreeSet<PortRef>> {
        self.paths.get(tuple)
    }

    /// The ports a flow's packets cross at `time_ns`, with the routes then in force: once a
    /// routing loop is in place, a flow it captures no longer reaches the switches past it.
    pub fn ports_at(&self, tuple: &str, time_ns: u64) -> Option<&BTreeSet<PortRef>> {
        self.phases
            .iter()
            .rev()
            .find(|(start, _)| *start <= time_ns)
            .and_then(|(_, paths)| paths.get(tuple))
    }
}

/// Whether an incident (victim, triggered in `window`) is about the trace's anomaly: its
/// trigger falls in the anomaly's window and the victim is one of the anomaly's own flows,
/// crosses one of its initial or loop ports, or crosses a port the anomaly's PFC held paused
/// while the sampled packet was in the network (a pause that had ended before it was sent
/// did not delay it: that victim was slowed by something else).
pub fn attributed(truth: &Truth, paths: &FlowPaths, victim: &str, window: Window) -> bool {
    if !truth.in_window(window.at_ns) {
        return false;
    }
    if truth.anomaly_flows.contains(victim) {
        return true;
    }
    let Some(ports) = paths.ports_at(victim, window.at_ns) else {
        return false;
    };
    ports.iter().any(|p| {
        truth.origin_port_at(p, window.at_ns)
            || truth.spreading.iter().any(|e| {
                e.paused == *p && e.time_ns <= window.at_ns && e.until_ns >= window.since_ns
            })
    })
}
