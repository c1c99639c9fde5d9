//! Builds a ready-to-run [`Simulation`] from a validated scenario.

use crate::dcqcn::{DcqcnParams, DcqcnState};
use crate::event::{EventKind, EventQueue};
use crate::fabric;
use crate::packet::{FiveTuple, PacketPool, ROCEV2_UDP_PORT, ROCE_ACK_BYTES, ROCE_DATA_OVERHEAD};
use crate::rng::Rng;
use crate::routing::RoutingTable;
use crate::scenario::{FaultSpec, LoadedScenario, ScenarioError, WorkloadSpec};
use crate::sim::{
    FaultAction, Flow, Nic, Owner, Params, Port, PortCounters, SendState, Simulation, SwitchState,
};
use crate::time::{from_us, serialization, Time, NS};
use crate::truth::{Anomaly, AnomalyKind};
use crate::workload::{self, HostResolver};
use hawkmesh_wire::topology::{NodeId, NodeKind, PortNo, PortRef};
use std::collections::{HashMap, VecDeque};

impl Simulation {
    /// Builds the simulation of a loaded scenario.
    pub fn new(loaded: &LoadedScenario) -> Result<Simulation, ScenarioError> {
        let s = &loaded.scenario;
        let (topo, warnings) = fabric::build_with_warnings(loaded)?;
        topo.validate()
            .map_err(|e| loaded.error("topology", e.to_string()))?;
        let node_count = topo.nodes.len();

        // Ports: per node, local numbers 0..n from the links.
        let mut port_counts = vec![0u32; node_count];
        for link in &topo.links {
            for end in [link.a, link.b] {
                port_counts[end.node as usize] =
                    port_counts[end.node as usize].max(end.port as u32 + 1);
            }
        }
        let mut node_first_port = Vec::with_capacity(node_count);
        let mut total = 0u32;
        for count in &port_counts {
            node_first_port.push(total);
            total += count;
        }
        let global = |r: PortRef| node_first_port[r.node as usize] + r.port as u32;
        let mut link_of = vec![None; total as usize];
        for link in &topo.links {
            link_of[global(link.a) as usize] = Some((global(link.b), link.gbps, link.delay_ns));
            link_of[global(link.b) as usize] = Some((global(link.a), link.gbps, link.delay_ns));
        }

        // Switches and NICs.
        let mut node_switch = vec![u32::MAX; node_count];
        let mut switches = Vec::new();
        let mut nics = Vec::new();
        let mut owners = vec![Owner::Switch(0); total as usize];
        let mut host_nics: HashMap<String, Vec<u32>> = HashMap::new();
        let mut host_names = Vec::new();
        let mut node_first_nic = vec![u32::MAX; node_count];
        let reference_ecmp = matches!(s.topology, crate::scenario::TopologySpec::HpccFile { .. });
        for node in &topo.nodes {
            let first = node_first_port[node.id as usize];
            let count = port_counts[node.id as usize];
            match node.kind {
                NodeKind::Switch => {
                    let index = switches.len() as u32;
                    node_switch[node.id as usize] = index;
                    // The reference's own topology files get the reference's ECMP seeds (its
                    // `SwitchNode` constructor seeds the hash with the node id), so that its
                    // flows take the same paths; other fabrics draw them from the seed.
                    let seed = if reference_ecmp {
                        node.id
                    } else {
                        Rng::derive(s.seed, 0xEC3F_0000 + node.id as u64).next_u64() as u32
                    };
                    switches.push(SwitchState {
                        node: node.id,
                        first_port: first,
                        port_count: count,
                        buffer: (s.switch.buffer_mb * 1024.0 * 1024.0) as u64,
                        total_headroom: 0,
                        total_reserve: 0,
                        shared_used: 0,
                        ecmp_seed: seed,
                        imbalance: None,
                    });
                    for g in first..first + count {
                        owners[g as usize] = Owner::Switch(index);
                    }
                }
                NodeKind::Host => {
                    if count == 0 {
                        return Err(
                            loaded.error("topology", format!("host {} has no link", node.name))
                        );
                    }
                    host_names.push(node.name.clone());
                    node_first_nic[node.id as usize] = nics.len() as u32;
                    let mut list = Vec::new();
                    for local in 0..count {
                        let index = nics.len() as u32;
                        owners[(first + local) as usize] = Owner::Nic(index);
                        list.push(index);
                        nics.push(Nic {
                            host: node.id,
                            port: first + local,
                            ip: fabric::host_ipv4(node.id, local),
                            control: VecDeque::new(),
                            ready: Default::default(),
                            rr_next: 0,
                            drain_bps: None,
                            rx_buffer: 0,
                            rx_busy_until: 0,
                            rx_xoff: false,
                            rx_xoff_priority: 0,
                            inject_until: 0,
                            inject_priority: 0,
                            next_sport: 49152,
                        });
                    }
                    host_nics.insert(node.name.clone(), list);
                }
            }
        }
        let nic_bps: Vec<u64> = nics
            .iter()
            .map(|n| {
                link_of[n.port as usize]
                    .map(|(_, g, _)| gbps_to_bps(g))
                    .unwrap_or(1)
            })
            .collect();
        let nic_rate = nic_bps.first().copied().unwrap_or(100_000_000_000);

        let reserve = (s.switch.reserve_kb * 1024.0) as u64;
        let mut ports = Vec::with_capacity(total as usize);
        let mut port_node = Vec::with_capacity(total as usize);
        for (node, count) in port_counts.iter().enumerate() {
            port_node.extend(std::iter::repeat_n(node as NodeId, *count as usize));
        }
        for g in 0..total {
            let node = port_node[g as usize];
            let (peer, gbps, delay_ns) = link_of[g as usize].ok_or_else(|| {
                loaded.error(
                    "topology",
                    format!(
                        "port {} of node {} has no link",
                        g - node_first_port[node as usize],
                        node
                    ),
                )
            })?;
            let bps = gbps_to_bps(gbps);
            let headroom = match s.switch.headroom_kb {
                Some(kb) => (kb * 1024.0) as u64,
                // Reference: 3 × link rate × one-way delay.
                None => (bps as u128 * delay_ns as u128 / 8 / 1_000_000_000 * 3) as u64,
            };
            let mut shift = s.switch.pfc_alpha_shift;
            let mut rate = bps;
            while rate > nic_rate && shift > 0 {
                shift -= 1;
                rate /= 2;
            }
            let (kmin, kmax, pmax) = ecn_for(s, gbps);
            ports.push(Port {
                node,
                local: (g - node_first_port[node as usize]) as PortNo,
                peer,
                bps,
                delay: delay_ns * NS,
                owner: owners[g as usize],
                busy_until: 0,
                tx_event_at: None,
                mac_control: VecDeque::new(),
                queues: Default::default(),
                queue_bytes: [0; 8],
                workload_bytes: Vec::new(),
                queued_total: 0,
                rr_next: 0,
                dwrr_deficit: [0; 8],
                paused_from: [0; 8],
                paused_until: [0; 8],
                pause_total: [0; 8],
                wait_from: None,
                wait_total: 0,
                link_up: true,
                loss_rate: 0.0,
                acl_drop: None,
                ingress_bytes: [0; 8],
                headroom_used: [0; 8],
                xoff_sent: [false; 8],
                pfc_generation: [0; 8],
                ingress_to: match owners[g as usize] {
                    Owner::Switch(_) => vec![0; port_counts[node as usize] as usize],
                    Owner::Nic(_) => Vec::new(),
                },
                headroom,
                pfc_shift: shift,
                kmin,
                kmax,
                pmax,
                counters: PortCounters::default(),
            });
        }
        for sw in &mut switches {
            for g in sw.first_port..sw.first_port + sw.port_count {
                sw.total_headroom += ports[g as usize].headroom;
                sw.total_reserve += reserve;
            }
        }

        let mtu_wire = s.nic.mtu_payload_bytes + ROCE_DATA_OVERHEAD + s.nic.wire_overhead_bytes;
        let mut dwrr_quantum = [0u64; 8];
        for (q, w) in s.switch.dwrr_weights.iter().enumerate() {
            dwrr_quantum[q] = *w as u64 * mtu_wire as u64;
        }
        let p = Params {
            end: from_us(s.duration_us),
            mtu: s.nic.mtu_payload_bytes,
            wire_overhead: s.nic.wire_overhead_bytes,
            ack_every: s.nic.ack_every_packets,
            nack_interval: from_us(s.nic.nack_interval_us),
            rto: from_us(s.nic.retransmit_timeout_us),
            control_priority: s.switch.control_priority,
            pfc_enabled: s.switch.pfc_enabled,
            pause_quanta: s.switch.pause_quanta,
            pause_refresh: s.switch.pause_refresh_us.map(from_us),
            scheduler: s.switch.scheduler,
            dwrr_quantum,
            reserve,
            resume_offset: (s.switch.resume_offset_kb * 1024.0) as u64,
            ecn_enabled: s.switch.ecn.enabled,
            cc: s.nic.cc,
            dcqcn: DcqcnParams::from_config(&s.nic.dcqcn),
            cnp_priority: s
                .nic
                .dcqcn
                .cnp_802p_prio
                .unwrap_or(s.switch.control_priority),
            ack_on_data_priority: s.nic.ack_priority == crate::scenario::AckPriority::Data,
            rx_xoff: (s.nic.rx_buffer_xoff_kb * 1024.0) as u64,
            rx_xon: (s.nic.rx_buffer_xon_kb * 1024.0) as u64,
            sample_interval: from_us(s.output.queue_sample_interval_us),
            record_pfc_events: s.output.pfc_events,
        };

        let mut sim = Simulation {
            now: 0,
            events: EventQueue::with_capacity(1 << 16),
            rng: Rng::derive(s.seed, 0xD47A),
            p,
            dcqcn_config: s.nic.dcqcn.clone(),
            knob_changes: 0,
            topo,
            warnings,
            ports,
            node_first_port,
            node_switch,
            switches,
            nics,
            flows: Vec::new(),
            packets: PacketPool::default(),
            routes: RoutingTable::shortest_paths(&crate::routing::RoutingGraph {
                switch_links: Vec::new(),
                nic_attach: Vec::new(),
            }),
            route_overrides: Vec::new(),
            pipelines: Vec::new(),
            host_hook: None,
            stall_interval: None,
            wakeup_interval: None,
            emit_buffer: Vec::new(),
            deferred_sends: Default::default(),
            tx_tokens: std::collections::HashMap::new(),
            tx_done: Default::default(),
            cpu_inbox: Vec::new(),
            fault_actions: Vec::new(),
            pfc_log: Vec::new(),
            queue_samples: Vec::new(),
            goodput: Vec::new(),
            delivered_bytes: 0,
            round_remaining: Vec::new(),
            round_flows: Vec::new(),
            round_off: Vec::new(),
            anomalies: Vec::new(),
            anomaly_origins: Vec::new(),
            watched_workloads: Vec::new(),
            incast_queues: Vec::new(),
        };
        sim.pipelines = (0..sim.switches.len()).map(|_| None).collect();
        sim.recompute_routes();

        // Static routes.
        let node_by_name: HashMap<String, NodeId> = sim
            .topo
            .nodes
            .iter()
            .map(|n| (n.name.clone(), n.id))
            .collect();
        for (index, route) in s.route.iter().enumerate() {
            let at = |f: &str| format!("route[{index}].{f}");
            let switch_node = *node_by_name.get(&route.switch).ok_or_else(|| {
                loaded.error(&at("switch"), format!("no node named {:?}", route.switch))
            })?;
            let switch = sim.node_switch[switch_node as usize];
            if switch == u32::MAX {
                return Err(loaded.error(
                    &at("switch"),
                    format!("{:?} is a host, not a switch", route.switch),
                ));
            }
            let mut dst_nics = host_nics
                .get(&route.dst)
                .ok_or_else(|| loaded.error(&at("dst"), format!("no host named {:?}", route.dst)))?
                .clone();
            if let Some(nic) = route.nic {
                let Some(only) = dst_nics.get(nic as usize).copied() else {
                    return Err(loaded.error(
                        &at("nic"),
                        format!(
                            "{:?} has {} NIC(s), no NIC {nic}",
                            route.dst,
                            dst_nics.len()
                        ),
                    ));
                };
                dst_nics = vec![only];
            }
            let mut via_ports = Vec::new();
            for (i, via) in route.via.iter().enumerate() {
                let neighbour = *node_by_name.get(via).ok_or_else(|| {
                    loaded.error(
                        &format!("route[{index}].via[{i}]"),
                        format!("no node named {via:?}"),
                    )
                })?;
                // A host next hop other than the destination would take the packets out of
                // the fabric to a host that does not want them.
                if sim.node_switch[neighbour as usize] == u32::MAX && *via != route.dst {
                    return Err(loaded.error(
                        &format!("route[{index}].via[{i}]"),
                        format!(
                            "{via:?} is a host, not the destination {:?}: a route may only hand packets to switches or to their own destination",
                            route.dst
                        ),
                    ));
                }
                let found = sim.ports_toward(switch_node, neighbour);
                if found.is_empty() {
                    return Err(loaded.error(
                        &format!("route[{index}].via[{i}]"),
                        format!("{:?} is not a neighbour of {:?}", via, route.switch),
                    ));
                }
                via_ports.extend(found);
            }
            let start = from_us(route.start_us);
            for dst in dst_nics {
                if start == 0 {
                    sim.routes.set(switch, dst, &via_ports);
                    sim.route_overrides.push((switch, dst, via_ports.clone()));
                } else {
                    sim.schedule_fault(
                        start,
                        FaultAction::InstallRoute {
                            switch,
                            dst_nic: dst,
                            ports: via_ports.clone(),
                        },
                    );
                }
            }
        }

        // Flows.
        let resolver = HostResolver {
            by_name: &host_nics,
            names: &host_names,
        };
        let nic_gbps: Vec<f64> = nic_bps.iter().map(|b| *b as f64 / 1e9).collect();
        let node_nic = |node: u32| -> Option<u32> {
            node_first_nic
                .get(node as usize)
                .copied()
                .filter(|n| *n != u32::MAX)
        };
        let defs = workload::generate(loaded, &resolver, &nic_gbps, &node_nic)?;
        let workload_count = s.workload.len();
        sim.round_remaining = vec![Vec::new(); workload_count];
        sim.round_flows = vec![Vec::new(); workload_count];
        sim.round_off = s
            .workload
            .iter()
            .map(|w| match w {
                WorkloadSpec::Alltoall { off_us, .. } => from_us(*off_us),
                _ => 0,
            })
            .collect();
        for def in &defs {
            let id = sim.flows.len() as u32;
            let nic = &mut sim.nics[def.src_nic as usize];
            let sport = def.sport.unwrap_or_else(|| {
                let port = nic.next_sport;
                nic.next_sport = if port == u16::MAX { 49152 } else { port + 1 };
                port
            });
            let tuple = FiveTuple {
                src_ip: nic.ip,
                dst_ip: sim.nics[def.dst_nic as usize].ip,
                src_port: sport,
                dst_port: def.dport.unwrap_or(ROCEV2_UDP_PORT),
                protocol: 17,
            };
            let line_rate = nic_bps[def.src_nic as usize] as f64;
            let (base_rtt, ideal_fct) = sim.ideal_times(def.src_nic, def.dst_nic, tuple, def.size);
            sim.flows.push(Flow {
                src_nic: def.src_nic,
                dst_nic: def.dst_nic,
                tuple,
                priority: def.priority,
                size: def.size,
                start: def.start,
                cc: def.congestion_control,
                workload: def.workload,
                round: def.round,
                snd_nxt: 0,
                snd_una: 0,
                max_sent: 0,
                line_rate,
                next_avail: 0,
                last_packet_bytes: 0,
                wake_at: 0,
                wake_event_at: None,
                increase_event_at: None,
                increase_deadline: (0, 0),
                send_state: SendState::Idle,
                dcqcn: DcqcnState::new(line_rate),
                last_progress: 0,
                rto_pending: false,
                stall_pending: false,
                finished_at: None,
                retransmitted_bytes: 0,
                timeouts: 0,
                base_rtt,
                ideal_fct,
                rcv_expected: 0,
                rcv_unacked_packets: 0,
                nack_timer: 0,
                last_nack: u64::MAX,
                last_cnp: None,
                cnps_sent: 0,
                ce_received: 0,
            });
            let rounds = &mut sim.round_remaining[def.workload];
            if rounds.len() <= def.round as usize {
                rounds.resize(def.round as usize + 1, 0);
                sim.round_flows[def.workload].resize(def.round as usize + 1, Vec::new());
            }
            rounds[def.round as usize] += 1;
            sim.round_flows[def.workload][def.round as usize].push(id);
            if let Some(start) = def.start {
                if start <= sim.p.end {
                    sim.events
                        .schedule(start, EventKind::FlowStart { flow: id });
                }
            }
        }

        // Faults.
        for (index, fault) in s.fault.iter().enumerate() {
            sim.add_fault(loaded, index, fault, &host_nics, &node_by_name)?;
        }
        if sim.p.sample_interval > 0 {
            sim.events.schedule(0, EventKind::Sample);
        }
        Ok(sim)
    }

    fn schedule_fault(&mut self, at: Time, action: FaultAction) {
        let index = self.fault_actions.len() as u32;
        self.fault_actions.push(action);
        self.events.schedule(at, EventKind::Fault { action: index });
    }

    /// Global ports of `node` whose link leads to `neighbour`, as local numbers.
    pub(crate) fn ports_toward(&self, node: NodeId, neighbour: NodeId) -> Vec<PortNo> {
        self.topo
            .links
            .iter()
            .filter_map(|l| {
                if l.a.node == node && l.b.node == neighbour {
                    Some(l.a.port)
                } else if l.b.node == node && l.a.node == neighbour {
                    Some(l.b.port)
                } else {
                    None
                }
            })
            .collect()
    }

    /// The egress ports (global) a packet of `tuple` from `src_nic` to `dst_nic` crosses
    /// with the current routes: the NIC port, then one port per switch.
    pub fn path_ports(&self, src_nic: u32, dst_nic: u32, tuple: FiveTuple) -> Vec<PortRef> {
        let mut path = Vec::new();
        let Some(nic) = self.nics.get(src_nic as usize) else {
            return path;
        };
        let mut port = nic.port;
        for _ in 0..64 {
            let p = &self.ports[port as usize];
            path.push(PortRef {
                node: p.node,
                port: p.local,
            });
            let next = p.peer;
            let Owner::Switch(s) = self.ports[next as usize].owner else {
                break;
            };
            let hops = self.routes.next_hops(s, dst_nic);
            if hops.is_empty() {
                break;
            }
            let local = if hops.len() == 1 {
                hops[0]
            } else {
                self.ecmp_pick(s, hops, &tuple)
            };
            port = self.switches[s as usize].first_port + local as u32;
        }
        path
    }

    /// The egress ports flow `flow` crosses with the current routes (see
    /// [`Simulation::path_ports`]); empty for an unknown flow.
    pub fn flow_path(&self, flow: u32) -> Vec<PortRef> {
        match self.flows.get(flow as usize) {
            Some(f) => self.path_ports(f.src_nic, f.dst_nic, f.tuple),
            None => Vec::new(),
        }
    }

    /// (base RTT, ideal FCT) of a flow: the base RTT is twice the propagation delay plus one
    /// MTU packet's serialization per hop (as the reference computes it, with our real frame
    /// sizes); the ideal FCT adds all the flow's bytes at the bottleneck rate.
    fn ideal_times(&self, src_nic: u32, dst_nic: u32, tuple: FiveTuple, size: u64) -> (Time, Time) {
        let path = self.path_ports(src_nic, dst_nic, tuple);
        let mtu = self.p.mtu as u64;
        let overhead = (ROCE_DATA_OVERHEAD + self.p.wire_overhead) as u64;
        let first_packet = (size.min(mtu) + overhead) as u32;
        let mut delay = 0;
        let mut serial = 0;
        let mut bottleneck = u64::MAX;
        for hop in &path {
            let g = self.node_first_port[hop.node as usize] + hop.port as u32;
            let p = &self.ports[g as usize];
            delay += p.delay;
            serial += serialization(first_packet, p.bps)
                + serialization(ROCE_ACK_BYTES + self.p.wire_overhead, p.bps);
            bottleneck = bottleneck.min(p.bps);
        }
        let base_rtt = 2 * delay + serial;
        let packets = size.div_ceil(mtu);
        let wire_bytes = size + packets * overhead;
        let ideal =
            base_rtt + (wire_bytes as u128 * 8_000_000_000_000 / bottleneck.max(1) as u128) as Time;
        (base_rtt, ideal)
    }

    fn add_fault(
        &mut self,
        loaded: &LoadedScenario,
        index: usize,
        fault: &FaultSpec,
        host_nics: &HashMap<String, Vec<u32>>,
        node_by_name: &HashMap<String, NodeId>,
    ) -> Result<(), ScenarioError> {
        let at = |f: &str| format!("fault[{index}].{f}");
        let nic_of = |field: &str, host: &str, nic: u32| -> Result<u32, ScenarioError> {
            let list = host_nics
                .get(host)
                .ok_or_else(|| loaded.error(&at(field), format!("no host named {host:?}")))?;
            list.get(nic as usize)
                .copied()
                .ok_or_else(|| loaded.error(&at("nic"), format!("host {host:?} has no NIC {nic}")))
        };
        let node_of = |field: &str, name: &str| -> Result<NodeId, ScenarioError> {
            node_by_name
                .get(name)
                .copied()
                .ok_or_else(|| loaded.error(&at(field), format!("no node named {name:?}")))
        };
        let data_priority = loaded.scenario.nic.data_priority;
        let end = self.p.end;
        let mut anomaly = Anomaly {
            fault_index: index,
            kind: AnomalyKind::LinkFlap,
            start_ns: 0,
            end_ns: end / NS,
            nodes: Vec::new(),
            initial_ports: Vec::new(),
            loop_ports: Vec::new(),
            root_cause_flows: Vec::new(),
            workload: None,
            pfc_spreading: Vec::new(),
            paused_ports: Vec::new(),
            queue_peaks: Vec::new(),
            description: String::new(),
        };
        let mut origins = Vec::new();
        match fault {
            FaultSpec::PfcInjection {
                host,
                nic,
                priority,
                start_us,
                duration_us,
            } => {
                let n = nic_of("host", host, *nic)?;
                let start = from_us(*start_us);
                let until = start + from_us(*duration_us);
                let priority = priority.unwrap_or(data_priority);
                self.schedule_fault(
                    start,
                    FaultAction::InjectStart {
                        nic: n,
                        priority,
                        until,
                    },
                );
                let port = self.nics[n as usize].port;
                let host_node = self.nics[n as usize].host;
                let peer = &self.ports[self.ports[port as usize].peer as usize];
                anomaly.kind = AnomalyKind::PfcStorm;
                anomaly.start_ns = start / NS;
                anomaly.end_ns = until / NS;
                anomaly.nodes = vec![host_node];
                anomaly.initial_ports = vec![PortRef {
                    node: peer.node,
                    port: peer.local,
                }];
                anomaly.description = format!(
                    "{host} NIC {nic} sends PFC PAUSE on priority {priority} for {duration_us} µs"
                );
                origins.push(host_node);
            }
            FaultSpec::SlowReceiver {
                host,
                nic,
                drain_gbps,
                start_us,
                duration_us,
            } => {
                let n = nic_of("host", host, *nic)?;
                let start = from_us(*start_us);
                let stop = start + from_us(*duration_us);
                self.schedule_fault(
                    start,
                    FaultAction::SlowStart {
                        nic: n,
                        bps: gbps_to_bps(*drain_gbps),
                    },
                );
                self.schedule_fault(stop, FaultAction::SlowEnd { nic: n });
                let port = self.nics[n as usize].port;
                let host_node = self.nics[n as usize].host;
                let peer = &self.ports[self.ports[port as usize].peer as usize];
                anomaly.kind = AnomalyKind::SlowReceiver;
                anomaly.start_ns = start / NS;
                anomaly.end_ns = stop / NS;
                anomaly.nodes = vec![host_node];
                anomaly.initial_ports = vec![PortRef {
                    node: peer.node,
                    port: peer.local,
                }];
                anomaly.description =
                    format!("{host} NIC {nic} drains at {drain_gbps} Gbit/s only");
                origins.push(host_node);
            }
            FaultSpec::LinkFlap {
                a,
                b,
                down_us,
                up_us,
                count,
                period_us,
                reroute_after_us,
            } => {
                let (pa, pb) =
                    self.link_ports(loaded, &at("a"), node_of("a", a)?, node_of("b", b)?)?;
                // Cycle i is the first one shifted by i periods (validated: a period is
                // longer than the outage, so the cycles never overlap).
                let period = period_us.map_or(0, from_us);
                let mut last_up = 0;
                for cycle in 0..*count {
                    let shift = period * Time::from(cycle);
                    let down = from_us(*down_us) + shift;
                    let up = from_us(*up_us) + shift;
                    self.schedule_fault(down, FaultAction::LinkDown { ports: [pa, pb] });
                    self.schedule_fault(up, FaultAction::LinkUp { ports: [pa, pb] });
                    if let Some(after) = reroute_after_us {
                        self.schedule_fault(down + from_us(*after), FaultAction::Reroute);
                        self.schedule_fault(up + from_us(*after), FaultAction::Reroute);
                    }
                    last_up = up;
                }
                anomaly.kind = AnomalyKind::LinkFlap;
                anomaly.start_ns = from_us(*down_us) / NS;
                anomaly.end_ns = last_up / NS;
                (anomaly.nodes, anomaly.initial_ports) = self.link_ends(pa, pb);
                anomaly.description = if *count > 1 {
                    format!(
                        "link {a}-{b} flaps {count} times: down from {down_us} µs to {up_us} µs, every {} µs",
                        period_us.unwrap_or(0.0)
                    )
                } else {
                    format!("link {a}-{b} down from {down_us} µs to {up_us} µs")
                };
            }
            FaultSpec::RandomLoss {
                a,
                b,
                rate,
                one_way,
            } => {
                let (pa, pb) =
                    self.link_ports(loaded, &at("a"), node_of("a", a)?, node_of("b", b)?)?;
                self.ports[pa as usize].loss_rate = *rate;
                if !one_way {
                    self.ports[pb as usize].loss_rate = *rate;
                }
                anomaly.kind = AnomalyKind::RandomLoss;
                (anomaly.nodes, anomaly.initial_ports) = self.link_ends(pa, pb);
                anomaly.description = if *one_way {
                    format!(
                        "link {a}-{b} loses {:.4} % of packets from {a} to {b}",
                        rate * 100.0
                    )
                } else {
                    format!("link {a}-{b} loses {:.4} % of packets", rate * 100.0)
                };
            }
            FaultSpec::AclDrop {
                a,
                b,
                src_port_min,
                src_port_max,
            } => {
                let (pa, pb) =
                    self.link_ports(loaded, &at("a"), node_of("a", a)?, node_of("b", b)?)?;
                self.ports[pa as usize].acl_drop = Some((*src_port_min, *src_port_max));
                self.ports[pb as usize].acl_drop = Some((*src_port_min, *src_port_max));
                anomaly.kind = AnomalyKind::AclDrop;
                (anomaly.nodes, anomaly.initial_ports) = self.link_ends(pa, pb);
                anomaly.description =
                    format!("link {a}-{b} drops UDP source ports {src_port_min}-{src_port_max}");
            }
            FaultSpec::RoutingLoop { switches, start_us } => {
                let mut nodes = Vec::new();
                for (i, name) in switches.iter().enumerate() {
                    let node = node_of(&format!("switches[{i}]"), name)?;
                    if self.node_switch[node as usize] == u32::MAX {
                        return Err(loaded.error(
                            &at(&format!("switches[{i}]")),
                            format!("{name:?} is not a switch"),
                        ));
                    }
                    nodes.push(node);
                }
                for i in 0..nodes.len() {
                    let (from, to) = (nodes[i], nodes[(i + 1) % nodes.len()]);
                    let ports = self.ports_toward(from, to);
                    let Some(port) = ports.first() else {
                        return Err(loaded.error(
                            &at("switches"),
                            format!(
                                "{} and {} are not neighbours",
                                switches[i],
                                switches[(i + 1) % nodes.len()]
                            ),
                        ));
                    };
                    anomaly.loop_ports.push(PortRef {
                        node: from,
                        port: *port,
                    });
                }
                anomaly.kind = AnomalyKind::RoutingLoop;
                anomaly.start_ns = from_us(*start_us) / NS;
                anomaly.initial_ports = anomaly.loop_ports.clone();
                anomaly.description = format!(
                    "static routes create a cyclic buffer dependency through {}",
                    switches.join(" → ")
                );
                anomaly.nodes = nodes.clone();
                origins.extend(nodes);
            }
            FaultSpec::EcmpImbalance {
                switch,
                toward,
                fraction,
            } => {
                let node = node_of("switch", switch)?;
                let s = self.node_switch[node as usize];
                if s == u32::MAX {
                    return Err(loaded.error(&at("switch"), format!("{switch:?} is not a switch")));
                }
                let neighbour = node_of("toward", toward)?;
                let Some(port) = self.ports_toward(node, neighbour).first().copied() else {
                    return Err(loaded.error(
                        &at("toward"),
                        format!("{toward:?} is not a neighbour of {switch:?}"),
                    ));
                };
                self.switches[s as usize].imbalance = Some((port, *fraction));
                anomaly.kind = AnomalyKind::EcmpImbalance;
                anomaly.nodes = vec![node];
                anomaly.initial_ports = vec![PortRef { node, port }];
                anomaly.description = format!(
                    "{switch} pins {:.0} % of its ECMP flows toward {toward}",
                    fraction * 100.0
                );
            }
            FaultSpec::IncastBurst { workload } => {
                // The receiver NIC and the first burst: an incast workload's, or the one
                // receiver of a flows workload (checked when the scenario was loaded).
                let (receiver, receiver_nic, start_us) = match &loaded.scenario.workload[*workload]
                {
                    WorkloadSpec::Incast {
                        receiver,
                        start_us,
                        nic,
                        ..
                    } => (receiver.clone(), *nic, *start_us),
                    WorkloadSpec::Flows { flows } if !flows.is_empty() => (
                        flows[0].dst.clone(),
                        flows[0].dst_nic,
                        flows
                            .iter()
                            .map(|f| f.start_us)
                            .fold(f64::INFINITY, f64::min),
                    ),
                    _ => {
                        return Err(loaded.error(
                            &at("workload"),
                            "neither an incast nor a flows workload with one receiver",
                        ))
                    }
                };
                let receiver = receiver.as_str();
                let start_us = &start_us;
                let n = nic_of("workload", receiver, receiver_nic)?;
                let port = self.nics[n as usize].port;
                let peer_global = self.ports[port as usize].peer;
                let peer = &self.ports[peer_global as usize];
                anomaly.kind = AnomalyKind::IncastBurst;
                anomaly.start_ns = from_us(*start_us) / NS;
                anomaly.nodes = vec![self.nics[n as usize].host];
                anomaly.initial_ports = vec![PortRef {
                    node: peer.node,
                    port: peer.local,
                }];
                anomaly.workload = Some(*workload as u32);
                if self.watched_workloads.len() <= *workload {
                    self.watched_workloads.resize(*workload + 1, false);
                }
                self.watched_workloads[*workload] = true;
                self.incast_queues = vec![Vec::new(); self.ports.len()];
                anomaly.root_cause_flows = self
                    .flows
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f.workload == *workload)
                    .map(|(i, _)| i as u32)
                    .collect();
                anomaly.description = format!(
                    "{} senders burst into {receiver}",
                    anomaly.root_cause_flows.len()
                );
                origins.push(peer.node);
            }
        }
        self.anomalies.push(anomaly);
        self.anomaly_origins.push(origins);
        Ok(())
    }

    /// The nodes and ports at the two ends of a link (global ports `pa`, `pb`): a link
    /// fault's place in the ground truth.
    fn link_ends(&self, pa: u32, pb: u32) -> (Vec<NodeId>, Vec<PortRef>) {
        let end = |g: u32| {
            let p = &self.ports[g as usize];
            (
                p.node,
                PortRef {
                    node: p.node,
                    port: p.local,
                },
            )
        };
        let ((na, a), (nb, b)) = (end(pa), end(pb));
        (vec![na, nb], vec![a, b])
    }

    /// The simulator's ports at `a`'s and `b`'s ends of the link joining them, in that
    /// order.
    fn link_ports(
        &self,
        loaded: &LoadedScenario,
        field: &str,
        a: NodeId,
        b: NodeId,
    ) -> Result<(u32, u32), ScenarioError> {
        let link = self
            .topo
            .links
            .iter()
            .find(|l| (l.a.node == a && l.b.node == b) || (l.a.node == b && l.b.node == a))
            .ok_or_else(|| loaded.error(field, "no link joins these two nodes"))?;
        let g = |r: PortRef| self.node_first_port[r.node as usize] + r.port as u32;
        // `a`'s end first, whichever way the link is described.
        if link.a.node == a {
            Ok((g(link.a), g(link.b)))
        } else {
            Ok((g(link.b), g(link.a)))
        }
    }
}

fn gbps_to_bps(gbps: f64) -> u64 {
    (gbps * 1e9).round().max(1.0) as u64
}

fn ecn_for(s: &crate::scenario::Scenario, gbps: f64) -> (u64, u64, f64) {
    let ecn = &s.switch.ecn;
    if let Some(entry) = ecn.per_speed.iter().find(|e| (e.gbps - gbps).abs() < 1e-6) {
        return (
            (entry.kmin_kb * 1000.0) as u64,
            (entry.kmax_kb * 1000.0) as u64,
            entry.pmax,
        );
    }
    (
        (ecn.kmin_kb_per_gbps * gbps * 1000.0) as u64,
        (ecn.kmax_kb_per_gbps * gbps * 1000.0) as u64,
        ecn.pmax,
    )
}
