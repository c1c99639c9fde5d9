//! Building and reading packet bytes with the program's own header layouts (so no byte
//! offset is written twice): RoCEv2 data packets, PFC frames, polling packets.

use hawkmesh_wire::pfc::PfcRepr;
use hawkmesh_wire::telemetry::FiveTuple;

use crate::ir::Program;

/// Bit offset and width of `header.field` in the program's layout.
pub fn field_layout(program: &Program, header: &str, field: &str) -> Option<(usize, u8)> {
    let h = program.header_by_name(header)?;
    let mut off = 0usize;
    for f in &program.headers[h.0 as usize].fields {
        let def = program.field(*f);
        if def.name == field {
            return Some((off, def.width));
        }
        off += def.width as usize;
    }
    None
}

/// Bytes of a header.
pub fn header_len(program: &Program, header: &str) -> usize {
    program.header_by_name(header).map_or(0, |h| {
        program.headers[h.0 as usize].bits(program) as usize / 8
    })
}

/// Emits `header` with the given field values (others 0).
pub fn emit_header(program: &Program, header: &str, values: &[(&str, u64)]) -> Vec<u8> {
    let mut out = vec![0u8; header_len(program, header)];
    for (name, v) in values {
        if let Some((off, w)) = field_layout(program, header, name) {
            write_field(&mut out, off, w, *v);
        }
    }
    out
}

/// Reads `header.field` from bytes where the header starts at `start`.
pub fn read_field(
    program: &Program,
    bytes: &[u8],
    start: usize,
    header: &str,
    field: &str,
) -> Option<u64> {
    let (off, w) = field_layout(program, header, field)?;
    let bit = start * 8 + off;
    if bit + w as usize > bytes.len() * 8 {
        return None;
    }
    let mut v: u128 = 0;
    for i in 0..w as usize {
        let b = bit + i;
        v = (v << 1) | ((bytes[b / 8] >> (7 - b % 8)) & 1) as u128;
    }
    Some(v as u64)
}

/// Writes `header.field` into bytes where the header starts at `start`; false when out of
/// range.
pub fn write_header_field(
    program: &Program,
    bytes: &mut [u8],
    start: usize,
    header: &str,
    field: &str,
    value: u64,
) -> bool {
    let Some((off, w)) = field_layout(program, header, field) else {
        return false;
    };
    if (start * 8 + off + w as usize) > bytes.len() * 8 {
        return false;
    }
    write_field(&mut bytes[start..], off, w, value);
    true
}

fn write_field(buf: &mut [u8], off: usize, w: u8, v: u64) {
    for i in 0..w as usize {
        let bit = (v >> (w as usize - 1 - i)) & 1;
        let b = off + i;
        if bit == 1 {
            buf[b / 8] |= 1 << (7 - b % 8);
        } else {
            buf[b / 8] &= !(1 << (7 - b % 8));
        }
    }
}

/// Ethernet + IPv4 + UDP headers for `tuple`.
pub fn eth_ipv4_udp(
    program: &Program,
    tuple: &FiveTuple,
    dscp: u8,
    ecn: u8,
    ttl: u8,
    udp_payload: usize,
) -> Vec<u8> {
    let ip = |a: [u8; 4]| u32::from_be_bytes(a) as u64;
    let mut v = emit_header(
        program,
        "ethernet",
        &[
            ("dst_addr", 0x02_00_00_00_00_02),
            ("src_addr", 0x02_00_00_00_00_01),
            ("ether_type", 0x0800),
        ],
    );
    let udp_len = 8 + udp_payload;
    v.extend(emit_header(
        program,
        "ipv4",
        &[
            ("version", 4),
            ("ihl", 5),
            ("dscp", dscp as u64),
            ("ecn", ecn as u64),
            ("total_len", (20 + udp_len) as u64),
            ("ttl", ttl as u64),
            ("protocol", tuple.protocol as u64),
            ("src_addr", ip(tuple.src_ip)),
            ("dst_addr", ip(tuple.dst_ip)),
        ],
    ));
    v.extend(emit_header(
        program,
        "udp",
        &[
            ("src_port", tuple.src_port as u64),
            ("dst_port", tuple.dst_port as u64),
            ("length", udp_len as u64),
        ],
    ));
    v
}

/// A RoCEv2 data packet of `wire_len` bytes (headers, BTH, zero payload to the length).
pub fn rocev2_data(
    program: &Program,
    tuple: &FiveTuple,
    dscp: u8,
    ecn: u8,
    ttl: u8,
    psn: u32,
    wire_len: usize,
) -> Vec<u8> {
    let bth = emit_header(
        program,
        "bth",
        &[
            ("opcode", 0x0A),
            ("partition_key", 0xFFFF),
            ("psn", psn as u64),
        ],
    );
    let base = 14 + 20 + 8 + bth.len();
    let payload = wire_len.saturating_sub(base);
    let mut v = eth_ipv4_udp(program, tuple, dscp, ecn, ttl, bth.len() + payload);
    v.extend(bth);
    v.resize(v.len() + payload, 0);
    v
}

/// A PFC frame (IEEE 802.1Qbb) with per-priority quanta for the enabled classes.
pub fn pfc_frame(vector: u8, quanta: [u16; 8]) -> Vec<u8> {
    let repr = PfcRepr {
        source: [0x02, 0, 0, 0, 0, 0x99],
        class_enable_vector: vector,
        quanta,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    // The buffer has the exact length the representation asks for.
    let _ = repr.emit(&mut buf);
    buf
}

/// Fields of a polling header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Polling {
    /// Event id.
    pub event_id: u64,
    /// Victim flow.
    pub victim: FiveTuple,
    /// Trace flag (HAWKEYE Table 1).
    pub trace_flag: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Context kind (0 in flight, 1 CPU copy).
    pub context_kind: u8,
    /// Flags on arrival at the switch (CPU copies).
    pub arrival_flags: u8,
    /// Ingress port context (CPU copies).
    pub context_ingress_port: u16,
    /// Egress port context: the victim's egress port (CPU copies).
    pub context_egress_port: u16,
    /// Context flags (CPU copies): `POLLING_CONTEXT_VICTIM_PAUSED`.
    pub context_flags: u8,
    /// Bitmap of the PFC-branch egress ports (CPU copies): bit `p` = port `p`.
    pub context_pfc_ports: u64,
}

impl Polling {
    /// A fresh polling packet header from a host.
    pub fn new(event_id: u64, victim: FiveTuple, hop_limit: u8) -> Self {
        Polling {
            event_id,
            victim,
            trace_flag: 1,
            hop_limit,
            context_kind: 0,
            arrival_flags: 0,
            context_ingress_port: 0,
            context_egress_port: 0,
            context_flags: 0,
            context_pfc_ports: 0,
        }
    }

    /// The header bytes.
    pub fn emit(&self, program: &Program) -> Vec<u8> {
        let ip = |a: [u8; 4]| u32::from_be_bytes(a) as u64;
        emit_header(
            program,
            "polling",
            &[
                ("version", program.constant("POLLING_VERSION").unwrap_or(1)),
                ("trace_flag", self.trace_flag as u64 & 3),
                ("hop_limit", self.hop_limit as u64),
                ("context_kind", self.context_kind as u64),
                ("event_id", self.event_id),
                ("victim_src_addr", ip(self.victim.src_ip)),
                ("victim_dst_addr", ip(self.victim.dst_ip)),
                ("victim_src_port", self.victim.src_port as u64),
                ("victim_dst_port", self.victim.dst_port as u64),
                ("victim_protocol", self.victim.protocol as u64),
                ("arrival_flags", self.arrival_flags as u64),
                ("context_ingress_port", self.context_ingress_port as u64),
                ("context_egress_port", self.context_egress_port as u64),
                ("context_flags", self.context_flags as u64),
                ("context_pfc_ports", self.context_pfc_ports),
            ],
        )
    }

    /// Parses header bytes (None when too short).
    pub fn parse(program: &Program, bytes: &[u8]) -> Option<Polling> {
        let r = |f: &str| read_field(program, bytes, 0, "polling", f);
        let ip = |v: u64| (v as u32).to_be_bytes();
        Some(Polling {
            event_id: r("event_id")?,
            victim: FiveTuple {
                src_ip: ip(r("victim_src_addr")?),
                dst_ip: ip(r("victim_dst_addr")?),
                src_port: r("victim_src_port")? as u16,
                dst_port: r("victim_dst_port")? as u16,
                protocol: r("victim_protocol")? as u8,
            },
            trace_flag: r("trace_flag")? as u8,
            hop_limit: r("hop_limit")? as u8,
            context_kind: r("context_kind")? as u8,
            arrival_flags: r("arrival_flags")? as u8,
            context_ingress_port: r("context_ingress_port")? as u16,
            context_egress_port: r("context_egress_port")? as u16,
            context_flags: r("context_flags")? as u8,
            context_pfc_ports: r("context_pfc_ports")?,
        })
    }
}

/// A full polling packet: Ethernet/IPv4/UDP(dport = POLLING_UDP_PORT) + polling header. The
/// outer addresses are the victim's, so non-HAWKEYE hops route it like the victim.
pub fn polling_packet(program: &Program, polling: &Polling) -> Vec<u8> {
    let mut outer = polling.victim;
    outer.dst_port = program.constant("POLLING_UDP_PORT").unwrap_or(0x6888) as u16;
    let header = polling.emit(program);
    let mut v = eth_ipv4_udp(program, &outer, 0, 0, 64, header.len());
    v.extend(header);
    v
}

/// Byte offset of the polling header in a polling packet.
pub fn polling_offset(program: &Program) -> usize {
    header_len(program, "ethernet") + header_len(program, "ipv4") + header_len(program, "udp")
}
