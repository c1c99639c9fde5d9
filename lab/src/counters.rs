//! netsim as a counter source for the congestion crate (issue 27): every port's counters
//! read while the simulation runs, as `perfquery`/`ethtool -S` read a device's, with the
//! ground truth beside them.
//!
//! - [`NetsimCounters`] is a [`CounterSource`]: PortXmitWait in ticks of τ from netsim's
//!   `xmit_wait_ns` (time with packets queued and nothing sent because every priority holding
//!   them was paused), PortXmitData in 4-byte words and PortXmitPkts (IBA 16.1.3.5), and per
//!   priority the PFC frames, pause durations and transmitted packets an mlx5 `ethtool -S`
//!   gives (`rx_prioN_pause`, `rx_prioN_pause_duration`, `tx_prioN_packets`). A reset keeps a
//!   baseline, as `perfquery -R` clears the device's counters.
//! - A query takes a turnaround (seeded, between `turnaround_ns.0` and `.1`) and the counters
//!   are read at a seeded instant inside it, not at its middle: the error Eq. 3's tᵠ + tᵖ/2
//!   estimate makes on a real fabric (and its FITF > 1 outliers) happens here too.
//! - [`NetsimClock`] is the sampler's [`Clock`]: sleeping runs the simulation.
//!
//! Both share the simulation (`Rc<RefCell<…>>`): the sampler holds the source and the clock
//! apart.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use hawkmesh_congestion::{
    Clock, CounterSource, Direction, PfcCounters, PortId, PortKey, Sample, SourceError, Tier, Width,
};
use hawkmesh_netsim::time::NS;
use hawkmesh_netsim::{PortCounters, Simulation};
use hawkmesh_wire::rng::SplitMix64;
use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortNo, PortRef};

/// The simulation, shared by the source and the clock.
pub type SharedSim = Rc<RefCell<Simulation>>;

/// netsim's ports as a counter source.
pub struct NetsimCounters {
    sim: SharedSim,
    ports: Vec<PortId>,
    refs: HashMap<PortKey, (NodeId, PortNo)>,
    baseline: HashMap<PortKey, PortCounters>,
    tau_ns: f64,
    turnaround_ns: (u64, u64),
    rng: SplitMix64,
}

/// The tier of a node as the study names them: hosts, ToRs (tier 0), leaves/aggregation
/// (tier 1), spines/core (tier 2); switches of arbitrary graphs are "switch".
pub fn tier_of(topology: &FabricTopology, node: NodeId) -> Tier {
    match topology.nodes.get(node as usize) {
        Some(n) if n.kind == NodeKind::Host => Tier::Host,
        Some(n) => match n.tier {
            Some(0) => Tier::Tor,
            Some(1) => Tier::Leaf,
            Some(_) => Tier::Spine,
            None => Tier::Other("switch".into()),
        },
        None => Tier::Other("unknown".into()),
    }
}

fn rank(tier: &Tier) -> u8 {
    match tier {
        Tier::Host => 0,
        Tier::Tor => 1,
        Tier::Leaf => 2,
        Tier::Spine => 3,
        Tier::Other(_) => 1,
    }
}

/// Every linked port of the fabric with its tier and direction: up when the link goes to a
/// higher tier (a host's NIC, a ToR's uplink), down otherwise.
pub fn fabric_ports(topology: &FabricTopology) -> Vec<(PortId, PortRef)> {
    let mut out = Vec::with_capacity(topology.links.len() * 2);
    for link in &topology.links {
        for (here, there) in [(link.a, link.b), (link.b, link.a)] {
            let Some(node) = topology.nodes.get(here.node as usize) else {
                continue;
            };
            let tier = tier_of(topology, here.node);
            let peer = tier_of(topology, there.node);
            let dir = if rank(&peer) > rank(&tier) {
                Direction::Up
            } else {
                Direction::Down
            };
            out.push((
                PortId::new(node.name.clone(), u32::from(here.port), tier, dir),
                here,
            ));
        }
    }
    out.sort_by_key(|p| p.1);
    out
}

impl std::fmt::Debug for NetsimCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetsimCounters")
            .field("ports", &self.ports.len())
            .field("tau_ns", &self.tau_ns)
            .field("turnaround_ns", &self.turnaround_ns)
            .finish()
    }
}

impl NetsimCounters {
    /// A source over `sim`'s ports: PortXmitWait ticks of `tau_ns`, queries taking between
    /// `turnaround_ns.0` and `.1`, the read instant in each drawn from `seed`.
    pub fn new(sim: SharedSim, tau_ns: f64, turnaround_ns: (u64, u64), seed: u64) -> Self {
        let listed = fabric_ports(sim.borrow().topology());
        let refs = listed
            .iter()
            .map(|(id, r)| (id.key(), (r.node, r.port)))
            .collect();
        NetsimCounters {
            ports: listed.into_iter().map(|(id, _)| id).collect(),
            refs,
            baseline: HashMap::new(),
            tau_ns: if tau_ns > 0.0 { tau_ns } else { 1.0 },
            turnaround_ns: (
                turnaround_ns.0.min(turnaround_ns.1),
                turnaround_ns.0.max(turnaround_ns.1),
            ),
            sim,
            rng: SplitMix64::new(seed),
        }
    }

    fn counters(&self, port: &PortId) -> Result<PortCounters, SourceError> {
        let (node, no) = self
            .refs
            .get(&port.key())
            .ok_or_else(|| SourceError::UnknownPort(port.to_string()))?;
        self.sim
            .borrow()
            .port_counters(*node, *no)
            .ok_or_else(|| SourceError::UnknownPort(port.to_string()))
    }

    /// The exact time `port` waited since its last reset (or the start), ns: the ground
    /// truth FITF is measured against.
    pub fn truth_wait_ns(&self, port: &PortId) -> Result<u64, SourceError> {
        let now = self.counters(port)?;
        let base = self.baseline.get(&port.key());
        Ok(now.xmit_wait_ns - base.map_or(0, |b| b.xmit_wait_ns))
    }
}

impl CounterSource for NetsimCounters {
    fn ports(&self) -> Vec<PortId> {
        self.ports.clone()
    }

    fn is_up(&mut self, port: &PortId) -> Result<bool, SourceError> {
        self.counters(port).map(|_| true)
    }

    fn reset(&mut self, port: &PortId) -> Result<(), SourceError> {
        let now = self.counters(port)?;
        self.baseline.insert(port.key(), now);
        Ok(())
    }

    fn read(&mut self, port: &PortId) -> Result<Sample, SourceError> {
        let (low, high) = self.turnaround_ns;
        let turnaround = low + self.rng.below(high - low + 1);
        let at = self.rng.below(turnaround + 1);
        let start = self.sim.borrow().now() / NS;
        run_to(&self.sim, start + at);
        let now = self.counters(port)?;
        run_to(&self.sim, start + turnaround);
        let zero = PortCounters::default();
        let base = self.baseline.get(&port.key()).unwrap_or(&zero);
        let mut sample = Sample::new(port.clone(), start, turnaround).with_wait(
            ((now.xmit_wait_ns - base.xmit_wait_ns) as f64 / self.tau_ns) as u64,
            Width::Bits64,
        );
        // PortXmitData counts 4-byte words (IBA 16.1.3.5).
        sample.xmit_data = Some((now.tx_bytes - base.tx_bytes) / 4);
        sample.xmit_pkts = Some(now.tx_packets - base.tx_packets);
        for prio in 0..8 {
            sample.pfc[prio] = PfcCounters {
                rx_pause: Some(now.pause_frames_received[prio] - base.pause_frames_received[prio]),
                tx_pause: Some(now.pause_frames_sent[prio] - base.pause_frames_sent[prio]),
                rx_pause_duration_us: Some(
                    (now.pause_duration_ns[prio] - base.pause_duration_ns[prio]) / 1000,
                ),
                tx_pkts: Some(now.tx_packets_prio[prio] - base.tx_packets_prio[prio]),
                ..PfcCounters::default()
            };
        }
        Ok(sample)
    }

    fn stamps_time(&self) -> bool {
        true
    }
}

fn run_to(sim: &SharedSim, ns: u64) {
    let until = ns.saturating_mul(NS);
    let mut sim = sim.borrow_mut();
    if until > sim.now() {
        sim.extend_end(until);
        sim.run_until(until);
    }
}

/// The sampler's clock: simulated time; sleeping runs the simulation.
pub struct NetsimClock(pub SharedSim);

impl std::fmt::Debug for NetsimClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NetsimClock({} ns)", self.now_ns())
    }
}

impl Clock for NetsimClock {
    fn now_ns(&self) -> u64 {
        self.0.borrow().now() / NS
    }

    fn sleep_ns(&mut self, ns: u64) {
        let now = self.now_ns();
        run_to(&self.0, now.saturating_add(ns));
    }
}
