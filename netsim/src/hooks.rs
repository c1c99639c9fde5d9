//! Extension points: the switch pipeline hook (where the generated data-plane model plugs
//! in), the switch CPU port, and the host hook (RTT-triggered agents).
//!
//! The metadata mirrors what a Tofino pipeline sees (TNA intrinsic metadata): ingress MAC
//! timestamp and port at ingress; enqueue timestamp, enqueue queue depth and dequeue time
//! delta at egress. Times are nanoseconds, truncated to 48 bits like Tofino's global
//! timestamp.

use crate::packet::{FiveTuple, Packet};
use crate::time::Time;
use hawkmesh_wire::topology::{NodeId, PortNo};

/// A set of switch ports (up to 256), for multicast / replication decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortSet {
    bits: [u64; 4],
}

impl PortSet {
    /// Adds a port (ports ≥ 256 are ignored and reported by [`PortSet::insert`]'s result).
    pub fn insert(&mut self, port: PortNo) -> bool {
        if port >= 256 {
            return false;
        }
        self.bits[port as usize / 64] |= 1 << (port % 64);
        true
    }
    /// Whether `port` is in the set.
    pub fn contains(&self, port: PortNo) -> bool {
        port < 256 && self.bits[port as usize / 64] & (1 << (port % 64)) != 0
    }
    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|b| *b == 0)
    }
    /// The ports in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = PortNo> + '_ {
        (0..256u16).filter(move |p| self.contains(*p))
    }
}

/// Intrinsic metadata at ingress.
#[derive(Clone, Copy, Debug)]
pub struct IngressMeta {
    /// The switch.
    pub switch: NodeId,
    /// Port the packet arrived on.
    pub ingress_port: PortNo,
    /// Arrival time, ns (48-bit).
    pub ingress_tstamp_ns: u64,
    /// The egress port the fabric's routing (ECMP) chose; `None` when there is no route
    /// (and for PFC frames, which are consumed).
    pub routed_egress_port: Option<PortNo>,
    /// Wire bytes.
    pub packet_bytes: u32,
}

/// What the ingress pipeline decided.
#[derive(Clone, Debug, Default)]
pub struct IngressActions {
    /// Drop the packet (the CPU copy, if any, is still made).
    pub drop: bool,
    /// Send to this port instead of the routed one.
    pub egress_override: Option<PortNo>,
    /// Replicate to these ports (in addition to, or with `drop`, instead of unicast).
    pub multicast: PortSet,
    /// Send a copy to the switch CPU port.
    pub to_cpu: bool,
    /// What the CPU copy carries when it differs from the packet (e.g. a polling copy with
    /// its port context); `None` copies the packet as is.
    pub cpu_payload: Option<Vec<u8>>,
}

/// Intrinsic metadata at egress (after the traffic manager).
#[derive(Clone, Copy, Debug)]
pub struct EgressMeta {
    /// The switch.
    pub switch: NodeId,
    /// Port the packet entered through.
    pub ingress_port: PortNo,
    /// Port it leaves through.
    pub egress_port: PortNo,
    /// Queue (priority).
    pub priority: u8,
    /// Enqueue time, ns (48-bit).
    pub enq_tstamp_ns: u64,
    /// Queue depth at enqueue, bytes.
    pub enq_qdepth_bytes: u32,
    /// Time spent queued, ns.
    pub deq_timedelta_ns: u64,
}

/// What the egress pipeline decided.
#[derive(Clone, Debug, Default)]
pub struct EgressActions {
    /// Drop instead of transmitting.
    pub drop: bool,
    /// Send a copy to the switch CPU port.
    pub to_cpu: bool,
    /// What the CPU copy carries (e.g. an eviction report); `None` copies the packet.
    pub cpu_payload: Option<Vec<u8>>,
}

/// A switch data-plane program running inside netsim (the codegen model implements this).
pub trait SwitchPipeline {
    /// Called for every packet arriving on a front-panel port, including PFC frames (which
    /// the MAC has already applied and which are consumed whatever the pipeline decides).
    fn ingress(&mut self, meta: &IngressMeta, packet: &mut Packet, actions: &mut IngressActions);
    /// Called when a packet leaves its egress queue.
    fn egress(&mut self, meta: &EgressMeta, packet: &mut Packet, actions: &mut EgressActions);
}

/// A packet delivered to a switch CPU port.
#[derive(Clone, Debug)]
pub struct CpuPacket {
    /// When it reached the CPU port.
    pub time: Time,
    /// The switch.
    pub switch: NodeId,
    /// Port it entered the switch through.
    pub ingress_port: PortNo,
    /// Egress port it was headed to (if decided).
    pub egress_port: Option<PortNo>,
    /// The packet (copy).
    pub packet: Packet,
    /// The bytes the pipeline put in the CPU copy, when it chose them.
    pub payload: Option<Vec<u8>>,
}

/// One RTT sample: the ACK of a data packet came back.
#[derive(Clone, Copy, Debug)]
pub struct RttSample {
    /// The sending host.
    pub host: NodeId,
    /// The sending NIC (endpoint index; use as `HostEmit::src_nic`).
    pub src_nic: u32,
    /// The receiving NIC (endpoint index).
    pub dst_nic: u32,
    /// Flow index.
    pub flow: u32,
    /// The flow's 5-tuple.
    pub tuple: FiveTuple,
    /// Cumulative bytes acknowledged.
    pub acked: u64,
    /// When the acknowledged packet was sent.
    pub sent_at: Time,
    /// When the ACK arrived.
    pub now: Time,
    /// Unloaded RTT of this flow's path (propagation + serialization).
    pub base_rtt: Time,
    /// How long the sending NIC has been paused by PFC on the flow's priority, in total up
    /// to `now` (what a ConnectX NIC counts as `rx_prio{N}_pause_duration`): growth between
    /// two samples means the sender itself was held.
    pub src_pause: Time,
}

/// A packet a host hook wants to send.
#[derive(Clone, Debug)]
pub struct HostEmit {
    /// The sending NIC (endpoint index).
    pub src_nic: u32,
    /// The destination NIC (endpoint index).
    pub dst_nic: u32,
    /// 5-tuple to put in the headers (e.g. a victim flow's, so ECMP follows its path).
    pub tuple: FiveTuple,
    /// Priority (usually the control priority).
    pub priority: u8,
    /// Custom header bytes.
    pub custom: Vec<u8>,
    /// Send no earlier than this time (a host CPU that takes a while before it posts the
    /// packet); at or before now sends at once.
    pub not_before: Time,
    /// Report the packet's send completion (its last bit left the NIC, a send CQE's
    /// timestamp) to [`HostHook::on_custom_sent`] with this token.
    pub tx_token: Option<u64>,
}

impl HostEmit {
    /// A packet sent at once, without a send completion.
    pub fn now(
        src_nic: u32,
        dst_nic: u32,
        tuple: FiveTuple,
        priority: u8,
        custom: Vec<u8>,
    ) -> Self {
        HostEmit {
            src_nic,
            dst_nic,
            tuple,
            priority,
            custom,
            not_before: 0,
            tx_token: None,
        }
    }
}

/// Host-side agent logic running inside netsim (the RTT-triggered polling agent).
pub trait HostHook {
    /// Called for every ACK that carries an RTT sample. Packets pushed to `emit` are sent.
    fn on_rtt_sample(&mut self, sample: &RttSample, emit: &mut Vec<HostEmit>);
    /// Called for every custom packet a host receives (`now` is its receive completion);
    /// packets pushed to `emit` are sent (an answer, e.g. a probe's ACK).
    fn on_custom_packet(
        &mut self,
        _host: NodeId,
        _packet: &Packet,
        _now: Time,
        _emit: &mut Vec<HostEmit>,
    ) {
    }
    /// Called when a custom packet sent with a [`HostEmit::tx_token`] has left its NIC
    /// (`now` is its send completion). Packets pushed to `emit` are sent.
    fn on_custom_sent(
        &mut self,
        _host: NodeId,
        _token: u64,
        _now: Time,
        _emit: &mut Vec<HostEmit>,
    ) {
    }
    /// How often [`HostHook::on_wakeup`] is called, from time 0 to the scenario's end (e.g.
    /// a prober's timer); `None` (the default) never calls it. Queried once, when the hook
    /// is installed.
    fn wakeup_interval(&self) -> Option<Time> {
        None
    }
    /// The periodic call of [`HostHook::wakeup_interval`]. Packets pushed to `emit` are sent.
    fn on_wakeup(&mut self, _now: Time, _emit: &mut Vec<HostEmit>) {}
    /// How long data may stay unacknowledged before [`HostHook::on_stall`] is called
    /// (e.g. 50 µs, as HAWKEYE's artifact); `None` (the default) never calls it. Queried
    /// once, when the hook is installed.
    fn stall_interval(&self) -> Option<Time> {
        None
    }
    /// Called while a flow has had unacknowledged data for at least the stall interval
    /// (again every interval while it lasts). `sample.sent_at` is when the flow last made
    /// progress, so `sample.now - sample.sent_at` is how long it has been stuck. A flow
    /// frozen by PFC returns no ACKs and therefore no RTT samples; this is how its host
    /// still notices.
    fn on_stall(&mut self, _sample: &RttSample, _emit: &mut Vec<HostEmit>) {}
}
