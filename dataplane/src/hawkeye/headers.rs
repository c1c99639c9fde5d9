//! Headers (wire order, with the eviction report first so that it is deparsed in front of
//! Ethernet) and the forward-only parser.

use super::constants::Consts;
use super::{ETHERTYPE_IPV4, IP_PROTOCOL_UDP};
use crate::ir::*;

/// The flow eviction report prepended to an eviction CPU copy.
pub(super) struct Eviction {
    pub(super) header: HeaderId,
    pub(super) epoch_id: FieldId,
    pub(super) epoch_index: FieldId,
    pub(super) egress_port: FieldId,
    pub(super) src_addr: FieldId,
    pub(super) dst_addr: FieldId,
    pub(super) src_port: FieldId,
    pub(super) dst_port: FieldId,
    pub(super) packets: FieldId,
    pub(super) paused_packets: FieldId,
    pub(super) unpaused_qdepth_sum: FieldId,
    pub(super) first_offset_ns: FieldId,
    pub(super) last_offset_ns: FieldId,
}

/// The IEEE 802.1Qbb PFC frame body.
pub(super) struct Pfc {
    pub(super) header: HeaderId,
    pub(super) opcode: FieldId,
    pub(super) class_enable: FieldId,
    /// `quanta_0..quanta_7`.
    pub(super) quanta: Vec<FieldId>,
}

/// IPv4 (the fields the program reads).
pub(super) struct Ipv4 {
    pub(super) header: HeaderId,
    pub(super) dscp: FieldId,
    /// RFC 3168 §5 ECN codepoint.
    pub(super) ecn: FieldId,
    pub(super) total_len: FieldId,
    pub(super) protocol: FieldId,
    pub(super) src_addr: FieldId,
    pub(super) dst_addr: FieldId,
}

/// UDP (the ports).
pub(super) struct Udp {
    pub(super) header: HeaderId,
    pub(super) src_port: FieldId,
    pub(super) dst_port: FieldId,
}

/// The HAWKEYE polling header (the fields the program reads or writes).
pub(super) struct Polling {
    pub(super) header: HeaderId,
    pub(super) version: FieldId,
    pub(super) trace_flag: FieldId,
    pub(super) hop_limit: FieldId,
    pub(super) context_kind: FieldId,
    pub(super) event_id: FieldId,
    pub(super) victim_src_addr: FieldId,
    pub(super) victim_dst_addr: FieldId,
    pub(super) victim_src_port: FieldId,
    pub(super) victim_dst_port: FieldId,
    pub(super) arrival_flags: FieldId,
    pub(super) context_ingress_port: FieldId,
    pub(super) context_egress_port: FieldId,
    pub(super) context_flags: FieldId,
    pub(super) context_pfc_ports: FieldId,
    pub(super) context_tstamp: FieldId,
}

/// Every header instance, with the fields the program uses.
pub(super) struct Headers {
    pub(super) eviction: Eviction,
    pub(super) ethernet: HeaderId,
    pub(super) ether_type: FieldId,
    pub(super) pfc: Pfc,
    pub(super) ipv4: Ipv4,
    pub(super) udp: Udp,
    /// The RoCEv2 BTH (its validity, and its opcode for the sketch).
    pub(super) bth: HeaderId,
    pub(super) bth_opcode: FieldId,
    pub(super) polling: Polling,
}

/// Declares the headers.
pub(super) fn headers(b: &mut ProgramBuilder) -> Headers {
    // The eviction report is declared first so that it is deparsed in front of Ethernet
    // on an eviction CPU copy.
    let (eviction, ev) = b.synthesized_header(
        "eviction",
        "Flow eviction report prepended to an egress clone for the CPU (HAWKEYE §3.3: a colliding flow evicts the old one and the controller stores it)",
        &[
            ("epoch_id", 16),
            ("epoch_index", 8),
            ("egress_port", 16),
            ("src_addr", 32),
            ("dst_addr", 32),
            ("src_port", 16),
            ("dst_port", 16),
            ("packets", 32),
            ("paused_packets", 32),
            ("unpaused_qdepth_sum", 32),
            ("first_offset_ns", 32),
            ("last_offset_ns", 32),
        ],
    );
    let (ethernet, eth) = b.header(
        "ethernet",
        "Ethernet II",
        &[("dst_addr", 48), ("src_addr", 48), ("ether_type", 16)],
    );
    let mut pfc_fields: Vec<(String, u8)> =
        vec![("opcode".into(), 16), ("class_enable".into(), 16)];
    for q in 0..8 {
        pfc_fields.push((format!("quanta_{q}"), 16));
    }
    let pfc_refs: Vec<(&str, u8)> = pfc_fields.iter().map(|(n, w)| (n.as_str(), *w)).collect();
    let (pfc, pf) = b.header(
        "pfc",
        "IEEE 802.1Qbb PFC frame body: opcode, class-enable vector, eight quanta",
        &pfc_refs,
    );
    let (ipv4, ip) = b.header(
        "ipv4",
        "IPv4 (RFC 791; DSCP/ECN per RFC 2474/3168)",
        &[
            ("version", 4),
            ("ihl", 4),
            ("dscp", 6),
            ("ecn", 2),
            ("total_len", 16),
            ("identification", 16),
            ("flags", 3),
            ("frag_offset", 13),
            ("ttl", 8),
            ("protocol", 8),
            ("hdr_checksum", 16),
            ("src_addr", 32),
            ("dst_addr", 32),
        ],
    );
    let (udp, u) = b.header(
        "udp",
        "UDP",
        &[
            ("src_port", 16),
            ("dst_port", 16),
            ("length", 16),
            ("checksum", 16),
        ],
    );
    let (bth, bt) = b.header(
        "bth",
        "InfiniBand Base Transport Header of RoCEv2 (IBTA vol. 1 §9.2)",
        &[
            ("opcode", 8),
            ("flags", 8),
            ("partition_key", 16),
            ("reserved0", 8),
            ("dest_qp", 24),
            ("ack_request", 1),
            ("reserved1", 7),
            ("psn", 24),
        ],
    );
    let (polling, po) = b.header(
        "polling",
        "HAWKEYE polling header (HAWKEYE Fig. 5, Table 1), version 3: 64-bit event id, victim 5-tuple, 2-bit trace flag, hop limit, port context (arrival port and flags, the victim's egress port, whether the victim is paused there, the PFC-branch egress ports, the switch's ingress timestamp of the packet)",
        &[
            ("version", 8),
            ("reserved_flags", 6),
            ("trace_flag", 2),
            ("hop_limit", 8),
            ("context_kind", 8),
            ("event_id", 64),
            ("victim_src_addr", 32),
            ("victim_dst_addr", 32),
            ("victim_src_port", 16),
            ("victim_dst_port", 16),
            ("victim_protocol", 8),
            ("arrival_flags", 8),
            ("context_ingress_port", 16),
            ("context_egress_port", 16),
            ("context_flags", 8),
            ("reserved", 8),
            ("context_pfc_ports", 64),
            ("context_tstamp", 64),
        ],
    );
    Headers {
        eviction: Eviction {
            header: eviction,
            epoch_id: ev[0],
            epoch_index: ev[1],
            egress_port: ev[2],
            src_addr: ev[3],
            dst_addr: ev[4],
            src_port: ev[5],
            dst_port: ev[6],
            packets: ev[7],
            paused_packets: ev[8],
            unpaused_qdepth_sum: ev[9],
            first_offset_ns: ev[10],
            last_offset_ns: ev[11],
        },
        ethernet,
        ether_type: eth[2],
        pfc: Pfc {
            header: pfc,
            opcode: pf[0],
            class_enable: pf[1],
            quanta: pf[2..10].to_vec(),
        },
        ipv4: Ipv4 {
            header: ipv4,
            dscp: ip[2],
            ecn: ip[3],
            total_len: ip[4],
            protocol: ip[9],
            src_addr: ip[11],
            dst_addr: ip[12],
        },
        udp: Udp {
            header: udp,
            src_port: u[0],
            dst_port: u[1],
        },
        bth,
        bth_opcode: bt[0],
        polling: Polling {
            header: polling,
            version: po[0],
            trace_flag: po[2],
            hop_limit: po[3],
            context_kind: po[4],
            event_id: po[5],
            victim_src_addr: po[6],
            victim_dst_addr: po[7],
            victim_src_port: po[8],
            victim_dst_port: po[9],
            arrival_flags: po[11],
            context_ingress_port: po[12],
            context_egress_port: po[13],
            context_flags: po[14],
            context_pfc_ports: po[16],
            context_tstamp: po[17],
        },
    }
}

/// The parser: Ethernet, then PFC or IPv4; UDP; RoCEv2 BTH or the polling header.
pub(super) fn parser(b: &mut ProgramBuilder, k: &Consts, h: &Headers) {
    let (ethertype_mac_control, rocev2_port, polling_port) =
        (k.ethertype_mac_control, k.rocev2_port, k.polling_port);
    let (ethernet, pfc, ipv4, udp, bth, polling) = (
        h.ethernet,
        h.pfc.header,
        h.ipv4.header,
        h.udp.header,
        h.bth,
        h.polling.header,
    );
    let (eth_type, ip_proto, udp_dport) = (h.ether_type, h.ipv4.protocol, h.udp.dst_port);
    let start = b.parser_state("start", Some(ethernet), Transition::Accept);
    let parse_pfc = b.parser_state("parse_pfc", Some(pfc), Transition::Accept);
    let parse_ipv4 = b.parser_state("parse_ipv4", Some(ipv4), Transition::Accept);
    let parse_udp = b.parser_state("parse_udp", Some(udp), Transition::Accept);
    let parse_bth = b.parser_state("parse_bth", Some(bth), Transition::Accept);
    let parse_polling = b.parser_state("parse_polling", Some(polling), Transition::Accept);
    b.set_transition(
        start,
        Transition::Select {
            field: eth_type,
            cases: vec![
                (ethertype_mac_control, Some(parse_pfc)),
                (ETHERTYPE_IPV4, Some(parse_ipv4)),
            ],
        },
    );
    b.set_transition(
        parse_ipv4,
        Transition::Select {
            field: ip_proto,
            cases: vec![(IP_PROTOCOL_UDP, Some(parse_udp))],
        },
    );
    b.set_transition(
        parse_udp,
        Transition::Select {
            field: udp_dport,
            cases: vec![
                (rocev2_port, Some(parse_bth)),
                (polling_port, Some(parse_polling)),
            ],
        },
    );
}
