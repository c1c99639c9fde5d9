//! Builders for hand-made incidents: a small fabric, flows routed hop by hop with their
//! per-hop counts, and the telemetry reports every switch on those routes would send.
//! Used by the tests, the benchmark and anyone who wants to rehearse a diagnosis without
//! the simulator.
//!
//! ```text
//! let topology = TopologyBuilder::new()
//!     .host("h0", [10, 0, 0, 1]).switch("tor0", Some(0)).link("h0", "tor0")
//!     .build()?;
//! let mut incident = IncidentBuilder::new(topology, 1 << 17, 2, victim);
//! incident.flow(0, victim, &["h0", "tor0", "h1"], &[Hop::new(100).paused(40, 60_000)]);
//! let reports = incident.build_reports()?;
//! ```
//!
//! Port records and causality meter rows are derived from the flows: a port's counts are
//! the sum over the flows leaving by it, and each hop adds `packets × packet_bytes` to the
//! meter row (ingress → egress) of its switch.

use std::collections::{BTreeMap, BTreeSet};

use hawkmesh_wire::telemetry::{
    EpochTelemetry, FiveTuple, FlowRecord, MeterRecord, PausedPort, PollingContext, PollingEgress,
    PortRecord, TelemetryReport, TraceFlags, TELEMETRY_FORMAT_VERSION,
};
use hawkmesh_wire::topology::{
    FabricTopology, LinkDesc, NodeDesc, NodeId, NodeKind, PortNo, PortRef,
};

/// A mistake in a hand-made incident.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("testkit: {0}")]
pub struct TestkitError(pub String);

/// Builds a [`FabricTopology`]; ports are numbered per node in link declaration order.
#[derive(Clone, Debug, Default)]
pub struct TopologyBuilder {
    topology: FabricTopology,
    next_port: Vec<PortNo>,
    errors: Vec<String>,
}

impl TopologyBuilder {
    /// An empty fabric.
    pub fn new() -> Self {
        Self::default()
    }

    fn node(mut self, name: &str, kind: NodeKind, tier: Option<u8>, ipv4: Option<[u8; 4]>) -> Self {
        let id = self.topology.nodes.len() as NodeId;
        if self.topology.node_by_name(name).is_some() {
            self.errors.push(format!("node {name} declared twice"));
        }
        self.topology.nodes.push(NodeDesc {
            id,
            name: name.to_string(),
            kind,
            tier,
            ipv4,
        });
        self.next_port.push(0);
        self
    }

    /// Adds a switch.
    pub fn switch(self, name: &str, tier: Option<u8>) -> Self {
        self.node(name, NodeKind::Switch, tier, None)
    }

    /// Adds a host.
    pub fn host(self, name: &str, ipv4: [u8; 4]) -> Self {
        self.node(name, NodeKind::Host, None, Some(ipv4))
    }

    /// Links two nodes at 100 Gbit/s, 1 µs.
    pub fn link(self, a: &str, b: &str) -> Self {
        self.link_gbps(a, b, 100.0)
    }

    /// Links two nodes at the given speed.
    pub fn link_gbps(mut self, a: &str, b: &str, gbps: f64) -> Self {
        let ids = (
            self.topology.node_by_name(a).map(|n| n.id),
            self.topology.node_by_name(b).map(|n| n.id),
        );
        let (Some(a_id), Some(b_id)) = ids else {
            self.errors
                .push(format!("link {a}-{b} names an unknown node"));
            return self;
        };
        let a_port = self.next_port[a_id as usize];
        let b_port = self.next_port[b_id as usize];
        self.next_port[a_id as usize] += 1;
        self.next_port[b_id as usize] += 1;
        self.topology.links.push(LinkDesc {
            a: PortRef {
                node: a_id,
                port: a_port,
            },
            b: PortRef {
                node: b_id,
                port: b_port,
            },
            gbps,
            delay_ns: 1000,
        });
        self
    }

    /// The fabric, or the first mistake.
    pub fn build(self) -> Result<FabricTopology, TestkitError> {
        if let Some(error) = self.errors.into_iter().next() {
            return Err(TestkitError(error));
        }
        self.topology
            .validate()
            .map_err(|e| TestkitError(e.to_string()))?;
        Ok(self.topology)
    }
}

/// The port of `from` whose link leads to `to`.
pub fn port_towards(topology: &FabricTopology, from: &str, to: &str) -> Option<PortRef> {
    let a = topology.node_by_name(from)?.id;
    let b = topology.node_by_name(to)?.id;
    topology.links.iter().find_map(|link| {
        if link.a.node == a && link.b.node == b {
            Some(link.a)
        } else if link.b.node == a && link.a.node == b {
            Some(link.b)
        } else {
            None
        }
    })
}

/// A flow's telemetry at one switch hop in one epoch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hop {
    /// Packets enqueued at the hop's egress port.
    pub packets: u32,
    /// Of those, paused.
    pub paused: u32,
    /// Mean queue depth met by the non-paused packets, bytes.
    pub mean_depth_bytes: u64,
    /// Mean queue depth met by the paused packets, bytes (goes into the port's all-packet sum).
    pub paused_depth_bytes: u64,
    /// Enqueue window (ns offsets in the epoch), or `None` for "timing unknown".
    pub window: Option<(u32, u32)>,
    /// Emit the record as an eviction digest plus a live record (half of the counts each).
    pub split_eviction: bool,
}

impl Hop {
    /// `packets` non-paused packets spread over the whole epoch, meeting no queue.
    pub fn new(packets: u32) -> Self {
        Hop {
            packets,
            paused: 0,
            mean_depth_bytes: 0,
            paused_depth_bytes: 0,
            window: Some((0, 0)),
            split_eviction: false,
        }
    }
    /// Some packets were paused and met `depth` bytes of queue.
    pub fn paused(mut self, paused: u32, depth: u64) -> Self {
        self.paused = paused;
        self.paused_depth_bytes = depth;
        self
    }
    /// Non-paused packets met `depth` bytes of queue on average.
    pub fn depth(mut self, depth: u64) -> Self {
        self.mean_depth_bytes = depth;
        self
    }
    /// Enqueue window within the epoch.
    pub fn window(mut self, first: u32, last: u32) -> Self {
        self.window = Some((first, last));
        self
    }
    /// No timing in the record.
    pub fn untimed(mut self) -> Self {
        self.window = None;
        self
    }
    /// Split into an eviction digest and a live record.
    pub fn evicted_half(mut self) -> Self {
        self.split_eviction = true;
        self
    }
}

#[derive(Clone, Debug)]
struct FlowSpec {
    epoch: usize,
    flow: FiveTuple,
    hops: Vec<(NodeId, PortNo, PortNo, Hop)>,
}

/// Builds the telemetry reports of a hand-made incident.
#[derive(Clone, Debug)]
pub struct IncidentBuilder {
    topology: FabricTopology,
    epoch_ns: u64,
    first_epoch_id: u64,
    epochs: usize,
    packet_bytes: u64,
    victim: FiveTuple,
    flows: Vec<FlowSpec>,
    silent: BTreeSet<NodeId>,
    lost_evictions: BTreeMap<(NodeId, usize), u32>,
    paused_now: BTreeMap<NodeId, Vec<PausedPort>>,
    xons: BTreeMap<(NodeId, usize, PortNo), u16>,
    errors: Vec<String>,
    event_id: u64,
}

impl IncidentBuilder {
    /// An incident on `topology` with `epochs` epochs of `epoch_ns` (a power of two).
    pub fn new(topology: FabricTopology, epoch_ns: u64, epochs: usize, victim: FiveTuple) -> Self {
        IncidentBuilder {
            topology,
            epoch_ns,
            first_epoch_id: 1000,
            epochs,
            packet_bytes: 1000,
            victim,
            flows: Vec::new(),
            silent: BTreeSet::new(),
            lost_evictions: BTreeMap::new(),
            paused_now: BTreeMap::new(),
            xons: BTreeMap::new(),
            errors: Vec::new(),
            event_id: 42,
        }
    }

    /// The topology.
    pub fn topology(&self) -> &FabricTopology {
        &self.topology
    }

    /// Start of epoch `index`, ns.
    pub fn epoch_start(&self, index: usize) -> u64 {
        (self.first_epoch_id + index as u64) * self.epoch_ns
    }

    /// Routes `flow` along `path` (node names, hosts or switches) in `epoch`, with one
    /// [`Hop`] per switch of the path in order.
    pub fn flow(
        &mut self,
        epoch: usize,
        flow: FiveTuple,
        path: &[&str],
        hops: &[Hop],
    ) -> &mut Self {
        let mut resolved = Vec::new();
        let mut hop_iter = hops.iter();
        for index in 0..path.len() {
            let Some(node) = self.topology.node_by_name(path[index]) else {
                self.errors.push(format!("unknown node {}", path[index]));
                return self;
            };
            if node.kind != NodeKind::Switch {
                continue;
            }
            let (Some(previous), Some(next)) = (
                index.checked_sub(1).and_then(|i| path.get(i)),
                path.get(index + 1),
            ) else {
                self.errors.push(format!(
                    "switch {} must have a node before and after it in the path",
                    path[index]
                ));
                return self;
            };
            let ingress = port_towards(&self.topology, path[index], previous);
            let egress = port_towards(&self.topology, path[index], next);
            let (Some(ingress), Some(egress)) = (ingress, egress) else {
                self.errors.push(format!(
                    "path {previous}-{}-{next} is not linked",
                    path[index]
                ));
                return self;
            };
            let Some(hop) = hop_iter.next() else {
                self.errors
                    .push(format!("flow {flow} has fewer hops than switches"));
                return self;
            };
            resolved.push((node.id, ingress.port, egress.port, *hop));
        }
        if hop_iter.next().is_some() {
            self.errors
                .push(format!("flow {flow} has more hops than switches"));
        }
        self.flows.push(FlowSpec {
            epoch,
            flow,
            hops: resolved,
        });
        self
    }

    /// `switch` sends no report (missing telemetry).
    pub fn silence(&mut self, switch: &str) -> &mut Self {
        match self.topology.node_by_name(switch) {
            Some(node) => {
                self.silent.insert(node.id);
            }
            None => self.errors.push(format!("unknown switch {switch}")),
        }
        self
    }

    /// At collection, `switch`'s port toward `toward` is paused on priority 3 (a pause in
    /// force, reported as port status).
    pub fn paused_at_collection(&mut self, switch: &str, toward: &str) -> &mut Self {
        let until_ns = self.epoch_start(self.epochs) + self.epoch_ns;
        self.port_status(switch, toward, true, until_ns)
    }

    /// `switch` reports (port status) that the pause of its port toward `toward` ended at
    /// `until_ns` — no longer in force at collection.
    pub fn pause_ended(&mut self, switch: &str, toward: &str, until_ns: u64) -> &mut Self {
        self.port_status(switch, toward, false, until_ns)
    }

    /// One port-status entry of `switch`'s report for its port toward `toward`.
    fn port_status(
        &mut self,
        switch: &str,
        toward: &str,
        in_force: bool,
        until_ns: u64,
    ) -> &mut Self {
        match port_towards(&self.topology, switch, toward) {
            Some(port) => self
                .paused_now
                .entry(port.node)
                .or_default()
                .push(PausedPort {
                    port: port.port,
                    priorities: 1 << 3,
                    in_force,
                    until_ns,
                }),
            None => self
                .errors
                .push(format!("{switch} has no link toward {toward}")),
        }
        self
    }

    /// `switch`'s port toward `toward` received `count` PFC XON frames in `epoch` (the
    /// device there released its pause itself).
    pub fn xons(&mut self, switch: &str, toward: &str, epoch: usize, count: u16) -> &mut Self {
        match port_towards(&self.topology, switch, toward) {
            Some(port) => {
                self.xons.insert((port.node, epoch, port.port), count);
            }
            None => self
                .errors
                .push(format!("{switch} has no link toward {toward}")),
        }
        self
    }

    /// The agent of `switch` lost `count` eviction digests in `epoch`.
    pub fn lose_evictions(&mut self, switch: &str, epoch: usize, count: u32) -> &mut Self {
        match self.topology.node_by_name(switch) {
            Some(node) => {
                self.lost_evictions.insert((node.id, epoch), count);
            }
            None => self.errors.push(format!("unknown switch {switch}")),
        }
        self
    }

    /// The reports, one per switch that any flow crosses (minus silenced ones).
    pub fn build_reports(&self) -> Result<Vec<TelemetryReport>, TestkitError> {
        if let Some(error) = self.errors.first() {
            return Err(TestkitError(error.clone()));
        }
        #[derive(Default)]
        struct PortAcc {
            packets: u64,
            paused: u64,
            depth_all: u64,
            depth_unpaused: u64,
        }
        let mut ports: BTreeMap<(NodeId, usize, PortNo), PortAcc> = BTreeMap::new();
        let mut meters: BTreeMap<(NodeId, usize, PortNo, PortNo), u64> = BTreeMap::new();
        let mut flows: BTreeMap<(NodeId, usize), Vec<FlowRecord>> = BTreeMap::new();
        let mut switches: BTreeSet<NodeId> = BTreeSet::new();
        let mut victim_ports: BTreeMap<NodeId, (PortNo, PortNo)> = BTreeMap::new();
        for spec in &self.flows {
            if spec.epoch >= self.epochs {
                return Err(TestkitError(format!(
                    "flow {} uses epoch {} of {}",
                    spec.flow, spec.epoch, self.epochs
                )));
            }
            for (switch, ingress, egress, hop) in &spec.hops {
                switches.insert(*switch);
                // A switch the flow's packets never reached (held upstream) records nothing.
                if hop.packets == 0 {
                    continue;
                }
                if spec.flow == self.victim {
                    victim_ports.entry(*switch).or_insert((*ingress, *egress));
                }
                let unpaused = u64::from(hop.packets.saturating_sub(hop.paused));
                let acc = ports.entry((*switch, spec.epoch, *egress)).or_default();
                acc.packets += u64::from(hop.packets);
                acc.paused += u64::from(hop.paused);
                acc.depth_unpaused += unpaused * hop.mean_depth_bytes;
                acc.depth_all += unpaused * hop.mean_depth_bytes
                    + u64::from(hop.paused) * hop.paused_depth_bytes;
                *meters
                    .entry((*switch, spec.epoch, *ingress, *egress))
                    .or_default() += u64::from(hop.packets) * self.packet_bytes;
                let (first, last) = hop.window.unwrap_or((0, 0));
                let last = if hop.window == Some((0, 0)) && hop.packets > 1 {
                    (self.epoch_ns - 1).min(u64::from(u32::MAX)) as u32
                } else {
                    last
                };
                let record = FlowRecord {
                    flow: spec.flow,
                    egress_port: *egress,
                    packet_count: hop.packets,
                    paused_packet_count: hop.paused,
                    queue_depth_sum_bytes: unpaused * hop.mean_depth_bytes,
                    first_enqueue_offset_ns: first,
                    last_enqueue_offset_ns: last,
                    evicted: false,
                };
                let list = flows.entry((*switch, spec.epoch)).or_default();
                if hop.split_eviction && hop.packets >= 2 {
                    let half = hop.packets / 2;
                    let paused_half = hop.paused.min(half);
                    let depth_half = u64::from(half - paused_half) * hop.mean_depth_bytes;
                    list.push(FlowRecord {
                        packet_count: half,
                        paused_packet_count: paused_half,
                        queue_depth_sum_bytes: depth_half,
                        evicted: true,
                        ..record
                    });
                    list.push(FlowRecord {
                        packet_count: hop.packets - half,
                        paused_packet_count: hop.paused - paused_half,
                        queue_depth_sum_bytes: record.queue_depth_sum_bytes - depth_half,
                        ..record
                    });
                } else if let Some(existing) = list
                    .iter_mut()
                    .find(|r| r.flow == spec.flow && r.egress_port == *egress && !r.evicted)
                {
                    existing.packet_count += record.packet_count;
                    existing.paused_packet_count += record.paused_packet_count;
                    existing.queue_depth_sum_bytes += record.queue_depth_sum_bytes;
                    existing.first_enqueue_offset_ns = existing
                        .first_enqueue_offset_ns
                        .min(record.first_enqueue_offset_ns);
                    existing.last_enqueue_offset_ns = existing
                        .last_enqueue_offset_ns
                        .max(record.last_enqueue_offset_ns);
                } else {
                    list.push(record);
                }
            }
        }
        let mut reports = Vec::new();
        for switch in switches {
            if self.silent.contains(&switch) {
                continue;
            }
            let linked: Vec<PortNo> = self
                .topology
                .links
                .iter()
                .flat_map(|l| [l.a, l.b])
                .filter(|p| p.node == switch)
                .map(|p| p.port)
                .collect();
            let first_port = linked.iter().copied().min().unwrap_or(0);
            let mut egress = Vec::new();
            let (ingress_port, victim_egress) = match victim_ports.get(&switch) {
                Some((ingress, egress_port)) => (*ingress, Some(*egress_port)),
                None => (first_port, None),
            };
            let mut epochs = Vec::new();
            for epoch in 0..self.epochs {
                let start_ns = self.epoch_start(epoch);
                let mut port_records: Vec<PortRecord> = ports
                    .range((switch, epoch, 0)..=(switch, epoch, PortNo::MAX))
                    .map(|((_, _, port), acc)| PortRecord {
                        port: *port,
                        packet_count: acc.packets as u32,
                        paused_packet_count: acc.paused as u32,
                        queue_depth_sum_bytes: acc.depth_all,
                        unpaused_queue_depth_sum_bytes: acc.depth_unpaused,
                        xon_count: self.xons.get(&(switch, epoch, *port)).copied().unwrap_or(0),
                    })
                    .collect();
                // XONs at a port that enqueued nothing in the epoch: a record of its own.
                for ((_, _, port), count) in self
                    .xons
                    .range((switch, epoch, 0)..=(switch, epoch, PortNo::MAX))
                {
                    if !port_records.iter().any(|r| r.port == *port) {
                        port_records.push(PortRecord {
                            port: *port,
                            packet_count: 0,
                            paused_packet_count: 0,
                            queue_depth_sum_bytes: 0,
                            unpaused_queue_depth_sum_bytes: 0,
                            xon_count: *count,
                        });
                    }
                }
                port_records.sort_by_key(|r| r.port);
                for record in &port_records {
                    let mut reason = 0;
                    if Some(record.port) == victim_egress {
                        reason |= TraceFlags::VICTIM_PATH.0;
                    }
                    if record.paused_packet_count > 0 {
                        reason |= TraceFlags::PFC_CAUSALITY.0;
                    }
                    if reason != 0 && !egress.iter().any(|e: &PollingEgress| e.port == record.port)
                    {
                        egress.push(PollingEgress {
                            port: record.port,
                            reason: TraceFlags(reason),
                        });
                    }
                }
                let meter_records: Vec<MeterRecord> = meters
                    .range((switch, epoch, 0, 0)..=(switch, epoch, PortNo::MAX, PortNo::MAX))
                    .map(|((_, _, ingress, egress), bytes)| MeterRecord {
                        ingress_port: *ingress,
                        egress_port: *egress,
                        bytes: *bytes,
                    })
                    .collect();
                let flow_records = flows.get(&(switch, epoch)).cloned().unwrap_or_default();
                let lost = self
                    .lost_evictions
                    .get(&(switch, epoch))
                    .copied()
                    .unwrap_or(0);
                // Like the switch agent, an epoch in which nothing was recorded is left out.
                if port_records.is_empty()
                    && meter_records.is_empty()
                    && flow_records.is_empty()
                    && lost == 0
                {
                    continue;
                }
                epochs.push(EpochTelemetry {
                    epoch_id: start_ns / self.epoch_ns,
                    start_ns,
                    lost_evictions: lost,
                    ports: port_records,
                    meters: meter_records,
                    flows: flow_records,
                });
            }
            egress.sort();
            reports.push(TelemetryReport {
                version: TELEMETRY_FORMAT_VERSION,
                switch,
                event_id: self.event_id,
                epoch_ns: self.epoch_ns,
                polling: PollingContext {
                    ingress_port,
                    flags: TraceFlags::BOTH,
                    victim: self.victim,
                    egress,
                },
                more_polling: Vec::new(),
                paused_ports: self.paused_now.get(&switch).cloned().unwrap_or_default(),
                epochs,
            });
        }
        Ok(reports)
    }
}

/// A complete sample incident for demos and service tests: h0 and h3 on tor0, h7 on tor1,
/// both ToRs under agg0; h7's NIC injects PFC, so tor1's port toward h7 is paused without
/// flow contention and the pause spreads to agg0 and tor0. The victim is h0 → h7.
/// Returns the topology, the victim and the reports of tor0, tor1 and agg0.
pub fn sample_pfc_storm() -> Result<(FabricTopology, FiveTuple, Vec<TelemetryReport>), TestkitError>
{
    let topology = TopologyBuilder::new()
        .switch("tor0", Some(0))
        .switch("tor1", Some(0))
        .switch("agg0", Some(1))
        .host("h0", [10, 0, 0, 1])
        .host("h3", [10, 0, 0, 4])
        .host("h7", [10, 0, 0, 8])
        .link("h0", "tor0")
        .link("h3", "tor0")
        .link("h7", "tor1")
        .link("tor0", "agg0")
        .link("tor1", "agg0")
        .build()?;
    let victim = FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 0, 8]);
    let other = FiveTuple::rocev2([10, 0, 0, 4], 49300, [10, 0, 0, 8]);
    let mut builder = IncidentBuilder::new(topology.clone(), 1 << 17, 1, victim);
    for (flow, src) in [(victim, "h0"), (other, "h3")] {
        builder.flow(
            0,
            flow,
            &[src, "tor0", "agg0", "tor1", "h7"],
            &[
                Hop::new(250).paused(200, 200_000).depth(30_000),
                Hop::new(250).paused(220, 300_000).depth(40_000),
                Hop::new(250).paused(240, 400_000).depth(120_000),
            ],
        );
    }
    let reports = builder.build_reports()?;
    Ok((topology, victim, reports))
}
