//! HAWKEYE telemetry reports: what a switch agent sends to the analyzer after a polling
//! packet reached its switch (HAWKEYE §3.3 telemetry logging, §3.4 controller-assisted
//! collection).
//!
//! One [`TelemetryReport`] holds everything one switch logged for one polling event: per epoch
//! the port records (HAWKEYE Fig. 4 "port-level telemetry"), the causality meter rows
//! (HAWKEYE Fig. 3, per ingress→egress port pair), the flow records (HAWKEYE Fig. 4
//! "flow-level telemetry", including flows evicted from the data-plane table) and the polling
//! context (which port the polling packet entered, which ports it left by and why, its trace
//! flags from HAWKEYE Table 1 and the victim 5-tuple).
//!
//! # Two encodings
//!
//! * **JSON** (serde) is the on-disk form the analyzer CLI reads. A file holds either one
//!   report object or an array of report objects; a directory of such files (conventionally
//!   `switch-<id>.json`, one per switch) is one incident. 5-tuples are written as strings in
//!   the victim syntax of [`FiveTuple`]'s `FromStr` (`10.0.0.1:49152->10.0.0.9:4791`).
//! * **Binary chunks** are what a switch agent streams (gRPC, or a file of concatenated
//!   chunks). A report is split into chunks of at most a chosen size (e.g. an MTU), each
//!   self-describing: a 32-byte chunk header followed by typed sections of fixed-size
//!   records. Every section names the epoch it belongs to, so chunks can be cut between any
//!   two records and reassembled by [`decode_reports`].
//!
//! ```text
//! chunk header (32 bytes, big endian)
//!   0..4   magic "HKTR"
//!   4      format version (5; versions 2 to 4 are read too: version 2's port records
//!          have the XON count reserved, zero; before version 4 a report holds one
//!          polling context; before version 5 a chunk has no checksum)
//!   5      chunk flags: bit 0 = last chunk of this report
//!   6..8   chunk index within the report, from 0
//!   8..12  switch node id
//!  12..20  polling event id
//!  20..28  epoch size in ns (power of two)
//!  28..32  payload length: bytes of sections after this header (the checksum excluded)
//! sections (payload length bytes)
//! checksum (4 bytes, version 5 on): CRC-32 (IEEE 802.3 polynomial, as zlib) of the header
//!          and the payload, big endian; a chunk whose checksum does not match is refused
//! section header (16 bytes)
//!   0      kind (1 polling, 2 polling egress, 3 epoch, 4 port, 5 meter, 6 flow,
//!          7 paused port)
//!   1      reserved (0)
//!   2..4   record count
//!   4..6   record length (must equal the kind's fixed length)
//!   6..8   reserved (0)
//!   8..16  epoch start ns (0 for the polling and paused-port kinds)
//! records
//!   polling (20):  ingress port u16, trace flags u8, reserved u8, victim 5-tuple (13),
//!                  reserved (3); the first is the report's polling context, each further
//!                  one a later arrival of the event by another port (`more_polling`)
//!   polling egress (4): port u16, reason flags u8, reserved u8; belongs to the polling
//!                  record before it
//!   paused port (12): port u16, priorities u8 (bit q = priority q), flags u8 (bit 0 =
//!                  in force at collection), latest pause end ns u64
//!   epoch (16):    epoch id u64, lost eviction digests u32, reserved u32
//!   port (28):     port u16, XON frames received u16, packets u32, paused packets u32,
//!                  queue-depth sum over all packets u64, over non-paused packets u64
//!   meter (12):    ingress port u16, egress port u16, bytes u64
//!   flow (40):     5-tuple (src ip 4, dst ip 4, src port 2, dst port 2, protocol 1),
//!                  flags u8 (bit 0 = evicted from the data-plane table), egress port u16,
//!                  packets u32, paused packets u32, queue-depth sum over non-paused
//!                  packets u64, first enqueue offset ns u32, last enqueue offset ns u32
//! ```
//!
//! Parsing never trusts a length: every read is checked and a failure names the byte offset
//! (from the start of the parsed buffer) and the field ([`TelemetryWireError`]).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::topology::{NodeId, PortNo};

/// The format version written by this build, in JSON (`version`) and in chunk headers.
pub const TELEMETRY_FORMAT_VERSION: u8 = 5;

/// The oldest format version this build reads (version 2 lacks the XON count of port
/// records, which reads as zero).
pub const TELEMETRY_MIN_FORMAT_VERSION: u8 = 2;

/// Whether this build reads telemetry of format `version`.
pub fn telemetry_version_supported(version: u8) -> bool {
    (TELEMETRY_MIN_FORMAT_VERSION..=TELEMETRY_FORMAT_VERSION).contains(&version)
}
/// The RoCEv2 UDP destination port and the UDP protocol number, from the switch program.
pub use crate::dataplane::{IP_PROTOCOL_UDP, ROCEV2_UDP_PORT};
/// Magic bytes that open every binary chunk.
pub const CHUNK_MAGIC: [u8; 4] = *b"HKTR";

// ---------------------------------------------------------------------------------------
// 5-tuple
// ---------------------------------------------------------------------------------------

/// The RoCEv2 5-tuple that identifies a flow (HAWKEYE §3.3 flow-level telemetry; the
/// polling header of HAWKEYE Fig. 5 carries the victim's).
///
/// Text form (also its JSON form): `SRC_IP:SRC_PORT->DST_IP[:DST_PORT][/PROTO]`, e.g.
/// `10.0.0.1:49152->10.0.0.9:4791`. When parsing, `DST_PORT` defaults to 4791 and `PROTO`
/// (a number, `udp` or `tcp`) to 17. Printing always writes the destination port and writes
/// `/PROTO` only when the protocol is not UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct FiveTuple {
    /// Source IPv4 address.
    pub src_ip: [u8; 4],
    /// Destination IPv4 address.
    pub dst_ip: [u8; 4],
    /// UDP source port (carries the RoCEv2 flow label entropy).
    pub src_port: u16,
    /// UDP destination port (4791 for RoCEv2).
    pub dst_port: u16,
    /// IP protocol (17 for RoCEv2).
    pub protocol: u8,
}

impl FiveTuple {
    /// Encoded length in the binary format.
    pub const WIRE_LEN: usize = 13;

    /// A RoCEv2 flow: UDP to port 4791.
    pub fn rocev2(src_ip: [u8; 4], src_port: u16, dst_ip: [u8; 4]) -> Self {
        FiveTuple {
            src_ip,
            dst_ip,
            src_port,
            dst_port: ROCEV2_UDP_PORT,
            protocol: IP_PROTOCOL_UDP,
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.src_ip);
        out.extend_from_slice(&self.dst_ip);
        out.extend_from_slice(&self.src_port.to_be_bytes());
        out.extend_from_slice(&self.dst_port.to_be_bytes());
        out.push(self.protocol);
    }

    fn read(reader: &mut Reader<'_>, field: &'static str) -> Result<Self, TelemetryWireError> {
        let src_ip = reader.array4(field)?;
        let dst_ip = reader.array4(field)?;
        let src_port = reader.u16(field)?;
        let dst_port = reader.u16(field)?;
        let protocol = reader.u8(field)?;
        Ok(FiveTuple {
            src_ip,
            dst_ip,
            src_port,
            dst_port,
            protocol,
        })
    }
}

fn fmt_ip(ip: [u8; 4], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3])
}

impl fmt::Display for FiveTuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_ip(self.src_ip, f)?;
        write!(f, ":{}->", self.src_port)?;
        fmt_ip(self.dst_ip, f)?;
        write!(f, ":{}", self.dst_port)?;
        if self.protocol != IP_PROTOCOL_UDP {
            write!(f, "/{}", self.protocol)?;
        }
        Ok(())
    }
}

/// Why a 5-tuple string does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid 5-tuple {input:?}: {reason} (expected SRC_IP:SRC_PORT->DST_IP[:DST_PORT][/PROTO], e.g. 10.0.0.1:49152->10.0.0.9:4791)")]
pub struct FiveTupleParseError {
    /// The text given.
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

fn parse_ipv4(text: &str) -> Option<[u8; 4]> {
    let mut out = [0u8; 4];
    let mut parts = text.split('.');
    for slot in out.iter_mut() {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *slot = part.parse().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(out)
}

impl FromStr for FiveTuple {
    type Err = FiveTupleParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| FiveTupleParseError {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let text = input.trim();
        let (text, protocol) = match text.split_once('/') {
            Some((rest, proto)) => {
                let protocol = match proto.to_ascii_lowercase().as_str() {
                    "udp" => IP_PROTOCOL_UDP,
                    "tcp" => 6,
                    number => number
                        .parse::<u8>()
                        .map_err(|_| fail("protocol must be udp, tcp or a number 0-255"))?,
                };
                (rest, protocol)
            }
            None => (text, IP_PROTOCOL_UDP),
        };
        let (source, destination) = text
            .split_once("->")
            .ok_or_else(|| fail("missing `->` between source and destination"))?;
        let (src_ip, src_port) = source
            .trim()
            .rsplit_once(':')
            .ok_or_else(|| fail("source needs IP:PORT"))?;
        let src_ip = parse_ipv4(src_ip).ok_or_else(|| fail("source IPv4 address is invalid"))?;
        let src_port = src_port
            .parse::<u16>()
            .map_err(|_| fail("source port must be a number 0-65535"))?;
        let destination = destination.trim();
        let (dst_ip, dst_port) = match destination.rsplit_once(':') {
            Some((ip, port)) => (
                ip,
                port.parse::<u16>()
                    .map_err(|_| fail("destination port must be a number 0-65535"))?,
            ),
            None => (destination, ROCEV2_UDP_PORT),
        };
        let dst_ip =
            parse_ipv4(dst_ip).ok_or_else(|| fail("destination IPv4 address is invalid"))?;
        Ok(FiveTuple {
            src_ip,
            dst_ip,
            src_port,
            dst_port,
            protocol,
        })
    }
}

impl TryFrom<String> for FiveTuple {
    type Error = FiveTupleParseError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<FiveTuple> for String {
    fn from(value: FiveTuple) -> Self {
        value.to_string()
    }
}

// ---------------------------------------------------------------------------------------
// Report types (serde)
// ---------------------------------------------------------------------------------------

/// Polling trace flags (HAWKEYE Table 1): bit 0 = trace along the victim flow path,
/// bit 1 = trace along the PFC causality. `0b11` traces both. The bits are the switch
/// program's (`TRACE_VICTIM_PATH`, `TRACE_PFC_CAUSALITY`, generated).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct TraceFlags(pub u8);

impl TraceFlags {
    /// `01`: trace along the victim flow path.
    pub const VICTIM_PATH: TraceFlags = TraceFlags(crate::dataplane::TRACE_VICTIM_PATH);
    /// `10`: trace along the PFC causality (spreading path).
    pub const PFC_CAUSALITY: TraceFlags = TraceFlags(crate::dataplane::TRACE_PFC_CAUSALITY);
    /// `11`: both.
    pub const BOTH: TraceFlags = TraceFlags(Self::VICTIM_PATH.0 | Self::PFC_CAUSALITY.0);

    /// Whether the victim-path bit is set.
    pub fn victim_path(self) -> bool {
        self.0 & Self::VICTIM_PATH.0 != 0
    }
    /// Whether the PFC-causality bit is set.
    pub fn pfc_causality(self) -> bool {
        self.0 & Self::PFC_CAUSALITY.0 != 0
    }
    /// Whether only the two defined bits are used.
    pub fn is_valid(self) -> bool {
        self.0 & !Self::BOTH.0 == 0
    }
}

/// One port the polling packet was sent out of, and why (HAWKEYE §3.4, Fig. 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PollingEgress {
    /// The egress port.
    pub port: PortNo,
    /// Why: victim-path bit (the victim flow leaves by this port), PFC-causality bit (this
    /// port is paused and the causality meter ties it to the congestion being traced).
    pub reason: TraceFlags,
}

/// How the polling packet met this switch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollingContext {
    /// The port the polling packet entered by.
    pub ingress_port: PortNo,
    /// The trace flags it carried on arrival (HAWKEYE Table 1).
    pub flags: TraceFlags,
    /// The victim flow named in the polling header.
    pub victim: FiveTuple,
    /// The ports it was forwarded out of, and why. Empty when this switch was the last
    /// one (the victim's last hop, or the end of the PFC spreading path).
    #[serde(default)]
    pub egress: Vec<PollingEgress>,
}

/// A port paused by PFC when the switch CPU collected, or whose pause ended within the
/// epochs read (HAWKEYE §3.3, Fig. 3 "port status"). A pause can be in force although no
/// packet was enqueued behind it in the epochs read (a storm that froze everything upstream
/// leaves no paused packets), and a pause that just ended explains the backlog its port is
/// still draining.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PausedPort {
    /// The egress port.
    pub port: PortNo,
    /// Priorities, bit q = priority q.
    pub priorities: u8,
    /// The pause was in force at collection (otherwise it ended at `until_ns`).
    pub in_force: bool,
    /// When the latest of those pauses ends or ended, ns (switch clock, absolute).
    pub until_ns: u64,
}

/// Port-level telemetry of one egress port in one epoch (HAWKEYE §3.3, Fig. 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRecord {
    /// The egress port.
    pub port: PortNo,
    /// Data packets enqueued at this port in the epoch.
    pub packet_count: u32,
    /// Of those, packets enqueued while the port was paused by PFC.
    pub paused_packet_count: u32,
    /// Sum over all enqueued packets of the queue depth (bytes) each saw at enqueue
    /// (HAWKEYE Alg. 1 l.4 `total_qdepth`; the port-level wait-for weight uses its mean).
    pub queue_depth_sum_bytes: u64,
    /// Same sum over the non-paused packets only (HAWKEYE §3.5.1: contention analysis
    /// excludes paused packets).
    pub unpaused_queue_depth_sum_bytes: u64,
    /// PFC XON frames (quanta 0, IEEE 802.1Qbb) the port received in the epoch: the
    /// device behind it released its pause itself. A port can have XONs and no packets
    /// (its upstream held by the pause).
    #[serde(default, skip_serializing_if = "is_zero_u16")]
    pub xon_count: u16,
}

fn is_zero_u16(v: &u16) -> bool {
    *v == 0
}

/// One causality meter row (HAWKEYE §3.3, Fig. 3): bytes that entered this switch by
/// `ingress_port` and were enqueued at `egress_port` in the epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeterRecord {
    /// Where the traffic entered this switch.
    pub ingress_port: PortNo,
    /// Where it was enqueued to leave.
    pub egress_port: PortNo,
    /// Bytes.
    pub bytes: u64,
}

/// Flow-level telemetry of one flow at one egress port in one epoch (HAWKEYE §3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowRecord {
    /// The flow.
    pub flow: FiveTuple,
    /// The egress port its packets were enqueued at.
    pub egress_port: PortNo,
    /// Packets of the flow enqueued in the epoch.
    pub packet_count: u32,
    /// Of those, packets enqueued while the port was paused.
    pub paused_packet_count: u32,
    /// Sum over the non-paused packets of the queue depth (bytes) each saw at enqueue.
    pub queue_depth_sum_bytes: u64,
    /// Nanoseconds from the epoch start to the flow's first enqueue in the epoch.
    pub first_enqueue_offset_ns: u32,
    /// Nanoseconds from the epoch start to the flow's last enqueue in the epoch. When both
    /// offsets are 0 and the flow has more than one packet, the timing is unknown and the
    /// analyzer spreads the packets over the whole epoch (HAWKEYE Alg. 1 l.24).
    pub last_enqueue_offset_ns: u32,
    /// The record is an eviction digest: the data-plane table slot was taken by another
    /// flow (HAWKEYE §3.3) and these are the counts the flow had until then. The analyzer
    /// adds it to the flow's other records of the same port and epoch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evicted: bool,
}

impl FlowRecord {
    /// Whether the record carries an enqueue time window.
    pub fn has_timing(&self) -> bool {
        self.first_enqueue_offset_ns != 0 || self.last_enqueue_offset_ns != 0
    }
}

/// Everything a switch logged in one epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EpochTelemetry {
    /// Absolute epoch number: `start_ns / epoch_ns`. The data plane keeps only the low bits
    /// (HAWKEYE §3.3 uses `timestamp[29:22]`); the agent extends them with its clock.
    pub epoch_id: u64,
    /// Absolute start time of the epoch in ns (switch clocks are assumed PTP-synchronised);
    /// epochs of different switches are aligned by this value.
    pub start_ns: u64,
    /// Eviction digests the agent could not keep (digest queue overflow): flow telemetry
    /// of this epoch is incomplete by at least this many records.
    #[serde(default)]
    pub lost_evictions: u32,
    /// Port records, at most one per port.
    #[serde(default)]
    pub ports: Vec<PortRecord>,
    /// Causality meter rows with non-zero bytes.
    #[serde(default)]
    pub meters: Vec<MeterRecord>,
    /// Flow records, including eviction digests.
    #[serde(default)]
    pub flows: Vec<FlowRecord>,
}

/// The telemetry one switch reported for one polling event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TelemetryReport {
    /// Format version ([`TELEMETRY_FORMAT_VERSION`]).
    pub version: u8,
    /// The switch ([`crate::topology::NodeDesc::id`]).
    pub switch: NodeId,
    /// The polling event that triggered the collection.
    pub event_id: u64,
    /// Epoch size in ns, a power of two (HAWKEYE §3.3 selects epoch bits of the timestamp).
    pub epoch_ns: u64,
    /// How the polling packet met this switch (its first arrival).
    pub polling: PollingContext,
    /// Later arrivals of the same event by other ports before the collection (around a
    /// routing loop, or where a PFC branch meets the victim path), each with the branch the
    /// data plane took from there, in arrival order. The data plane's dedupe keys on the
    /// arrival port because the PFC branch depends on it (`polling_dedupe`); these are the
    /// branches that close a frozen loop whose meters have aged out of the ring.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_polling: Vec<PollingContext>,
    /// Ports paused by PFC at the time of collection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paused_ports: Vec<PausedPort>,
    /// The epochs read from the ring buffer, oldest first.
    pub epochs: Vec<EpochTelemetry>,
}

/// JSON files hold one report or an array of reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ReportFile {
    /// A single report.
    One(Box<TelemetryReport>),
    /// Several reports.
    Many(Vec<TelemetryReport>),
}

impl ReportFile {
    /// The reports in the file, in file order.
    pub fn into_reports(self) -> Vec<TelemetryReport> {
        match self {
            ReportFile::One(report) => vec![*report],
            ReportFile::Many(reports) => reports,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Binary encoding
// ---------------------------------------------------------------------------------------

/// Why a binary telemetry buffer does not parse or cannot be produced.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TelemetryWireError {
    /// The buffer ends inside a field.
    #[error(
        "truncated at byte {offset}: field `{field}` needs {needed} bytes, {available} remain"
    )]
    Truncated {
        /// Byte offset of the field.
        offset: usize,
        /// The field.
        field: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes left in the buffer.
        available: usize,
    },
    /// A chunk does not start with `HKTR`.
    #[error("bad magic at byte {offset}: expected \"HKTR\", found {found:02x?}")]
    BadMagic {
        /// Byte offset of the chunk.
        offset: usize,
        /// The four bytes found.
        found: [u8; 4],
    },
    /// A version this build does not read.
    #[error("unsupported telemetry format version {version} at byte {offset} (this build reads versions {} to {})", TELEMETRY_MIN_FORMAT_VERSION, TELEMETRY_FORMAT_VERSION)]
    UnsupportedVersion {
        /// Byte offset of the version field.
        offset: usize,
        /// The version found.
        version: u8,
    },
    /// A field holds a value the format forbids.
    #[error("invalid field `{field}` at byte {offset}: {reason}")]
    InvalidField {
        /// Byte offset of the field.
        offset: usize,
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A chunk's checksum does not match its bytes (damaged in transit or on disk).
    #[error("chunk at byte {offset} (switch {switch}, event {event_id}, index {chunk_index}): checksum {found:#010x} does not match its bytes ({computed:#010x}); the chunk is damaged")]
    Checksum {
        /// Byte offset of the chunk.
        offset: usize,
        /// Switch the header names.
        switch: NodeId,
        /// Event id the header names.
        event_id: u64,
        /// Chunk index the header names.
        chunk_index: u16,
        /// The checksum carried.
        found: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// The report cannot be encoded (a value does not fit its field, or the chunk size is
    /// too small for one record).
    #[error("cannot encode report: {reason}")]
    Encode {
        /// What does not fit.
        reason: String,
    },
}

/// Section kinds of the binary format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum SectionKind {
    /// The polling context (one record).
    Polling = 1,
    /// Polling egress ports.
    PollingEgress = 2,
    /// Epoch metadata (one record per epoch).
    Epoch = 3,
    /// Port records.
    Port = 4,
    /// Causality meter rows.
    Meter = 5,
    /// Flow records.
    Flow = 6,
    /// Ports paused at collection time.
    PausedPort = 7,
}

impl SectionKind {
    /// Fixed length of one record of this kind.
    pub const fn record_len(self) -> usize {
        match self {
            SectionKind::Polling => 20,
            SectionKind::PollingEgress => 4,
            SectionKind::Epoch => 16,
            SectionKind::Port => 28,
            SectionKind::Meter => 12,
            SectionKind::Flow => 40,
            SectionKind::PausedPort => 12,
        }
    }

    fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            1 => SectionKind::Polling,
            2 => SectionKind::PollingEgress,
            3 => SectionKind::Epoch,
            4 => SectionKind::Port,
            5 => SectionKind::Meter,
            6 => SectionKind::Flow,
            7 => SectionKind::PausedPort,
            _ => return None,
        })
    }
}

mod field {
    //! Byte ranges of the chunk and section headers.
    use std::ops::Range;
    pub const MAGIC: Range<usize> = 0..4;
    pub const VERSION: usize = 4;
    pub const FLAGS: usize = 5;
    pub const CHUNK_INDEX: Range<usize> = 6..8;
    pub const SWITCH: Range<usize> = 8..12;
    pub const EVENT_ID: Range<usize> = 12..20;
    pub const EPOCH_NS: Range<usize> = 20..28;
    pub const PAYLOAD_LEN: Range<usize> = 28..32;
    pub const CHUNK_HEADER_LEN: usize = 32;

    pub const SECTION_KIND: usize = 0;
    pub const SECTION_COUNT: Range<usize> = 2..4;
    pub const SECTION_RECORD_LEN: Range<usize> = 4..6;
    pub const SECTION_HEADER_LEN: usize = 16;
}

/// Chunk flag: this chunk is the last of its report.
pub const CHUNK_FLAG_LAST: u8 = 0b1;

/// Bytes of the checksum that ends a chunk (format version 5 on).
pub const CHUNK_CHECKSUM_LEN: usize = 4;

/// The checksum of a chunk's header and payload: CRC-32 with the IEEE 802.3 polynomial
/// (reflected 0xEDB88320, as zlib and Ethernet's FCS compute it).
pub fn chunk_checksum(header_and_payload: &[u8]) -> u32 {
    crc32fast::hash(header_and_payload)
}

/// Checks one whole chunk as received on its own (a gRPC message, a stored record): its
/// header, that its length is what the header announces, and its checksum (version 5 on).
/// The sections are not parsed.
pub fn check_chunk(bytes: &[u8]) -> Result<ChunkHeaderRepr, TelemetryWireError> {
    let header = ChunkHeaderRepr::parse(&ChunkHeader::new_checked(bytes)?, 0)?;
    let expected = header.chunk_len();
    if bytes.len() != expected {
        return Err(TelemetryWireError::InvalidField {
            offset: 0,
            field: "chunk length",
            reason: format!(
                "chunk of switch {} event {} index {} is {} bytes, its header announces {expected}",
                header.switch,
                header.event_id,
                header.chunk_index,
                bytes.len()
            ),
        });
    }
    verify_checksum(&header, bytes, 0)?;
    Ok(header)
}

/// Checks the checksum of the chunk `bytes` (exactly [`ChunkHeaderRepr::chunk_len`] long)
/// starting at `offset` of the enclosing buffer.
fn verify_checksum(
    header: &ChunkHeaderRepr,
    bytes: &[u8],
    offset: usize,
) -> Result<(), TelemetryWireError> {
    if header.checksum_len() == 0 {
        return Ok(());
    }
    let body = field::CHUNK_HEADER_LEN + header.payload_len as usize;
    let found = be_u32(&bytes[body..body + CHUNK_CHECKSUM_LEN]);
    let computed = chunk_checksum(&bytes[..body]);
    if found != computed {
        return Err(TelemetryWireError::Checksum {
            offset,
            switch: header.switch,
            event_id: header.event_id,
            chunk_index: header.chunk_index,
            found,
            computed,
        });
    }
    Ok(())
}

/// A typed view of a chunk header over a byte buffer (smoltcp style).
#[derive(Debug, Clone)]
pub struct ChunkHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ChunkHeader<T> {
    /// Header length in bytes.
    pub const LEN: usize = field::CHUNK_HEADER_LEN;

    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Self {
        ChunkHeader { buffer }
    }

    /// Wraps a buffer after checking it holds a whole header.
    pub fn new_checked(buffer: T) -> Result<Self, TelemetryWireError> {
        let available = buffer.as_ref().len();
        if available < Self::LEN {
            return Err(TelemetryWireError::Truncated {
                offset: 0,
                field: "chunk header",
                needed: Self::LEN,
                available,
            });
        }
        Ok(ChunkHeader { buffer })
    }

    fn slice(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// The magic bytes.
    pub fn magic(&self) -> [u8; 4] {
        let mut out = [0; 4];
        out.copy_from_slice(&self.slice()[field::MAGIC]);
        out
    }
    /// Format version.
    pub fn version(&self) -> u8 {
        self.slice()[field::VERSION]
    }
    /// Chunk flags.
    pub fn flags(&self) -> u8 {
        self.slice()[field::FLAGS]
    }
    /// Chunk index within the report.
    pub fn chunk_index(&self) -> u16 {
        be_u16(&self.slice()[field::CHUNK_INDEX])
    }
    /// Switch node id.
    pub fn switch(&self) -> u32 {
        be_u32(&self.slice()[field::SWITCH])
    }
    /// Polling event id.
    pub fn event_id(&self) -> u64 {
        be_u64(&self.slice()[field::EVENT_ID])
    }
    /// Epoch size in ns.
    pub fn epoch_ns(&self) -> u64 {
        be_u64(&self.slice()[field::EPOCH_NS])
    }
    /// Bytes of sections after the header.
    pub fn payload_len(&self) -> u32 {
        be_u32(&self.slice()[field::PAYLOAD_LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ChunkHeader<T> {
    fn slice_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the magic bytes.
    pub fn set_magic(&mut self) {
        self.slice_mut()[field::MAGIC].copy_from_slice(&CHUNK_MAGIC);
    }
    /// Sets the version.
    pub fn set_version(&mut self, value: u8) {
        self.slice_mut()[field::VERSION] = value;
    }
    /// Sets the flags.
    pub fn set_flags(&mut self, value: u8) {
        self.slice_mut()[field::FLAGS] = value;
    }
    /// Sets the chunk index.
    pub fn set_chunk_index(&mut self, value: u16) {
        self.slice_mut()[field::CHUNK_INDEX].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the switch id.
    pub fn set_switch(&mut self, value: u32) {
        self.slice_mut()[field::SWITCH].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the event id.
    pub fn set_event_id(&mut self, value: u64) {
        self.slice_mut()[field::EVENT_ID].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the epoch size.
    pub fn set_epoch_ns(&mut self, value: u64) {
        self.slice_mut()[field::EPOCH_NS].copy_from_slice(&value.to_be_bytes());
    }
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, value: u32) {
        self.slice_mut()[field::PAYLOAD_LEN].copy_from_slice(&value.to_be_bytes());
    }
}

/// The parsed form of a chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeaderRepr {
    /// Format version (written as [`TELEMETRY_FORMAT_VERSION`] by this build).
    pub version: u8,
    /// Whether this chunk ends its report.
    pub last: bool,
    /// Index of the chunk within its report.
    pub chunk_index: u16,
    /// Switch node id.
    pub switch: NodeId,
    /// Polling event id.
    pub event_id: u64,
    /// Epoch size in ns.
    pub epoch_ns: u64,
    /// Bytes of sections after the header.
    pub payload_len: u32,
}

impl ChunkHeaderRepr {
    /// Parses and validates a header; `base` is its offset in the enclosing buffer, used in
    /// error messages.
    pub fn parse<T: AsRef<[u8]>>(
        header: &ChunkHeader<T>,
        base: usize,
    ) -> Result<Self, TelemetryWireError> {
        if header.magic() != CHUNK_MAGIC {
            return Err(TelemetryWireError::BadMagic {
                offset: base,
                found: header.magic(),
            });
        }
        if !telemetry_version_supported(header.version()) {
            return Err(TelemetryWireError::UnsupportedVersion {
                offset: base + field::VERSION,
                version: header.version(),
            });
        }
        if header.flags() & !CHUNK_FLAG_LAST != 0 {
            return Err(TelemetryWireError::InvalidField {
                offset: base + field::FLAGS,
                field: "chunk flags",
                reason: format!("undefined bits set in {:#04x}", header.flags()),
            });
        }
        let epoch_ns = header.epoch_ns();
        if !epoch_ns.is_power_of_two() {
            return Err(TelemetryWireError::InvalidField {
                offset: base + field::EPOCH_NS.start,
                field: "epoch size",
                reason: format!("{epoch_ns} ns is not a power of two"),
            });
        }
        Ok(ChunkHeaderRepr {
            version: header.version(),
            last: header.flags() & CHUNK_FLAG_LAST != 0,
            chunk_index: header.chunk_index(),
            switch: header.switch(),
            event_id: header.event_id(),
            epoch_ns,
            payload_len: header.payload_len(),
        })
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        field::CHUNK_HEADER_LEN
    }

    /// Bytes of the checksum after the payload (none before version 5).
    pub const fn checksum_len(&self) -> usize {
        if self.version >= 5 {
            CHUNK_CHECKSUM_LEN
        } else {
            0
        }
    }

    /// Bytes of the whole chunk: header, payload and checksum.
    pub const fn chunk_len(&self) -> usize {
        field::CHUNK_HEADER_LEN + self.payload_len as usize + self.checksum_len()
    }

    /// Writes the header into `header`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, header: &mut ChunkHeader<T>) {
        header.set_magic();
        header.set_version(self.version);
        header.set_flags(if self.last { CHUNK_FLAG_LAST } else { 0 });
        header.set_chunk_index(self.chunk_index);
        header.set_switch(self.switch);
        header.set_event_id(self.event_id);
        header.set_epoch_ns(self.epoch_ns);
        header.set_payload_len(self.payload_len);
    }
}

fn be_u16(bytes: &[u8]) -> u16 {
    let mut out = [0; 2];
    out.copy_from_slice(&bytes[..2]);
    u16::from_be_bytes(out)
}
fn be_u32(bytes: &[u8]) -> u32 {
    let mut out = [0; 4];
    out.copy_from_slice(&bytes[..4]);
    u32::from_be_bytes(out)
}
fn be_u64(bytes: &[u8]) -> u64 {
    let mut out = [0; 8];
    out.copy_from_slice(&bytes[..8]);
    u64::from_be_bytes(out)
}

/// Checked cursor over untrusted bytes; every read names its field and absolute offset.
struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], base: usize) -> Self {
        Reader {
            bytes,
            position: 0,
            base,
        }
    }
    fn offset(&self) -> usize {
        self.base + self.position
    }
    fn take(&mut self, len: usize, field: &'static str) -> Result<&'a [u8], TelemetryWireError> {
        let available = self.bytes.len().saturating_sub(self.position);
        if available < len {
            return Err(TelemetryWireError::Truncated {
                offset: self.offset(),
                field,
                needed: len,
                available,
            });
        }
        let out = &self.bytes[self.position..self.position + len];
        self.position += len;
        Ok(out)
    }
    fn u8(&mut self, field: &'static str) -> Result<u8, TelemetryWireError> {
        Ok(self.take(1, field)?[0])
    }
    fn u16(&mut self, field: &'static str) -> Result<u16, TelemetryWireError> {
        Ok(be_u16(self.take(2, field)?))
    }
    fn u32(&mut self, field: &'static str) -> Result<u32, TelemetryWireError> {
        Ok(be_u32(self.take(4, field)?))
    }
    fn u64(&mut self, field: &'static str) -> Result<u64, TelemetryWireError> {
        Ok(be_u64(self.take(8, field)?))
    }
    fn array4(&mut self, field: &'static str) -> Result<[u8; 4], TelemetryWireError> {
        let mut out = [0; 4];
        out.copy_from_slice(self.take(4, field)?);
        Ok(out)
    }
    fn reserved(&mut self, len: usize, field: &'static str) -> Result<(), TelemetryWireError> {
        let offset = self.offset();
        let bytes = self.take(len, field)?;
        if bytes.iter().any(|&b| b != 0) {
            return Err(TelemetryWireError::InvalidField {
                offset,
                field,
                reason: "reserved bytes must be zero".into(),
            });
        }
        Ok(())
    }
    fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.position)
    }
}

/// One encoded record, ready to be placed in a section.
#[derive(Clone, Debug)]
struct EncodedRecord {
    kind: SectionKind,
    epoch_start_ns: u64,
    bytes: Vec<u8>,
}

fn encode_records(report: &TelemetryReport) -> Vec<EncodedRecord> {
    let mut out = Vec::new();
    for polling in std::iter::once(&report.polling).chain(&report.more_polling) {
        let mut bytes = Vec::with_capacity(SectionKind::Polling.record_len());
        bytes.extend_from_slice(&polling.ingress_port.to_be_bytes());
        bytes.push(polling.flags.0);
        bytes.push(0);
        polling.victim.write(&mut bytes);
        bytes.extend_from_slice(&[0, 0, 0]);
        out.push(EncodedRecord {
            kind: SectionKind::Polling,
            epoch_start_ns: 0,
            bytes,
        });
        for egress in &polling.egress {
            let mut bytes = Vec::with_capacity(4);
            bytes.extend_from_slice(&egress.port.to_be_bytes());
            bytes.push(egress.reason.0);
            bytes.push(0);
            out.push(EncodedRecord {
                kind: SectionKind::PollingEgress,
                epoch_start_ns: 0,
                bytes,
            });
        }
    }
    for paused in &report.paused_ports {
        let mut bytes = Vec::with_capacity(12);
        bytes.extend_from_slice(&paused.port.to_be_bytes());
        bytes.push(paused.priorities);
        bytes.push(u8::from(paused.in_force));
        bytes.extend_from_slice(&paused.until_ns.to_be_bytes());
        out.push(EncodedRecord {
            kind: SectionKind::PausedPort,
            epoch_start_ns: 0,
            bytes,
        });
    }
    for epoch in &report.epochs {
        let start = epoch.start_ns;
        let mut bytes = Vec::with_capacity(16);
        bytes.extend_from_slice(&epoch.epoch_id.to_be_bytes());
        bytes.extend_from_slice(&epoch.lost_evictions.to_be_bytes());
        bytes.extend_from_slice(&[0; 4]);
        out.push(EncodedRecord {
            kind: SectionKind::Epoch,
            epoch_start_ns: start,
            bytes,
        });
        for port in &epoch.ports {
            let mut bytes = Vec::with_capacity(28);
            bytes.extend_from_slice(&port.port.to_be_bytes());
            bytes.extend_from_slice(&port.xon_count.to_be_bytes());
            bytes.extend_from_slice(&port.packet_count.to_be_bytes());
            bytes.extend_from_slice(&port.paused_packet_count.to_be_bytes());
            bytes.extend_from_slice(&port.queue_depth_sum_bytes.to_be_bytes());
            bytes.extend_from_slice(&port.unpaused_queue_depth_sum_bytes.to_be_bytes());
            out.push(EncodedRecord {
                kind: SectionKind::Port,
                epoch_start_ns: start,
                bytes,
            });
        }
        for meter in &epoch.meters {
            let mut bytes = Vec::with_capacity(12);
            bytes.extend_from_slice(&meter.ingress_port.to_be_bytes());
            bytes.extend_from_slice(&meter.egress_port.to_be_bytes());
            bytes.extend_from_slice(&meter.bytes.to_be_bytes());
            out.push(EncodedRecord {
                kind: SectionKind::Meter,
                epoch_start_ns: start,
                bytes,
            });
        }
        for flow in &epoch.flows {
            let mut bytes = Vec::with_capacity(40);
            flow.flow.write(&mut bytes);
            bytes.push(u8::from(flow.evicted));
            bytes.extend_from_slice(&flow.egress_port.to_be_bytes());
            bytes.extend_from_slice(&flow.packet_count.to_be_bytes());
            bytes.extend_from_slice(&flow.paused_packet_count.to_be_bytes());
            bytes.extend_from_slice(&flow.queue_depth_sum_bytes.to_be_bytes());
            bytes.extend_from_slice(&flow.first_enqueue_offset_ns.to_be_bytes());
            bytes.extend_from_slice(&flow.last_enqueue_offset_ns.to_be_bytes());
            out.push(EncodedRecord {
                kind: SectionKind::Flow,
                epoch_start_ns: start,
                bytes,
            });
        }
    }
    out
}

impl TelemetryReport {
    /// Smallest chunk size [`TelemetryReport::to_chunks`] accepts: a header, a section
    /// header and the largest record.
    pub const MIN_CHUNK_LEN: usize = field::CHUNK_HEADER_LEN
        + field::SECTION_HEADER_LEN
        + SectionKind::Flow.record_len()
        + CHUNK_CHECKSUM_LEN;

    /// Encodes the report as binary chunks of at most `max_chunk_len` bytes each (e.g. an
    /// MTU less the transport headers). Records are packed in report order; a section ends
    /// when the kind or epoch changes, when 65,535 records are reached, or at a chunk end.
    pub fn to_chunks(&self, max_chunk_len: usize) -> Result<Vec<Vec<u8>>, TelemetryWireError> {
        if max_chunk_len < Self::MIN_CHUNK_LEN {
            return Err(TelemetryWireError::Encode {
                reason: format!(
                    "chunk size {max_chunk_len} is below the minimum of {} bytes",
                    Self::MIN_CHUNK_LEN
                ),
            });
        }
        if !self.epoch_ns.is_power_of_two() {
            return Err(TelemetryWireError::Encode {
                reason: format!("epoch size {} ns is not a power of two", self.epoch_ns),
            });
        }
        let records = encode_records(self);
        // Header and sections; the checksum follows.
        let max_chunk_len = max_chunk_len - CHUNK_CHECKSUM_LEN;
        let mut chunks: Vec<Vec<u8>> = Vec::new();
        let mut current: Vec<u8> = vec![0; field::CHUNK_HEADER_LEN];
        // (offset of the open section header in `current`, kind, epoch, count)
        let mut open: Option<(usize, SectionKind, u64, u16)> = None;
        for record in &records {
            let fits_in_open = match open {
                Some((_, kind, epoch, count)) => {
                    kind == record.kind
                        && epoch == record.epoch_start_ns
                        && count < u16::MAX
                        && current.len() + record.bytes.len() <= max_chunk_len
                }
                None => false,
            };
            if !fits_in_open {
                if let Some((at, _, _, count)) = open.take() {
                    let range = at + field::SECTION_COUNT.start..at + field::SECTION_COUNT.end;
                    current[range].copy_from_slice(&count.to_be_bytes());
                }
                if current.len() + field::SECTION_HEADER_LEN + record.bytes.len() > max_chunk_len {
                    chunks.push(std::mem::replace(
                        &mut current,
                        vec![0; field::CHUNK_HEADER_LEN],
                    ));
                }
                let at = current.len();
                current.push(record.kind as u8);
                current.push(0);
                current.extend_from_slice(&0u16.to_be_bytes());
                current.extend_from_slice(&(record.kind.record_len() as u16).to_be_bytes());
                current.extend_from_slice(&[0, 0]);
                current.extend_from_slice(&record.epoch_start_ns.to_be_bytes());
                open = Some((at, record.kind, record.epoch_start_ns, 0));
            }
            current.extend_from_slice(&record.bytes);
            if let Some((_, _, _, count)) = open.as_mut() {
                *count += 1;
            }
        }
        if let Some((at, _, _, count)) = open.take() {
            let range = at + field::SECTION_COUNT.start..at + field::SECTION_COUNT.end;
            current[range].copy_from_slice(&count.to_be_bytes());
        }
        chunks.push(current);
        let total = chunks.len();
        if total > usize::from(u16::MAX) + 1 {
            return Err(TelemetryWireError::Encode {
                reason: format!("report needs {total} chunks, more than 65,536"),
            });
        }
        for (index, chunk) in chunks.iter_mut().enumerate() {
            let payload_len = chunk.len() - field::CHUNK_HEADER_LEN;
            let repr = ChunkHeaderRepr {
                version: TELEMETRY_FORMAT_VERSION,
                last: index + 1 == total,
                chunk_index: index as u16,
                switch: self.switch,
                event_id: self.event_id,
                epoch_ns: self.epoch_ns,
                payload_len: payload_len as u32,
            };
            let mut header = ChunkHeader::new_unchecked(&mut chunk[..field::CHUNK_HEADER_LEN]);
            repr.emit(&mut header);
            let checksum = chunk_checksum(chunk);
            chunk.extend_from_slice(&checksum.to_be_bytes());
        }
        Ok(chunks)
    }

    /// Encodes the report as one byte stream of concatenated chunks.
    pub fn to_stream(&self, max_chunk_len: usize) -> Result<Vec<u8>, TelemetryWireError> {
        Ok(self.to_chunks(max_chunk_len)?.concat())
    }
}

/// A report being reassembled from chunks.
struct PartialReport {
    header: ChunkHeaderRepr,
    next_index: u16,
    polling: Option<PollingContext>,
    more_polling: Vec<PollingContext>,
    paused_ports: Vec<PausedPort>,
    epochs: Vec<EpochTelemetry>,
    /// Index into `epochs` by start (lookups stay logarithmic: decoding is O(n log n) in
    /// the records, however many epochs a report holds).
    epoch_index: BTreeMap<u64, usize>,
    epochs_with_meta: BTreeSet<u64>,
}

impl PartialReport {
    fn new(header: ChunkHeaderRepr) -> Self {
        PartialReport {
            header,
            next_index: 0,
            polling: None,
            more_polling: Vec::new(),
            paused_ports: Vec::new(),
            epochs: Vec::new(),
            epoch_index: BTreeMap::new(),
            epochs_with_meta: BTreeSet::new(),
        }
    }

    fn epoch_mut(&mut self, start_ns: u64) -> &mut EpochTelemetry {
        let position = match self.epoch_index.get(&start_ns) {
            Some(&position) => position,
            None => {
                self.epoch_index.insert(start_ns, self.epochs.len());
                self.epochs.push(EpochTelemetry {
                    epoch_id: 0,
                    start_ns,
                    lost_evictions: 0,
                    ports: Vec::new(),
                    meters: Vec::new(),
                    flows: Vec::new(),
                });
                self.epochs.len() - 1
            }
        };
        &mut self.epochs[position]
    }
}

fn parse_section(
    report: &mut PartialReport,
    reader: &mut Reader<'_>,
) -> Result<(), TelemetryWireError> {
    let section_offset = reader.offset();
    let kind_byte = reader.u8("section kind")?;
    let kind = SectionKind::from_u8(kind_byte).ok_or(TelemetryWireError::InvalidField {
        offset: section_offset + field::SECTION_KIND,
        field: "section kind",
        reason: format!("unknown section kind {kind_byte}"),
    })?;
    reader.reserved(1, "section reserved")?;
    let count = reader.u16("section record count")?;
    let record_len_offset = section_offset + field::SECTION_RECORD_LEN.start;
    let record_len = reader.u16("section record length")?;
    if usize::from(record_len) != kind.record_len() {
        return Err(TelemetryWireError::InvalidField {
            offset: record_len_offset,
            field: "section record length",
            reason: format!(
                "{kind:?} records are {} bytes, header says {record_len}",
                kind.record_len()
            ),
        });
    }
    reader.reserved(2, "section reserved")?;
    let epoch_offset = reader.offset();
    let epoch_start_ns = reader.u64("section epoch start")?;
    let needed = usize::from(count) * kind.record_len();
    if reader.remaining() < needed {
        return Err(TelemetryWireError::Truncated {
            offset: reader.offset(),
            field: "section records",
            needed,
            available: reader.remaining(),
        });
    }
    let no_epoch = matches!(
        kind,
        SectionKind::Polling | SectionKind::PollingEgress | SectionKind::PausedPort
    );
    if no_epoch && epoch_start_ns != 0 {
        return Err(TelemetryWireError::InvalidField {
            offset: epoch_offset,
            field: "section epoch start",
            reason: "polling and paused-port sections carry no epoch and must hold 0".into(),
        });
    }
    let epoch_ns = report.header.epoch_ns;
    if !no_epoch && epoch_start_ns % epoch_ns != 0 {
        return Err(TelemetryWireError::InvalidField {
            offset: epoch_offset,
            field: "section epoch start",
            reason: format!(
                "epoch start {epoch_start_ns} ns is not a multiple of the epoch size {epoch_ns} ns"
            ),
        });
    }
    for _ in 0..count {
        let record_offset = reader.offset();
        match kind {
            SectionKind::Polling => {
                let ingress_port = reader.u16("polling ingress port")?;
                let flags_offset = reader.offset();
                let flags = TraceFlags(reader.u8("polling flags")?);
                if !flags.is_valid() {
                    return Err(TelemetryWireError::InvalidField {
                        offset: flags_offset,
                        field: "polling flags",
                        reason: format!("undefined bits set in {:#04x}", flags.0),
                    });
                }
                reader.reserved(1, "polling reserved")?;
                let victim = FiveTuple::read(reader, "polling victim 5-tuple")?;
                reader.reserved(3, "polling reserved")?;
                let context = PollingContext {
                    ingress_port,
                    flags,
                    victim,
                    egress: Vec::new(),
                };
                match &report.polling {
                    None => report.polling = Some(context),
                    Some(first) => {
                        let known = std::iter::once(first)
                            .chain(&report.more_polling)
                            .any(|p| p.ingress_port == ingress_port);
                        if known {
                            return Err(TelemetryWireError::InvalidField {
                                offset: record_offset,
                                field: "polling context",
                                reason: format!(
                                    "a second polling context for ingress port {ingress_port} (one per arrival port)"
                                ),
                            });
                        }
                        report.more_polling.push(context);
                    }
                }
            }
            SectionKind::PollingEgress => {
                let port = reader.u16("polling egress port")?;
                let reason_offset = reader.offset();
                let reason = TraceFlags(reader.u8("polling egress reason")?);
                if !reason.is_valid() {
                    return Err(TelemetryWireError::InvalidField {
                        offset: reason_offset,
                        field: "polling egress reason",
                        reason: format!("undefined bits set in {:#04x}", reason.0),
                    });
                }
                reader.reserved(1, "polling egress reserved")?;
                let polling = match report.more_polling.last_mut() {
                    Some(later) => Some(later),
                    None => report.polling.as_mut(),
                };
                let polling = polling.ok_or(TelemetryWireError::InvalidField {
                    offset: record_offset,
                    field: "polling egress",
                    reason: "polling egress records must follow the polling context".into(),
                })?;
                polling.egress.push(PollingEgress { port, reason });
            }
            SectionKind::Epoch => {
                let id_offset = reader.offset();
                let epoch_id = reader.u64("epoch id")?;
                let lost_evictions = reader.u32("epoch lost evictions")?;
                reader.reserved(4, "epoch reserved")?;
                if epoch_id != epoch_start_ns / epoch_ns {
                    return Err(TelemetryWireError::InvalidField {
                        offset: id_offset,
                        field: "epoch id",
                        reason: format!(
                            "epoch id {epoch_id} does not match start {epoch_start_ns} ns / epoch size {epoch_ns} ns"
                        ),
                    });
                }
                if report.epochs_with_meta.contains(&epoch_start_ns) {
                    return Err(TelemetryWireError::InvalidField {
                        offset: record_offset,
                        field: "epoch",
                        reason: format!("epoch starting at {epoch_start_ns} ns appears twice"),
                    });
                }
                report.epochs_with_meta.insert(epoch_start_ns);
                let epoch = report.epoch_mut(epoch_start_ns);
                epoch.epoch_id = epoch_id;
                epoch.lost_evictions = lost_evictions;
            }
            SectionKind::Port => {
                let port = reader.u16("port record port")?;
                let xon_count = reader.u16("port record XON count")?;
                let packet_count = reader.u32("port record packet count")?;
                let paused_packet_count = reader.u32("port record paused packet count")?;
                let queue_depth_sum_bytes = reader.u64("port record queue depth sum")?;
                let unpaused_queue_depth_sum_bytes =
                    reader.u64("port record unpaused queue depth sum")?;
                report.epoch_mut(epoch_start_ns).ports.push(PortRecord {
                    port,
                    packet_count,
                    paused_packet_count,
                    queue_depth_sum_bytes,
                    unpaused_queue_depth_sum_bytes,
                    xon_count,
                });
            }
            SectionKind::Meter => {
                let ingress_port = reader.u16("meter ingress port")?;
                let egress_port = reader.u16("meter egress port")?;
                let bytes = reader.u64("meter bytes")?;
                report.epoch_mut(epoch_start_ns).meters.push(MeterRecord {
                    ingress_port,
                    egress_port,
                    bytes,
                });
            }
            SectionKind::PausedPort => {
                let port = reader.u16("paused port")?;
                let priorities_offset = reader.offset();
                let priorities = reader.u8("paused port priorities")?;
                if priorities == 0 {
                    return Err(TelemetryWireError::InvalidField {
                        offset: priorities_offset,
                        field: "paused port priorities",
                        reason: "a paused port names at least one paused priority".into(),
                    });
                }
                let flags_offset = reader.offset();
                let flags = reader.u8("paused port flags")?;
                if flags & !1 != 0 {
                    return Err(TelemetryWireError::InvalidField {
                        offset: flags_offset,
                        field: "paused port flags",
                        reason: format!("undefined bits set in {flags:#04x}"),
                    });
                }
                let until_ns = reader.u64("paused port pause end")?;
                report.paused_ports.push(PausedPort {
                    port,
                    priorities,
                    in_force: flags & 1 != 0,
                    until_ns,
                });
            }
            SectionKind::Flow => {
                let flow = FiveTuple::read(reader, "flow 5-tuple")?;
                let flags_offset = reader.offset();
                let flags = reader.u8("flow flags")?;
                if flags & !1 != 0 {
                    return Err(TelemetryWireError::InvalidField {
                        offset: flags_offset,
                        field: "flow flags",
                        reason: format!("undefined bits set in {flags:#04x}"),
                    });
                }
                let egress_port = reader.u16("flow egress port")?;
                let packet_count = reader.u32("flow packet count")?;
                let paused_packet_count = reader.u32("flow paused packet count")?;
                let queue_depth_sum_bytes = reader.u64("flow queue depth sum")?;
                let first_enqueue_offset_ns = reader.u32("flow first enqueue offset")?;
                let last_enqueue_offset_ns = reader.u32("flow last enqueue offset")?;
                report.epoch_mut(epoch_start_ns).flows.push(FlowRecord {
                    flow,
                    egress_port,
                    packet_count,
                    paused_packet_count,
                    queue_depth_sum_bytes,
                    first_enqueue_offset_ns,
                    last_enqueue_offset_ns,
                    evicted: flags & 1 != 0,
                });
            }
        }
    }
    Ok(())
}

fn finish_report(
    partial: PartialReport,
    offset: usize,
) -> Result<TelemetryReport, TelemetryWireError> {
    let polling = partial.polling.ok_or(TelemetryWireError::InvalidField {
        offset,
        field: "polling context",
        reason: format!(
            "report of switch {} event {} has no polling section",
            partial.header.switch, partial.header.event_id
        ),
    })?;
    for epoch in &partial.epochs {
        if !partial.epochs_with_meta.contains(&epoch.start_ns) {
            return Err(TelemetryWireError::InvalidField {
                offset,
                field: "epoch",
                reason: format!(
                    "records refer to epoch starting at {} ns but the report has no epoch section for it",
                    epoch.start_ns
                ),
            });
        }
    }
    Ok(TelemetryReport {
        version: TELEMETRY_FORMAT_VERSION,
        switch: partial.header.switch,
        event_id: partial.header.event_id,
        epoch_ns: partial.header.epoch_ns,
        polling,
        more_polling: partial.more_polling,
        paused_ports: partial.paused_ports,
        epochs: partial.epochs,
    })
}

/// Decodes a byte stream of concatenated chunks into reports. The chunks of one report must
/// be consecutive and numbered from 0; the last carries the last-chunk flag. Epochs keep the
/// order in which they first appear.
pub fn decode_reports(bytes: &[u8]) -> Result<Vec<TelemetryReport>, TelemetryWireError> {
    let mut reports = Vec::new();
    let mut partial: Option<PartialReport> = None;
    let mut offset = 0usize;
    while offset < bytes.len() {
        let header_view =
            ChunkHeader::new_checked(&bytes[offset..]).map_err(|error| match error {
                TelemetryWireError::Truncated {
                    field,
                    needed,
                    available,
                    ..
                } => TelemetryWireError::Truncated {
                    offset,
                    field,
                    needed,
                    available,
                },
                other => other,
            })?;
        let header = ChunkHeaderRepr::parse(&header_view, offset)?;
        let payload_start = offset + field::CHUNK_HEADER_LEN;
        let payload_len = header.payload_len as usize;
        let available = bytes.len() - payload_start;
        if available < payload_len + header.checksum_len() {
            return Err(TelemetryWireError::Truncated {
                offset: payload_start,
                field: if available < payload_len {
                    "chunk payload"
                } else {
                    "chunk checksum"
                },
                needed: payload_len + header.checksum_len(),
                available,
            });
        }
        verify_checksum(&header, &bytes[offset..offset + header.chunk_len()], offset)?;
        let index_offset = offset + field::CHUNK_INDEX.start;
        match partial.as_mut() {
            Some(open) => {
                if open.header.switch != header.switch
                    || open.header.event_id != header.event_id
                    || open.header.epoch_ns != header.epoch_ns
                {
                    return Err(TelemetryWireError::InvalidField {
                        offset,
                        field: "chunk header",
                        reason: format!(
                            "report of switch {} event {} is interrupted by a chunk of switch {} event {} before its last chunk",
                            open.header.switch, open.header.event_id, header.switch, header.event_id
                        ),
                    });
                }
                if header.chunk_index != open.next_index {
                    return Err(TelemetryWireError::InvalidField {
                        offset: index_offset,
                        field: "chunk index",
                        reason: format!(
                            "expected chunk {} of switch {} event {}, found {}",
                            open.next_index, header.switch, header.event_id, header.chunk_index
                        ),
                    });
                }
            }
            None => {
                if header.chunk_index != 0 {
                    return Err(TelemetryWireError::InvalidField {
                        offset: index_offset,
                        field: "chunk index",
                        reason: format!(
                            "report of switch {} event {} starts at chunk {}, expected 0",
                            header.switch, header.event_id, header.chunk_index
                        ),
                    });
                }
                partial = Some(PartialReport::new(header));
            }
        }
        let open = partial.as_mut().ok_or(TelemetryWireError::InvalidField {
            offset,
            field: "chunk header",
            reason: "internal: no open report".into(),
        })?;
        let mut reader = Reader::new(
            &bytes[payload_start..payload_start + payload_len],
            payload_start,
        );
        while reader.remaining() > 0 {
            parse_section(open, &mut reader)?;
        }
        open.next_index = open.next_index.wrapping_add(1);
        offset += header.chunk_len();
        if header.last {
            if let Some(done) = partial.take() {
                reports.push(finish_report(done, offset)?);
            }
        }
    }
    if let Some(open) = partial {
        return Err(TelemetryWireError::InvalidField {
            offset,
            field: "chunk",
            reason: format!(
                "stream ends before the last chunk of switch {} event {} (received {} chunks)",
                open.header.switch, open.header.event_id, open.next_index
            ),
        });
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each chunk of `stream` with its checksum recomputed (a test that damages a field
    /// checks what the parser says about that field, not the checksum).
    fn resealed(stream: &[u8]) -> Vec<u8> {
        let mut out = stream.to_vec();
        let mut offset = 0;
        while offset + field::CHUNK_HEADER_LEN <= out.len() {
            let payload = be_u32(&out[offset + field::PAYLOAD_LEN.start..]) as usize;
            let body = field::CHUNK_HEADER_LEN + payload;
            if offset + body + CHUNK_CHECKSUM_LEN > out.len() {
                break;
            }
            let checksum = chunk_checksum(&out[offset..offset + body]);
            out[offset + body..offset + body + CHUNK_CHECKSUM_LEN]
                .copy_from_slice(&checksum.to_be_bytes());
            offset += body + CHUNK_CHECKSUM_LEN;
        }
        out
    }

    /// `stream` as an agent of format `version` (< 5, without checksums) wrote it.
    fn as_version(stream: &[u8], version: u8) -> Vec<u8> {
        let mut out = Vec::new();
        let mut offset = 0;
        while offset < stream.len() {
            let payload = be_u32(&stream[offset + field::PAYLOAD_LEN.start..]) as usize;
            let body = field::CHUNK_HEADER_LEN + payload;
            let start = out.len();
            out.extend_from_slice(&stream[offset..offset + body]);
            out[start + field::VERSION] = version;
            offset += body + CHUNK_CHECKSUM_LEN;
        }
        out
    }

    #[test]
    fn every_flipped_bit_is_refused_by_the_checksum() {
        let stream = sample_report(3).to_stream(256).unwrap();
        assert!(decode_reports(&stream).is_ok());
        let mut refused = 0;
        for byte in 0..stream.len() {
            for bit in 0..8 {
                let mut bad = stream.clone();
                bad[byte] ^= 1 << bit;
                // Whatever else it breaks, a damaged chunk never decodes.
                assert!(decode_reports(&bad).is_err(), "byte {byte} bit {bit}");
                refused += 1;
            }
        }
        assert_eq!(refused, stream.len() * 8);
        // A flipped payload bit is named as damage, with the chunk.
        let mut bad = stream.clone();
        bad[40] ^= 0x10;
        let error = decode_reports(&bad).unwrap_err();
        assert!(
            matches!(
                error,
                TelemetryWireError::Checksum {
                    offset: 0,
                    chunk_index: 0,
                    ..
                }
            ),
            "{error}"
        );
        assert!(check_chunk(&bad[..sample_report(3).to_chunks(256).unwrap()[0].len()]).is_err());
        // Format 4 (no checksum) is still read.
        let old = as_version(&stream, 4);
        assert_eq!(
            decode_reports(&old).unwrap(),
            decode_reports(&stream).unwrap()
        );
    }

    #[test]
    fn decoding_is_not_quadratic_in_epochs() {
        // 20,000 epochs of one report: each epoch is found by its start in a map, not by
        // scanning the ones before it (16 MB reports took 41 s before).
        let mut report = sample_report(0);
        let template = report.epochs[0].clone();
        report.epochs = (0..20_000u64)
            .map(|i| EpochTelemetry {
                epoch_id: i,
                start_ns: i * report.epoch_ns,
                ..template.clone()
            })
            .collect();
        let stream = report.to_stream(9000).unwrap();
        let decoded = decode_reports(&stream).unwrap();
        assert_eq!(decoded[0].epochs.len(), 20_000);
        assert_eq!(decoded[0].epochs[19_999].start_ns, 19_999 * report.epoch_ns);
    }

    fn flow(n: u8) -> FiveTuple {
        FiveTuple::rocev2([10, 0, 0, n], 49152 + u16::from(n), [10, 0, 1, 1])
    }

    fn sample_report(flows: usize) -> TelemetryReport {
        let epoch_ns = 1 << 20;
        let epochs = (0..2u64)
            .map(|i| {
                let start_ns = (100 + i) * epoch_ns;
                EpochTelemetry {
                    epoch_id: 100 + i,
                    start_ns,
                    lost_evictions: i as u32,
                    ports: vec![
                        PortRecord {
                            port: 1,
                            packet_count: 1000,
                            paused_packet_count: 300,
                            queue_depth_sum_bytes: 9_000_000,
                            unpaused_queue_depth_sum_bytes: 4_000_000,
                            xon_count: 3,
                        },
                        PortRecord {
                            port: 2,
                            packet_count: 10,
                            paused_packet_count: 0,
                            queue_depth_sum_bytes: 0,
                            unpaused_queue_depth_sum_bytes: 0,
                            xon_count: 0,
                        },
                    ],
                    meters: vec![MeterRecord {
                        ingress_port: 0,
                        egress_port: 1,
                        bytes: 1_024_000,
                    }],
                    flows: (0..flows)
                        .map(|f| FlowRecord {
                            flow: flow(f as u8),
                            egress_port: 1,
                            packet_count: 10 + f as u32,
                            paused_packet_count: f as u32 % 3,
                            queue_depth_sum_bytes: 12345 * f as u64,
                            first_enqueue_offset_ns: 10,
                            last_enqueue_offset_ns: 5000,
                            evicted: f % 7 == 3,
                        })
                        .collect(),
                }
            })
            .collect();
        TelemetryReport {
            version: TELEMETRY_FORMAT_VERSION,
            switch: 7,
            event_id: 0xdead_beef_0001,
            epoch_ns,
            more_polling: Vec::new(),
            polling: PollingContext {
                ingress_port: 3,
                flags: TraceFlags::BOTH,
                victim: flow(1),
                egress: vec![
                    PollingEgress {
                        port: 1,
                        reason: TraceFlags::VICTIM_PATH,
                    },
                    PollingEgress {
                        port: 2,
                        reason: TraceFlags::PFC_CAUSALITY,
                    },
                ],
            },
            paused_ports: vec![PausedPort {
                port: 2,
                priorities: 0b1000,
                in_force: true,
                until_ns: 1_234_567,
            }],
            epochs,
        }
    }

    #[test]
    fn five_tuple_text_round_trips_and_defaults() {
        let tuple: FiveTuple = "10.0.0.1:49152->10.0.0.9:4791".parse().unwrap();
        assert_eq!(
            tuple,
            FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 0, 9])
        );
        assert_eq!(tuple.to_string(), "10.0.0.1:49152->10.0.0.9:4791");
        let short: FiveTuple = " 10.0.0.1:49152 -> 10.0.0.9 ".parse().unwrap();
        assert_eq!(short, tuple);
        let tcp: FiveTuple = "1.2.3.4:5->6.7.8.9:10/tcp".parse().unwrap();
        assert_eq!(tcp.protocol, 6);
        assert_eq!(tcp.to_string().parse::<FiveTuple>().unwrap(), tcp);
        for bad in [
            "10.0.0.1->10.0.0.9",
            "10.0.0.1:70000->10.0.0.9",
            "10.0.0.256:1->10.0.0.9",
            "10.0.0:1->10.0.0.9",
            "10.0.0.1:1 10.0.0.9",
            "10.0.0.1:1->10.0.0.9/icmpx",
        ] {
            assert!(bad.parse::<FiveTuple>().is_err(), "{bad} must not parse");
        }
    }

    #[test]
    fn json_round_trip_single_and_many() {
        let report = sample_report(5);
        let json = serde_json::to_string_pretty(&report).unwrap();
        assert!(json.contains("\"10.0.0.1:49153->10.0.1.1:4791\""));
        let back: ReportFile = serde_json::from_str(&json).unwrap();
        assert_eq!(back.into_reports(), vec![report.clone()]);
        let many = serde_json::to_string(&vec![report.clone(), report.clone()]).unwrap();
        let back: ReportFile = serde_json::from_str(&many).unwrap();
        assert_eq!(back.into_reports().len(), 2);
    }

    #[test]
    fn binary_round_trip_in_one_and_many_chunks() {
        let report = sample_report(100);
        let one = report.to_chunks(1 << 20).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(decode_reports(&one.concat()).unwrap(), vec![report.clone()]);
        let chunks = report.to_chunks(1500).unwrap();
        assert!(
            chunks.len() > 3,
            "100 flows x 2 epochs need several MTU chunks"
        );
        assert!(chunks.iter().all(|c| c.len() <= 1500));
        let header = ChunkHeader::new_checked(&chunks[0][..]).unwrap();
        let repr = ChunkHeaderRepr::parse(&header, 0).unwrap();
        assert_eq!(repr.switch, 7);
        assert!(!repr.last);
        assert_eq!(repr.buffer_len(), ChunkHeader::<&[u8]>::LEN);
        let mut stream = chunks.concat();
        // Two reports back to back in one stream.
        let mut second = report.clone();
        second.switch = 8;
        stream.extend(second.to_stream(TelemetryReport::MIN_CHUNK_LEN).unwrap());
        let decoded = decode_reports(&stream).unwrap();
        assert_eq!(decoded, vec![report, second]);
    }

    #[test]
    fn every_truncation_is_an_error_naming_an_offset() {
        let stream = sample_report(3).to_stream(400).unwrap();
        for len in 1..stream.len() {
            let error = decode_reports(&stream[..len]).unwrap_err();
            let text = error.to_string();
            assert!(
                text.contains("byte") || text.contains("stream ends"),
                "{text}"
            );
            if let TelemetryWireError::Truncated { offset, .. } = error {
                assert!(offset <= len);
            }
        }
    }

    #[test]
    fn port_xon_counts_round_trip_and_version_2_reads_them_as_zero() {
        let report = sample_report(1);
        assert_eq!(report.epochs[0].ports[0].xon_count, 3);
        let stream = report.to_stream(4096).unwrap();
        let decoded = decode_reports(&stream).unwrap();
        assert_eq!(decoded[0].epochs[0].ports[0].xon_count, 3);
        // A version-2 agent wrote zeros where the XON count now sits.
        let mut old = sample_report(1);
        for epoch in &mut old.epochs {
            for port in &mut epoch.ports {
                port.xon_count = 0;
            }
        }
        let stream = as_version(&old.to_stream(4096).unwrap(), 2);
        let decoded = decode_reports(&stream).unwrap();
        assert!(decoded[0]
            .epochs
            .iter()
            .all(|e| e.ports.iter().all(|p| p.xon_count == 0)));
        // JSON without the field (version 2) reads as zero too.
        let json = r#"{"port":1,"packet_count":5,"paused_packet_count":0,"queue_depth_sum_bytes":0,"unpaused_queue_depth_sum_bytes":0}"#;
        let record: PortRecord = serde_json::from_str(json).unwrap();
        assert_eq!(record.xon_count, 0);
    }

    #[test]
    fn corrupt_fields_are_named() {
        let stream = sample_report(1).to_stream(4096).unwrap();
        let mut bad = stream.clone();
        bad[0] = b'X';
        assert!(matches!(
            decode_reports(&resealed(&bad)),
            Err(TelemetryWireError::BadMagic { offset: 0, .. })
        ));
        let mut bad = stream.clone();
        bad[4] = 9;
        assert!(matches!(
            decode_reports(&resealed(&bad)),
            Err(TelemetryWireError::UnsupportedVersion {
                offset: 4,
                version: 9
            })
        ));
        let mut bad = stream.clone();
        bad[27] = 3; // epoch size no longer a power of two
        assert!(matches!(
            decode_reports(&resealed(&bad)),
            Err(TelemetryWireError::InvalidField {
                field: "epoch size",
                offset: 20,
                ..
            })
        ));
        let mut bad = stream.clone();
        bad[32] = 99; // first section kind
        assert!(matches!(
            decode_reports(&resealed(&bad)),
            Err(TelemetryWireError::InvalidField {
                field: "section kind",
                offset: 32,
                ..
            })
        ));
        let mut bad = stream.clone();
        bad[37] = 21; // record length of the polling section
        assert!(matches!(
            decode_reports(&resealed(&bad)),
            Err(TelemetryWireError::InvalidField {
                field: "section record length",
                offset: 36,
                ..
            })
        ));
        // Header 32, polling section 16 + 20, egress section 16 + 2 × 4, paused-port section
        // header 16: the record's priorities byte is at 110.
        let mut bad = stream.clone();
        assert_eq!(bad[92], SectionKind::PausedPort as u8);
        bad[110] = 0;
        assert!(matches!(
            decode_reports(&resealed(&bad)),
            Err(TelemetryWireError::InvalidField {
                field: "paused port priorities",
                offset: 110,
                ..
            })
        ));
        let mut bad = stream;
        bad[6..8].copy_from_slice(&5u16.to_be_bytes());
        assert!(matches!(
            decode_reports(&resealed(&bad)),
            Err(TelemetryWireError::InvalidField {
                field: "chunk index",
                offset: 6,
                ..
            })
        ));
    }

    #[test]
    fn later_arrivals_by_other_ports_round_trip_with_their_own_branches() {
        let mut report = sample_report(4);
        report.more_polling = vec![
            PollingContext {
                ingress_port: 5,
                flags: TraceFlags::PFC_CAUSALITY,
                victim: flow(1),
                egress: vec![PollingEgress {
                    port: 6,
                    reason: TraceFlags::PFC_CAUSALITY,
                }],
            },
            PollingContext {
                ingress_port: 0,
                flags: TraceFlags::PFC_CAUSALITY,
                victim: flow(1),
                egress: Vec::new(),
            },
        ];
        for chunk_len in [1 << 20, TelemetryReport::MIN_CHUNK_LEN] {
            let stream = report.to_stream(chunk_len).unwrap();
            assert_eq!(decode_reports(&stream).unwrap(), vec![report.clone()]);
        }
        let json = serde_json::to_string(&report).unwrap();
        let back: ReportFile = serde_json::from_str(&json).unwrap();
        assert_eq!(back.into_reports(), vec![report.clone()]);
        // A report of one arrival (every report before format 4) has no `more_polling`.
        let single = serde_json::to_string(&sample_report(1)).unwrap();
        assert!(!single.contains("more_polling"));
        // Two contexts for one arrival port contradict the data plane's dedupe.
        let mut twice = report;
        twice.more_polling[1].ingress_port = twice.polling.ingress_port;
        let error = decode_reports(&twice.to_stream(1 << 20).unwrap()).unwrap_err();
        assert!(
            matches!(
                error,
                TelemetryWireError::InvalidField {
                    field: "polling context",
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn chunk_size_below_minimum_is_refused() {
        assert!(matches!(
            sample_report(1).to_chunks(40),
            Err(TelemetryWireError::Encode { .. })
        ));
    }
}
