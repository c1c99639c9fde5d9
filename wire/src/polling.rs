//! The HAWKEYE polling header (HAWKEYE §3.2, Table 1), version 3 of hawkmesh's layout.
//!
//! A host sends it in a UDP datagram to port `POLLING_UDP_PORT` with the victim's addresses
//! in the outer headers, so that switches without HAWKEYE route it like the victim. A switch
//! running the program forwards it along the victim path and the PFC branch and copies it to
//! its CPU port, with the context of its own decisions filled in (context kind 1) and the
//! switch's ingress timestamp of the packet (the clock the switch's epochs are in, so the
//! agent reads the epochs of the event without a clock of its own synchronised to the ASIC).
//!
//! ```text
//!  0        1          2          3             4                     12
//!  | version| rsvd:6 tf:2| hop limit| context kind| event id (64)        |
//!  12             16             20       22       24     25          26
//!  | victim src IP | victim dst IP | sport  | dport  | proto| arrival fl. |
//!  26            28            30       31      32                     40
//!  | ctx ingress  | ctx egress  | ctx fl.| rsvd  | PFC-branch ports (64)  |
//!  40                                   48
//!  | ingress timestamp, ns (64; 48 used) |
//! ```
//!
//! The layout is the switch program's: [`PollingHeader`] is a `zerocopy` view whose field
//! offsets are checked at compile time against the generated
//! [`crate::dataplane::polling_layout`], so the program cannot change the header without
//! this view failing to build.

use core::mem::{offset_of, size_of};

use thiserror::Error;
use zerocopy::byteorder::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::dataplane::{self, ethernet_layout, ipv4_layout, polling_layout as l, udp_layout};
use crate::telemetry::FiveTuple;

pub use crate::dataplane::{
    POLLING_CONTEXT_CPU_COPY, POLLING_CONTEXT_IN_FLIGHT, POLLING_CONTEXT_VICTIM_PAUSED,
    POLLING_UDP_PORT, POLLING_VERSION, TRACE_PFC_CAUSALITY, TRACE_VICTIM_PATH,
};

/// Bytes of the polling header.
pub const POLLING_HEADER_BYTES: usize = dataplane::POLLING_HEADER_BYTES as usize;

/// Byte offset of the polling header in a polling packet (after Ethernet, IPv4 without
/// options and UDP).
pub const POLLING_PACKET_OFFSET: usize =
    ethernet_layout::HEADER_BYTES + ipv4_layout::HEADER_BYTES + udp_layout::HEADER_BYTES;

/// Ports a PFC-branch bitmap can name (bit `p` = port `p`).
pub const PFC_BRANCH_PORTS: u16 = u64::BITS as u16;

/// Bits of a polling event id that hold the sending host's sequence number; the host id
/// (its low 24 bits) sits above them, so hosts draw ids without coordinating.
pub const EVENT_SEQUENCE_BITS: u32 = 40;

/// The event id host `host` gives its `sequence`-th polling event.
pub fn event_id(host: u32, sequence: u64) -> u64 {
    (u64::from(host) << EVENT_SEQUENCE_BITS) | (sequence & ((1 << EVENT_SEQUENCE_BITS) - 1))
}

/// The host (low 24 bits of its id) that sent polling event `event_id`.
pub fn event_host(event_id: u64) -> u32 {
    (event_id >> EVENT_SEQUENCE_BITS) as u32
}

/// The polling header as it is on the wire (network byte order, no padding).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct PollingHeader {
    /// Layout version (`POLLING_VERSION`).
    pub version: u8,
    /// Reserved (6 high bits) and the trace flag (2 low bits, [`TRACE_VICTIM_PATH`] |
    /// [`TRACE_PFC_CAUSALITY`]).
    pub flags: u8,
    /// Hops left; a switch drops the packet at 0.
    pub hop_limit: u8,
    /// [`POLLING_CONTEXT_IN_FLIGHT`] or [`POLLING_CONTEXT_CPU_COPY`].
    pub context_kind: u8,
    /// Polling event id (host id and sequence).
    pub event_id: U64,
    /// Victim source IPv4 address.
    pub victim_src_addr: U32,
    /// Victim destination IPv4 address.
    pub victim_dst_addr: U32,
    /// Victim UDP source port.
    pub victim_src_port: U16,
    /// Victim UDP destination port.
    pub victim_dst_port: U16,
    /// Victim IP protocol.
    pub victim_protocol: u8,
    /// Trace flags the packet arrived with at this switch (CPU copies).
    pub arrival_flags: u8,
    /// Port the packet came in by (CPU copies).
    pub context_ingress_port: U16,
    /// The victim's egress port here, `NO_PORT` when unrouted (CPU copies).
    pub context_egress_port: U16,
    /// [`POLLING_CONTEXT_VICTIM_PAUSED`] (CPU copies).
    pub context_flags: u8,
    /// Reserved.
    pub reserved: u8,
    /// The PFC-branch egress ports the data plane chose (CPU copies).
    pub context_pfc_ports: U64,
    /// The switch's ingress timestamp of the packet, ns (CPU copies; Tofino's 48-bit
    /// `ingress_mac_tstamp`).
    pub context_tstamp: U64,
}

/// Byte offset of a field in the generated layout; fails the build if it is not on a byte
/// boundary.
const fn at((bit, _width): (usize, u8)) -> usize {
    assert!(bit % 8 == 0, "polling field not byte-aligned");
    bit / 8
}

// The view is the program's layout, field by field (HAWKEYE polling header as generated).
const _: () = {
    assert!(size_of::<PollingHeader>() == POLLING_HEADER_BYTES);
    assert!(size_of::<PollingHeader>() == l::HEADER_BYTES);
    assert!(offset_of!(PollingHeader, version) == at(l::VERSION));
    assert!(offset_of!(PollingHeader, flags) == at(l::RESERVED_FLAGS));
    // The trace flag is the low two bits of the flags byte.
    assert!(l::TRACE_FLAG.0 == l::RESERVED_FLAGS.0 + 6 && l::TRACE_FLAG.1 == 2);
    assert!(offset_of!(PollingHeader, hop_limit) == at(l::HOP_LIMIT));
    assert!(offset_of!(PollingHeader, context_kind) == at(l::CONTEXT_KIND));
    assert!(offset_of!(PollingHeader, event_id) == at(l::EVENT_ID));
    assert!(offset_of!(PollingHeader, victim_src_addr) == at(l::VICTIM_SRC_ADDR));
    assert!(offset_of!(PollingHeader, victim_dst_addr) == at(l::VICTIM_DST_ADDR));
    assert!(offset_of!(PollingHeader, victim_src_port) == at(l::VICTIM_SRC_PORT));
    assert!(offset_of!(PollingHeader, victim_dst_port) == at(l::VICTIM_DST_PORT));
    assert!(offset_of!(PollingHeader, victim_protocol) == at(l::VICTIM_PROTOCOL));
    assert!(offset_of!(PollingHeader, arrival_flags) == at(l::ARRIVAL_FLAGS));
    assert!(offset_of!(PollingHeader, context_ingress_port) == at(l::CONTEXT_INGRESS_PORT));
    assert!(offset_of!(PollingHeader, context_egress_port) == at(l::CONTEXT_EGRESS_PORT));
    assert!(offset_of!(PollingHeader, context_flags) == at(l::CONTEXT_FLAGS));
    assert!(offset_of!(PollingHeader, reserved) == at(l::RESERVED));
    assert!(offset_of!(PollingHeader, context_pfc_ports) == at(l::CONTEXT_PFC_PORTS));
    assert!(l::CONTEXT_PFC_PORTS.1 as u32 == u64::BITS);
    assert!(offset_of!(PollingHeader, context_tstamp) == at(l::CONTEXT_TSTAMP));
    assert!(l::CONTEXT_TSTAMP.1 as u32 == u64::BITS);
};

/// Why bytes are not a polling header.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum PollingError {
    /// Fewer bytes than the header.
    #[error("polling header truncated: {len} bytes, need {needed}")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// A layout this build does not know.
    #[error("byte 0: polling header version {found}, this build reads version {expected}")]
    Version {
        /// Version found.
        found: u8,
        /// Version expected (`POLLING_VERSION`).
        expected: u8,
    },
}

impl PollingHeader {
    /// The header at the front of `bytes`, checked: long enough and of this version.
    pub fn new_checked(bytes: &[u8]) -> Result<&PollingHeader, PollingError> {
        let (header, _) =
            PollingHeader::ref_from_prefix(bytes).map_err(|_| PollingError::Truncated {
                len: bytes.len(),
                needed: POLLING_HEADER_BYTES,
            })?;
        header.check_version()?;
        Ok(header)
    }

    /// The header at the front of `bytes`, mutable, checked like [`Self::new_checked`].
    pub fn new_checked_mut(bytes: &mut [u8]) -> Result<&mut PollingHeader, PollingError> {
        let len = bytes.len();
        let (header, _) =
            PollingHeader::mut_from_prefix(bytes).map_err(|_| PollingError::Truncated {
                len,
                needed: POLLING_HEADER_BYTES,
            })?;
        header.check_version()?;
        Ok(header)
    }

    fn check_version(&self) -> Result<(), PollingError> {
        if self.version != POLLING_VERSION {
            return Err(PollingError::Version {
                found: self.version,
                expected: POLLING_VERSION,
            });
        }
        Ok(())
    }

    /// The trace flag (low two bits of `flags`).
    pub fn trace_flag(&self) -> u8 {
        self.flags & 0b11
    }
}

/// The fields of a polling header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Polling {
    /// Event id.
    pub event_id: u64,
    /// Victim flow.
    pub victim: FiveTuple,
    /// Trace flag (HAWKEYE Table 1): [`TRACE_VICTIM_PATH`] | [`TRACE_PFC_CAUSALITY`].
    pub trace_flag: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Context kind ([`POLLING_CONTEXT_IN_FLIGHT`], [`POLLING_CONTEXT_CPU_COPY`]).
    pub context_kind: u8,
    /// Flags on arrival at the switch (CPU copies).
    pub arrival_flags: u8,
    /// Ingress port context (CPU copies).
    pub context_ingress_port: u16,
    /// Egress port context: the victim's egress port (CPU copies).
    pub context_egress_port: u16,
    /// Context flags (CPU copies): [`POLLING_CONTEXT_VICTIM_PAUSED`].
    pub context_flags: u8,
    /// Bitmap of the PFC-branch egress ports (CPU copies): bit `p` = port `p`.
    pub context_pfc_ports: u64,
    /// The switch's ingress timestamp of the packet, ns (CPU copies).
    pub context_tstamp_ns: u64,
}

impl Polling {
    /// A fresh polling header from a host: victim path traced, no context.
    pub fn new(event_id: u64, victim: FiveTuple, hop_limit: u8) -> Self {
        Polling {
            event_id,
            victim,
            trace_flag: TRACE_VICTIM_PATH,
            hop_limit,
            context_kind: POLLING_CONTEXT_IN_FLIGHT,
            arrival_flags: 0,
            context_ingress_port: 0,
            context_egress_port: 0,
            context_flags: 0,
            context_pfc_ports: 0,
            context_tstamp_ns: 0,
        }
    }

    /// Parses the header at the front of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Polling, PollingError> {
        Ok(Polling::from_header(PollingHeader::new_checked(bytes)?))
    }

    /// Parses the polling header of a whole polling packet (Ethernet, IPv4, UDP, header).
    pub fn parse_packet(packet: &[u8]) -> Result<Polling, PollingError> {
        match packet.get(POLLING_PACKET_OFFSET..) {
            Some(bytes) => Polling::parse(bytes),
            None => Err(PollingError::Truncated {
                len: packet.len(),
                needed: POLLING_PACKET_OFFSET + POLLING_HEADER_BYTES,
            }),
        }
    }

    /// The fields of a checked header.
    pub fn from_header(h: &PollingHeader) -> Polling {
        Polling {
            event_id: h.event_id.get(),
            victim: FiveTuple {
                src_ip: h.victim_src_addr.get().to_be_bytes(),
                dst_ip: h.victim_dst_addr.get().to_be_bytes(),
                src_port: h.victim_src_port.get(),
                dst_port: h.victim_dst_port.get(),
                protocol: h.victim_protocol,
            },
            trace_flag: h.trace_flag(),
            hop_limit: h.hop_limit,
            context_kind: h.context_kind,
            arrival_flags: h.arrival_flags,
            context_ingress_port: h.context_ingress_port.get(),
            context_egress_port: h.context_egress_port.get(),
            context_flags: h.context_flags,
            context_pfc_ports: h.context_pfc_ports.get(),
            context_tstamp_ns: h.context_tstamp.get(),
        }
    }

    /// The header on the wire (this version, reserved bits zero).
    pub fn header(&self) -> PollingHeader {
        PollingHeader {
            version: POLLING_VERSION,
            flags: self.trace_flag & 0b11,
            hop_limit: self.hop_limit,
            context_kind: self.context_kind,
            event_id: U64::new(self.event_id),
            victim_src_addr: U32::new(u32::from_be_bytes(self.victim.src_ip)),
            victim_dst_addr: U32::new(u32::from_be_bytes(self.victim.dst_ip)),
            victim_src_port: U16::new(self.victim.src_port),
            victim_dst_port: U16::new(self.victim.dst_port),
            victim_protocol: self.victim.protocol,
            arrival_flags: self.arrival_flags,
            context_ingress_port: U16::new(self.context_ingress_port),
            context_egress_port: U16::new(self.context_egress_port),
            context_flags: self.context_flags,
            reserved: 0,
            context_pfc_ports: U64::new(self.context_pfc_ports),
            context_tstamp: U64::new(self.context_tstamp_ns),
        }
    }

    /// The header bytes.
    pub fn emit(&self) -> [u8; POLLING_HEADER_BYTES] {
        let mut out = [0u8; POLLING_HEADER_BYTES];
        out.copy_from_slice(self.header().as_bytes());
        out
    }

    /// The PFC-branch ports, lowest first.
    pub fn pfc_branch_ports(&self) -> impl Iterator<Item = u16> + '_ {
        (0..PFC_BRANCH_PORTS).filter(|p| self.context_pfc_ports & (1u64 << p) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Polling {
        Polling {
            event_id: 0x0102_0304_0506_0708,
            victim: FiveTuple::rocev2([11, 0, 4, 1], 49152, [11, 0, 0, 1]),
            trace_flag: TRACE_VICTIM_PATH | TRACE_PFC_CAUSALITY,
            hop_limit: 16,
            context_kind: POLLING_CONTEXT_CPU_COPY,
            arrival_flags: TRACE_PFC_CAUSALITY,
            context_ingress_port: 3,
            context_egress_port: 0xffff,
            context_flags: POLLING_CONTEXT_VICTIM_PAUSED,
            context_pfc_ports: (1 << 63) | (1 << 5) | 1,
            context_tstamp_ns: 0x0000_8765_4321_0fed,
        }
    }

    #[test]
    fn round_trips_and_puts_fields_where_the_program_reads_them() {
        let p = sample();
        let bytes = p.emit();
        assert_eq!(Polling::parse(&bytes), Ok(p));
        assert_eq!(bytes[0], POLLING_VERSION);
        assert_eq!(bytes[1], 0b11, "trace flag in the low bits, reserved zero");
        assert_eq!(&bytes[4..12], &0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(&bytes[12..16], &[11, 0, 4, 1]);
        assert_eq!(&bytes[20..22], &49152u16.to_be_bytes());
        assert_eq!(&bytes[28..30], &[0xff, 0xff]);
        assert_eq!(&bytes[40..48], &0x0000_8765_4321_0fedu64.to_be_bytes());
        assert_eq!(p.pfc_branch_ports().collect::<Vec<_>>(), vec![0, 5, 63]);
    }

    #[test]
    fn malformed_headers_are_refused_with_the_reason() {
        let bytes = sample().emit();
        assert_eq!(
            Polling::parse(&bytes[..47]),
            Err(PollingError::Truncated {
                len: 47,
                needed: 48
            })
        );
        let mut old = bytes;
        old[0] = 1;
        let err = Polling::parse(&old).unwrap_err();
        assert_eq!(
            err,
            PollingError::Version {
                found: 1,
                expected: POLLING_VERSION
            }
        );
        assert!(err.to_string().contains("byte 0"), "{err}");
        assert!(Polling::parse_packet(&[0u8; 41]).is_err());
    }

    #[test]
    fn reserved_bits_are_ignored_on_parse_and_zero_on_emit() {
        let mut bytes = sample().emit();
        bytes[1] |= 0b1111_0000;
        bytes[31] = 0xaa;
        let p = Polling::parse(&bytes).expect("parses");
        assert_eq!(p, sample());
        assert_eq!(p.emit(), sample().emit());
    }

    #[test]
    fn event_ids_carry_the_host_above_its_sequence() {
        let id = event_id(7, 3);
        assert_eq!(id, (7 << 40) | 3);
        assert_eq!(event_host(id), 7);
        // A sequence past 40 bits wraps inside its field instead of changing the host.
        assert_eq!(event_host(event_id(7, 1 << 40)), 7);
    }

    #[test]
    fn the_view_edits_one_field_in_place() {
        let mut packet = vec![0u8; POLLING_PACKET_OFFSET];
        packet.extend_from_slice(&sample().emit());
        let header =
            PollingHeader::new_checked_mut(&mut packet[POLLING_PACKET_OFFSET..]).expect("view");
        header.arrival_flags = TRACE_VICTIM_PATH;
        header.context_ingress_port = U16::new(9);
        let p = Polling::parse_packet(&packet).expect("parses");
        assert_eq!(p.arrival_flags, TRACE_VICTIM_PATH);
        assert_eq!(p.context_ingress_port, 9);
        assert_eq!(p.event_id, sample().event_id);
    }
}
