//! IEEE 802.1Qbb priority-based flow control (PFC) frames.
//!
//! A PFC frame is a MAC control frame (IEEE 802.3 Annex 31D): destination
//! 01-80-C2-00-00-01, EtherType 0x8808, opcode 0x0101, a 16-bit class-enable vector whose low
//! eight bits select priorities, and eight 16-bit pause times ("quanta"), one per priority. One
//! quantum is the time to transmit 512 bits at the port's speed. A quanta value of 0 for an
//! enabled priority resumes it (XON). The frame is padded to the 64-byte minimum.
//!
//! ```text
//!  0      6      12   14     16     18            34           60    64
//!  | dst  | src  |8808|0101  | CEV  | time[0..8]  |   pad      | FCS |
//! ```

use thiserror::Error;

/// EtherType of MAC control frames (IEEE 802.3 clause 31), from the switch program.
pub use crate::dataplane::ETHERTYPE_MAC_CONTROL;
/// MAC control opcode of priority-based flow control (IEEE 802.1Qbb, 802.3 Annex 31D), from
/// the switch program.
pub use crate::dataplane::PFC_OPCODE as OPCODE_PFC;
/// Reserved multicast destination of MAC control frames.
pub const PFC_DESTINATION: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x01];
/// Bytes of a PFC frame on the wire, FCS included (minimum Ethernet frame).
pub const PFC_FRAME_BYTES: usize = 64;
/// Bit times in one pause quantum.
pub const BITS_PER_QUANTUM: u64 = 512;

/// Byte ranges of the frame's fields, from the switch program's header layouts (generated
/// in `dataplane`): the PFC body follows the Ethernet header.
mod field {
    use crate::dataplane::{ethernet_layout as eth, pfc_layout as pfc};
    use core::ops::Range;

    const fn bytes(start: usize, (bit, width): (usize, u8)) -> Range<usize> {
        start + bit / 8..start + (bit + width as usize).div_ceil(8)
    }
    const BODY: usize = bytes(0, eth::ETHER_TYPE).end;
    pub const DESTINATION: Range<usize> = bytes(0, eth::DST_ADDR);
    pub const SOURCE: Range<usize> = bytes(0, eth::SRC_ADDR);
    pub const ETHERTYPE: Range<usize> = bytes(0, eth::ETHER_TYPE);
    pub const OPCODE: Range<usize> = bytes(BODY, pfc::OPCODE);
    pub const CLASS_ENABLE: Range<usize> = bytes(BODY, pfc::CLASS_ENABLE);
    pub const TIMES: Range<usize> =
        bytes(BODY, pfc::QUANTA_0).start..bytes(BODY, pfc::QUANTA_7).end;
}

/// Why bytes are not a valid PFC frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum PfcError {
    /// Fewer bytes than the fixed header.
    #[error("PFC frame truncated: {len} bytes, need at least {needed}")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes needed.
        needed: usize,
    },
    /// Not a MAC control frame.
    #[error("byte 12: EtherType {found:#06x} is not MAC control (0x8808)")]
    NotMacControl {
        /// The EtherType found.
        found: u16,
    },
    /// A MAC control frame but not PFC (e.g. 802.3x PAUSE, opcode 0x0001).
    #[error("byte 14: MAC control opcode {found:#06x} is not PFC (0x0101)")]
    NotPfc {
        /// The opcode found.
        found: u16,
    },
}

/// A typed view over the bytes of a PFC frame.
#[derive(Debug, Clone)]
pub struct PfcFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> PfcFrame<T> {
    /// Wraps bytes without checking them.
    pub fn new_unchecked(buffer: T) -> Self {
        PfcFrame { buffer }
    }

    /// Wraps untrusted bytes, checking length, EtherType and opcode.
    pub fn new_checked(buffer: T) -> Result<Self, PfcError> {
        let frame = PfcFrame { buffer };
        let len = frame.buffer.as_ref().len();
        if len < field::TIMES.end {
            return Err(PfcError::Truncated {
                len,
                needed: field::TIMES.end,
            });
        }
        if frame.ethertype() != ETHERTYPE_MAC_CONTROL {
            return Err(PfcError::NotMacControl {
                found: frame.ethertype(),
            });
        }
        if frame.opcode() != OPCODE_PFC {
            return Err(PfcError::NotPfc {
                found: frame.opcode(),
            });
        }
        Ok(frame)
    }

    fn read_u16(&self, at: usize) -> u16 {
        let bytes = self.buffer.as_ref();
        u16::from_be_bytes([bytes[at], bytes[at + 1]])
    }

    /// Source MAC address.
    pub fn source(&self) -> [u8; 6] {
        let mut mac = [0; 6];
        mac.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        mac
    }

    /// EtherType (0x8808 for a valid frame).
    pub fn ethertype(&self) -> u16 {
        self.read_u16(field::ETHERTYPE.start)
    }

    /// MAC control opcode (0x0101 for a valid frame).
    pub fn opcode(&self) -> u16 {
        self.read_u16(field::OPCODE.start)
    }

    /// Class-enable vector: bit `p` set means priority `p`'s time is valid.
    pub fn class_enable_vector(&self) -> u8 {
        (self.read_u16(field::CLASS_ENABLE.start) & 0xFF) as u8
    }

    /// Pause time of `priority` in quanta.
    pub fn quanta(&self, priority: usize) -> u16 {
        self.read_u16(field::TIMES.start + 2 * (priority & 7))
    }
}

/// The meaning of a PFC frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PfcRepr {
    /// Sender's MAC address.
    pub source: [u8; 6],
    /// Bit `p` set: the frame carries a pause time for priority `p`.
    pub class_enable_vector: u8,
    /// Pause time per priority in quanta (512 bit times); 0 resumes.
    pub quanta: [u16; 8],
}

impl PfcRepr {
    /// A frame that pauses (or, with `quanta` 0, resumes) the priorities in `vector`.
    pub fn uniform(source: [u8; 6], vector: u8, quanta: u16) -> Self {
        let mut times = [0; 8];
        for (priority, time) in times.iter_mut().enumerate() {
            if vector & (1 << priority) != 0 {
                *time = quanta;
            }
        }
        PfcRepr {
            source,
            class_enable_vector: vector,
            quanta: times,
        }
    }

    /// Parses a checked frame.
    pub fn parse<T: AsRef<[u8]>>(frame: &PfcFrame<T>) -> Self {
        let mut quanta = [0; 8];
        for (priority, time) in quanta.iter_mut().enumerate() {
            *time = frame.quanta(priority);
        }
        PfcRepr {
            source: frame.source(),
            class_enable_vector: frame.class_enable_vector(),
            quanta,
        }
    }

    /// Bytes needed to emit the frame (FCS included, left zero).
    pub fn buffer_len(&self) -> usize {
        PFC_FRAME_BYTES
    }

    /// Writes the frame into `buffer`, which must hold [`Self::buffer_len`] bytes.
    pub fn emit(&self, buffer: &mut [u8]) -> Result<(), PfcError> {
        if buffer.len() < PFC_FRAME_BYTES {
            return Err(PfcError::Truncated {
                len: buffer.len(),
                needed: PFC_FRAME_BYTES,
            });
        }
        buffer[..PFC_FRAME_BYTES].fill(0);
        buffer[field::DESTINATION].copy_from_slice(&PFC_DESTINATION);
        buffer[field::SOURCE].copy_from_slice(&self.source);
        buffer[field::ETHERTYPE].copy_from_slice(&ETHERTYPE_MAC_CONTROL.to_be_bytes());
        buffer[field::OPCODE].copy_from_slice(&OPCODE_PFC.to_be_bytes());
        buffer[field::CLASS_ENABLE]
            .copy_from_slice(&(self.class_enable_vector as u16).to_be_bytes());
        for (priority, time) in self.quanta.iter().enumerate() {
            let at = field::TIMES.start + 2 * priority;
            buffer[at..at + 2].copy_from_slice(&time.to_be_bytes());
        }
        Ok(())
    }

    /// Whether the frame pauses `priority` (enabled with non-zero quanta).
    pub fn pauses(&self, priority: usize) -> bool {
        self.class_enable_vector & (1 << (priority & 7)) != 0 && self.quanta[priority & 7] != 0
    }

    /// Whether the frame resumes `priority` (enabled with zero quanta, i.e. XON).
    pub fn resumes(&self, priority: usize) -> bool {
        self.class_enable_vector & (1 << (priority & 7)) != 0 && self.quanta[priority & 7] == 0
    }
}

/// How long `quanta` pause a port of `bits_per_second`, in picoseconds
/// (quanta × 512 bit times, IEEE 802.1Qbb).
pub fn pause_duration_ps(quanta: u16, bits_per_second: u64) -> u64 {
    ((quanta as u128 * BITS_PER_QUANTUM as u128 * 1_000_000_000_000)
        / bits_per_second.max(1) as u128) as u64
}

/// Whether a pause whose end the data plane stored as the low 32 bits of the ns clock
/// (`pause_end_p{q}` registers) is in force at `now_lo32`: `0 < end − now ≤ MAX_PAUSE_NS`
/// in 32-bit wrapping arithmetic. A stored end further ahead than the longest pause one
/// PFC frame can ask for is a stale value seen across the clock's wrap (or never written),
/// not a pause. The switch program applies the same test in its register actions.
pub fn pause_in_force(end_lo32: u32, now_lo32: u32) -> bool {
    let ahead = end_lo32.wrapping_sub(now_lo32);
    ahead != 0 && ahead <= crate::dataplane::MAX_PAUSE_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_is_in_force_only_within_the_longest_pause_ahead_across_the_wrap() {
        let now = u32::MAX - 10;
        assert!(
            pause_in_force(now.wrapping_add(1_000), now),
            "ends after the wrap"
        );
        assert!(!pause_in_force(now, now), "ends now");
        assert!(!pause_in_force(now.wrapping_sub(1), now), "ended");
        let longest = crate::dataplane::MAX_PAUSE_NS;
        assert!(pause_in_force(now.wrapping_add(longest), now));
        assert!(!pause_in_force(now.wrapping_add(longest + 1), now), "stale");
    }

    #[test]
    fn round_trip_and_semantics() {
        let repr = PfcRepr::uniform([2, 0, 0, 0, 0, 9], 0b0000_1000, 0xFFFF);
        let mut bytes = [0xAAu8; 64];
        repr.emit(&mut bytes).unwrap();
        assert_eq!(&bytes[0..6], &PFC_DESTINATION);
        assert_eq!(&bytes[12..16], &[0x88, 0x08, 0x01, 0x01]);
        assert_eq!(&bytes[16..18], &[0x00, 0x08]);
        assert_eq!(&bytes[24..26], &[0xFF, 0xFF]);
        assert!(bytes[34..].iter().all(|b| *b == 0));
        let parsed = PfcRepr::parse(&PfcFrame::new_checked(&bytes[..]).unwrap());
        assert_eq!(parsed, repr);
        assert!(parsed.pauses(3) && !parsed.pauses(2) && !parsed.resumes(3));
        let xon = PfcRepr::uniform([0; 6], 0b1000, 0);
        assert!(xon.resumes(3) && !xon.pauses(3) && !xon.resumes(4));
    }

    #[test]
    fn malformed_frames_are_rejected_with_the_place() {
        assert_eq!(
            PfcFrame::new_checked(&[0u8; 20][..]).unwrap_err(),
            PfcError::Truncated {
                len: 20,
                needed: 34
            }
        );
        let mut bytes = [0u8; 64];
        PfcRepr::uniform([0; 6], 1, 1).emit(&mut bytes).unwrap();
        bytes[15] = 0x01; // opcode 0x0101 -> 0x0101 unchanged, make it 802.3x PAUSE
        bytes[14] = 0x00;
        assert_eq!(
            PfcFrame::new_checked(&bytes[..]).unwrap_err(),
            PfcError::NotPfc { found: 0x0001 }
        );
        bytes[12] = 0x08;
        bytes[13] = 0x00;
        assert_eq!(
            PfcFrame::new_checked(&bytes[..]).unwrap_err(),
            PfcError::NotMacControl { found: 0x0800 }
        );
        let mut short = [0u8; 10];
        assert!(PfcRepr::uniform([0; 6], 1, 1).emit(&mut short).is_err());
    }

    #[test]
    fn quanta_are_512_bit_times_at_port_speed() {
        // 65535 quanta at 100G: 65535 * 5.12 ns = 335.5392 us.
        assert_eq!(pause_duration_ps(65535, 100_000_000_000), 335_539_200);
        assert_eq!(pause_duration_ps(1, 400_000_000_000), 1_280);
        assert_eq!(pause_duration_ps(0, 100_000_000_000), 0);
    }
}
