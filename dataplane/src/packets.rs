//! Building and reading packet bytes with the program's own header layouts (so no byte
//! offset is written twice): RoCEv2 data packets, PFC frames, polling packets. The polling
//! header itself is `wire::polling` (a typed view checked against the same layout).

use hawkmesh_wire::pfc::PfcRepr;
pub use hawkmesh_wire::polling::Polling;
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

/// A full polling packet: Ethernet/IPv4/UDP(dport = POLLING_UDP_PORT) + polling header. The
/// outer addresses are the victim's, so non-HAWKEYE hops route it like the victim.
pub fn polling_packet(program: &Program, polling: &Polling) -> Vec<u8> {
    let mut outer = polling.victim;
    outer.dst_port = program.constant("POLLING_UDP_PORT").unwrap_or(0x6888) as u16;
    let header = polling.emit();
    let mut v = eth_ipv4_udp(program, &outer, 0, 0, 64, header.len());
    v.extend_from_slice(&header);
    v
}

/// Byte offset of the polling header in a polling packet.
pub fn polling_offset(program: &Program) -> usize {
    header_len(program, "ethernet") + header_len(program, "ipv4") + header_len(program, "udp")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hawkeye::{program, HawkeyeParams};
    use hawkmesh_wire::polling::POLLING_PACKET_OFFSET;

    /// `wire::polling` is a fixed view; the program is the source of the layout. Every field
    /// written through the program's layout must read back through the view, and the view's
    /// bytes must be what the program's layout emits.
    #[test]
    fn the_wire_polling_view_is_the_programs_layout() {
        for params in [
            HawkeyeParams::default(),
            HawkeyeParams {
                sketch: None,
                ..HawkeyeParams::default()
            },
        ] {
            let p = program(&params).expect("program");
            assert_eq!(polling_offset(&p), POLLING_PACKET_OFFSET);
            let polling = Polling {
                event_id: 0xfedc_ba98_7654_3210,
                victim: FiveTuple::rocev2([11, 0, 4, 1], 49153, [11, 0, 0, 2]),
                trace_flag: 3,
                hop_limit: 9,
                context_kind: 1,
                arrival_flags: 2,
                context_ingress_port: 17,
                context_egress_port: 0xffff,
                context_flags: 1,
                context_pfc_ports: 0x8000_0000_0000_0021,
                context_tstamp_ns: 0x0000_1234_5678_9abc,
            };
            let ip = |a: [u8; 4]| u64::from(u32::from_be_bytes(a));
            let by_program = emit_header(
                &p,
                "polling",
                &[
                    ("version", p.constant("POLLING_VERSION").expect("version")),
                    ("trace_flag", 3),
                    ("hop_limit", 9),
                    ("context_kind", 1),
                    ("event_id", polling.event_id),
                    ("victim_src_addr", ip(polling.victim.src_ip)),
                    ("victim_dst_addr", ip(polling.victim.dst_ip)),
                    ("victim_src_port", 49153),
                    ("victim_dst_port", u64::from(polling.victim.dst_port)),
                    ("victim_protocol", 17),
                    ("arrival_flags", 2),
                    ("context_ingress_port", 17),
                    ("context_egress_port", 0xffff),
                    ("context_flags", 1),
                    ("context_pfc_ports", polling.context_pfc_ports),
                    ("context_tstamp", polling.context_tstamp_ns),
                ],
            );
            assert_eq!(polling.emit().as_slice(), by_program.as_slice());
            let packet = polling_packet(&p, &polling);
            assert_eq!(Polling::parse_packet(&packet), Ok(polling));
        }
    }
}
