//! R-Pingmesh inside netsim: the host agent's [`Prober`] and [`Responder`] on every RNIC,
//! probing the controller's pinglists ([`hawkmesh_pingmesh::Pinglists`]) with real packets
//! in the simulated fabric, and the results in the form the analyzer takes
//! ([`hawkmesh_pingmesh::analysis::ProbeRecord`]).
//!
//! The netsim transport (the one transport of the probing library that runs here):
//!
//! - Probes and ACKs are custom packets of [`ProbingConfig::priority`] with the probe's
//!   5-tuple (ACKs keep the probe's UDP source port, as RC ACKs do), so ECMP hashes them like
//!   service traffic and PFC pauses them like it; a lost link loses them.
//! - Library times are nanoseconds (netsim's clock counts picoseconds; the glue converts).
//! - ② and ④ are send completions (the last bit left the NIC, netsim's
//!   `HostHook::on_custom_sent`); ③ and ⑤ receive completions.
//! - ① and ⑥ come from a modelled host CPU: one queue per host, each probe, ACK or delay ACK
//!   it handles costs [`ProbingConfig::cpu_cost_ns`], plus any [`CpuLoad`] injected on that
//!   host (a responder whose CPU is taken by the service answers late: §6's CPU noise).
//! - Path tracing: the route a 5-tuple takes (`Simulation::path_ports`), traced on the
//!   schedule the daemon's traceroute keeps ([`hawkmesh_host_agent::paths::PathTracer`], one
//!   per host: a new 5-tuple when the budget allows, a stale one again after the refresh time,
//!   at most [`ProbingConfig::path_tracing`]'s rate). Results carry the last traced path of
//!   their 5-tuple and of their ACKs' (the responder's host traces those), empty before the
//!   first trace. The agents are taken to have run before the simulation starts: every
//!   pinglist 5-tuple is traced at time 0; what appears later (service connections) waits
//!   for the budget.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use hawkmesh_host_agent::paths::{PathTracer, PathTracingConfig};
use hawkmesh_host_agent::probe::{ProbeOutcome, ProbeResult, Prober, ProberConfig, Responder};
use hawkmesh_host_agent::{DetectorConfig, PollingTrigger, RttDetector};

use crate::hosts::polling_emit;
use hawkmesh_netsim::hooks::{HostEmit, HostHook, RttSample};
use hawkmesh_netsim::packet::Packet;
use hawkmesh_netsim::time::{Time, NS};
use hawkmesh_netsim::Simulation;
use hawkmesh_pingmesh::analysis::{ProbeRecord, ProbeSource, ProbeStatus};
use hawkmesh_pingmesh::inventory::{Inventory, RnicId};
use hawkmesh_pingmesh::pinglist::{PinglistConfig, Pinglists, ROCE_SOURCE_PORT_MIN};
use hawkmesh_pingmesh::rng::SplitMix64;
use hawkmesh_wire::probe::{ProbeKind, ProbeRepr, PROBE_PAYLOAD_BYTES};
use hawkmesh_wire::telemetry::{FiveTuple, ROCEV2_UDP_PORT};
use hawkmesh_wire::topology::{NodeId, PortRef};

/// How the simulated agents probe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProbingConfig {
    /// The controller's pinglist settings (rates are per simulated second).
    pub pinglists: PinglistConfig,
    /// A probe without both ACKs after this long is a timeout.
    pub timeout_ns: u64,
    /// 802.1p priority of probes and ACKs (the service's, so they meet what it meets).
    pub priority: u8,
    /// Host CPU time to handle one probe, ACK or delay ACK.
    pub cpu_cost_ns: u64,
    /// The agents' timer: probes due within a tick leave at its start.
    pub tick_ns: u64,
    /// The agents' first incarnation (their QPNs derive from it; a restart takes the next).
    pub incarnation: u32,
    /// How often the controller's comm info (each RNIC's QPN) reaches the probers'
    /// pinglists (R-Pingmesh: 5 minutes); a restarted responder's new QPN is unknown to
    /// its probers until then.
    pub comm_refresh_ns: u64,
    /// Service tracing (probes on the service connections' own 5-tuples), or none.
    pub service_tracing: Option<ServiceTracing>,
    /// Each host's path tracing schedule (rates per simulated second).
    pub path_tracing: PathTracingConfig,
}

/// Service tracing (R-Pingmesh §4.1.2): every service connection a host's RNIC opened is
/// probed on its own 5-tuple (its UDP source port), so the probe takes the connection's
/// ECMP path; the RTT the probes measure can trigger HAWKEYE polling for the connection
/// (the loop none of the seed systems closes: where R-Pingmesh sees a slow service path,
/// HAWKEYE asks the switches on it why).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ServiceTracing {
    /// Time between two probes of one connection (R-Pingmesh: 10 ms; the simulated runs'
    /// rates are 200 times the paper's: 50 µs).
    pub interval_ns: u64,
    /// The HAWKEYE trigger on the probes' network RTT (a probe unanswered for the detector's
    /// `stall_ns` is a stall): a polling packet for the connection's 5-tuple. `None`: trace
    /// only.
    pub trigger: Option<DetectorConfig>,
    /// 802.1p priority of the polling packets.
    pub control_priority: u8,
}

impl ServiceTracing {
    /// Tracing every 50 µs (simulation scale), polling with HAWKEYE's defaults in
    /// `control_priority`.
    pub fn polling(control_priority: u8) -> Self {
        ServiceTracing {
            interval_ns: 50_000,
            trigger: Some(DetectorConfig::default()),
            control_priority,
        }
    }
}

impl Default for ProbingConfig {
    fn default() -> Self {
        ProbingConfig {
            // Simulated runs last milliseconds: the paper's 10 probes/s become 2,000/s so
            // that a 20-ms analysis period sees as many probes per RNIC as 4 s of the paper.
            pinglists: PinglistConfig {
                tor_mesh_pps: 2_000.0,
                link_target_pps: 2_000.0,
                ..PinglistConfig::default()
            },
            timeout_ns: 2_000_000,
            priority: 3,
            cpu_cost_ns: 1_000,
            tick_ns: 50_000,
            incarnation: 1,
            comm_refresh_ns: 100_000_000,
            service_tracing: None,
            // The daemon's default schedule at the simulation's 200-fold rates.
            path_tracing: PathTracingConfig {
                traces_per_s: 2_000.0,
                refresh_ns: 1_500_000_000,
                ..PathTracingConfig::default()
            },
        }
    }
}

/// Extra CPU time per packet on a host during an interval (the service hogging the CPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuLoad {
    /// The host.
    pub host: NodeId,
    /// Extra time per handled packet.
    pub extra_ns: u64,
    /// From (ns of simulated time).
    pub from_ns: u64,
    /// Until (ns of simulated time).
    pub until_ns: u64,
}

/// The modelled host CPUs (R-Pingmesh's ① and ⑥, a responder's delay): one queue per host;
/// each packet handled costs `cost_ns` plus the [`CpuLoad`]s on that host at the time.
#[derive(Clone, Debug)]
pub(crate) struct HostCpus {
    free_at: HashMap<NodeId, u64>,
    loads: Vec<CpuLoad>,
    cost_ns: u64,
}

impl HostCpus {
    pub(crate) fn new(loads: Vec<CpuLoad>, cost_ns: u64) -> Self {
        HostCpus {
            free_at: HashMap::new(),
            loads,
            cost_ns,
        }
    }

    /// When (ns) `host`'s CPU finishes handling one more packet that arrived at `now` (ns).
    pub(crate) fn handle(&mut self, host: NodeId, now: u64) -> u64 {
        let extra: u64 = self
            .loads
            .iter()
            .filter(|l| l.host == host && l.from_ns <= now && now < l.until_ns)
            .map(|l| l.extra_ns)
            .sum();
        let free = self.free_at.entry(host).or_insert(0);
        let done = (*free).max(now) + self.cost_ns + extra;
        *free = done;
        done
    }
}

/// Something that happens to a host's agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentEventKind {
    /// The agent restarts: its RNICs' queue pairs are new (new QPNs, a new incarnation),
    /// its probes in flight are lost.
    Restart,
    /// The host goes down: its agent neither probes, answers nor uploads any more.
    Down,
}

/// An agent event at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AgentEvent {
    /// The host.
    pub host: NodeId,
    /// When (ns of simulated time).
    pub at_ns: u64,
    /// What.
    pub kind: AgentEventKind,
}

/// Whom a probe went to, as the prober keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Target {
    rnic: RnicId,
    source: ProbeSource,
    tuple: FiveTuple,
    qpn: u32,
}

/// What a send-completion token stands for.
#[derive(Clone, Copy, Debug)]
enum Sent {
    Probe {
        prober: RnicId,
        seq: u64,
    },
    Ack {
        responder: RnicId,
        prober: RnicId,
        tuple: FiveTuple,
        ack: ProbeRepr,
    },
}

struct Rnic {
    host: NodeId,
    ip: [u8; 4],
    /// The agent's current incarnation on this RNIC (its QPN derives from it).
    incarnation: u32,
    prober: Prober<Target>,
    responder: Responder,
    /// Next ToR-mesh probe due (ns).
    tor_mesh_next: u64,
    tor_mesh_index: usize,
    /// Next inter-ToR probe due (ns).
    inter_next: u64,
    inter_index: usize,
}

/// A service connection being traced.
#[derive(Clone, Copy, Debug)]
struct Service {
    prober: RnicId,
    target: RnicId,
    /// The connection's 5-tuple (the probes').
    tuple: FiveTuple,
    /// Opened and not done.
    active: bool,
    next_ns: u64,
    /// Send time of the oldest probe not answered since the last answer.
    waiting_since: Option<u64>,
    /// The unloaded RTT of its path (from the topology), ns.
    base_rtt_ns: u64,
}

/// Counters of a probing run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbingStats {
    /// Probes sent.
    pub probes: u64,
    /// Probes refused by a prober (too many in flight).
    pub refused: u64,
    /// Custom packets that were not probe payloads or were rejected by a prober/responder.
    pub rejected: u64,
}

struct State {
    config: ProbingConfig,
    inventory: Inventory,
    lists: Pinglists,
    rnics: Vec<Rnic>,
    cpus: HostCpus,
    /// Agent events not yet applied, in time order.
    events: Vec<AgentEvent>,
    /// Hosts that went down, and when (ns).
    down: HashMap<NodeId, u64>,
    /// The QPNs the probers' pinglists carry (the controller's comm info as of its last
    /// refresh).
    published_qpn: Vec<u32>,
    next_refresh: u64,
    prober_config: ProberConfig,
    sent: HashMap<u64, Sent>,
    next_token: u64,
    results: Vec<(RnicId, ProbeResult<Target>)>,
    stats: ProbingStats,
    /// Service connections by netsim flow.
    services: BTreeMap<u32, Service>,
    /// The flow of each traced 5-tuple.
    service_flows: HashMap<FiveTuple, u32>,
    detectors: BTreeMap<NodeId, RttDetector>,
    triggers: Vec<PollingTrigger>,
    triggering_stopped: bool,
    /// Each host's path tracing.
    tracers: HashMap<NodeId, PathTracer<PathKey, Arc<[PortRef]>>>,
}

/// A traced 5-tuple: from, to, the 5-tuple.
type PathKey = (RnicId, RnicId, FiveTuple);

impl State {
    /// When (ns) the host's CPU finishes handling one more packet that arrived at `now` (ns).
    fn cpu(&mut self, host: NodeId, now: u64) -> u64 {
        self.cpus.handle(host, now)
    }

    fn token(&mut self, what: Sent) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.sent.insert(token, what);
        token
    }

    /// The 5-tuple of a probe from `prober` to `target` on UDP source port `src_port`.
    fn tuple(&self, prober: RnicId, target: RnicId, src_port: u16) -> Option<FiveTuple> {
        let (from, to) = (
            self.rnics.get(prober as usize)?,
            self.rnics.get(target as usize)?,
        );
        Some(FiveTuple {
            src_ip: from.ip,
            dst_ip: to.ip,
            src_port,
            dst_port: ROCEV2_UDP_PORT,
            protocol: 17,
        })
    }

    /// The host tracing `key`'s path: the sender's.
    fn tracer(&mut self, key: &PathKey) -> Option<&mut PathTracer<PathKey, Arc<[PortRef]>>> {
        let host = self.rnics.get(key.0 as usize)?.host;
        self.tracers.get_mut(&host)
    }

    /// The RNIC's current QPN (what the controller's registry holds once its agent has
    /// registered).
    fn qpn(&self, rnic: RnicId) -> u32 {
        self.rnics
            .get(rnic as usize)
            .map_or(0, |r| qpn_of(r.incarnation, rnic))
    }

    fn is_down(&self, host: NodeId) -> bool {
        self.down.contains_key(&host)
    }

    /// Applies the agent events due by `now` (ns) and the comm-info refresh.
    fn apply_events(&mut self, now: u64) {
        while self.events.first().is_some_and(|e| e.at_ns <= now) {
            let event = self.events.remove(0);
            match event.kind {
                AgentEventKind::Down => {
                    self.down.entry(event.host).or_insert(event.at_ns);
                }
                AgentEventKind::Restart => {
                    for id in 0..self.rnics.len() {
                        if self.rnics[id].host != event.host {
                            continue;
                        }
                        let incarnation = self.rnics[id].incarnation.wrapping_add(1);
                        let qpn = qpn_of(incarnation, id as RnicId);
                        let r = &mut self.rnics[id];
                        r.incarnation = incarnation;
                        r.prober = Prober::new(self.prober_config, qpn, incarnation);
                        r.responder = Responder::new(qpn, incarnation, true, 4096);
                    }
                }
            }
        }
        if now >= self.next_refresh {
            self.published_qpn = (0..self.rnics.len() as RnicId)
                .map(|r| self.qpn(r))
                .collect();
            self.next_refresh = now + self.config.comm_refresh_ns.max(1);
        }
    }

    /// A probe ended: keep its result; a service-tracing probe's RTT (or its loss) goes to
    /// its host's HAWKEYE detector.
    fn finished(
        &mut self,
        rnic: RnicId,
        result: ProbeResult<Target>,
        now: u64,
        emit: &mut Vec<HostEmit>,
    ) {
        if result.target.source == ProbeSource::ServiceTracing {
            let victim = result.target.tuple;
            let sample = match result.outcome {
                ProbeOutcome::Answered { network_rtt_ns, .. } => {
                    if let Some(flow) = self.service_flows.get(&victim) {
                        if let Some(service) = self.services.get_mut(flow) {
                            service.waiting_since = None;
                        }
                    }
                    Some((network_rtt_ns, false))
                }
                ProbeOutcome::Timeout { .. } => Some((result.sent_ns, true)),
                ProbeOutcome::Inconsistent => None,
            };
            if let Some((value, lost)) = sample {
                self.observe_service(rnic, result.target.rnic, victim, value, lost, now, emit);
            }
        }
        self.results.push((rnic, result));
    }

    /// Feeds a service connection's probe RTT (or, `stalled`, the send time of a probe
    /// still unanswered) to the prober host's detector; polls on a trigger.
    #[allow(clippy::too_many_arguments)]
    fn observe_service(
        &mut self,
        prober: RnicId,
        target: RnicId,
        victim: FiveTuple,
        value: u64,
        stalled: bool,
        now: u64,
        emit: &mut Vec<HostEmit>,
    ) {
        let Some(tracing) = self.config.service_tracing else {
            return;
        };
        let Some(config) = tracing.trigger else {
            return;
        };
        if self.triggering_stopped {
            return;
        }
        let Some(host) = self.rnics.get(prober as usize).map(|r| r.host) else {
            return;
        };
        let base = self
            .service_flows
            .get(&victim)
            .and_then(|flow| self.services.get(flow))
            .map(|s| s.base_rtt_ns);
        let detector = self
            .detectors
            .entry(host)
            .or_insert_with(|| RttDetector::new(host, config));
        // The base RTT is the connection's unloaded path RTT from the topology (a base
        // learned from the first probes would be the congestion itself for a connection
        // opened into it, as an incast's are). It counts the data packets' serialisation,
        // more than a probe's: the comparison errs on the quiet side.
        let trigger = if stalled {
            detector.observe_stall(victim, value, base, now)
        } else {
            detector.observe(victim, value, base, now)
        };
        if let Some(trigger) = trigger {
            emit.push(polling_emit(
                &trigger,
                prober,
                target,
                tracing.control_priority,
                false,
            ));
            self.triggers.push(trigger);
        }
    }

    fn send_probe(
        &mut self,
        prober: RnicId,
        target: RnicId,
        source: ProbeSource,
        src_port: u16,
        now: Time,
        emit: &mut Vec<HostEmit>,
    ) {
        let Some(tuple) = self.tuple(prober, target, src_port) else {
            return;
        };
        // The target's QPN as the prober's pinglist has it (refreshed periodically).
        let qpn = self
            .published_qpn
            .get(target as usize)
            .copied()
            .unwrap_or(0);
        let key = Target {
            rnic: target,
            source,
            tuple,
            qpn,
        };
        let Some(probe) = self.rnics[prober as usize].prober.probe(key, qpn, now) else {
            self.stats.refused += 1;
            return;
        };
        if source == ProbeSource::ServiceTracing {
            if let Some(service) = self
                .service_flows
                .get(&tuple)
                .and_then(|flow| self.services.get_mut(flow))
            {
                service.waiting_since.get_or_insert(now);
            }
        }
        let Ok(payload) = probe.to_bytes() else {
            return;
        };
        self.stats.probes += 1;
        let token = self.token(Sent::Probe {
            prober,
            seq: probe.seq,
        });
        emit.push(HostEmit {
            tx_token: Some(token),
            ..HostEmit::now(
                prober,
                target,
                tuple,
                self.config.priority,
                payload.to_vec(),
            )
        });
    }

    /// The agents' timer at `now` (ns): expire probes, send the ones due.
    fn wakeup(&mut self, now: u64, emit: &mut Vec<HostEmit>) {
        self.apply_events(now);
        for index in 0..self.rnics.len() {
            let rnic = index as RnicId;
            if self.is_down(self.rnics[index].host) {
                continue;
            }
            for expired in self.rnics[index].prober.expire(now) {
                self.finished(rnic, expired, now, emit);
            }
            let list = &self.lists.lists()[index];
            let (tor_mesh, inter) = (list.tor_mesh.clone(), list.inter_tor.clone());
            let (mesh_every, inter_every) = (list.tor_mesh_interval_ns, list.inter_tor_interval_ns);
            if let Some(every) = mesh_every {
                while self.rnics[index].tor_mesh_next <= now && !tor_mesh.is_empty() {
                    let i = self.rnics[index].tor_mesh_index % tor_mesh.len();
                    self.rnics[index].tor_mesh_index += 1;
                    self.rnics[index].tor_mesh_next += every;
                    let target = tor_mesh[i];
                    let port = tor_mesh_port(target);
                    self.send_probe(rnic, target, ProbeSource::TorMesh, port, now, emit);
                }
            }
            if let Some(every) = inter_every {
                while self.rnics[index].inter_next <= now && !inter.is_empty() {
                    let i = self.rnics[index].inter_index % inter.len();
                    self.rnics[index].inter_index += 1;
                    self.rnics[index].inter_next += every;
                    let t = inter[i];
                    self.send_probe(rnic, t.dst, ProbeSource::InterTor, t.src_port, now, emit);
                }
            }
        }
    }

    /// The service-tracing probes due at `now` (ns), and the stalls of connections whose
    /// probes have gone unanswered for the detector's stall time.
    fn trace(&mut self, now: u64, emit: &mut Vec<HostEmit>) {
        let Some(tracing) = self.config.service_tracing else {
            return;
        };
        let every = tracing.interval_ns.max(1);
        let flows: Vec<u32> = self.services.keys().copied().collect();
        for flow in flows {
            let Some(service) = self.services.get(&flow).copied() else {
                continue;
            };
            let host = self.rnics.get(service.prober as usize).map(|r| r.host);
            if !service.active || host.is_none_or(|h| self.is_down(h)) {
                continue;
            }
            if let (Some(since), Some(config)) = (service.waiting_since, tracing.trigger) {
                if config.stall_ns > 0 && now.saturating_sub(since) >= config.stall_ns {
                    self.observe_service(
                        service.prober,
                        service.target,
                        service.tuple,
                        since,
                        true,
                        now,
                        emit,
                    );
                }
            }
            if service.next_ns <= now {
                // One probe per due time; after a long gap, no burst to catch up.
                let next = (service.next_ns + every).max(now + 1);
                if let Some(s) = self.services.get_mut(&flow) {
                    s.next_ns = next;
                }
                self.send_probe(
                    service.prober,
                    service.target,
                    ProbeSource::ServiceTracing,
                    service.tuple.src_port,
                    now,
                    emit,
                );
            }
        }
    }

    /// A probe payload arrived (receive completion `now`, ns).
    fn received(&mut self, packet: &Packet, now: u64, emit: &mut Vec<HostEmit>) {
        let Ok(repr) = ProbeRepr::from_bytes(packet.custom_bytes()) else {
            self.stats.rejected += 1;
            return;
        };
        let at = packet.dst_nic;
        let Some(host) = self.rnics.get(at as usize).map(|r| r.host) else {
            return;
        };
        if self.is_down(host) {
            return;
        }
        match repr.kind {
            ProbeKind::Probe => {
                // ③ = now; the responder's CPU posts the first ACK.
                let Ok(ack) = self.rnics[at as usize].responder.on_probe(&repr, now) else {
                    self.stats.rejected += 1;
                    return;
                };
                let Ok(payload) = ack.to_bytes() else {
                    return;
                };
                let posted = self.cpu(host, now);
                let tuple = ack_tuple(packet.tuple);
                let token = self.token(Sent::Ack {
                    responder: at,
                    prober: packet.src_nic,
                    tuple,
                    ack,
                });
                emit.push(HostEmit {
                    not_before: posted * NS,
                    tx_token: Some(token),
                    ..HostEmit::now(
                        at,
                        packet.src_nic,
                        tuple,
                        self.config.priority,
                        payload.to_vec(),
                    )
                });
            }
            ProbeKind::Ack | ProbeKind::DelayAck => {
                // ⑤ = now; ⑥ when the prober's CPU has handled it.
                let handled = self.cpu(host, now);
                match self.rnics[at as usize].prober.on_ack(&repr, now, handled) {
                    Ok(Some(result)) => self.finished(at, result, now, emit),
                    Ok(None) => {}
                    Err(_) => self.stats.rejected += 1,
                }
            }
        }
    }

    /// A packet with a token left its NIC (send completion `now`, ns).
    fn send_completed(&mut self, token: u64, now: u64, emit: &mut Vec<HostEmit>) {
        match self.sent.remove(&token) {
            Some(Sent::Probe { prober, seq }) => {
                if let Some(result) = self.rnics[prober as usize]
                    .prober
                    .on_send_completion(seq, now)
                {
                    self.finished(prober, result, now, emit);
                }
            }
            Some(Sent::Ack {
                responder,
                prober,
                tuple,
                ack,
            }) => {
                // ④ = now: the delay ACK carries ④−③, posted by the responder's CPU.
                let Some(delay_ack) = self.rnics[responder as usize]
                    .responder
                    .on_ack_sent(&ack, now)
                else {
                    return;
                };
                let Ok(payload) = delay_ack.to_bytes() else {
                    return;
                };
                let host = self.rnics[responder as usize].host;
                let posted = self.cpu(host, now);
                emit.push(HostEmit {
                    not_before: posted * NS,
                    ..HostEmit::now(
                        responder,
                        prober,
                        tuple,
                        self.config.priority,
                        payload.to_vec(),
                    )
                });
            }
            None => {}
        }
    }
}

/// Checks that the inventory's RNIC order is netsim's NIC order (RNIC id = netsim NIC
/// index, which the glue relies on).
pub(crate) fn check_nic_order(sim: &Simulation, inventory: &Inventory) -> Result<(), ProbingError> {
    let topology = sim.topology();
    // netsim numbers NICs by host id, then port: the inventory's order.
    let mut expected = Vec::new();
    for node in &topology.nodes {
        let mut ports: Vec<u16> = topology
            .links
            .iter()
            .filter_map(|l| {
                if l.a.node == node.id {
                    Some(l.a.port)
                } else if l.b.node == node.id {
                    Some(l.b.port)
                } else {
                    None
                }
            })
            .collect();
        if node.kind == hawkmesh_wire::topology::NodeKind::Host {
            ports.sort_unstable();
            expected.extend(ports.into_iter().map(|p| (node.id, p)));
        }
    }
    for (rnic, r) in inventory.rnics().iter().enumerate() {
        if expected.get(rnic) != Some(&(r.host, r.nic)) {
            return Err(ProbingError::NicOrder {
                rnic: rnic as RnicId,
                label: inventory.label(rnic as RnicId),
            });
        }
    }
    Ok(())
}

fn qpn_base(incarnation: u32) -> u32 {
    incarnation.wrapping_mul(0x10_0000)
}

fn qpn_of(incarnation: u32, rnic: RnicId) -> u32 {
    qpn_base(incarnation).wrapping_add(rnic)
}

/// The ACK's 5-tuple: the probe's reversed, keeping its UDP source port (RC ACKs do).
/// A ToR-mesh probe's source port: fixed per target (ToR-mesh paths have no ECMP choice).
fn tor_mesh_port(target: RnicId) -> u16 {
    ROCE_SOURCE_PORT_MIN + (target as u16 & 0x3FFF)
}

fn ack_tuple(probe: FiveTuple) -> FiveTuple {
    FiveTuple {
        src_ip: probe.dst_ip,
        dst_ip: probe.src_ip,
        src_port: probe.src_port,
        dst_port: ROCEV2_UDP_PORT,
        protocol: probe.protocol,
    }
}

/// Why probing could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ProbingError {
    /// The fabric has no RNICs to probe, or an unusable description.
    #[error("pingmesh inventory: {0}")]
    Inventory(#[from] hawkmesh_pingmesh::InventoryError),
    /// The pinglists could not be built.
    #[error("pinglists: {0}")]
    Pinglists(#[from] hawkmesh_pingmesh::PinglistError),
    /// The path tracing schedule is unusable.
    #[error("{0}")]
    PathTracing(String),
    /// The inventory's RNIC order is not netsim's NIC order.
    #[error("RNIC {rnic} ({label}) is not netsim NIC {rnic}")]
    NicOrder {
        /// The RNIC.
        rnic: RnicId,
        /// Its label.
        label: String,
    },
}

/// Every simulated host's probing agent, as one netsim host hook; clones share the state
/// (install one clone in the simulation, keep one to read the results).
#[derive(Clone)]
pub struct NetsimProbing {
    state: Rc<RefCell<State>>,
}

impl std::fmt::Debug for NetsimProbing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("NetsimProbing")
            .field("rnics", &state.rnics.len())
            .field("stats", &state.stats)
            .finish_non_exhaustive()
    }
}

impl NetsimProbing {
    /// Agents for every RNIC of `sim`'s fabric, probing the pinglists `config` gives, with
    /// `loads` on some hosts' CPUs and `events` (restarts, hosts going down).
    pub fn new(
        sim: &Simulation,
        config: ProbingConfig,
        loads: Vec<CpuLoad>,
        mut events: Vec<AgentEvent>,
    ) -> Result<Self, ProbingError> {
        events.sort_by_key(|e| e.at_ns);
        let topology = sim.topology();
        let inventory = Inventory::from_topology(topology)?;
        check_nic_order(sim, &inventory)?;
        let lists = Pinglists::build(&inventory, config.pinglists)?;
        let prober_config = ProberConfig {
            timeout_ns: config.timeout_ns,
            ..ProberConfig::default()
        };
        let rnics: Vec<Rnic> = inventory
            .rnics()
            .iter()
            .enumerate()
            .map(|(id, r)| {
                let qpn = qpn_of(config.incarnation, id as RnicId);
                // Start each RNIC's loops at a random phase within their interval (seeded),
                // as independently started agents would: phases spread over the whole
                // interval, so that no periodic fault (a flapping link) meets every RNIC's
                // probes in the same place of its cycle.
                let list = &lists.lists()[id];
                let mut phase = SplitMix64::new(
                    config.pinglists.seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                );
                let mut offset = |every: Option<u64>| every.map_or(0, |e| phase.below(e.max(1)));
                Rnic {
                    host: r.host,
                    ip: r.ipv4,
                    incarnation: config.incarnation,
                    prober: Prober::new(prober_config, qpn, config.incarnation),
                    responder: Responder::new(qpn, config.incarnation, true, 4096),
                    tor_mesh_next: offset(list.tor_mesh_interval_ns),
                    tor_mesh_index: 0,
                    inter_next: offset(list.inter_tor_interval_ns),
                    inter_index: 0,
                }
            })
            .collect();
        let published_qpn = (0..rnics.len() as RnicId)
            .map(|r| qpn_of(config.incarnation, r))
            .collect();
        // Each host's path tracing, with every pinglist 5-tuple and its ACKs' traced before
        // the simulation starts (the agents have been running).
        let mut tracers: HashMap<NodeId, PathTracer<PathKey, Arc<[PortRef]>>> = HashMap::new();
        for rnic in &rnics {
            if let std::collections::hash_map::Entry::Vacant(slot) = tracers.entry(rnic.host) {
                slot.insert(
                    PathTracer::new(config.path_tracing).map_err(ProbingError::PathTracing)?,
                );
            }
        }
        let tuple = |from: RnicId, to: RnicId, src_port: u16| FiveTuple {
            src_ip: rnics[from as usize].ip,
            dst_ip: rnics[to as usize].ip,
            src_port,
            dst_port: ROCEV2_UDP_PORT,
            protocol: 17,
        };
        for list in lists.lists() {
            let from = list.rnic;
            let probed = list
                .tor_mesh
                .iter()
                .map(|to| (*to, tor_mesh_port(*to)))
                .chain(list.inter_tor.iter().map(|t| (t.dst, t.src_port)));
            for (to, port) in probed {
                let probe = tuple(from, to, port);
                for key in [(from, to, probe), (to, from, ack_tuple(probe))] {
                    let host = rnics[key.0 as usize].host;
                    if let Some(tracer) = tracers.get_mut(&host) {
                        tracer.need(&key, 0);
                        let path = sim.path_ports(key.0, key.1, key.2);
                        tracer.traced(&key, Some(path.into()), 0);
                    }
                }
            }
        }
        Ok(NetsimProbing {
            state: Rc::new(RefCell::new(State {
                config,
                inventory,
                lists,
                rnics,
                cpus: HostCpus::new(loads, config.cpu_cost_ns),
                events,
                down: HashMap::new(),
                published_qpn,
                next_refresh: config.comm_refresh_ns,
                prober_config,
                sent: HashMap::new(),
                next_token: 0,
                results: Vec::new(),
                stats: ProbingStats::default(),
                services: BTreeMap::new(),
                service_flows: HashMap::new(),
                detectors: BTreeMap::new(),
                triggers: Vec::new(),
                triggering_stopped: false,
                tracers,
            })),
        })
    }

    /// Between simulation slices: the service connections open now (R-Pingmesh learns them
    /// as the service creates and destroys its RC queue pairs; here, netsim's flows that
    /// have started and not delivered all their bytes). Does nothing without
    /// [`ProbingConfig::service_tracing`].
    pub fn trace_services(&self, sim: &Simulation) {
        let mut state = self.state.borrow_mut();
        let Some(tracing) = state.config.service_tracing else {
            return;
        };
        let now = sim.now() / NS;
        for flow in 0..sim.flow_count() as u32 {
            let Some(posted) = sim.flow_posting(flow) else {
                continue;
            };
            let open = posted.start_ns.is_some_and(|s| s <= now)
                && sim.flow_delivered(flow).unwrap_or(0) < posted.size;
            if let Some(service) = state.services.get_mut(&flow) {
                service.active = open;
                continue;
            }
            if !open {
                continue;
            }
            // Connections start being traced at their first slice, spread over the
            // interval like independently opened connections.
            let offset = u64::from(flow).wrapping_mul(7_919) % tracing.interval_ns.max(1);
            state.services.insert(
                flow,
                Service {
                    prober: posted.src_nic,
                    target: posted.dst_nic,
                    tuple: posted.tuple,
                    active: true,
                    next_ns: now + offset,
                    waiting_since: None,
                    base_rtt_ns: posted.base_rtt_ns,
                },
            );
            state.service_flows.insert(posted.tuple, flow);
        }
    }

    /// Stops triggering: later service-tracing probes send no polling packets (a run's
    /// drain time).
    pub fn stop_triggering(&self) {
        self.state.borrow_mut().triggering_stopped = true;
    }

    /// Every polling trigger the service-tracing probes fired, in order.
    pub fn triggers(&self) -> Vec<PollingTrigger> {
        self.state.borrow().triggers.clone()
    }

    /// The RNIC inventory the agents probe.
    pub fn inventory(&self) -> Inventory {
        self.state.borrow().inventory.clone()
    }

    /// Counters so far.
    pub fn stats(&self) -> ProbingStats {
        self.state.borrow().stats
    }

    /// When each host last uploaded, as of `now_ns`: a live agent uploads continuously, a
    /// host that went down uploaded last when it did.
    pub fn last_uploads(&self, now_ns: u64) -> Vec<(NodeId, u64)> {
        let state = self.state.borrow();
        let mut hosts: Vec<NodeId> = state.rnics.iter().map(|r| r.host).collect();
        hosts.dedup();
        hosts
            .into_iter()
            .map(|h| (h, state.down.get(&h).copied().unwrap_or(now_ns)))
            .collect()
    }

    /// The controller's comm info: each RNIC's current queue pair number.
    pub fn current_qpns(&self) -> std::collections::BTreeMap<RnicId, u32> {
        let state = self.state.borrow();
        (0..state.rnics.len() as RnicId)
            .map(|r| (r, state.qpn(r)))
            .collect()
    }

    /// Takes the probes finished so far as the analyzer's records, with the paths their
    /// 5-tuples and their ACKs' take in `sim` now (path tracing).
    pub fn take_records(&self, sim: &Simulation) -> Vec<ProbeRecord> {
        let mut state = self.state.borrow_mut();
        let state = &mut *state;
        let results = std::mem::take(&mut state.results);
        let now_ns = sim.now() / NS;
        // The 5-tuples probed, then the traces the hosts' budgets allow now.
        let keys = |prober: RnicId, target: &Target| {
            [
                (prober, target.rnic, target.tuple),
                (target.rnic, prober, ack_tuple(target.tuple)),
            ]
        };
        for (prober, result) in &results {
            for key in keys(*prober, &result.target) {
                if let Some(tracer) = state.tracer(&key) {
                    tracer.need(&key, result.sent_ns);
                }
            }
        }
        for tracer in state.tracers.values_mut() {
            for key in tracer.due(now_ns) {
                let path = sim.path_ports(key.0, key.1, key.2);
                tracer.traced(&key, Some(path.into()), now_ns);
            }
        }
        let none: Arc<[PortRef]> = Arc::new([]);
        results
            .into_iter()
            .filter_map(|(prober, result)| {
                let status = match result.outcome {
                    ProbeOutcome::Answered {
                        network_rtt_ns,
                        prober_delay_ns,
                        responder_delay_ns,
                        ..
                    } => ProbeStatus::Answered {
                        network_rtt_ns,
                        prober_delay_ns,
                        responder_delay_ns,
                    },
                    ProbeOutcome::Timeout { ack, delay_ack } => {
                        ProbeStatus::Timeout { ack, delay_ack }
                    }
                    // Both clocks are netsim's here; a contradiction would be a bug.
                    ProbeOutcome::Inconsistent => return None,
                };
                let target = result.target;
                let [probe, ack] = keys(prober, &target).map(|key| {
                    state
                        .tracers
                        .get(&state.rnics[key.0 as usize].host)
                        .and_then(|t| t.path(&key))
                        .map_or_else(|| Arc::clone(&none), Arc::clone)
                });
                Some(ProbeRecord {
                    prober,
                    target: target.rnic,
                    source: target.source,
                    target_qpn: target.qpn,
                    sent_ns: result.sent_ns,
                    status,
                    path: probe,
                    ack_path: ack,
                })
            })
            .collect()
    }
}

impl HostHook for NetsimProbing {
    fn on_rtt_sample(&mut self, _: &RttSample, _: &mut Vec<HostEmit>) {}

    fn wakeup_interval(&self) -> Option<Time> {
        Some(self.state.borrow().config.tick_ns.max(1) * NS)
    }

    fn on_wakeup(&mut self, now: Time, emit: &mut Vec<HostEmit>) {
        let mut state = self.state.borrow_mut();
        state.wakeup(now / NS, emit);
        state.trace(now / NS, emit);
    }

    fn on_custom_packet(
        &mut self,
        _: NodeId,
        packet: &Packet,
        now: Time,
        emit: &mut Vec<HostEmit>,
    ) {
        if packet.custom_bytes().len() >= PROBE_PAYLOAD_BYTES {
            self.state.borrow_mut().received(packet, now / NS, emit);
        }
    }

    fn on_custom_sent(&mut self, _: NodeId, token: u64, now: Time, emit: &mut Vec<HostEmit>) {
        self.state
            .borrow_mut()
            .send_completed(token, now / NS, emit);
    }
}
