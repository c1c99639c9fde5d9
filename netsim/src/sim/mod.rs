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
//!
//! This file holds the state (ports, switches, NICs, flows), the public API, the event loop
//! and the transmission common to switch and NIC ports (MAC, PFC reception). The handlers
//! live by concern in `switch.rs` (ingress, admission, PFC, ECN, scheduling), `nic.rs`
//! (send/receive, go-back-N, CNPs, DCQCN hooks), `faults.rs` (fault actions, rerouting) and
//! `sampling.rs` (periodic queue and goodput samples), each an `impl Simulation` block.

use crate::dcqcn::{DcqcnParams, DcqcnState};
use crate::event::{EventKind, EventQueue};
use crate::hooks::{CpuPacket, HostEmit, HostHook, SwitchPipeline};
use crate::packet::{FiveTuple, Packet, PacketKind, PacketPool};
use crate::rng::Rng;
use crate::routing::RoutingTable;
use crate::scenario::{CongestionControl, Scheduler};
use crate::time::{serialization, Time, NS};
use hawkmesh_wire::pfc::pause_duration_ps;
use hawkmesh_wire::topology::{FabricTopology, NodeId, PortNo};
use std::collections::VecDeque;

mod faults;
mod knobs;
mod nic;
mod sampling;
mod switch;

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
    /// Packets transmitted per 802.1p priority, PFC frames (MAC control) left out: what a
    /// PFC watchdog checks a paused queue against (SONiC pfcwd HLD: paused and not
    /// transmitting), like mlx5's `tx_prioN_packets` or a switch queue's packet counter.
    pub tx_packets_prio: [u64; 8],
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
    /// Packets dropped by an ACL fault (their UDP source port).
    pub drops_acl: u64,
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
    /// Time this port had packets queued but sent nothing because every priority holding
    /// them was paused, ns: the PortXmitWait of InfiniBand (IBA 16.1.3.5: ticks with data
    /// to send and none sent for lack of credits), PFC's pause in the credits' place.
    pub xmit_wait_ns: u64,
    /// Packets ECN-marked (CE) at this egress.
    pub ecn_marked: u64,
    /// Largest egress queue occupancy seen, bytes (all priorities).
    pub max_queue_bytes: u64,
}

/// A flow as its sending host posts it ([`Simulation::flow_posting`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowPosting {
    /// Sending host.
    pub host: NodeId,
    /// Sending NIC (netsim's NIC index, as in [`HostEmit`]).
    pub src_nic: u32,
    /// Receiving NIC.
    pub dst_nic: u32,
    /// Its 5-tuple.
    pub tuple: FiveTuple,
    /// When its work was posted, ns (`None`: not yet, e.g. a later all-to-all round).
    pub start_ns: Option<u64>,
    /// Base RTT of its path, ns.
    pub base_rtt_ns: u64,
    /// How long the sending NIC has been paused by PFC on the flow's priority so far, ns
    /// (the NIC's pause-duration counter).
    pub src_pause_ns: u64,
    /// Its size, bytes (done once that many are delivered, [`Simulation::flow_delivered`]).
    pub size: u64,
    /// Its 802.1p priority.
    pub priority: u8,
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
    /// Bytes queued here by workload (all priorities; the packets of a flow): whose queue
    /// an XOFF is for, without a scan of the queue (ground truth). Entries stay at 0.
    pub workload_bytes: Vec<(usize, u64)>,
    pub queued_total: u64,
    pub rr_next: u8,
    pub dwrr_deficit: [u64; 8],
    pub paused_from: [Time; 8],
    pub paused_until: [Time; 8],
    pub pause_total: [Time; 8],
    /// Since when the port has waited with packets queued behind pauses (none: not now).
    pub wait_from: Option<Time>,
    /// Closed waits, summed.
    pub wait_total: Time,
    pub link_up: bool,
    pub loss_rate: f64,
    /// Packets with a UDP source port in this range are dropped here (an ACL fault).
    pub acl_drop: Option<(u16, u16)>,
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

impl Port {
    /// The counters at `at`, with the pauses and the wait still open counted up to it.
    pub(crate) fn counters_at(&self, at: Time) -> PortCounters {
        let mut counters = self.counters.clone();
        for prio in 0..8 {
            let open = self.paused_until[prio]
                .min(at)
                .saturating_sub(self.paused_from[prio]);
            counters.pause_duration_ns[prio] = (self.pause_total[prio] + open) / NS;
        }
        let open = self.wait_from.map_or(0, |from| at.saturating_sub(from));
        counters.xmit_wait_ns = (self.wait_total + open) / NS;
        counters
    }
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
    /// ACKs and NACKs travel on the flow's data priority instead of the control priority.
    pub ack_on_data_priority: bool,
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

/// Items parked until an event names their slot (a free list keeps insertion O(1)).
#[derive(Debug)]
pub(crate) struct Slots<T> {
    items: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slots<T> {
    /// Parks `item`; returns its slot.
    pub(crate) fn insert(&mut self, item: T) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.items[slot as usize] = Some(item);
                slot
            }
            None => {
                self.items.push(Some(item));
                (self.items.len() - 1) as u32
            }
        }
    }

    /// Takes the item of `slot` (once).
    pub(crate) fn take(&mut self, slot: u32) -> Option<T> {
        let item = self.items.get_mut(slot as usize)?.take();
        if item.is_some() {
            self.free.push(slot);
        }
        item
    }
}

/// The simulator.
pub struct Simulation {
    pub(crate) now: Time,
    pub(crate) events: EventQueue,
    pub(crate) rng: Rng,
    pub(crate) p: Params,
    /// The NICs' DCQCN knobs in force, as the scenario writes them (`set_knobs` changes
    /// them).
    pub(crate) dcqcn_config: crate::scenario::DcqcnConfig,
    /// Knob changes made while running.
    pub(crate) knob_changes: u64,
    pub(crate) topo: FabricTopology,
    /// Warnings about the scenario's inputs, from building it.
    pub(crate) warnings: Vec<crate::fabric::Warning>,
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
    pub(crate) wakeup_interval: Option<Time>,
    pub(crate) emit_buffer: Vec<HostEmit>,
    /// Host hooks' sends waiting for their time.
    pub(crate) deferred_sends: Slots<HostEmit>,
    /// Custom packets in a NIC queue whose send completion a hook asked for: packet id →
    /// (host, token).
    pub(crate) tx_tokens: std::collections::HashMap<u32, (NodeId, u64)>,
    /// Send completions scheduled and not yet reported.
    pub(crate) tx_done: Slots<(NodeId, u64)>,
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
    /// Ground truth: per workload, whether it is a labelled incast whose queues are tracked
    /// (empty when the scenario labels none, so unlabelled runs skip the tracking).
    pub(crate) watched_workloads: Vec<bool>,
    /// Ground truth: per switch egress port, (workload, bytes queued now, peak) of each
    /// watched incast that queued there.
    pub(crate) incast_queues: Vec<Vec<(u32, u64, u64)>>,
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

    /// Flow `flow` as the host that sends it knows it: when its work was posted (`None`: an
    /// all-to-all round not started yet), its NICs and 5-tuple, its base RTT.
    pub fn flow_posting(&self, flow: u32) -> Option<FlowPosting> {
        let f = self.flows.get(flow as usize)?;
        Some(FlowPosting {
            host: self.nics.get(f.src_nic as usize)?.host,
            src_nic: f.src_nic,
            dst_nic: f.dst_nic,
            tuple: f.tuple,
            start_ns: f.start.map(|t| t / crate::time::NS),
            base_rtt_ns: f.base_rtt / crate::time::NS,
            src_pause_ns: self.nic_pause(f.src_nic, f.priority) / crate::time::NS,
            size: f.size,
            priority: f.priority,
        })
    }

    /// How long NIC `nic` has been paused by PFC on `priority`, in total up to now (the
    /// pause still in force counted to now).
    pub(crate) fn nic_pause(&self, nic: u32, priority: u8) -> Time {
        let Some(port) = self
            .nics
            .get(nic as usize)
            .and_then(|n| self.ports.get(n.port as usize))
        else {
            return 0;
        };
        let prio = priority as usize & 7;
        let open = port.paused_until[prio]
            .min(self.now)
            .saturating_sub(port.paused_from[prio]);
        port.pause_total[prio] + open
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

    /// Warnings about the scenario's inputs found while building it (e.g. ignored lines of
    /// an HPCC topology file); callers print them.
    pub fn warnings(&self) -> &[crate::fabric::Warning] {
        &self.warnings
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
        let wakeup = hook.wakeup_interval().filter(|t| *t > 0);
        if wakeup.is_some() && self.wakeup_interval.is_none() {
            self.events.schedule(self.now, EventKind::HostWakeup);
        }
        self.wakeup_interval = wakeup;
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

    /// A port's counters as read now (pause durations and the transmit wait include the
    /// pause or wait still running), like a device's counters read mid-run; `None` for a
    /// port the fabric does not have.
    pub fn port_counters(&self, node: NodeId, port: PortNo) -> Option<PortCounters> {
        let first = *self.node_first_port.get(node as usize)?;
        let index = first.checked_add(u32::from(port))?;
        let p = self.ports.get(index as usize)?;
        if p.node != node {
            return None;
        }
        Some(p.counters_at(self.now))
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
            EventKind::HostWakeup => self.on_host_wakeup(),
            EventKind::HostSend { slot } => {
                if let Some(emit) = self.deferred_sends.take(slot) {
                    self.send_custom(emit);
                }
            }
            EventKind::HostTxDone { slot } => self.on_host_tx_done(slot),
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
                    if p.wait_from.is_none() {
                        p.wait_from = Some(now);
                    }
                    self.wake_port_at(port, wake);
                }
            }
            return;
        };
        {
            let p = &mut self.ports[port as usize];
            if let Some(from) = p.wait_from.take() {
                p.wait_total += now - from;
            }
        }
        let (size, kind) = {
            let packet = self.packets.get(id);
            (packet.size, packet.kind)
        };
        let tx_end = now + serialization(size, self.ports[port as usize].bps);
        if kind == PacketKind::Custom && !self.tx_tokens.is_empty() {
            if let Some(token) = self.tx_tokens.remove(&id) {
                self.schedule_tx_done(tx_end, token);
            }
        }
        let p = &mut self.ports[port as usize];
        p.busy_until = tx_end;
        p.counters.tx_bytes += size as u64;
        p.counters.tx_packets += 1;
        if kind != PacketKind::Pfc {
            p.counters.tx_packets_prio[usize::from(self.packets.get(id).priority & 7)] += 1;
        }
        let lost = if !p.link_up {
            p.counters.drops_link_down += 1;
            true
        } else if p.loss_rate > 0.0 && kind != PacketKind::Pfc && self.rng.next_f64() < p.loss_rate
        {
            p.counters.drops_random_loss += 1;
            true
        } else if p.acl_drop.is_some_and(|(lo, hi)| {
            kind != PacketKind::Pfc && (lo..=hi).contains(&self.packets.get(id).tuple.src_port)
        }) {
            p.counters.drops_acl += 1;
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
}
