//! Hostmesh inside netsim: every host's agent probes between its own RNICs across rails
//! ([`hawkmesh_pingmesh::hostmesh`]), with real probe packets in the simulated fabric and no
//! controller.
//!
//! - A probe is the 50-byte probe payload (`wire::probe`) from one RNIC of a host to
//!   another, with a UDP source port that changes at every probe
//!   ([`hawkmesh_pingmesh::hostmesh::source_port`]), in [`HostmeshProbingConfig::priority`].
//! - ① is when the agent posts it (its timer tick), ② its send completion, ③ its receive
//!   completion at the other RNIC, ④ when the host's CPU (a queue per host, as in
//!   [`crate::pingmesh`]) has handled it: one-way latency ③ − ②, processing delay
//!   (④ − ①) − (③ − ②). Both ends are the same host: one clock.
//! - A probe not received within [`HostmeshProbingConfig::timeout_ns`] is lost, on its own
//!   path (there is no ACK).
//! - Path tracing: the route the probe's 5-tuple takes (`Simulation::path_ports`).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use hawkmesh_netsim::hooks::{HostEmit, HostHook, RttSample};
use hawkmesh_netsim::packet::Packet;
use hawkmesh_netsim::time::{Time, NS};
use hawkmesh_netsim::Simulation;
use hawkmesh_pingmesh::hostmesh::{
    plan, source_port, HostPlan, HostmeshConfig, OneWay, OneWayRecord,
};
use hawkmesh_pingmesh::inventory::{Inventory, RnicId};
use hawkmesh_wire::probe::{ProbeKind, ProbeRepr, PROBE_PAYLOAD_BYTES};
use hawkmesh_wire::telemetry::{FiveTuple, ROCEV2_UDP_PORT};
use hawkmesh_wire::topology::NodeId;

use crate::pingmesh::{CpuLoad, HostCpus, ProbingError};

/// How the simulated Hostmesh agents probe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostmeshProbingConfig {
    /// Planning and analysis settings (the rate is per simulated second).
    pub hostmesh: HostmeshConfig,
    /// A probe not received after this long is lost.
    pub timeout_ns: u64,
    /// 802.1p priority of the probes.
    pub priority: u8,
    /// Host CPU time to handle one probe.
    pub cpu_cost_ns: u64,
    /// The agents' timer.
    pub tick_ns: u64,
}

impl Default for HostmeshProbingConfig {
    fn default() -> Self {
        HostmeshProbingConfig {
            // Simulated runs last milliseconds: rates 200 times the deployment's, like
            // lab::pingmesh's.
            hostmesh: HostmeshConfig {
                pps_per_rnic: 4_000.0,
                ..HostmeshConfig::default()
            },
            timeout_ns: 2_000_000,
            priority: 3,
            cpu_cost_ns: 1_000,
            tick_ns: 50_000,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    src: RnicId,
    dst: RnicId,
    tuple: FiveTuple,
    posted_ns: u64,
    sent_ns: Option<u64>,
}

struct HostState {
    plan: HostPlan,
    next_ns: u64,
    cursor: usize,
    /// Probes sent per pair (the n of the source port).
    sent: HashMap<(RnicId, RnicId), u64>,
}

struct State {
    config: HostmeshProbingConfig,
    inventory: Inventory,
    hosts: Vec<HostState>,
    ips: Vec<[u8; 4]>,
    host_of: Vec<NodeId>,
    cpus: HostCpus,
    /// By probe sequence number.
    in_flight: BTreeMap<u64, InFlight>,
    next_seq: u64,
    records: Vec<(OneWayRecord, FiveTuple)>,
    probes: u64,
}

impl State {
    fn wakeup(&mut self, now: u64, emit: &mut Vec<HostEmit>) {
        // Lost: not received within the timeout.
        let expired: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.posted_ns + self.config.timeout_ns <= now)
            .map(|(seq, _)| *seq)
            .collect();
        for seq in expired {
            if let Some(f) = self.in_flight.remove(&seq) {
                self.records.push((
                    OneWayRecord {
                        src: f.src,
                        dst: f.dst,
                        sent_ns: f.posted_ns,
                        outcome: OneWay::Lost,
                        path: Vec::new(),
                    },
                    f.tuple,
                ));
            }
        }
        let pps = self.config.hostmesh.pps_per_rnic.max(1e-3);
        for h in 0..self.hosts.len() {
            // Each RNIC sends `pps`: the host, `pps` × its sending RNICs.
            let senders = {
                let mut s: Vec<RnicId> = self.hosts[h].plan.pairs.iter().map(|p| p.0).collect();
                s.sort_unstable();
                s.dedup();
                s.len().max(1)
            };
            let every = (1e9 / (pps * senders as f64)).max(1.0) as u64;
            while self.hosts[h].next_ns <= now {
                let host = &mut self.hosts[h];
                host.next_ns += every;
                let pair = host.plan.pairs[host.cursor % host.plan.pairs.len()];
                host.cursor += 1;
                let n = host.sent.entry(pair).or_insert(0);
                let port = source_port(self.config.hostmesh.seed, pair, *n);
                *n += 1;
                let (src, dst) = pair;
                let tuple = FiveTuple {
                    src_ip: self.ips[src as usize],
                    dst_ip: self.ips[dst as usize],
                    src_port: port,
                    dst_port: ROCEV2_UDP_PORT,
                    protocol: 17,
                };
                let seq = self.next_seq;
                self.next_seq += 1;
                let probe = ProbeRepr {
                    kind: ProbeKind::Probe,
                    hardware_timestamps: true,
                    host_clock_timestamps: false,
                    seq,
                    prober_qpn: src,
                    responder_qpn: dst,
                    sent_ns: now,
                    responder_delay_ns: 0,
                    prober_incarnation: 1,
                    responder_incarnation: 1,
                    src_port: port,
                };
                let Ok(payload) = probe.to_bytes() else {
                    continue;
                };
                self.in_flight.insert(
                    seq,
                    InFlight {
                        src,
                        dst,
                        tuple,
                        posted_ns: now,
                        sent_ns: None,
                    },
                );
                self.probes += 1;
                emit.push(HostEmit {
                    tx_token: Some(seq),
                    ..HostEmit::now(src, dst, tuple, self.config.priority, payload.to_vec())
                });
            }
        }
    }

    fn received(&mut self, packet: &Packet, now: u64) {
        let Ok(repr) = ProbeRepr::from_bytes(packet.custom_bytes()) else {
            return;
        };
        if repr.kind != ProbeKind::Probe {
            return;
        }
        let Some(f) = self.in_flight.remove(&repr.seq) else {
            return;
        };
        let host = self.host_of[f.dst as usize];
        let handled = self.cpus.handle(host, now);
        // ② precedes ③ (the last bit left before the first arrived); without it (cannot
        // happen in netsim) the latency is counted from ①.
        let sent = f.sent_ns.unwrap_or(f.posted_ns);
        let latency_ns = now.saturating_sub(sent);
        let processing_ns = handled
            .saturating_sub(f.posted_ns)
            .saturating_sub(latency_ns);
        self.records.push((
            OneWayRecord {
                src: f.src,
                dst: f.dst,
                sent_ns: f.posted_ns,
                outcome: OneWay::Arrived {
                    latency_ns,
                    processing_ns,
                },
                path: Vec::new(),
            },
            f.tuple,
        ));
    }
}

/// Every host's Hostmesh agent as one netsim host hook; clones share the state.
#[derive(Clone)]
pub struct NetsimHostmesh {
    state: Rc<RefCell<State>>,
}

impl std::fmt::Debug for NetsimHostmesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.borrow();
        f.debug_struct("NetsimHostmesh")
            .field("hosts", &state.hosts.len())
            .field("probes", &state.probes)
            .finish_non_exhaustive()
    }
}

impl NetsimHostmesh {
    /// Agents on every host of `sim`'s fabric with RNICs on more than one switch, with
    /// `loads` on some hosts' CPUs.
    pub fn new(
        sim: &Simulation,
        config: HostmeshProbingConfig,
        loads: Vec<CpuLoad>,
    ) -> Result<Self, ProbingError> {
        let inventory = Inventory::from_topology(sim.topology())?;
        crate::pingmesh::check_nic_order(sim, &inventory)?;
        let hosts = plan(&inventory)
            .into_iter()
            .enumerate()
            .map(|(i, plan)| HostState {
                plan,
                // Hosts start at different offsets within a tick, as independent agents.
                next_ns: (i as u64).wrapping_mul(7_919) % config.tick_ns.max(1),
                cursor: 0,
                sent: HashMap::new(),
            })
            .collect();
        let ips = inventory.rnics().iter().map(|r| r.ipv4).collect();
        let host_of = inventory.rnics().iter().map(|r| r.host).collect();
        Ok(NetsimHostmesh {
            state: Rc::new(RefCell::new(State {
                config,
                inventory,
                hosts,
                ips,
                host_of,
                cpus: HostCpus::new(loads, config.cpu_cost_ns),
                in_flight: BTreeMap::new(),
                next_seq: 1,
                records: Vec::new(),
                probes: 0,
            })),
        })
    }

    /// The RNIC inventory.
    pub fn inventory(&self) -> Inventory {
        self.state.borrow().inventory.clone()
    }

    /// Probes sent so far.
    pub fn probes(&self) -> u64 {
        self.state.borrow().probes
    }

    /// Hosts probing (those with RNICs on more than one switch).
    pub fn probing_hosts(&self) -> usize {
        self.state.borrow().hosts.len()
    }

    /// Takes the probes ended so far, with the paths their 5-tuples take in `sim` now.
    pub fn take_records(&self, sim: &Simulation) -> Vec<OneWayRecord> {
        let records = std::mem::take(&mut self.state.borrow_mut().records);
        records
            .into_iter()
            .map(|(mut record, tuple)| {
                record.path = sim.path_ports(record.src, record.dst, tuple);
                record
            })
            .collect()
    }
}

impl HostHook for NetsimHostmesh {
    fn on_rtt_sample(&mut self, _: &RttSample, _: &mut Vec<HostEmit>) {}

    fn wakeup_interval(&self) -> Option<Time> {
        Some(self.state.borrow().config.tick_ns.max(1) * NS)
    }

    fn on_wakeup(&mut self, now: Time, emit: &mut Vec<HostEmit>) {
        self.state.borrow_mut().wakeup(now / NS, emit);
    }

    fn on_custom_packet(&mut self, _: NodeId, packet: &Packet, now: Time, _: &mut Vec<HostEmit>) {
        if packet.custom_bytes().len() >= PROBE_PAYLOAD_BYTES {
            self.state.borrow_mut().received(packet, now / NS);
        }
    }

    fn on_custom_sent(&mut self, _: NodeId, token: u64, now: Time, _: &mut Vec<HostEmit>) {
        // The token is the probe's sequence number.
        if let Some(f) = self.state.borrow_mut().in_flight.get_mut(&token) {
            f.sent_ns = Some(now / NS);
        }
    }
}
