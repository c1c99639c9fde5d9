//! R-Pingmesh probe and ACK payloads (R-Pingmesh, SIGCOMM'24, §4.1 and Fig. 4).
//!
//! A prober sends a probe to a responder's UD queue pair (or, with the kernel-UDP transport,
//! to its UDP port); the responder answers with two ACKs. The first leaves as soon as the
//! probe is received; the second carries the responder's processing delay ④−③ (probe
//! received → first ACK sent, both completion timestamps of the responder's NIC), which the
//! prober subtracts to separate network RTT from end-host delay. Both ACKs echo the probe's
//! sequence number, its send time ① and both sides' queue pair numbers and agent
//! incarnations, so a prober restarted in between (a new incarnation, a new QPN) can tell a
//! stale ACK from a current one (§4.3, QPN reset).
//!
//! The payload is 50 bytes, the size the paper's deployment uses (§5), big-endian:
//!
//! ```text
//!  0       4   5    6     7     8          16           20             24
//!  | magic | v | kind|flags| 0   |  seq      | prober QPN | responder QPN |
//!  24              32                    40                   44                48         50
//!  | sent ① (ns)   | responder delay (ns) | prober incarnation | responder inc. | src port |
//! ```
//!
//! On RoCEv2 the payload follows the BTH and DETH of a UD SEND (and a receiving UD queue
//! pair sees the 40-byte GRH before it); on the kernel-UDP fallback it is the UDP payload.
//!
//! The source port (bytes 48..50, version 2): the outer UDP source port of the probe's
//! 5-tuple, which both ACKs echo and leave from. A receiving UD queue pair cannot see it:
//! over IPv4 its 40-byte GRH area holds 20 undefined bytes and the IPv4 header, no UDP
//! header (IBTA RoCEv2 Annex A17.4.5.2), so the prober writes it here for the responder.
//!
//! Versions: version 1 had bytes 48..50 reserved (zero). This build writes version 2 and
//! reads both; a version-1 payload reads as source port 0, "not carried" (a transport that
//! sees the port itself, kernel UDP, does not need it). A version-1 build refuses version-2
//! payloads by their version byte ("byte 4: probe payload version 2, …"), so a mixed
//! deployment fails loudly on the old side rather than misreading the port.

use thiserror::Error;

/// "HMPR": a hawkmesh probe payload.
pub const PROBE_MAGIC: u32 = 0x484D_5052;
/// Version of the layout this module writes (2: the source port in bytes 48..50).
pub const PROBE_VERSION: u8 = 2;
/// The oldest version this module reads (1: bytes 48..50 reserved, read as source port 0).
pub const PROBE_MIN_VERSION: u8 = 1;
/// Bytes of a probe or ACK payload (R-Pingmesh §5: 50-byte probes and ACKs).
pub const PROBE_PAYLOAD_BYTES: usize = 50;
/// Bytes of a probe or ACK on the wire as a RoCEv2 UD send: Ethernet header (14), IPv4 (20),
/// UDP (8), BTH (12), DETH (8), the payload, ICRC (4) and FCS (4) (IBTA RoCEv2 Annex A17;
/// preamble and inter-frame gap not counted).
pub const PROBE_FRAME_BYTES: usize = 14 + 20 + 8 + 12 + 8 + PROBE_PAYLOAD_BYTES + 4 + 4;
/// `flags` bit: the responder delay comes from NIC completion timestamps (hardware); clear
/// when the responder measured it with its host clock (software timestamps).
pub const FLAG_HARDWARE_TIMESTAMPS: u8 = 0x01;
/// `flags` bit: the responder had no NIC or kernel timestamp for ③ or ④ (a device without
/// completion timestamps, a kernel that gave none) and measured the delay with host-clock
/// readings taken by the agent, which include its own scheduling; the prober's results say
/// so. Never set together with [`FLAG_HARDWARE_TIMESTAMPS`].
pub const FLAG_HOST_CLOCK: u8 = 0x02;

mod field {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 5;
    pub const FLAGS: usize = 6;
    pub const RESERVED0: usize = 7;
    pub const SEQ: Range<usize> = 8..16;
    pub const PROBER_QPN: Range<usize> = 16..20;
    pub const RESPONDER_QPN: Range<usize> = 20..24;
    pub const SENT_NS: Range<usize> = 24..32;
    pub const RESPONDER_DELAY_NS: Range<usize> = 32..40;
    pub const PROBER_INCARNATION: Range<usize> = 40..44;
    pub const RESPONDER_INCARNATION: Range<usize> = 44..48;
    pub const SRC_PORT: Range<usize> = 48..50;
}

/// What a payload is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProbeKind {
    /// Prober → responder.
    Probe,
    /// The responder's first ACK, sent on receipt (its send completion is ④).
    Ack,
    /// The responder's second ACK, carrying ④−③.
    DelayAck,
}

impl ProbeKind {
    fn code(self) -> u8 {
        match self {
            ProbeKind::Probe => 1,
            ProbeKind::Ack => 2,
            ProbeKind::DelayAck => 3,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        match code {
            1 => Some(ProbeKind::Probe),
            2 => Some(ProbeKind::Ack),
            3 => Some(ProbeKind::DelayAck),
            _ => None,
        }
    }
}

/// Why bytes are not a probe payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum ProbeError {
    /// Fewer bytes than a payload.
    #[error("probe payload truncated: {len} bytes, need {PROBE_PAYLOAD_BYTES}")]
    Truncated {
        /// Bytes present.
        len: usize,
    },
    /// Not a hawkmesh probe.
    #[error("bytes 0..4: magic {found:#010x} is not a hawkmesh probe ({PROBE_MAGIC:#010x})")]
    BadMagic {
        /// The value found.
        found: u32,
    },
    /// A layout this build does not read.
    #[error(
        "byte 4: probe payload version {found}, this build reads versions {PROBE_MIN_VERSION} to {PROBE_VERSION}"
    )]
    UnsupportedVersion {
        /// The version found.
        found: u8,
    },
    /// An unknown kind.
    #[error("byte 5: probe kind {found} is not 1 (probe), 2 (ACK) or 3 (delay ACK)")]
    BadKind {
        /// The code found.
        found: u8,
    },
    /// Reserved bits set (a newer sender, or damage).
    #[error("byte {at}: reserved byte is {found:#04x}, must be 0")]
    Reserved {
        /// Byte offset.
        at: usize,
        /// The value found.
        found: u8,
    },
    /// A payload that claims both NIC and host-clock timestamps.
    #[error("byte 6: a payload cannot claim both hardware and host-clock timestamps")]
    ConflictingClocks,
    /// A probe carrying a responder delay, or an ACK from a responder that claims a delay
    /// in a first ACK.
    #[error(
        "bytes 32..40: a {kind:?} carries responder delay {delay_ns} ns; only a delay ACK may"
    )]
    UnexpectedDelay {
        /// The payload's kind.
        kind: ProbeKind,
        /// The delay found.
        delay_ns: u64,
    },
}

/// A typed view over the bytes of a probe payload.
#[derive(Debug, Clone)]
pub struct ProbePayload<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ProbePayload<T> {
    /// Wraps untrusted bytes, checking length, magic, version, kind and reserved bytes.
    /// Bytes after the payload (padding a transport added) are ignored.
    pub fn new_checked(buffer: T) -> Result<Self, ProbeError> {
        let payload = ProbePayload { buffer };
        let bytes = payload.buffer.as_ref();
        if bytes.len() < PROBE_PAYLOAD_BYTES {
            return Err(ProbeError::Truncated { len: bytes.len() });
        }
        let magic = payload.u32_at(field::MAGIC.start);
        if magic != PROBE_MAGIC {
            return Err(ProbeError::BadMagic { found: magic });
        }
        let version = bytes[field::VERSION];
        if !(PROBE_MIN_VERSION..=PROBE_VERSION).contains(&version) {
            return Err(ProbeError::UnsupportedVersion { found: version });
        }
        let Some(kind) = ProbeKind::from_code(bytes[field::KIND]) else {
            return Err(ProbeError::BadKind {
                found: bytes[field::KIND],
            });
        };
        // Version 1 reserved the source port's bytes.
        let reserved: &[usize] = if version == 1 {
            &[
                field::RESERVED0,
                field::SRC_PORT.start,
                field::SRC_PORT.end - 1,
            ]
        } else {
            &[field::RESERVED0]
        };
        for &at in reserved {
            if bytes[at] != 0 {
                return Err(ProbeError::Reserved {
                    at,
                    found: bytes[at],
                });
            }
        }
        let flags = bytes[field::FLAGS];
        if flags & !(FLAG_HARDWARE_TIMESTAMPS | FLAG_HOST_CLOCK) != 0 {
            return Err(ProbeError::Reserved {
                at: field::FLAGS,
                found: flags,
            });
        }
        if flags & FLAG_HARDWARE_TIMESTAMPS != 0 && flags & FLAG_HOST_CLOCK != 0 {
            return Err(ProbeError::ConflictingClocks);
        }
        let delay_ns = payload.u64_at(field::RESPONDER_DELAY_NS.start);
        if kind != ProbeKind::DelayAck && delay_ns != 0 {
            return Err(ProbeError::UnexpectedDelay { kind, delay_ns });
        }
        Ok(payload)
    }

    fn u32_at(&self, at: usize) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    fn u16_at(&self, at: usize) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    fn u64_at(&self, at: usize) -> u64 {
        let mut word = [0; 8];
        word.copy_from_slice(&self.buffer.as_ref()[at..at + 8]);
        u64::from_be_bytes(word)
    }

    /// The payload's kind (checked).
    pub fn kind(&self) -> ProbeKind {
        ProbeKind::from_code(self.buffer.as_ref()[field::KIND]).unwrap_or(ProbeKind::Probe)
    }

    /// The layout version (checked: [`PROBE_MIN_VERSION`] to [`PROBE_VERSION`]).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// The 5-tuple's source port the payload carries (0 in a version-1 payload: not
    /// carried).
    pub fn src_port(&self) -> u16 {
        self.u16_at(field::SRC_PORT.start)
    }
}

/// The meaning of a probe payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProbeRepr {
    /// Probe, first ACK or delay ACK.
    pub kind: ProbeKind,
    /// The responder's delay came from NIC timestamps (delay ACKs; see
    /// [`FLAG_HARDWARE_TIMESTAMPS`]).
    pub hardware_timestamps: bool,
    /// The responder's delay came from host-clock readings, not NIC or kernel timestamps
    /// (delay ACKs; see [`FLAG_HOST_CLOCK`]).
    pub host_clock_timestamps: bool,
    /// The prober's sequence number of the probe (echoed by both ACKs).
    pub seq: u64,
    /// The prober's queue pair number (its UDP port on the kernel transport).
    pub prober_qpn: u32,
    /// The responder's queue pair number the probe was addressed to.
    pub responder_qpn: u32,
    /// ①: when the prober posted the probe, on the prober's clock (echoed by both ACKs).
    pub sent_ns: u64,
    /// ④−③ (delay ACKs only, else 0): probe received → first ACK sent at the responder.
    pub responder_delay_ns: u64,
    /// The prober agent's incarnation (drawn at its start).
    pub prober_incarnation: u32,
    /// The responder agent's incarnation (0 in a probe when the prober does not know it).
    pub responder_incarnation: u32,
    /// The outer UDP source port of the probe's 5-tuple, which its ACKs echo and leave from
    /// (0: not carried, as in a version-1 payload). A UD receiver learns it only from here.
    pub src_port: u16,
}

impl ProbeRepr {
    /// Parses a checked payload.
    pub fn parse<T: AsRef<[u8]>>(payload: &ProbePayload<T>) -> Self {
        let bytes = payload.buffer.as_ref();
        ProbeRepr {
            kind: payload.kind(),
            hardware_timestamps: bytes[field::FLAGS] & FLAG_HARDWARE_TIMESTAMPS != 0,
            host_clock_timestamps: bytes[field::FLAGS] & FLAG_HOST_CLOCK != 0,
            seq: payload.u64_at(field::SEQ.start),
            prober_qpn: payload.u32_at(field::PROBER_QPN.start),
            responder_qpn: payload.u32_at(field::RESPONDER_QPN.start),
            sent_ns: payload.u64_at(field::SENT_NS.start),
            responder_delay_ns: payload.u64_at(field::RESPONDER_DELAY_NS.start),
            prober_incarnation: payload.u32_at(field::PROBER_INCARNATION.start),
            responder_incarnation: payload.u32_at(field::RESPONDER_INCARNATION.start),
            src_port: payload.src_port(),
        }
    }

    /// Checks and parses untrusted bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ProbeError> {
        Ok(Self::parse(&ProbePayload::new_checked(bytes)?))
    }

    /// The first ACK a responder sends for this probe (with its own incarnation).
    pub fn ack(&self, responder_incarnation: u32) -> ProbeRepr {
        ProbeRepr {
            kind: ProbeKind::Ack,
            hardware_timestamps: false,
            host_clock_timestamps: false,
            responder_delay_ns: 0,
            responder_incarnation,
            ..*self
        }
    }

    /// The second ACK, carrying the responder's delay ④−③ (measured on NIC timestamps when
    /// `hardware`; set [`Self::host_clock_timestamps`] on the result when it was measured on
    /// host-clock readings).
    pub fn delay_ack(&self, responder_incarnation: u32, delay_ns: u64, hardware: bool) -> Self {
        ProbeRepr {
            kind: ProbeKind::DelayAck,
            hardware_timestamps: hardware,
            host_clock_timestamps: false,
            responder_delay_ns: delay_ns,
            responder_incarnation,
            ..*self
        }
    }

    /// Writes the payload into `buffer`, which must hold [`PROBE_PAYLOAD_BYTES`].
    pub fn emit(&self, buffer: &mut [u8]) -> Result<(), ProbeError> {
        if buffer.len() < PROBE_PAYLOAD_BYTES {
            return Err(ProbeError::Truncated { len: buffer.len() });
        }
        if self.kind != ProbeKind::DelayAck && self.responder_delay_ns != 0 {
            return Err(ProbeError::UnexpectedDelay {
                kind: self.kind,
                delay_ns: self.responder_delay_ns,
            });
        }
        if self.hardware_timestamps && self.host_clock_timestamps {
            return Err(ProbeError::ConflictingClocks);
        }
        let b = &mut buffer[..PROBE_PAYLOAD_BYTES];
        b.fill(0);
        b[field::MAGIC].copy_from_slice(&PROBE_MAGIC.to_be_bytes());
        b[field::VERSION] = PROBE_VERSION;
        b[field::KIND] = self.kind.code();
        if self.hardware_timestamps {
            b[field::FLAGS] = FLAG_HARDWARE_TIMESTAMPS;
        }
        if self.host_clock_timestamps {
            b[field::FLAGS] = FLAG_HOST_CLOCK;
        }
        b[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        b[field::PROBER_QPN].copy_from_slice(&self.prober_qpn.to_be_bytes());
        b[field::RESPONDER_QPN].copy_from_slice(&self.responder_qpn.to_be_bytes());
        b[field::SENT_NS].copy_from_slice(&self.sent_ns.to_be_bytes());
        b[field::RESPONDER_DELAY_NS].copy_from_slice(&self.responder_delay_ns.to_be_bytes());
        b[field::PROBER_INCARNATION].copy_from_slice(&self.prober_incarnation.to_be_bytes());
        b[field::RESPONDER_INCARNATION].copy_from_slice(&self.responder_incarnation.to_be_bytes());
        b[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        Ok(())
    }

    /// The payload as bytes.
    pub fn to_bytes(&self) -> Result<[u8; PROBE_PAYLOAD_BYTES], ProbeError> {
        let mut bytes = [0; PROBE_PAYLOAD_BYTES];
        self.emit(&mut bytes)?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe() -> ProbeRepr {
        ProbeRepr {
            kind: ProbeKind::Probe,
            hardware_timestamps: false,
            host_clock_timestamps: false,
            seq: 0x0102_0304_0506_0708,
            prober_qpn: 0x11,
            responder_qpn: 0x22,
            sent_ns: 1_000_000_007,
            responder_delay_ns: 0,
            prober_incarnation: 0xAABB_CCDD,
            responder_incarnation: 0,
            src_port: 0xC123,
        }
    }

    #[test]
    fn a_probe_and_its_acks_round_trip_and_echo_the_probe() {
        let p = probe();
        let bytes = p.to_bytes().unwrap();
        assert_eq!(&bytes[0..4], b"HMPR");
        assert_eq!(&bytes[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(ProbeRepr::from_bytes(&bytes).unwrap(), p);
        let ack = p.ack(7);
        let back = ProbeRepr::from_bytes(&ack.to_bytes().unwrap()).unwrap();
        assert_eq!(
            (back.kind, back.seq, back.sent_ns, back.src_port),
            (ProbeKind::Ack, p.seq, p.sent_ns, 0xC123)
        );
        assert_eq!(&bytes[48..50], &[0xC1, 0x23]);
        assert_eq!(back.responder_incarnation, 7);
        let delay = p.delay_ack(7, 12_345, true);
        let back = ProbeRepr::from_bytes(&delay.to_bytes().unwrap()).unwrap();
        assert_eq!(back.kind, ProbeKind::DelayAck);
        assert_eq!(back.responder_delay_ns, 12_345);
        assert!(back.hardware_timestamps);
        // A transport's padding after the payload is ignored.
        let mut padded = delay.to_bytes().unwrap().to_vec();
        padded.extend_from_slice(&[0xEE; 14]);
        assert_eq!(ProbeRepr::from_bytes(&padded).unwrap(), delay);
    }

    #[test]
    fn damaged_or_foreign_payloads_are_refused_naming_the_byte() {
        let good = probe().to_bytes().unwrap();
        assert_eq!(
            ProbeRepr::from_bytes(&good[..49]),
            Err(ProbeError::Truncated { len: 49 })
        );
        let mut bad = good;
        bad[0] = b'X';
        assert!(ProbeRepr::from_bytes(&bad)
            .unwrap_err()
            .to_string()
            .starts_with("bytes 0..4"));
        for version in [0, 3] {
            let mut bad = good;
            bad[4] = version;
            assert_eq!(
                ProbeRepr::from_bytes(&bad),
                Err(ProbeError::UnsupportedVersion { found: version })
            );
        }
        let mut bad = good;
        bad[4] = 3;
        assert_eq!(
            ProbeRepr::from_bytes(&bad).unwrap_err().to_string(),
            "byte 4: probe payload version 3, this build reads versions 1 to 2"
        );
        let mut bad = good;
        bad[5] = 9;
        assert_eq!(
            ProbeRepr::from_bytes(&bad),
            Err(ProbeError::BadKind { found: 9 })
        );
        let mut bad = good;
        bad[7] = 1;
        assert_eq!(
            ProbeRepr::from_bytes(&bad),
            Err(ProbeError::Reserved { at: 7, found: 1 })
        );
        let mut bad = good;
        bad[6] = 0x80;
        assert!(matches!(
            ProbeRepr::from_bytes(&bad),
            Err(ProbeError::Reserved { at: 6, .. })
        ));
        // A probe (or first ACK) never carries a delay.
        let mut bad = good;
        bad[39] = 5;
        assert_eq!(
            ProbeRepr::from_bytes(&bad),
            Err(ProbeError::UnexpectedDelay {
                kind: ProbeKind::Probe,
                delay_ns: 5
            })
        );
        let mut wrong = probe();
        wrong.responder_delay_ns = 3;
        assert!(wrong.to_bytes().is_err());
        // A delay measured on NIC timestamps and on host-clock readings at once.
        let mut bad = good;
        bad[6] = FLAG_HARDWARE_TIMESTAMPS | FLAG_HOST_CLOCK;
        assert_eq!(
            ProbeRepr::from_bytes(&bad),
            Err(ProbeError::ConflictingClocks)
        );
        let both = ProbeRepr {
            host_clock_timestamps: true,
            ..probe().delay_ack(1, 5, true)
        };
        assert_eq!(both.to_bytes(), Err(ProbeError::ConflictingClocks));
    }

    #[test]
    fn a_delay_measured_on_host_clock_readings_says_so() {
        let delay = ProbeRepr {
            host_clock_timestamps: true,
            ..probe().delay_ack(3, 40_000, false)
        };
        let bytes = delay.to_bytes().unwrap();
        assert_eq!(bytes[6], FLAG_HOST_CLOCK);
        let back = ProbeRepr::from_bytes(&bytes).unwrap();
        assert!(back.host_clock_timestamps && !back.hardware_timestamps);
        // The ACKs built from a probe never inherit the flag.
        assert!(!back.ack(3).host_clock_timestamps);
    }

    /// A version-1 payload (bytes 48..50 reserved) still reads, as source port 0; a
    /// version-1 payload with those bytes set is refused as before.
    #[test]
    fn version_one_payloads_read_as_not_carrying_the_source_port() {
        let mut v1 = ProbeRepr {
            src_port: 0,
            ..probe()
        }
        .to_bytes()
        .unwrap();
        v1[4] = 1;
        let back = ProbeRepr::from_bytes(&v1).unwrap();
        assert_eq!(back.src_port, 0);
        assert_eq!(ProbePayload::new_checked(&v1[..]).unwrap().version(), 1);
        v1[48] = 0xC0;
        assert_eq!(
            ProbeRepr::from_bytes(&v1),
            Err(ProbeError::Reserved {
                at: 48,
                found: 0xC0
            })
        );
        // The same bytes in version 2 are the port.
        v1[4] = 2;
        assert_eq!(ProbeRepr::from_bytes(&v1).unwrap().src_port, 0xC000);
    }
}
