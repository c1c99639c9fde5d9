//! The eviction report: the record of a flow the data plane evicted from its telemetry slot
//! on a hash collision (HAWKEYE §3.3), at the front of the egress clone the switch sends to
//! its CPU port.
//!
//! ```text
//!  0         2      3            5          9          13      15      17
//!  | epoch id | slot | egress port| src IP   | dst IP   | sport | dport |
//!  17        21             25                     29             33            37
//!  | packets | paused pkts   | unpaused qdepth sum | first off. ns | last off. ns |
//! ```
//!
//! [`EvictionHeader`] is a `zerocopy` view whose offsets are checked at compile time against
//! the generated [`crate::dataplane::eviction_layout`]. The queue-depth sum is in the
//! target's queue unit (Tofino: 80-byte cells); the reader converts.

use core::mem::{offset_of, size_of};

use zerocopy::byteorder::network_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::dataplane::{self, eviction_layout as l};

/// Bytes of an eviction report.
pub const EVICTION_REPORT_BYTES: usize = dataplane::EVICTION_REPORT_BYTES as usize;

/// An eviction report as it is on the wire (network byte order, no padding).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct EvictionHeader {
    /// Stored epoch id of the evicted entry.
    pub epoch_id: U16,
    /// Ring slot (epoch index) of the evicted entry.
    pub epoch_index: u8,
    /// The flow's egress port.
    pub egress_port: U16,
    /// Flow source IPv4 address.
    pub src_addr: U32,
    /// Flow destination IPv4 address.
    pub dst_addr: U32,
    /// Flow UDP source port.
    pub src_port: U16,
    /// Flow UDP destination port.
    pub dst_port: U16,
    /// Packets enqueued in the epoch.
    pub packets: U32,
    /// Of those, packets enqueued while their queue was paused.
    pub paused_packets: U32,
    /// Sum of the queue depth at enqueue of the unpaused packets (target queue units).
    pub unpaused_qdepth_sum: U32,
    /// First enqueue, ns after the epoch's start.
    pub first_offset_ns: U32,
    /// Last enqueue, ns after the epoch's start.
    pub last_offset_ns: U32,
}

const fn at((bit, _width): (usize, u8)) -> usize {
    assert!(bit % 8 == 0, "eviction field not byte-aligned");
    bit / 8
}

// The view is the program's layout, field by field.
const _: () = {
    assert!(size_of::<EvictionHeader>() == EVICTION_REPORT_BYTES);
    assert!(size_of::<EvictionHeader>() == l::HEADER_BYTES);
    assert!(offset_of!(EvictionHeader, epoch_id) == at(l::EPOCH_ID));
    assert!(offset_of!(EvictionHeader, epoch_index) == at(l::EPOCH_INDEX));
    assert!(offset_of!(EvictionHeader, egress_port) == at(l::EGRESS_PORT));
    assert!(offset_of!(EvictionHeader, src_addr) == at(l::SRC_ADDR));
    assert!(offset_of!(EvictionHeader, dst_addr) == at(l::DST_ADDR));
    assert!(offset_of!(EvictionHeader, src_port) == at(l::SRC_PORT));
    assert!(offset_of!(EvictionHeader, dst_port) == at(l::DST_PORT));
    assert!(offset_of!(EvictionHeader, packets) == at(l::PACKETS));
    assert!(offset_of!(EvictionHeader, paused_packets) == at(l::PAUSED_PACKETS));
    assert!(offset_of!(EvictionHeader, unpaused_qdepth_sum) == at(l::UNPAUSED_QDEPTH_SUM));
    assert!(offset_of!(EvictionHeader, first_offset_ns) == at(l::FIRST_OFFSET_NS));
    assert!(offset_of!(EvictionHeader, last_offset_ns) == at(l::LAST_OFFSET_NS));
};

impl EvictionHeader {
    /// The report at the front of `bytes`, or `None` when fewer than
    /// [`EVICTION_REPORT_BYTES`] are there.
    pub fn new_checked(bytes: &[u8]) -> Option<&EvictionHeader> {
        EvictionHeader::ref_from_prefix(bytes).ok().map(|(h, _)| h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_where_the_program_writes_them() {
        let mut bytes = [0u8; EVICTION_REPORT_BYTES + 3];
        bytes[0..2].copy_from_slice(&0x0102u16.to_be_bytes());
        bytes[2] = 3;
        bytes[3..5].copy_from_slice(&7u16.to_be_bytes());
        bytes[5..9].copy_from_slice(&[11, 0, 4, 1]);
        bytes[17..21].copy_from_slice(&1234u32.to_be_bytes());
        bytes[33..37].copy_from_slice(&999u32.to_be_bytes());
        let h = EvictionHeader::new_checked(&bytes).expect("long enough");
        assert_eq!(h.epoch_id.get(), 0x0102);
        assert_eq!(h.epoch_index, 3);
        assert_eq!(h.egress_port.get(), 7);
        assert_eq!(h.src_addr.get().to_be_bytes(), [11, 0, 4, 1]);
        assert_eq!(h.packets.get(), 1234);
        assert_eq!(h.last_offset_ns.get(), 999);
        assert_eq!(h.as_bytes(), &bytes[..EVICTION_REPORT_BYTES]);
    }

    #[test]
    fn a_short_report_is_refused() {
        assert!(EvictionHeader::new_checked(&[0u8; EVICTION_REPORT_BYTES - 1]).is_none());
    }
}
