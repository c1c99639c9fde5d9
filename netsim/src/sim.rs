//! The simulator: state of every port, switch, NIC and flow, and the event handlers.
//!
//! Data path in one paragraph: a NIC picks a ready queue pair (round robin per priority,
//! rate-paced by DCQCN), builds a data packet and serializes it onto its link; the packet
//! arrives at a switch after the propagation delay; the switch runs the pipeline hook, routes
//! (ECMP), admits it against the ingress (port, priority) buffer accounting (reserve, shared
//! with dynamic threshold, headroom), sends PFC XOFF upstream when the ingress crosses its
//! threshold, and enqueues it in the egress queue of its priority; when the egress port is
//! free and the priority not paused, the packet is dequeued (strict-priority control queue,
//! then RR/DWRR), ECN-marked on the instantaneous queue length, passed through the egress
//! hook and transmitted. The receiving NIC acknowledges (go-back-N), sends CNPs for CE marks
//! (at most one per `min_time_between_cnps`), and the sender's DCQCN reacts.

use crate::dcqcn::{DcqcnEffect, DcqcnParams, DcqcnState};
use crate::event::{EventKind, EventQueue};
use crate::hooks::{
    CpuPacket, EgressActions, EgressMeta, HostEmit, HostHook, IngressActions, IngressMeta,
    RttSample, SwitchPipeline,
};
use crate::packet::{
    FiveTuple, Packet, PacketKind, PacketPool, CUSTOM_CAPACITY, CUSTOM_OVERHEAD, ECN_CE, ECN_ECT0,
    ECN_NOT_ECT, ROCE_ACK_BYTES, ROCE_CNP_BYTES, ROCE_DATA_OVERHEAD,
};
use crate::rng::Rng;
use crate::routing::{ecmp_hash, RoutingGraph, RoutingTable};
use crate::scenario::{CongestionControl, Scheduler};
use crate::time::{serialization, Time, NS};
use hawkmesh_wire::pfc::{pause_duration_ps, PFC_FRAME_BYTES};
use hawkmesh_wire::topology::{FabricTopology, NodeId, PortNo};
use std::collections::VecDeque;

/// A cache prefetch hint. The only `unsafe` in the workspace.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of the x86_64 baseline (always enabled), and PREFETCHT0 is a hint
    // that never faults and never reads or writes memory architecturally, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

/// Who owns a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    Switch(u32),
    Nic(u32),
}

/// Counters of one port, like a switch's or NIC's hardware counters.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct PortCounters {
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Packets dropped at ingress for lack of buffer (headroom overflow / lossy threshold).
    pub drops_buffer: u64,
    /// Packets lost because the link was down.
    pub drops_link_down: u64,
    /// Packets lost to random loss on the link.
    pub drops_random_loss: u64,
    /// Packets dropped because their TTL ran out (routing loops).
    pub drops_ttl: u64,
    /// Packets dropped for lack of a route.
    pub drops_no_route: u64,
    /// Packets dropped by the pipeline hook.
    pub drops_pipeline: u64,
    /// PFC frames sent per priority (XOFF and XON).
    pub pause_frames_sent: [u64; 8],
    /// PFC frames received per priority.
    pub pause_frames_received: [u64; 8],
    /// Time this port's transmitter was paused per priority, ns (like `rx_prioN_pause_duration`).
    pub pause_duration_ns: [u64; 8],
    /// Packets ECN-marked (CE) at this egress.
    pub ecn_marked: u64,
    /// Largest egress queue occupancy seen, bytes (all priorities).
    pub max_queue_bytes: u64,
}

#[derive(Debug)]
pub(crate) struct Port {
    pub node: NodeId,
    pub local: PortNo,
    pub peer: u32,
    pub bps: u64,
    pub delay: Time,
    pub owner: Owner,
    pub busy_until: Time,
    /// Time of the earliest pending `TxFree` event of this port, if any.
    pub tx_event_at: Option<Time>,
    pub mac_control: VecDeque<u32>,
    pub queues: [VecDeque<u32>; 8],
    pub queue_bytes: [u64; 8],
    pub queued_total: u64,
    pub rr_next: u8,
    pub dwrr_deficit: [u64; 8],
    pub paused_from: [Time; 8],
    pub paused_until: [Time; 8],
    pub pause_total: [Time; 8],
    pub link_up: bool,
    pub loss_rate: f64,
    // Ingress accounting of this port as an ingress of its switch (HPCC SwitchMmu).
    pub ingress_bytes: [u64; 8],
    pub headroom_used: [u64; 8],
    pub xoff_sent: [bool; 8],
    pub pfc_generation: [u32; 8],
    /// Bytes held in this ingress's buffer by egress port (local number), all lossless
    /// priorities: what an XOFF sent here is waiting for (ground truth only; empty for NICs).
    pub ingress_to: Vec<u64>,
    pub headroom: u64,
    pub pfc_shift: u32,
    pub kmin: u64,
    pub kmax: u64,
    pub pmax: f64,
    pub counters: PortCounters,
}

#[derive(Debug)]
pub(crate) struct SwitchState {
    pub node: NodeId,
    pub first_port: u32,
    pub port_count: u32,
    pub buffer: u64,
    pub total_headroom: u64,
    pub total_reserve: u64,
    pub shared_used: u64,
    pub ecmp_seed: u32,
    pub imbalance: Option<(PortNo, f64)>,
}

#[derive(Debug)]
pub(crate) struct Nic {
    pub host: NodeId,
    pub port: u32,
    pub ip: [u8; 4],
    pub control: VecDeque<u32>,
    pub ready: [VecDeque<u32>; 8],
    pub rr_next: u8,
    pub drain_bps: Option<u64>,
    pub rx_buffer: u64,
    pub rx_busy_until: Time,
    pub rx_xoff: bool,
    pub rx_xoff_priority: u8,
    pub inject_until: Time,
    pub inject_priority: u8,
    pub next_sport: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendState {
    Idle,
    InRing,
    Waiting,
}

#[derive(Debug)]
pub(crate) struct Flow {
    pub src_nic: u32,
    pub dst_nic: u32,
    pub tuple: FiveTuple,
    pub priority: u8,
    pub size: u64,
    pub start: Option<Time>,
    pub cc: bool,
    pub workload: usize,
    pub round: u32,
    // Sender.
    pub snd_nxt: u64,
    pub snd_una: u64,
    pub max_sent: u64,
    pub line_rate: f64,
    pub next_avail: Time,
    pub last_packet_bytes: u32,
    pub wake_at: Time,
    pub wake_event_at: Option<Time>,
    pub increase_event_at: Option<Time>,
    pub increase_deadline: (Time, u32),
    pub send_state: SendState,
    pub dcqcn: DcqcnState,
    pub last_progress: Time,
    pub rto_pending: bool,
    pub stall_pending: bool,
    pub finished_at: Option<Time>,
    pub retransmitted_bytes: u64,
    pub timeouts: u64,
    pub base_rtt: Time,
    pub ideal_fct: Time,
    // Receiver.
    pub rcv_expected: u64,
    pub rcv_unacked_packets: u32,
    pub nack_timer: Time,
    pub last_nack: u64,
    pub last_cnp: Option<Time>,
    pub cnps_sent: u64,
    pub ce_received: u64,
}

/// A PFC frame sent by a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PfcEvent {
    /// Time, ns.
    pub time_ns: u64,
    /// Sending node.
    pub node: NodeId,
    /// Port it left through.
    pub port: PortNo,
    /// Priority.
    pub priority: u8,
    /// Quanta (0 = XON / resume).
    pub quanta: u16,
    /// For an XOFF from a switch: the egress port (local number) holding most of the
    /// pausing ingress's buffered bytes — the queue the upstream is made to wait for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<PortNo>,
    /// For an XOFF with a `cause`: the workload (index in the scenario's `[[workload]]`
    /// list) owning more than half of the bytes queued at that egress port, if one does —
    /// which traffic built the queue the upstream is made to wait for (ground truth only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause_workload: Option<u32>,
}

/// One queue-depth sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct QueueSample {
    /// Time, ns.
    pub time_ns: u64,
    /// Switch.
    pub node: NodeId,
    /// Egress port.
    pub port: PortNo,
    /// Priority.
    pub priority: u8,
    /// Bytes queued.
    pub bytes: u64,
}

/// Derived parameters.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub end: Time,
    pub mtu: u32,
    pub wire_overhead: u32,
    pub ack_every: u32,
    pub nack_interval: Time,
    pub rto: Time,
    pub control_priority: u8,
    pub pfc_enabled: bool,
    pub pause_quanta: u16,
    pub pause_refresh: Option<Time>,
    pub scheduler: Scheduler,
    pub dwrr_quantum: [u64; 8],
    pub reserve: u64,
    pub resume_offset: u64,
    pub ecn_enabled: bool,
    pub cc: CongestionControl,
    pub dcqcn: DcqcnParams,
    pub cnp_priority: u8,
    pub rx_xoff: u64,
    pub rx_xon: u64,
    pub sample_interval: Time,
    pub record_pfc_events: bool,
}

/// A scheduled fault action.
#[derive(Clone, Debug)]
pub(crate) enum FaultAction {
    InjectStart {
        nic: u32,
        priority: u8,
        until: Time,
    },
    SlowStart {
        nic: u32,
        bps: u64,
    },
    SlowEnd {
        nic: u32,
    },
    LinkDown {
        ports: [u32; 2],
    },
    LinkUp {
        ports: [u32; 2],
    },
    Reroute,
    InstallRoute {
        switch: u32,
        dst_nic: u32,
        ports: Vec<PortNo>,
    },
}

/// The simulator.
pub struct Simulation {
    pub(crate) now: Time,
    pub(crate) events: EventQueue,
    pub(crate) rng: Rng,
    pub(crate) p: Params,
    pub(crate) topo: FabricTopology,
    pub(crate) ports: Vec<Port>,
    pub(crate) node_first_port: Vec<u32>,
    pub(crate) node_switch: Vec<u32>,
    pub(crate) switches: Vec<SwitchState>,
    pub(crate) nics: Vec<Nic>,
    pub(crate) flows: Vec<Flow>,
    pub(crate) packets: PacketPool,
    pub(crate) routes: RoutingTable,
    pub(crate) route_overrides: Vec<(u32, u32, Vec<PortNo>)>,
    pub(crate) pipelines: Vec<Option<Box<dyn SwitchPipeline>>>,
    pub(crate) host_hook: Option<Box<dyn HostHook>>,
    pub(crate) stall_interval: Option<Time>,
    pub(crate) emit_buffer: Vec<HostEmit>,
    pub(crate) cpu_inbox: Vec<CpuPacket>,
    pub(crate) fault_actions: Vec<FaultAction>,
    pub(crate) pfc_log: Vec<PfcEvent>,
    pub(crate) queue_samples: Vec<QueueSample>,
    pub(crate) goodput: Vec<(Time, u64)>,
    pub(crate) delivered_bytes: u64,
    pub(crate) round_remaining: Vec<Vec<u32>>,
    pub(crate) round_flows: Vec<Vec<Vec<u32>>>,
    pub(crate) round_off: Vec<Time>,
    pub(crate) anomalies: Vec<crate::truth::Anomaly>,
    pub(crate) anomaly_origins: Vec<Vec<NodeId>>,
}

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("now", &self.now)
            .field("nodes", &self.topo.nodes.len())
            .field("flows", &self.flows.len())
            .finish_non_exhaustive()
    }
}

impl Simulation {
    /// Current simulated time.
    pub fn now(&self) -> Time {
        self.now
    }

    /// Events processed so far.
    pub fn events_processed(&self) -> u64 {
        self.events.processed()
    }

    /// Bytes of flow `flow` delivered in order to its receiver so far.
    pub fn flow_delivered(&self, flow: u32) -> Option<u64> {
        self.flows.get(flow as usize).map(|f| f.rcv_expected)
    }

    /// Number of flows.
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// Application bytes delivered in order to all receivers so far.
    pub fn delivered_bytes(&self) -> u64 {
        self.delivered_bytes
    }

    /// Largest number of events pending at once (memory footprint of the event set).
    pub fn max_pending_events(&self) -> usize {
        self.events.max_pending()
    }

    /// The fabric.
    pub fn topology(&self) -> &FabricTopology {
        &self.topo
    }

    /// Installs a data-plane program on a switch (by node id).
    pub fn set_pipeline(&mut self, switch: NodeId, pipeline: Box<dyn SwitchPipeline>) -> bool {
        match self.node_switch.get(switch as usize) {
            Some(index) if *index != u32::MAX => {
                self.pipelines[*index as usize] = Some(pipeline);
                true
            }
            _ => false,
        }
    }

    /// Installs the host-side agent logic.
    pub fn set_host_hook(&mut self, hook: Box<dyn HostHook>) {
        self.stall_interval = hook.stall_interval().filter(|t| *t > 0);
        self.host_hook = Some(hook);
    }

    /// Takes the packets that reached switch CPU ports since the last call.
    pub fn take_cpu_packets(&mut self) -> Vec<CpuPacket> {
        std::mem::take(&mut self.cpu_inbox)
    }

    /// Sends a packet from a switch CPU out of one of its ports (e.g. a regenerated polling
    /// packet). Returns false when the switch or port does not exist.
    pub fn inject_from_cpu(&mut self, switch: NodeId, port: PortNo, mut packet: Packet) -> bool {
        let Some(first) = self.node_first_port.get(switch as usize).copied() else {
            return false;
        };
        if self
            .node_switch
            .get(switch as usize)
            .copied()
            .unwrap_or(u32::MAX)
            == u32::MAX
        {
            return false;
        }
        let global = first + port as u32;
        if self.ports.get(global as usize).map(|p| p.node) != Some(switch) {
            return false;
        }
        packet.in_port = u32::MAX;
        let id = self.packets.alloc(packet);
        self.enqueue_egress(global, id);
        true
    }

    /// Sends a packet from a host NIC as a host agent would (e.g. a polling packet).
    pub fn emit_from_host(&mut self, emit: HostEmit) {
        self.send_custom(emit);
    }

    /// Runs until simulated time `until` (or the scenario end, whichever is first).
    pub fn run_until(&mut self, until: Time) {
        let until = until.min(self.p.end);
        while let Some((time, kind)) = self.events.pop_until(until) {
            self.now = time;
            // Packets and ports are touched in an order no cache predicts; ask for the next
            // arrival's packet and port while this event is handled.
            if let Some((_, EventKind::Arrive { port, packet })) = self.events.peek_ready() {
                prefetch(self.packets.slot_ptr(*packet));
                if let Some(p) = self.ports.get(*port as usize) {
                    prefetch(p as *const Port as *const u8);
                }
            }
            self.dispatch(kind);
        }
        self.now = self.now.max(until);
    }

    /// Moves the end of the run to `end` if that is later: the fabric keeps running
    /// (packets in flight, pauses, host hooks) but nothing the scenario schedules starts
    /// after the scenario's own end.
    pub fn extend_end(&mut self, end: Time) {
        self.p.end = self.p.end.max(end);
    }

    /// Runs to the scenario's end.
    pub fn run(&mut self) {
        self.run_until(self.p.end);
    }

    fn dispatch(&mut self, kind: EventKind) {
        match kind {
            EventKind::Arrive { port, packet } => self.on_arrive(port, packet),
            EventKind::TxFree { port } => {
                let p = &mut self.ports[port as usize];
                if p.tx_event_at == Some(self.now) {
                    p.tx_event_at = None;
                }
                self.try_transmit(port);
            }
            EventKind::FlowStart { flow } => self.on_flow_start(flow),
            EventKind::QpReady { flow } => self.on_qp_ready(flow),
            EventKind::DcqcnDecrease { flow } => self.on_dcqcn_decrease(flow),
            EventKind::DcqcnIncrease { flow, generation } => {
                self.on_dcqcn_increase(flow, generation)
            }
            EventKind::RetransmitTimer { flow } => self.on_retransmit_timer(flow),
            EventKind::StallCheck { flow } => self.on_stall_check(flow),
            EventKind::PfcRefresh {
                port,
                priority,
                generation,
            } => self.on_pfc_refresh(port, priority, generation),
            EventKind::NicRxDrain { port, packet } => self.on_nic_rx_drained(port, packet),
            EventKind::Fault { action } => self.on_fault(action),
            EventKind::Sample => self.on_sample(),
        }
    }

    // ----------------------------------------------------------------------------------
    // Transmission (common to switch and NIC ports)
    // ----------------------------------------------------------------------------------

    fn has_backlog(&self, port: u32) -> bool {
        let p = &self.ports[port as usize];
        if !p.mac_control.is_empty() || p.queued_total > 0 {
            return true;
        }
        match p.owner {
            Owner::Switch(_) => false,
            Owner::Nic(n) => {
                let nic = &self.nics[n as usize];
                !nic.control.is_empty() || nic.ready.iter().any(|r| !r.is_empty())
            }
        }
    }

    /// Makes sure `port` transmits as soon as it can.
    #[inline]
    pub(crate) fn kick(&mut self, port: u32) {
        let at = self.ports[port as usize].busy_until;
        if at > self.now {
            self.wake_port_at(port, at);
        } else {
            self.try_transmit(port);
        }
    }

    /// Ensures a `TxFree` event for `port` at or before `at`. Later pending events become
    /// harmless extra calls of `try_transmit`.
    #[inline]
    fn wake_port_at(&mut self, port: u32, at: Time) {
        let now = self.now;
        let p = &mut self.ports[port as usize];
        // A pending event at `now` may already be behind us in this instant; only a strictly
        // later one that is not after `at` makes a new event unnecessary.
        if p.tx_event_at
            .is_none_or(|pending| pending > at || pending <= now)
        {
            p.tx_event_at = Some(at);
            self.events.schedule(at, EventKind::TxFree { port });
        }
    }

    fn try_transmit(&mut self, port: u32) {
        let now = self.now;
        let busy_until = self.ports[port as usize].busy_until;
        if busy_until > now {
            if self.has_backlog(port) {
                self.wake_port_at(port, busy_until);
            }
            return;
        }
        let picked = if let Some(id) = self.ports[port as usize].mac_control.pop_front() {
            Some(id)
        } else {
            match self.ports[port as usize].owner {
                Owner::Switch(_) => self.switch_dequeue(port),
                Owner::Nic(n) => self.nic_dequeue(n),
            }
        };
        let Some(id) = picked else {
            // Nothing eligible: if packets wait behind a pause, wake when it expires.
            let p = &mut self.ports[port as usize];
            if p.queued_total > 0 || matches!(p.owner, Owner::Nic(_)) {
                let mut wake = Time::MAX;
                for prio in 0..8 {
                    if p.paused_until[prio] > now {
                        let waiting = match p.owner {
                            Owner::Switch(_) => !p.queues[prio].is_empty(),
                            Owner::Nic(n) => !self.nics[n as usize].ready[prio].is_empty(),
                        };
                        if waiting {
                            wake = wake.min(p.paused_until[prio]);
                        }
                    }
                }
                if wake != Time::MAX {
                    self.wake_port_at(port, wake);
                }
            }
            return;
        };
        let (size, kind) = {
            let packet = self.packets.get(id);
            (packet.size, packet.kind)
        };
        let p = &mut self.ports[port as usize];
        let tx_end = now + serialization(size, p.bps);
        p.busy_until = tx_end;
        p.counters.tx_bytes += size as u64;
        p.counters.tx_packets += 1;
        let lost = if !p.link_up {
            p.counters.drops_link_down += 1;
            true
        } else if p.loss_rate > 0.0 && kind != PacketKind::Pfc && self.rng.next_f64() < p.loss_rate
        {
            p.counters.drops_random_loss += 1;
            true
        } else {
            false
        };
        if lost {
            self.packets.free(id);
        } else {
            let arrive = tx_end + p.delay;
            let peer = p.peer;
            self.events.schedule(
                arrive,
                EventKind::Arrive {
                    port: peer,
                    packet: id,
                },
            );
        }
        if self.has_backlog(port) {
            self.wake_port_at(port, tx_end);
        }
    }

    fn on_arrive(&mut self, port: u32, id: u32) {
        let p = &mut self.ports[port as usize];
        let size = self.packets.get(id).size as u64;
        p.counters.rx_bytes += size;
        p.counters.rx_packets += 1;
        if self.packets.get(id).kind == PacketKind::Pfc {
            self.apply_pfc(port, id);
            if let Owner::Switch(s) = self.ports[port as usize].owner {
                // The pipeline sees PFC frames (HAWKEYE parses them) but they are consumed.
                self.run_ingress_hook(s, port, id, None);
            }
            self.packets.free(id);
            return;
        }
        match self.ports[port as usize].owner {
            Owner::Switch(s) => self.switch_receive(s, port, id),
            Owner::Nic(n) => self.nic_receive(n, id),
        }
    }

    /// IEEE 802.1Qbb at a receiving MAC: pause each enabled priority for quanta × 512 bit
    /// times at this port's speed; quanta 0 resumes.
    fn apply_pfc(&mut self, port: u32, id: u32) {
        let now = self.now;
        let (vector, quanta) = {
            let packet = self.packets.get(id);
            (packet.pfc_vector, packet.pfc_quanta)
        };
        let p = &mut self.ports[port as usize];
        let mut resumed = false;
        for (prio, quanta) in quanta.iter().enumerate() {
            if vector & (1 << prio) == 0 {
                continue;
            }
            p.counters.pause_frames_received[prio] += 1;
            if *quanta > 0 {
                let until = now + pause_duration_ps(*quanta, p.bps);
                if p.paused_until[prio] > now {
                    p.paused_until[prio] = until;
                } else {
                    p.pause_total[prio] += p.paused_until[prio] - p.paused_from[prio];
                    p.paused_from[prio] = now;
                    p.paused_until[prio] = until;
                }
            } else if p.paused_until[prio] > now {
                p.paused_until[prio] = now;
                resumed = true;
            }
        }
        if resumed {
            self.kick(port);
        }
    }

    // ----------------------------------------------------------------------------------
    // Switch
    // ----------------------------------------------------------------------------------

    fn run_ingress_hook(
        &mut self,
        s: u32,
        port: u32,
        id: u32,
        routed: Option<PortNo>,
    ) -> IngressActions {
        let mut actions = IngressActions::default();
        if let Some(pipeline) = self.pipelines[s as usize].as_mut() {
            let meta = IngressMeta {
                switch: self.switches[s as usize].node,
                ingress_port: self.ports[port as usize].local,
                ingress_tstamp_ns: (self.now / NS) & 0xFFFF_FFFF_FFFF,
                routed_egress_port: routed,
                packet_bytes: self.packets.get(id).size,
            };
            pipeline.ingress(&meta, self.packets.get_mut(id), &mut actions);
        }
        actions
    }

    fn route(&self, s: u32, id: u32) -> Option<PortNo> {
        let packet = self.packets.get(id);
        let hops = self.routes.next_hops(s, packet.dst_nic);
        match hops.len() {
            0 => None,
            1 => Some(hops[0]),
            n => {
                let sw = &self.switches[s as usize];
                let t = &packet.tuple;
                let hash = ecmp_hash(t.src_ip, t.dst_ip, t.src_port, t.dst_port, sw.ecmp_seed);
                if let Some((favoured, fraction)) = sw.imbalance {
                    if hops.contains(&favoured) {
                        let draw =
                            ecmp_hash(t.dst_ip, t.src_ip, t.dst_port, t.src_port, !sw.ecmp_seed);
                        if (draw as f64) < fraction * (u32::MAX as f64) {
                            return Some(favoured);
                        }
                    }
                }
                Some(hops[hash as usize % n])
            }
        }
    }

    fn switch_receive(&mut self, s: u32, port: u32, id: u32) {
        let first = self.switches[s as usize].first_port;
        {
            let packet = self.packets.get_mut(id);
            packet.in_port = port;
            packet.bridge = [0; 2];
            if packet.ttl <= 1 {
                self.ports[port as usize].counters.drops_ttl += 1;
                self.packets.free(id);
                return;
            }
            packet.ttl -= 1;
        }
        // Packets from a pipeline or CPU may name no (or no existing) destination NIC.
        let routed = if self.packets.get(id).dst_nic as usize >= self.nics.len() {
            None
        } else {
            self.route(s, id)
        };
        let mut actions = self.run_ingress_hook(s, port, id, routed);
        if actions.to_cpu {
            self.cpu_inbox.push(CpuPacket {
                time: self.now,
                switch: self.switches[s as usize].node,
                ingress_port: self.ports[port as usize].local,
                egress_port: actions.egress_override.or(routed),
                packet: self.packets.get(id).clone(),
                payload: actions.cpu_payload.take(),
            });
        }
        let port_count = self.switches[s as usize].port_count;
        if !actions.multicast.is_empty() {
            for out in actions.multicast.iter() {
                if (out as u32) < port_count {
                    let copy = self.packets.get(id).clone();
                    let copy_id = self.packets.alloc(copy);
                    self.admit_and_enqueue(s, port, first + out as u32, copy_id);
                }
            }
        }
        if actions.drop {
            self.ports[port as usize].counters.drops_pipeline += 1;
            self.packets.free(id);
            return;
        }
        if !actions.multicast.is_empty() && actions.egress_override.is_none() {
            // Replication replaced unicast.
            self.packets.free(id);
            return;
        }
        match actions.egress_override.or(routed) {
            Some(out) if (out as u32) < port_count => {
                self.admit_and_enqueue(s, port, first + out as u32, id)
            }
            _ => {
                self.ports[port as usize].counters.drops_no_route += 1;
                self.packets.free(id);
            }
        }
    }

    fn pfc_threshold(&self, s: u32, in_port: u32) -> u64 {
        let sw = &self.switches[s as usize];
        let free = sw
            .buffer
            .saturating_sub(sw.total_headroom + sw.total_reserve + sw.shared_used);
        free >> self.ports[in_port as usize].pfc_shift
    }

    fn shared_used(&self, in_port: u32, prio: usize) -> u64 {
        self.ports[in_port as usize].ingress_bytes[prio].saturating_sub(self.p.reserve)
    }

    /// Ingress admission (HPCC SwitchMmu semantics) and enqueue at the egress port.
    fn admit_and_enqueue(&mut self, s: u32, in_port: u32, out_port: u32, id: u32) {
        let (prio, size) = {
            let packet = self.packets.get(id);
            (packet.priority as usize, packet.size as u64)
        };
        if prio != self.p.control_priority as usize {
            let threshold = self.pfc_threshold(s, in_port);
            let shared = self.shared_used(in_port, prio);
            let reserve = self.p.reserve;
            let p = &self.ports[in_port as usize];
            let admit = if self.p.pfc_enabled {
                !(size + p.headroom_used[prio] > p.headroom && size + shared > threshold)
            } else {
                p.ingress_bytes[prio] + size <= reserve || size + shared <= threshold
            };
            if !admit {
                self.ports[in_port as usize].counters.drops_buffer += 1;
                self.packets.free(id);
                return;
            }
            let p = &mut self.ports[in_port as usize];
            let new_bytes = p.ingress_bytes[prio] + size;
            if new_bytes <= reserve {
                p.ingress_bytes[prio] += size;
            } else if self.p.pfc_enabled && new_bytes - reserve > threshold {
                p.headroom_used[prio] += size;
            } else {
                p.ingress_bytes[prio] += size;
                self.switches[s as usize].shared_used += size.min(new_bytes - reserve);
            }
            let out_local = self.ports[out_port as usize].local as usize;
            if let Some(held) = self.ports[in_port as usize].ingress_to.get_mut(out_local) {
                *held += size;
            }
            self.check_pause(s, in_port, prio);
        }
        self.enqueue_egress(out_port, id);
    }

    fn enqueue_egress(&mut self, out_port: u32, id: u32) {
        let now = self.now;
        let p = &mut self.ports[out_port as usize];
        let packet = self.packets.get_mut(id);
        let prio = packet.priority as usize & 7;
        packet.enq_time = now;
        packet.enq_qdepth = p.queue_bytes[prio].min(u32::MAX as u64) as u32;
        p.queue_bytes[prio] += packet.size as u64;
        p.queued_total += 1;
        p.queues[prio].push_back(id);
        let total: u64 = p.queue_bytes.iter().sum();
        if total > p.counters.max_queue_bytes {
            p.counters.max_queue_bytes = total;
        }
        self.kick(out_port);
    }

    fn check_pause(&mut self, s: u32, in_port: u32, prio: usize) {
        if !self.p.pfc_enabled {
            return;
        }
        let threshold = self.pfc_threshold(s, in_port);
        let shared = self.shared_used(in_port, prio);
        let p = &self.ports[in_port as usize];
        if !p.xoff_sent[prio] && (p.headroom_used[prio] > 0 || shared >= threshold) {
            self.send_xoff(in_port, prio as u8);
        }
    }

    fn should_resume_switch(&self, s: u32, in_port: u32, prio: usize) -> bool {
        let p = &self.ports[in_port as usize];
        if !p.xoff_sent[prio] || p.headroom_used[prio] > 0 {
            return false;
        }
        let shared = self.shared_used(in_port, prio);
        shared == 0 || shared + self.p.resume_offset <= self.pfc_threshold(s, in_port)
    }

    fn make_pfc(&mut self, port: u32, prio: u8, quanta: u16) -> u32 {
        let mut packet = Packet::new(PacketKind::Pfc);
        packet.priority = prio;
        packet.size = PFC_FRAME_BYTES as u32 + self.p.wire_overhead;
        packet.pfc_vector = 1 << prio;
        packet.pfc_quanta[prio as usize] = quanta;
        let p = &mut self.ports[port as usize];
        p.counters.pause_frames_sent[prio as usize] += 1;
        // The ground truth needs every PFC frame (XOFFs for the spreading tree, XONs for
        // when its pauses ended) even when events are not exported.
        let cause = if quanta > 0 {
            p.ingress_to
                .iter()
                .enumerate()
                .filter(|(_, held)| **held > 0)
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(&a.0)))
                .map(|(local, _)| local as PortNo)
        } else {
            None
        };
        let (node, local) = (p.node, p.local);
        let cause_workload = match (cause, p.owner) {
            (Some(out_local), Owner::Switch(s)) => self.queue_majority_workload(
                self.switches[s as usize].first_port + u32::from(out_local),
            ),
            _ => None,
        };
        self.pfc_log.push(PfcEvent {
            time_ns: self.now / NS,
            node,
            port: local,
            priority: prio,
            quanta,
            cause,
            cause_workload,
        });
        self.packets.alloc(packet)
    }

    /// The workload owning more than half of the bytes queued (all priorities) at egress
    /// `port`, if one does. Ground truth only: runs once per XOFF.
    fn queue_majority_workload(&self, port: u32) -> Option<u32> {
        let p = self.ports.get(port as usize)?;
        let mut bytes: Vec<(usize, u64)> = Vec::new();
        let mut total = 0u64;
        for id in p.queues.iter().flatten() {
            let packet = self.packets.get(*id);
            let size = u64::from(packet.size);
            total += size;
            let Some(flow) = self.flows.get(packet.flow as usize) else {
                continue;
            };
            match bytes.iter_mut().find(|(w, _)| *w == flow.workload) {
                Some((_, b)) => *b += size,
                None => bytes.push((flow.workload, size)),
            }
        }
        bytes
            .into_iter()
            .find(|(_, b)| *b * 2 > total)
            .map(|(w, _)| w as u32)
    }

    fn pause_refresh_interval(&self, port: u32) -> Time {
        self.p.pause_refresh.unwrap_or_else(|| {
            (pause_duration_ps(self.p.pause_quanta, self.ports[port as usize].bps) / 2).max(NS)
        })
    }

    /// Sends XOFF for `prio` out of `port` (toward the upstream sender) and arms the refresh.
    pub(crate) fn send_xoff(&mut self, port: u32, prio: u8) {
        let id = self.make_pfc(port, prio, self.p.pause_quanta);
        let refresh = self.pause_refresh_interval(port);
        let p = &mut self.ports[port as usize];
        p.xoff_sent[prio as usize] = true;
        p.pfc_generation[prio as usize] = p.pfc_generation[prio as usize].wrapping_add(1);
        let generation = p.pfc_generation[prio as usize];
        p.mac_control.push_back(id);
        self.events.schedule(
            self.now + refresh,
            EventKind::PfcRefresh {
                port,
                priority: prio,
                generation,
            },
        );
        self.kick(port);
    }

    fn send_xon(&mut self, port: u32, prio: u8) {
        let id = self.make_pfc(port, prio, 0);
        let p = &mut self.ports[port as usize];
        p.xoff_sent[prio as usize] = false;
        p.pfc_generation[prio as usize] = p.pfc_generation[prio as usize].wrapping_add(1);
        p.mac_control.push_back(id);
        self.kick(port);
    }

    fn on_pfc_refresh(&mut self, port: u32, prio: u8, generation: u32) {
        let p = &self.ports[port as usize];
        if p.pfc_generation[prio as usize] != generation || !p.xoff_sent[prio as usize] {
            return;
        }
        match p.owner {
            Owner::Switch(s) => {
                if self.should_resume_switch(s, port, prio as usize) {
                    self.send_xon(port, prio);
                } else {
                    self.send_xoff(port, prio);
                }
            }
            Owner::Nic(n) => {
                let nic = &self.nics[n as usize];
                let injecting = self.now < nic.inject_until && nic.inject_priority == prio;
                let congested = nic.rx_xoff && nic.rx_buffer > self.p.rx_xon;
                if injecting || congested {
                    self.send_xoff(port, prio);
                } else if nic.rx_xoff {
                    self.nics[n as usize].rx_xoff = false;
                    self.send_xon(port, prio);
                } else {
                    // A storm that ended simply stops refreshing; the pause expires.
                    self.ports[port as usize].xoff_sent[prio as usize] = false;
                }
            }
        }
    }

    fn switch_dequeue(&mut self, port: u32) -> Option<u32> {
        let now = self.now;
        let ctrl = self.p.control_priority as usize;
        loop {
            let p = &mut self.ports[port as usize];
            let prio = if !p.queues[ctrl].is_empty() {
                ctrl
            } else {
                match self.p.scheduler {
                    Scheduler::Rr => {
                        let mut chosen = None;
                        for i in 0..8 {
                            let q = (p.rr_next as usize + i) & 7;
                            if q != ctrl && !p.queues[q].is_empty() && p.paused_until[q] <= now {
                                chosen = Some(q);
                                break;
                            }
                        }
                        let q = chosen?;
                        p.rr_next = ((q + 1) & 7) as u8;
                        q
                    }
                    Scheduler::Dwrr => {
                        let eligible = |p: &Port, q: usize| {
                            q != ctrl && !p.queues[q].is_empty() && p.paused_until[q] <= now
                        };
                        if !(0..8).any(|q| eligible(p, q)) {
                            return None;
                        }
                        let mut chosen = None;
                        for _ in 0..64 * 8 {
                            let q = p.rr_next as usize & 7;
                            if eligible(p, q) {
                                let head = self.packets.get(p.queues[q][0]).size as u64;
                                if p.dwrr_deficit[q] >= head {
                                    p.dwrr_deficit[q] -= head;
                                    chosen = Some(q);
                                    break;
                                }
                                p.dwrr_deficit[q] += self.p.dwrr_quantum[q];
                            } else if p.queues[q].is_empty() {
                                p.dwrr_deficit[q] = 0;
                            }
                            if chosen.is_none() {
                                p.rr_next = ((q + 1) & 7) as u8;
                            }
                        }
                        chosen?
                    }
                }
            };
            let id = p.queues[prio].pop_front()?;
            let size = self.packets.get(id).size as u64;
            p.queue_bytes[prio] -= size;
            p.queued_total -= 1;
            if p.queues[prio].is_empty() {
                p.dwrr_deficit[prio] = 0;
            }
            let in_port = self.packets.get(id).in_port;
            if prio != ctrl && in_port != u32::MAX {
                let out_local = self.ports[port as usize].local as usize;
                self.release_ingress(in_port, out_local, prio, size);
            }
            // ECN marking at dequeue on the instantaneous queue (after removal, as the
            // reference does), linear between Kmin and Kmax up to Pmax.
            if prio != ctrl && self.p.ecn_enabled && self.packets.get(id).ecn != ECN_NOT_ECT {
                let p = &self.ports[port as usize];
                let queued = p.queue_bytes[prio];
                let mark = if queued > p.kmax {
                    true
                } else if queued > p.kmin {
                    let prob = p.pmax * (queued - p.kmin) as f64 / (p.kmax - p.kmin).max(1) as f64;
                    self.rng.next_f64() < prob
                } else {
                    false
                };
                if mark {
                    self.packets.get_mut(id).ecn = ECN_CE;
                    self.ports[port as usize].counters.ecn_marked += 1;
                }
            }
            let Owner::Switch(s) = self.ports[port as usize].owner else {
                return Some(id);
            };
            if self.pipelines[s as usize].is_none() {
                return Some(id);
            }
            let mut actions = EgressActions::default();
            let (meta, ingress_local) = {
                let packet = self.packets.get(id);
                let ingress_local = if packet.in_port == u32::MAX {
                    PortNo::MAX
                } else {
                    self.ports[packet.in_port as usize].local
                };
                (
                    EgressMeta {
                        switch: self.switches[s as usize].node,
                        ingress_port: ingress_local,
                        egress_port: self.ports[port as usize].local,
                        priority: prio as u8,
                        enq_tstamp_ns: (packet.enq_time / NS) & 0xFFFF_FFFF_FFFF,
                        enq_qdepth_bytes: packet.enq_qdepth,
                        deq_timedelta_ns: (now - packet.enq_time) / NS,
                    },
                    ingress_local,
                )
            };
            if let Some(pipeline) = self.pipelines[s as usize].as_mut() {
                pipeline.egress(&meta, self.packets.get_mut(id), &mut actions);
            }
            if actions.to_cpu {
                self.cpu_inbox.push(CpuPacket {
                    time: now,
                    switch: meta.switch,
                    ingress_port: ingress_local,
                    egress_port: Some(meta.egress_port),
                    packet: self.packets.get(id).clone(),
                    payload: actions.cpu_payload.take(),
                });
            }
            if actions.drop {
                self.ports[port as usize].counters.drops_pipeline += 1;
                self.packets.free(id);
                continue;
            }
            return Some(id);
        }
    }

    fn release_ingress(&mut self, in_port: u32, out_local: usize, prio: usize, size: u64) {
        let reserve = self.p.reserve;
        let Owner::Switch(s) = self.ports[in_port as usize].owner else {
            return;
        };
        let p = &mut self.ports[in_port as usize];
        if let Some(held) = p.ingress_to.get_mut(out_local) {
            *held = held.saturating_sub(size);
        }
        let from_headroom = p.headroom_used[prio].min(size);
        let from_shared = (size - from_headroom).min(p.ingress_bytes[prio].saturating_sub(reserve));
        p.headroom_used[prio] -= from_headroom;
        p.ingress_bytes[prio] = p.ingress_bytes[prio].saturating_sub(size - from_headroom);
        self.switches[s as usize].shared_used -= from_shared;
        if self.should_resume_switch(s, in_port, prio) {
            self.send_xon(in_port, prio as u8);
        }
    }

    // ----------------------------------------------------------------------------------
    // NIC: transmit side
    // ----------------------------------------------------------------------------------

    fn nic_dequeue(&mut self, n: u32) -> Option<u32> {
        let now = self.now;
        let port = self.nics[n as usize].port;
        let ctrl = self.p.control_priority as usize;
        if self.ports[port as usize].paused_until[ctrl] <= now {
            if let Some(id) = self.nics[n as usize].control.pop_front() {
                return Some(id);
            }
        }
        loop {
            let nic = &mut self.nics[n as usize];
            let p = &self.ports[port as usize];
            let mut chosen = None;
            for i in 0..8 {
                let q = (nic.rr_next as usize + i) & 7;
                if !nic.ready[q].is_empty() && p.paused_until[q] <= now {
                    chosen = Some(q);
                    break;
                }
            }
            let prio = chosen?;
            nic.rr_next = ((prio + 1) & 7) as u8;
            let flow = nic.ready[prio].pop_front()?;
            let f = &mut self.flows[flow as usize];
            if f.finished_at.is_some() || f.snd_nxt >= f.size {
                f.send_state = SendState::Idle;
                continue;
            }
            return Some(self.build_data_packet(flow));
        }
    }

    fn build_data_packet(&mut self, flow: u32) -> u32 {
        let now = self.now;
        let mtu = self.p.mtu as u64;
        let overhead = ROCE_DATA_OVERHEAD + self.p.wire_overhead;
        let f = &mut self.flows[flow as usize];
        let payload = (f.size - f.snd_nxt).min(mtu) as u32;
        let mut packet = Packet::new(PacketKind::Data);
        packet.priority = f.priority;
        packet.dscp = crate::packet::dscp_for_priority(f.priority);
        packet.ecn = ECN_ECT0;
        packet.src_nic = f.src_nic;
        packet.dst_nic = f.dst_nic;
        packet.tuple = f.tuple;
        packet.flow = flow;
        packet.seq = f.snd_nxt;
        packet.payload = payload;
        packet.size = payload + overhead;
        packet.sent_at = now;
        if f.snd_nxt < f.max_sent {
            f.retransmitted_bytes += payload as u64;
        }
        f.snd_nxt += payload as u64;
        f.max_sent = f.max_sent.max(f.snd_nxt);
        // Rate pacing from the start of this packet (reference: UpdateNextAvail).
        let rate = if f.cc && self.p.cc == CongestionControl::Dcqcn {
            f.dcqcn.rate
        } else {
            f.line_rate
        };
        let gap = (packet.size as f64 * 8e12 / rate) as Time;
        f.next_avail = now + gap;
        f.last_packet_bytes = packet.size;
        let line_gap = (packet.size as f64 * 8e12 / f.line_rate) as Time;
        let more = f.snd_nxt < f.size;
        let prio = f.priority as usize;
        let src_nic = f.src_nic;
        if !f.rto_pending {
            f.rto_pending = true;
            f.last_progress = f.last_progress.max(now);
            self.events
                .schedule(now + self.p.rto, EventKind::RetransmitTimer { flow });
        }
        if let Some(interval) = self.stall_interval {
            if !f.stall_pending {
                f.stall_pending = true;
                self.events
                    .schedule(now + interval, EventKind::StallCheck { flow });
            }
        }
        let f = &mut self.flows[flow as usize];
        if more {
            if f.next_avail <= now + line_gap {
                f.send_state = SendState::InRing;
                self.nics[src_nic as usize].ready[prio].push_back(flow);
            } else {
                self.wait_for_pacing(flow);
            }
        } else {
            f.send_state = SendState::Idle;
        }
        let f = &mut self.flows[flow as usize];
        if f.cc && self.p.cc == CongestionControl::Dcqcn {
            let line = f.line_rate;
            let old = f.dcqcn.rate;
            if f.dcqcn
                .on_bytes_sent(packet.size as u64, line, &self.p.dcqcn)
            {
                self.rate_changed(flow, old);
            }
        }
        self.packets.alloc(packet)
    }

    /// Puts a flow that has data to (re)send into its NIC's scheduling.
    fn make_eligible(&mut self, flow: u32) {
        let now = self.now;
        let f = &mut self.flows[flow as usize];
        if f.finished_at.is_some() || f.snd_nxt >= f.size || f.send_state == SendState::InRing {
            return;
        }
        if f.next_avail <= now {
            f.send_state = SendState::InRing;
            let nic = f.src_nic;
            let prio = f.priority as usize;
            self.nics[nic as usize].ready[prio].push_back(flow);
            let port = self.nics[nic as usize].port;
            self.kick(port);
        } else {
            self.wait_for_pacing(flow);
        }
    }

    /// Parks a flow until its pacing time `next_avail`. At most one wake-up event per flow
    /// is useful: an event that fires early re-arms itself for the (later) current time.
    fn wait_for_pacing(&mut self, flow: u32) {
        let f = &mut self.flows[flow as usize];
        f.send_state = SendState::Waiting;
        f.wake_at = f.next_avail;
        match f.wake_event_at {
            Some(pending) if pending <= f.wake_at => {}
            _ => {
                f.wake_event_at = Some(f.wake_at);
                self.events.schedule(f.wake_at, EventKind::QpReady { flow });
            }
        }
    }

    fn on_qp_ready(&mut self, flow: u32) {
        let now = self.now;
        let f = &mut self.flows[flow as usize];
        if f.wake_event_at != Some(now) {
            return; // superseded by an earlier wake-up
        }
        f.wake_event_at = None;
        if f.send_state != SendState::Waiting {
            return;
        }
        if now < f.wake_at {
            f.wake_event_at = Some(f.wake_at);
            let at = f.wake_at;
            self.events.schedule(at, EventKind::QpReady { flow });
            return;
        }
        f.send_state = SendState::Idle;
        f.next_avail = f.next_avail.min(now);
        self.make_eligible(flow);
    }

    fn on_flow_start(&mut self, flow: u32) {
        let f = &mut self.flows[flow as usize];
        f.start = Some(self.now);
        f.last_progress = self.now;
        f.next_avail = self.now;
        self.make_eligible(flow);
    }

    /// Applies a DCQCN rate change to the pacing of a waiting QP (reference: ChangeRate).
    fn rate_changed(&mut self, flow: u32, old_rate: f64) {
        let f = &mut self.flows[flow as usize];
        let new_rate = f.dcqcn.rate;
        if new_rate == old_rate || f.last_packet_bytes == 0 {
            return;
        }
        let bits = f.last_packet_bytes as f64 * 8e12;
        let old_gap = (bits / old_rate) as i128;
        let new_gap = (bits / new_rate) as i128;
        let adjusted = (f.next_avail as i128 + new_gap - old_gap).max(0) as Time;
        f.next_avail = adjusted;
        if f.send_state == SendState::Waiting && f.wake_at != adjusted {
            f.send_state = SendState::Idle;
            self.make_eligible(flow);
        }
    }

    fn apply_dcqcn_effect(&mut self, flow: u32, effect: DcqcnEffect) {
        if let Some(at) = effect.decrease_at {
            self.events.schedule(at, EventKind::DcqcnDecrease { flow });
        }
        if let Some((at, generation)) = effect.increase_at {
            // One pending timer event per flow: a restarted timer only moves the deadline.
            let f = &mut self.flows[flow as usize];
            f.increase_deadline = (at, generation);
            if f.increase_event_at.is_none_or(|pending| pending > at) {
                f.increase_event_at = Some(at);
                self.events
                    .schedule(at, EventKind::DcqcnIncrease { flow, generation });
            }
        }
        if let Some(old) = effect.old_rate {
            self.rate_changed(flow, old);
        }
    }

    fn on_dcqcn_decrease(&mut self, flow: u32) {
        let f = &mut self.flows[flow as usize];
        if f.finished_at.is_some() {
            return;
        }
        let effect = f
            .dcqcn
            .on_decrease_check(self.now, f.line_rate, &self.p.dcqcn);
        self.apply_dcqcn_effect(flow, effect);
    }

    fn on_dcqcn_increase(&mut self, flow: u32, _generation: u32) {
        let now = self.now;
        let f = &mut self.flows[flow as usize];
        if f.increase_event_at != Some(now) {
            return;
        }
        f.increase_event_at = None;
        if f.finished_at.is_some() {
            return;
        }
        let (deadline, generation) = f.increase_deadline;
        if now < deadline {
            f.increase_event_at = Some(deadline);
            self.events
                .schedule(deadline, EventKind::DcqcnIncrease { flow, generation });
            return;
        }
        let (effect, _) =
            f.dcqcn
                .on_increase_timer(self.now, generation, f.line_rate, &self.p.dcqcn);
        self.apply_dcqcn_effect(flow, effect);
    }

    fn on_retransmit_timer(&mut self, flow: u32) {
        let now = self.now;
        let rto = self.p.rto;
        let f = &mut self.flows[flow as usize];
        f.rto_pending = false;
        // Nothing to do once finished or when everything sent has been acknowledged.
        if f.finished_at.is_some() || f.snd_una >= f.max_sent {
            return;
        }
        if now >= f.last_progress + rto {
            f.timeouts += 1;
            f.snd_nxt = f.snd_una;
            f.last_progress = now;
            f.rto_pending = true;
            self.events
                .schedule(now + rto, EventKind::RetransmitTimer { flow });
            self.make_eligible(flow);
        } else {
            f.rto_pending = true;
            let at = f.last_progress + rto;
            self.events
                .schedule(at, EventKind::RetransmitTimer { flow });
        }
    }

    /// Tells the host hook about a flow whose data has been unacknowledged for the stall
    /// interval; re-arms while data is outstanding.
    fn on_stall_check(&mut self, flow: u32) {
        let now = self.now;
        let Some(interval) = self.stall_interval else {
            return;
        };
        let f = &mut self.flows[flow as usize];
        f.stall_pending = false;
        if f.finished_at.is_some() || f.snd_una >= f.max_sent {
            return;
        }
        f.stall_pending = true;
        let stuck_since = f.last_progress;
        if now < stuck_since + interval {
            self.events
                .schedule(stuck_since + interval, EventKind::StallCheck { flow });
            return;
        }
        self.events
            .schedule(now + interval, EventKind::StallCheck { flow });
        let sample = RttSample {
            host: self.nics[f.src_nic as usize].host,
            src_nic: f.src_nic,
            dst_nic: f.dst_nic,
            flow,
            tuple: f.tuple,
            acked: f.snd_una,
            sent_at: stuck_since,
            now,
            base_rtt: f.base_rtt,
        };
        if let Some(hook) = self.host_hook.as_mut() {
            hook.on_stall(&sample, &mut self.emit_buffer);
            if !self.emit_buffer.is_empty() {
                let emits = std::mem::take(&mut self.emit_buffer);
                for emit in emits {
                    self.send_custom(emit);
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------
    // NIC: receive side
    // ----------------------------------------------------------------------------------

    fn nic_receive(&mut self, n: u32, id: u32) {
        let nic = &mut self.nics[n as usize];
        if let Some(bps) = nic.drain_bps {
            // Slow receiver: packets wait in the NIC receive buffer and drain at `bps`.
            let size = self.packets.get(id).size;
            nic.rx_buffer += size as u64;
            let start = nic.rx_busy_until.max(self.now);
            nic.rx_busy_until = start + serialization(size, bps);
            let done = nic.rx_busy_until;
            let port = nic.port;
            let over = nic.rx_buffer > self.p.rx_xoff && !nic.rx_xoff;
            self.events
                .schedule(done, EventKind::NicRxDrain { port, packet: id });
            if over {
                let prio = self.packets.get(id).priority;
                if prio != self.p.control_priority {
                    self.nics[n as usize].rx_xoff = true;
                    self.nics[n as usize].rx_xoff_priority = prio;
                    self.send_xoff(port, prio);
                }
            }
            return;
        }
        if self.nics[n as usize].rx_buffer > 0 {
            // Still draining after the slow period: keep order.
            let nic = &mut self.nics[n as usize];
            let size = self.packets.get(id).size as u64;
            nic.rx_buffer += size;
            let done = nic.rx_busy_until.max(self.now);
            let port = nic.port;
            self.events
                .schedule(done, EventKind::NicRxDrain { port, packet: id });
            return;
        }
        self.nic_process(n, id);
    }

    fn on_nic_rx_drained(&mut self, port: u32, id: u32) {
        let Owner::Nic(n) = self.ports[port as usize].owner else {
            self.packets.free(id);
            return;
        };
        let size = self.packets.get(id).size as u64;
        let nic = &mut self.nics[n as usize];
        nic.rx_buffer = nic.rx_buffer.saturating_sub(size);
        if nic.rx_xoff && nic.rx_buffer <= self.p.rx_xon {
            nic.rx_xoff = false;
            let prio = nic.rx_xoff_priority;
            if self.ports[port as usize].xoff_sent[prio as usize] {
                self.send_xon(port, prio);
            }
        }
        self.nic_process(n, id);
    }

    fn nic_process(&mut self, n: u32, id: u32) {
        let kind = self.packets.get(id).kind;
        match kind {
            PacketKind::Data => self.receive_data(n, id),
            PacketKind::Ack | PacketKind::Nack => self.receive_ack(id),
            PacketKind::Cnp => self.receive_cnp(id),
            PacketKind::Custom => {
                let host = self.nics[n as usize].host;
                if let Some(hook) = self.host_hook.as_mut() {
                    hook.on_custom_packet(host, self.packets.get(id), self.now);
                }
            }
            PacketKind::Pfc => {}
        }
        self.packets.free(id);
    }

    fn control_packet(&self, kind: PacketKind, flow: u32, size: u32) -> Packet {
        let f = &self.flows[flow as usize];
        let mut packet = Packet::new(kind);
        packet.priority = if kind == PacketKind::Cnp {
            self.p.cnp_priority
        } else {
            self.p.control_priority
        };
        packet.dscp = crate::packet::dscp_for_priority(packet.priority);
        packet.src_nic = f.dst_nic;
        packet.dst_nic = f.src_nic;
        packet.tuple = FiveTuple {
            src_ip: f.tuple.dst_ip,
            dst_ip: f.tuple.src_ip,
            src_port: f.tuple.dst_port,
            dst_port: f.tuple.src_port,
            protocol: 17,
        };
        packet.flow = flow;
        packet.size = size + self.p.wire_overhead;
        packet
    }

    fn send_from_nic(&mut self, nic: u32, packet: Packet) {
        let id = self.packets.alloc(packet);
        let n = &mut self.nics[nic as usize];
        n.control.push_back(id);
        let port = n.port;
        self.kick(port);
    }

    fn receive_data(&mut self, n: u32, id: u32) {
        let now = self.now;
        let (flow, seq, payload, ce, sent_at) = {
            let packet = self.packets.get(id);
            (
                packet.flow,
                packet.seq,
                packet.payload as u64,
                packet.ecn == ECN_CE,
                packet.sent_at,
            )
        };
        if flow as usize >= self.flows.len() || self.flows[flow as usize].dst_nic != n {
            return;
        }
        if ce {
            let gap = self.p.dcqcn.min_time_between_cnps;
            let f = &mut self.flows[flow as usize];
            f.ce_received += 1;
            let due = match f.last_cnp {
                None => true,
                Some(last) => now >= last + gap,
            };
            if due {
                f.last_cnp = Some(now);
                f.cnps_sent += 1;
                let packet = self.control_packet(PacketKind::Cnp, flow, ROCE_CNP_BYTES);
                self.send_from_nic(n, packet);
            }
        }
        let ack_every = self.p.ack_every;
        let nack_interval = self.p.nack_interval;
        let f = &mut self.flows[flow as usize];
        let reply = if seq == f.rcv_expected {
            f.rcv_expected += payload;
            self.delivered_bytes += payload;
            f.rcv_unacked_packets += 1;
            if f.rcv_unacked_packets >= ack_every || f.rcv_expected >= f.size {
                f.rcv_unacked_packets = 0;
                Some(PacketKind::Ack)
            } else {
                None
            }
        } else if seq > f.rcv_expected {
            if now >= f.nack_timer || f.last_nack != f.rcv_expected {
                f.nack_timer = now + nack_interval;
                f.last_nack = f.rcv_expected;
                Some(PacketKind::Nack)
            } else {
                None
            }
        } else {
            // Duplicate (after go-back-N or a lost ACK): re-acknowledge.
            Some(PacketKind::Ack)
        };
        if let Some(kind) = reply {
            let expected = self.flows[flow as usize].rcv_expected;
            let mut packet = self.control_packet(kind, flow, ROCE_ACK_BYTES);
            packet.seq = expected;
            packet.sent_at = sent_at;
            self.send_from_nic(n, packet);
        }
    }

    fn receive_ack(&mut self, id: u32) {
        let now = self.now;
        let (flow, seq, kind, sent_at) = {
            let packet = self.packets.get(id);
            (packet.flow, packet.seq, packet.kind, packet.sent_at)
        };
        let Some(f) = self.flows.get_mut(flow as usize) else {
            return;
        };
        if f.finished_at.is_some() {
            return;
        }
        if seq > f.snd_una {
            f.snd_una = seq.min(f.size);
            f.last_progress = now;
        }
        if kind == PacketKind::Nack {
            // Go-back-N: resend from the first unacknowledged byte.
            f.snd_nxt = f.snd_una;
        }
        let sample = (kind == PacketKind::Ack).then(|| RttSample {
            host: self.nics[f.src_nic as usize].host,
            src_nic: f.src_nic,
            dst_nic: f.dst_nic,
            flow,
            tuple: f.tuple,
            acked: f.snd_una,
            sent_at,
            now,
            base_rtt: f.base_rtt,
        });
        if f.snd_una >= f.size {
            f.finished_at = Some(now);
            self.on_flow_finished(flow);
        } else if kind == PacketKind::Nack {
            self.make_eligible(flow);
        }
        if let (Some(sample), Some(hook)) = (sample, self.host_hook.as_mut()) {
            hook.on_rtt_sample(&sample, &mut self.emit_buffer);
            if !self.emit_buffer.is_empty() {
                let emits = std::mem::take(&mut self.emit_buffer);
                for emit in emits {
                    self.send_custom(emit);
                }
            }
        }
    }

    /// Sends a packet built by a host hook.
    pub(crate) fn send_custom(&mut self, emit: HostEmit) {
        if emit.src_nic as usize >= self.nics.len() || emit.dst_nic as usize >= self.nics.len() {
            return;
        }
        let mut packet = Packet::new(PacketKind::Custom);
        packet.priority = emit.priority & 7;
        packet.dscp = crate::packet::dscp_for_priority(packet.priority);
        packet.src_nic = emit.src_nic;
        packet.dst_nic = emit.dst_nic;
        packet.tuple = emit.tuple;
        let len = emit.custom.len().min(CUSTOM_CAPACITY);
        packet.custom[..len].copy_from_slice(&emit.custom[..len]);
        packet.custom_len = len as u8;
        packet.size = (CUSTOM_OVERHEAD + len as u32).max(64) + self.p.wire_overhead;
        self.send_from_nic(emit.src_nic, packet);
    }

    fn receive_cnp(&mut self, id: u32) {
        let flow = self.packets.get(id).flow;
        let Some(f) = self.flows.get_mut(flow as usize) else {
            return;
        };
        if f.finished_at.is_some() || !f.cc || self.p.cc != CongestionControl::Dcqcn {
            return;
        }
        let effect = f.dcqcn.on_cnp(self.now, &self.p.dcqcn);
        self.apply_dcqcn_effect(flow, effect);
    }

    fn on_flow_finished(&mut self, flow: u32) {
        let (workload, round) = {
            let f = &self.flows[flow as usize];
            (f.workload, f.round)
        };
        let Some(remaining) = self
            .round_remaining
            .get_mut(workload)
            .and_then(|r| r.get_mut(round as usize))
        else {
            return;
        };
        *remaining = remaining.saturating_sub(1);
        if *remaining == 0 {
            let next = round as usize + 1;
            if let Some(flows) = self.round_flows[workload].get(next).cloned() {
                let at = self.now + self.round_off[workload];
                for flow in flows {
                    self.events.schedule(at, EventKind::FlowStart { flow });
                }
            }
        }
    }

    // ----------------------------------------------------------------------------------
    // Faults and sampling
    // ----------------------------------------------------------------------------------

    fn on_fault(&mut self, action: u32) {
        let Some(action) = self.fault_actions.get(action as usize).cloned() else {
            return;
        };
        match action {
            FaultAction::InjectStart {
                nic,
                priority,
                until,
            } => {
                let n = &mut self.nics[nic as usize];
                n.inject_until = until;
                n.inject_priority = priority;
                let port = n.port;
                self.send_xoff(port, priority);
            }
            FaultAction::SlowStart { nic, bps } => {
                self.nics[nic as usize].drain_bps = Some(bps);
            }
            FaultAction::SlowEnd { nic } => {
                self.nics[nic as usize].drain_bps = None;
            }
            FaultAction::LinkDown { ports } => {
                for port in ports {
                    self.ports[port as usize].link_up = false;
                }
            }
            FaultAction::LinkUp { ports } => {
                for port in ports {
                    self.ports[port as usize].link_up = true;
                    self.kick(port);
                }
            }
            FaultAction::Reroute => self.recompute_routes(),
            FaultAction::InstallRoute {
                switch,
                dst_nic,
                ports,
            } => {
                self.routes.set(switch, dst_nic, &ports);
                self.route_overrides.push((switch, dst_nic, ports));
            }
        }
    }

    /// Recomputes shortest-path routes over the links that are up, then re-applies static
    /// overrides.
    pub(crate) fn recompute_routes(&mut self) {
        let graph = self.routing_graph();
        self.routes = RoutingTable::shortest_paths(&graph);
        for (switch, nic, ports) in &self.route_overrides {
            self.routes.set(*switch, *nic, ports);
        }
    }

    pub(crate) fn routing_graph(&self) -> RoutingGraph {
        let mut switch_links = vec![Vec::new(); self.switches.len()];
        let mut nic_attach = vec![None; self.nics.len()];
        for (s, sw) in self.switches.iter().enumerate() {
            for global in sw.first_port..sw.first_port + sw.port_count {
                let port = &self.ports[global as usize];
                if !port.link_up {
                    continue;
                }
                match self.ports[port.peer as usize].owner {
                    Owner::Switch(other) => switch_links[s].push((port.local, other)),
                    Owner::Nic(n) => nic_attach[n as usize] = Some((s as u32, port.local)),
                }
            }
        }
        RoutingGraph {
            switch_links,
            nic_attach,
        }
    }

    fn on_sample(&mut self) {
        let time_ns = self.now / NS;
        for sw in &self.switches {
            for global in sw.first_port..sw.first_port + sw.port_count {
                let port = &self.ports[global as usize];
                if port.queued_total == 0 {
                    continue;
                }
                for (prio, bytes) in port.queue_bytes.iter().enumerate() {
                    if *bytes > 0 {
                        self.queue_samples.push(QueueSample {
                            time_ns,
                            node: sw.node,
                            port: port.local,
                            priority: prio as u8,
                            bytes: *bytes,
                        });
                    }
                }
            }
        }
        self.goodput.push((self.now, self.delivered_bytes));
        if self.p.sample_interval > 0 {
            let next = self.now + self.p.sample_interval;
            if next <= self.p.end {
                self.events.schedule(next, EventKind::Sample);
            }
        }
    }
}
