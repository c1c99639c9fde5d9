//! Packets inside the simulator and their arena.
//!
//! A packet is a plain struct (headers as fields, not bytes): switches and NICs read fields
//! directly. Byte formats for the wire (PFC frames, RoCEv2 headers) live in `hawkmesh-wire`;
//! the sizes below are the real on-wire sizes so serialization times are right.

use crate::time::Time;

/// Ethernet (14) + IPv4 (20) + UDP (8) + InfiniBand BTH (12) + ICRC (4) + FCS (4).
pub const ROCE_DATA_OVERHEAD: u32 = 62;
/// RoCEv2 ACK/NACK: headers as data plus AETH (4), no payload.
pub const ROCE_ACK_BYTES: u32 = 66;
/// RoCEv2 CNP: headers as data plus 16 reserved bytes (IBA Annex A17).
pub const ROCE_CNP_BYTES: u32 = 78;
pub use hawkmesh_wire::telemetry::ROCEV2_UDP_PORT;
/// Ethernet + IPv4 + UDP + FCS around a custom (e.g. polling) payload.
pub const CUSTOM_OVERHEAD: u32 = 46;
/// Bytes of custom header a packet can carry (polling headers, probes).
pub const CUSTOM_CAPACITY: usize = 64;

/// What a packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PacketKind {
    /// RDMA data (RC SEND/WRITE payload segment).
    Data,
    /// Cumulative acknowledgement.
    Ack,
    /// Go-back-N negative acknowledgement (expected sequence in `seq`).
    Nack,
    /// Congestion notification packet (DCQCN NP → RP).
    Cnp,
    /// IEEE 802.1Qbb PFC frame (hop-by-hop, never forwarded).
    Pfc,
    /// A packet emitted by a host hook or a switch CPU (polling packets, probes); routed by
    /// its destination NIC in the control priority unless the emitter chose otherwise.
    Custom,
}

/// ECN codepoint (RFC 3168).
pub const ECN_NOT_ECT: u8 = 0;
/// ECN-capable transport.
pub const ECN_ECT0: u8 = 2;
/// Congestion experienced.
pub const ECN_CE: u8 = 3;

pub use hawkmesh_wire::telemetry::FiveTuple;

/// The DSCP a host NIC marks for an 802.1p priority: `priority << 3 | 2` (RoCEv2's usual
/// DSCP 26 for priority 3), so a switch trusting DSCP recovers the priority as `DSCP >> 3`
/// (RFC 2474 class selector).
pub fn dscp_for_priority(priority: u8) -> u8 {
    (priority & 7) << 3 | 2
}

/// A packet in flight or in a queue.
#[derive(Clone, Debug)]
pub struct Packet {
    /// What it is.
    pub kind: PacketKind,
    /// 802.1p priority / traffic class (0..=7).
    pub priority: u8,
    /// ECN codepoint.
    pub ecn: u8,
    /// DSCP (the upper six bits of the IPv4 TOS byte).
    pub dscp: u8,
    /// IP TTL (hop limit); decremented by every switch, dropped at 0.
    pub ttl: u8,
    /// Sending NIC (endpoint index).
    pub src_nic: u32,
    /// Destination NIC (endpoint index).
    pub dst_nic: u32,
    /// 5-tuple in the IP/UDP headers.
    pub tuple: FiveTuple,
    /// Flow index (for data/ACK/NACK/CNP); `u32::MAX` for packets without a flow.
    pub flow: u32,
    /// Data: first byte's sequence; ACK: cumulative bytes received; NACK: expected sequence.
    pub seq: u64,
    /// Payload bytes (data only).
    pub payload: u32,
    /// Bytes on the wire.
    pub size: u32,
    /// Data: time the NIC sent it; ACK: the echoed send time of the acknowledged packet.
    pub sent_at: Time,
    /// Global index of the port it entered the current switch through.
    pub in_port: u32,
    /// When it was enqueued at the current egress queue.
    pub enq_time: Time,
    /// Depth of that queue (bytes) when it was enqueued.
    pub enq_qdepth: u32,
    /// PFC: class-enable vector.
    pub pfc_vector: u8,
    /// PFC: quanta per priority.
    pub pfc_quanta: [u16; 8],
    /// Scratch metadata a switch pipeline carries from its ingress to its egress pass
    /// (Tofino's bridged metadata); cleared when the packet enters a switch.
    pub bridge: [u64; 2],
    /// Custom header bytes used.
    pub custom_len: u8,
    /// Custom header bytes (polling header etc.).
    pub custom: [u8; CUSTOM_CAPACITY],
}

impl Packet {
    /// A blank packet of `kind`.
    pub fn new(kind: PacketKind) -> Self {
        Packet {
            kind,
            priority: 0,
            ecn: ECN_NOT_ECT,
            dscp: 0,
            ttl: 64,
            src_nic: u32::MAX,
            dst_nic: u32::MAX,
            tuple: FiveTuple {
                src_ip: [0; 4],
                dst_ip: [0; 4],
                src_port: 0,
                dst_port: 0,
                protocol: 17,
            },
            flow: u32::MAX,
            seq: 0,
            payload: 0,
            size: 64,
            sent_at: 0,
            in_port: u32::MAX,
            enq_time: 0,
            enq_qdepth: 0,
            pfc_vector: 0,
            pfc_quanta: [0; 8],
            bridge: [0; 2],
            custom_len: 0,
            custom: [0; CUSTOM_CAPACITY],
        }
    }

    /// The custom header bytes.
    pub fn custom_bytes(&self) -> &[u8] {
        &self.custom[..self.custom_len as usize]
    }
}

/// Arena of packets with a free list: no allocation per packet once warmed up.
#[derive(Debug, Default)]
pub struct PacketPool {
    slots: Vec<Packet>,
    free: Vec<u32>,
}

impl PacketPool {
    /// Stores `packet` and returns its handle.
    #[inline]
    pub fn alloc(&mut self, packet: Packet) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = packet;
                id
            }
            None => {
                self.slots.push(packet);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Releases a handle.
    #[inline]
    pub fn free(&mut self, id: u32) {
        self.free.push(id);
    }

    /// The packet behind a handle.
    #[inline]
    pub fn get(&self, id: u32) -> &Packet {
        &self.slots[id as usize]
    }

    /// The packet behind a handle, mutable.
    #[inline]
    pub fn get_mut(&mut self, id: u32) -> &mut Packet {
        &mut self.slots[id as usize]
    }

    /// Address of a slot (for cache prefetching; never dereferenced by the caller).
    #[inline]
    pub fn slot_ptr(&self, id: u32) -> *const u8 {
        self.slots
            .get(id as usize)
            .map_or(std::ptr::null(), |p| p as *const Packet as *const u8)
    }

    /// Packets currently allocated.
    pub fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// High-water mark of simultaneously live packets.
    pub fn capacity_used(&self) -> usize {
        self.slots.len()
    }
}
