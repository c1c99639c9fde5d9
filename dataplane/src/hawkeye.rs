//! The hawkmesh switch program: HAWKEYE telemetry, causality meters and polling
//! (HAWKEYE §3.3–3.4) and, on ToR variants, PARALEON's Elastic Sketch — written once here.
//!
//! # Pipeline
//!
//! ```text
//! ingress (every packet, when it is enqueued)        egress (per copy, when it leaves)
//!  PFC frame (0x8808/0x0101): pause_end_p{q}[port]     clone to CPU: write port context
//!   = now + quanta×512 bit times (quanta 0 = XON);      (victim port, victim paused, PFC
//!   PFC bitmap of paused ports; frame consumed           branch ports)
//!  polling (UDP dport POLLING_UDP_PORT)                polling copy: keep on the victim
//!   hop limit 0 / bad version → drop                    port (flag 01) or, with the PFC
//!   dedupe[hash(event, port)] within interval → drop    bit, on a port of the bridged PFC
//!   clone to CPU (ingress port, arrival flags)          branch set; set the PFC bit when
//!   victim paused = victim port ∈ paused bitmap         the victim is paused; hop − 1
//!   PFC branch = fanout[ingress] ∩ paused bitmap      RoCEv2 (BTH): queue-depth sums per
//!   flag 1x → multicast all ports                       port and flow telemetry (epoch
//!   flag 01 → victim's forwarding choice                slots reset on first touch), flow
//!  IPv4 → forward table (L3/ECMP)                       eviction → egress clone to CPU
//!   RoCEv2 (BTH): paused = pause_end[egress, tc] > now
//!    port packets / paused packets, causality meter
//!    bytes[in→out], fanout and paused bitmaps
//!   ToR: Elastic Sketch insert once per path (DSCP mark bit)
//! ```
//!
//! HAWKEYE's artifact counts in egress only, so a packet held behind a PAUSE is invisible
//! until it leaves; during a PFC storm or a deadlock it never leaves. Counting paused
//! packets and meter bytes at enqueue (ingress knows the egress port and the time) makes the
//! paused port and its causality visible while the pause lasts; queue depths at enqueue are
//! only known in egress (`enq_qdepth`), so those sums stay there, keyed by the enqueue epoch.
//!
//! Registers are sized from [`HawkeyeParams`]; every index is
//! `epoch_index ++ port` / `epoch_index ++ ingress ++ egress` / `epoch_index ++ flow slot`.

use crate::error::BuildError;
use crate::ir::e::*;
use crate::ir::*;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u64 = 0x0800;

/// Module of the per-epoch port telemetry registers (cells `slot·ports + port`).
pub const MODULE_PORT_TELEMETRY: &str = "port telemetry";
/// Module of the per-epoch PFC causality meter (cells `slot·ports² + ingress·ports + egress`).
pub const MODULE_CAUSALITY_METER: &str = "causality meter";
/// Module of the per-epoch flow telemetry (cells `slot·flow_slots + hash slot`).
pub const MODULE_FLOW_TELEMETRY: &str = "flow telemetry";
/// IPv4 protocol number of UDP.
pub const IP_PROTOCOL_UDP: u64 = 17;

/// Name of the register holding, per port, when the PFC pause of priority `q` ends.
pub fn pause_end_register(q: u8) -> String {
    format!("pause_end_p{q}")
}

/// Parameters of a program variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HawkeyeParams {
    /// Front-panel ports (power of two; port numbers are `0..ports`).
    pub ports: u32,
    /// Epochs kept in the ring (power of two).
    pub epochs: u32,
    /// log2 of the epoch length in ns (HAWKEYE §3.3: 2^20 ns ≈ 1 ms).
    pub epoch_log2_ns: u8,
    /// Flow slots per epoch (power of two).
    pub flow_slots: u32,
    /// Polling duplicate-suppression slots (power of two).
    pub dedupe_slots: u32,
    /// Duplicate-suppression interval in units of 1024 ns.
    pub dedupe_interval_units: u32,
    /// CPU port number (Tofino: the PCIe CPU port, e.g. 192 on a 2-pipe Wedge 100BF-32X).
    pub cpu_port: u16,
    /// Elastic Sketch (PARALEON) on ToR switches.
    pub sketch: Option<SketchParams>,
}

/// Elastic Sketch sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SketchParams {
    /// Heavy-part buckets (power of two).
    pub heavy_buckets: u32,
    /// Light-part 8-bit counters (power of two).
    pub light_counters: u32,
    /// Eviction threshold λ: vote− ≥ λ × vote+ (Elastic Sketch §3.1; 8 in the paper).
    pub lambda: u32,
}

impl Default for HawkeyeParams {
    fn default() -> Self {
        HawkeyeParams {
            ports: 64,
            epochs: 4,
            epoch_log2_ns: 20,
            flow_slots: 4096,
            dedupe_slots: 1024,
            // ≈ 3 ms (the artifact's per-QP polling guard).
            dedupe_interval_units: 2930,
            cpu_port: 192,
            sketch: Some(SketchParams {
                heavy_buckets: 4096,
                light_counters: 65536,
                lambda: 8,
            }),
        }
    }
}

fn log2(name: &'static str, v: u32, min: u32, max: u32) -> Result<u8, BuildError> {
    if !v.is_power_of_two() || v < min || v > max {
        return Err(BuildError::Parameter {
            name,
            message: format!("{v} must be a power of two in {min}..={max}"),
        });
    }
    Ok(v.trailing_zeros() as u8)
}

fn always(word: Word, op: SaluOp, a: SaluOperand, b: SaluOperand) -> SaluUpdate {
    SaluUpdate {
        when: Pred::ALWAYS,
        word,
        op,
        a,
        b,
    }
}

fn upd(when: Pred, word: Word, op: SaluOp, a: SaluOperand, b: SaluOperand) -> SaluUpdate {
    SaluUpdate {
        when,
        word,
        op,
        a,
        b,
    }
}

fn out(when: Pred, value: SaluOutputValue) -> SaluOutput {
    SaluOutput { when, value }
}

fn cond(
    left: SaluOperand,
    right: Option<(bool, SaluOperand)>,
    cmp: CmpOp,
    constant: i64,
) -> SaluCondition {
    SaluCondition {
        left,
        right,
        cmp,
        constant,
    }
}

use SaluOperand::{Const as K, Phv, Reg};
const LO: SaluOperand = Reg(Word::Lo);
const HI: SaluOperand = Reg(Word::Hi);

/// A register action, shorthand.
fn ra(
    b: &mut ProgramBuilder,
    name: &str,
    register: RegisterId,
    doc: &str,
    conditions: Vec<SaluCondition>,
    updates: Vec<SaluUpdate>,
    outputs: Vec<SaluOutput>,
) -> RegisterActionId {
    b.register_action(RegisterAction {
        name: name.to_string(),
        register,
        doc: doc.to_string(),
        conditions,
        updates,
        outputs,
    })
}

/// One 32-bit metadata field per 32-port word of a port bitmap: `{name}_w0`, `{name}_w1`, ….
fn word_meta(b: &mut ProgramBuilder, name: &str, words: usize) -> Vec<FieldId> {
    (0..words)
        .map(|w| b.meta(&format!("{name}_w{w}"), 32))
        .collect()
}

fn exec(action: RegisterActionId, index: Expr, output: Option<FieldId>) -> Stmt {
    Stmt::Execute {
        action,
        index,
        output,
    }
}

/// `(a ++ b)` for an index: `a << b_width | b`, at `a_width + b_width` bits.
fn concat(a: Expr, a_width: u8, b: Expr, b_width: u8) -> Expr {
    let w = a_width + b_width;
    or(shl(cast(a, w), b_width), cast(b, w))
}

/// Stores the current epoch id in a ring slot and returns the previous one (a different id
/// means the slot is stale and its counters restart now: no stale value survives).
fn epoch_swap(
    b: &mut ProgramBuilder,
    name: &str,
    r: RegisterId,
    epoch: FieldId,
) -> RegisterActionId {
    ra(
        b,
        name,
        r,
        "Stores the current epoch id; returns the previous one (a different id means the slot is stale and is reset now)",
        vec![],
        vec![always(Word::Lo, SaluOp::Set, Phv(epoch), K(0))],
        vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Lo))],
    )
}

/// A per-epoch counter: the first touch in a new epoch sets it, later packets add.
fn epoch_counter(
    b: &mut ProgramBuilder,
    name: &str,
    r: RegisterId,
    fresh: FieldId,
    v: SaluOperand,
) -> RegisterActionId {
    ra(
        b,
        name,
        r,
        "First touch in a new epoch sets the value, later packets add (saturating)",
        vec![cond(Phv(fresh), None, CmpOp::Ne, 0)],
        vec![
            upd(Pred::when(Some(true), None), Word::Lo, SaluOp::Set, v, K(0)),
            upd(
                Pred::when(Some(false), None),
                Word::Lo,
                SaluOp::SatAdd,
                LO,
                v,
            ),
        ],
        vec![],
    )
}

/// A bitmap of ports kept for the most recent epoch that touched it (lo = epoch id, hi =
/// bitmap): OR in `mask` within the epoch, start over in a new one.
fn epoch_bitmap_or(
    b: &mut ProgramBuilder,
    name: &str,
    r: RegisterId,
    epoch: FieldId,
    mask: FieldId,
) -> RegisterActionId {
    ra(
        b,
        name,
        r,
        "Same epoch: bitmap |= mask; a new epoch starts the bitmap over",
        vec![cond(LO, Some((true, Phv(epoch))), CmpOp::Eq, 0)],
        vec![
            upd(
                Pred::when(Some(true), None),
                Word::Hi,
                SaluOp::Or,
                HI,
                Phv(mask),
            ),
            upd(
                Pred::when(Some(false), None),
                Word::Hi,
                SaluOp::Set,
                Phv(mask),
                K(0),
            ),
            always(Word::Lo, SaluOp::Set, Phv(epoch), K(0)),
        ],
        vec![],
    )
}

/// The ring slot (`index`) and the epoch id (`id`, 16 bits: the lap) of timestamp `tstamp`
/// for epochs of 2^`eb` ns and a ring of 2^`epoch_bits` slots (HAWKEYE §3.3).
fn epoch_of(tstamp: FieldId, index: FieldId, id: FieldId, eb: u8, epoch_bits: u8) -> [Stmt; 2] {
    [
        Stmt::Assign(
            index,
            if epoch_bits == 0 {
                c(0, 1)
            } else {
                slice(f(tstamp), eb + epoch_bits - 1, eb)
            },
        ),
        Stmt::Assign(id, slice(f(tstamp), eb + epoch_bits + 15, eb + epoch_bits)),
    ]
}

/// Reads one ring slot's [`epoch_bitmap_or`] bitmap when it was written in the lap
/// `lap` (the slot's epoch within the ring), else 0.
fn slot_bitmap_read(
    b: &mut ProgramBuilder,
    name: &str,
    r: RegisterId,
    lap: FieldId,
) -> RegisterActionId {
    ra(
        b,
        name,
        r,
        "Returns the bitmap when it was written in the slot's epoch of the ring (stored lap id = the lap that epoch belongs to), else 0",
        vec![cond(LO, Some((true, Phv(lap))), CmpOp::Eq, 0)],
        vec![],
        vec![out(Pred::when(Some(true), None), SaluOutputValue::Old(Word::Hi))],
    )
}

/// `a ^ b`.
fn xor(a: Expr, b: Expr) -> Expr {
    Expr::Bin(BinOp::Xor, Box::new(a), Box::new(b))
}

/// `max(a, b)`.
fn max(a: Expr, b: Expr) -> Expr {
    Expr::Bin(BinOp::Max, Box::new(a), Box::new(b))
}

/// Table entries the control plane installs at start-up besides routes (BF Runtime
/// `table_add`): the one-hot masks of every port, in ingress (`port_mask`) and egress
/// (`egress_port_mask`). Tofino's ALUs shift by immediates only, so `1 << port` is a table.
pub fn port_mask_entries(program: &Program) -> Vec<(&'static str, u64, &'static str, Vec<u64>)> {
    let ports = program.constant("PORTS").unwrap_or(0);
    let mut out = Vec::new();
    for (table, action) in [
        ("port_mask", "port_mask_set"),
        ("egress_port_mask", "egress_port_mask_set"),
    ] {
        for port in 0..ports {
            let words = ports.div_ceil(32);
            let params = (0..words)
                .map(|w| {
                    if port / 32 == w {
                        1u64 << (port % 32)
                    } else {
                        0
                    }
                })
                .collect();
            out.push((table, port, action, params));
        }
    }
    out
}

/// Builds the program for `params`.
pub fn program(params: &HawkeyeParams) -> Result<Program, BuildError> {
    // The polling PFC branch carries egress-port bitmaps in 32-bit words bridged to egress
    // (at most two words): 64 ports per pipe, as on a Tofino pipe.
    let port_bits = log2("ports", params.ports, 2, 64)?;
    let mask_words = params.ports.div_ceil(32) as usize;
    let eb = params.epoch_log2_ns;
    let epoch_bits = log2("epochs", params.epochs, 1, 16)?;
    let flow_bits = log2("flow_slots", params.flow_slots, 2, 1 << 20)?;
    let dedupe_bits = log2("dedupe_slots", params.dedupe_slots, 2, 1 << 16)?;
    if params.epoch_log2_ns < 10 || params.epoch_log2_ns as u32 + epoch_bits as u32 + 16 > 48 {
        return Err(BuildError::Parameter {
            name: "epoch_log2_ns",
            message: format!(
                "{} leaves no room for a 16-bit epoch id in the 48-bit timestamp (need 10 ≤ epoch_log2_ns ≤ {})",
                params.epoch_log2_ns,
                32 - epoch_bits
            ),
        });
    }
    if params.epoch_log2_ns > 32 {
        return Err(BuildError::Parameter {
            name: "epoch_log2_ns",
            message: "epochs longer than 2^32 ns do not fit the 32-bit offsets".into(),
        });
    }
    let doc = "hawkmesh switch data plane: HAWKEYE PFC-aware telemetry, causality meters and polling (HAWKEYE SIGCOMM'25 §3.3-3.4), Elastic Sketch on ToR switches (PARALEON ICNP'24 §III-B, Elastic Sketch SIGCOMM'18 §3)";
    let mut b = ProgramBuilder::new("hawkmesh", doc);
    b.cpu_mirror_session(1);

    // ---- constants shared with Rust -------------------------------------------------
    let ethertype_mac_control = b.constant(
        "ETHERTYPE_MAC_CONTROL",
        0x8808,
        16,
        "IEEE 802.3 clause 31 MAC control EtherType (PFC frames)",
    );
    let pfc_opcode = b.constant("PFC_OPCODE", 0x0101, 16, "IEEE 802.1Qbb PFC opcode");
    b.constant("ETHERTYPE_IPV4", ETHERTYPE_IPV4, 16, "IPv4 EtherType");
    b.constant("IP_PROTOCOL_UDP", IP_PROTOCOL_UDP, 8, "UDP protocol number");
    let rocev2_port = b.constant(
        "ROCEV2_UDP_PORT",
        4791,
        16,
        "RoCEv2 UDP destination port (IBTA Annex A17)",
    );
    let polling_port = b.constant("POLLING_UDP_PORT", 0x6888, 16, "UDP destination port of HAWKEYE polling packets (0x6888, the artifact's polling EtherType, reused as a UDP port)");
    let polling_version = b.constant(
        "POLLING_VERSION",
        2,
        8,
        "Version of the polling header layout",
    );
    b.constant(
        "POLLING_HEADER_BYTES",
        40,
        16,
        "Bytes of the polling header after the UDP header",
    );
    b.constant(
        "POLLING_CONTEXT_IN_FLIGHT",
        0,
        8,
        "context_kind of a polling packet travelling between switches",
    );
    let ctx_cpu = b.constant(
        "POLLING_CONTEXT_CPU_COPY",
        1,
        8,
        "context_kind of the copy a switch sends to its CPU port",
    );
    b.constant(
        "TRACE_VICTIM_PATH",
        1,
        2,
        "HAWKEYE Table 1 flag 01: trace along the victim flow path",
    );
    b.constant(
        "TRACE_PFC_CAUSALITY",
        2,
        2,
        "HAWKEYE Table 1 flag 10: trace along the PFC causality",
    );
    b.constant(
        "POLLING_CONTEXT_VICTIM_PAUSED",
        1,
        8,
        "context_flags bit of a CPU copy: the victim's egress port here is paused (the polling packet leaves it with the PFC bit)",
    );
    let all_ports_group = b.constant(
        "MCAST_GROUP_ALL_PORTS",
        1,
        16,
        "Multicast group holding every front-panel port (polling PFC branch)",
    );
    let no_port = b.constant("NO_PORT", 0xFFFF, 16, "Port value meaning 'none'");
    b.constant(
        "CPU_PORT",
        params.cpu_port as u64,
        16,
        "The switch CPU port",
    );
    b.constant(
        "CPU_MIRROR_SESSION",
        1,
        16,
        "Mirror session that sends clones to the CPU port",
    );
    b.constant(
        "PORTS",
        params.ports as u64,
        16,
        "Front-panel ports covered by the telemetry registers",
    );
    b.constant(
        "EPOCHS",
        params.epochs as u64,
        16,
        "Epochs kept in the ring (HAWKEYE §3.3)",
    );
    b.constant(
        "EPOCH_LOG2_NS",
        params.epoch_log2_ns as u64,
        8,
        "Epoch length is 2^EPOCH_LOG2_NS ns",
    );
    b.constant(
        "FLOW_SLOTS",
        params.flow_slots as u64,
        32,
        "Flow telemetry slots per epoch",
    );
    b.constant(
        "QDEPTH_UNIT_BYTES_TOFINO",
        80,
        8,
        "Tofino enq_qdepth unit (cells of 80 bytes)",
    );
    b.constant(
        "EVICTION_REPORT_BYTES",
        37,
        16,
        "Bytes of the eviction report header at the front of an eviction CPU copy",
    );
    b.constant(
        "DEDUPE_INTERVAL_UNITS",
        params.dedupe_interval_units as u64,
        32,
        "Polling duplicate suppression interval in 1024-ns units",
    );
    // IEEE 802.1Qbb: one PFC frame pauses for at most 65,535 quanta of 512 bit times; at
    // the slowest speed of the port-speed table (25 Gbit/s) that is 1.342 ms, plus the
    // 0.1 % of the pipeline's quanta scaling.
    let max_pause_ns = b.constant(
        "MAX_PAUSE_NS",
        1_344_000,
        32,
        "Longest pause one PFC frame can ask for, ns (65,535 quanta at 25 Gbit/s, rounded up): a stored pause end further ahead is stale",
    );
    b.multicast_group(all_ports_group as u16, "every front-panel port (0..PORTS)");

    // ---- headers -------------------------------------------------------------------
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
    let (bth, _bt) = b.header(
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
        "HAWKEYE polling header (HAWKEYE Fig. 5, Table 1), version 2: 64-bit event id, victim 5-tuple, 2-bit trace flag, hop limit, port context (arrival port and flags, the victim's egress port, whether the victim is paused there, the PFC-branch egress ports)",
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
        ],
    );
    let (
        ev_epoch_id,
        ev_epoch_index,
        ev_port,
        ev_src,
        ev_dst,
        ev_sport,
        ev_dport,
        ev_pkts,
        ev_paused,
        ev_qsum,
        ev_first,
        ev_last,
    ) = (
        ev[0], ev[1], ev[2], ev[3], ev[4], ev[5], ev[6], ev[7], ev[8], ev[9], ev[10], ev[11],
    );
    let eth_type = eth[2];
    let (pfc_opcode_f, pfc_cev) = (pf[0], pf[1]);
    let pfc_quanta: Vec<FieldId> = pf[2..10].to_vec();
    let (ip_dscp, ip_total_len, ip_proto, ip_src, ip_dst) = (ip[2], ip[4], ip[9], ip[11], ip[12]);
    let (udp_sport, udp_dport) = (u[0], u[1]);
    let (po_version, po_flag, po_hop, po_kind, po_event) = (po[0], po[2], po[3], po[4], po[5]);
    let (po_vsrc, po_vdst, po_vsport, po_vdport) = (po[6], po[7], po[8], po[9]);
    let (po_arrival, po_ctx_in, po_ctx_out, po_ctx_flags, po_ctx_pfc) =
        (po[11], po[12], po[13], po[14], po[16]);

    // ---- parser --------------------------------------------------------------------
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

    // ---- intrinsics ----------------------------------------------------------------
    let ig_port = b.intrinsic(Intrinsic::IngressPort);
    let ig_tstamp = b.intrinsic(Intrinsic::IngressTstamp);
    let eg_port = b.intrinsic(Intrinsic::EgressPort);
    let enq_tstamp = b.intrinsic(Intrinsic::EnqTstamp);
    let enq_qdepth = b.intrinsic(Intrinsic::EnqQdepth);
    let clone_kind = b.intrinsic(Intrinsic::CloneKind);

    // ---- metadata ------------------------------------------------------------------
    let victim_port = b.meta_carried("victim_port", 16, true, true);
    // Enqueue-side PFC state, decided in ingress where every packet is seen when it is
    // enqueued (a packet stuck behind a PAUSE never reaches egress while the pause lasts).
    let paused_bridged = b.meta_carried("paused_at_enqueue", 1, true, false);
    let victim_paused = b.meta_carried("victim_paused", 1, true, true);
    let pfc_ports: Vec<FieldId> = (0..mask_words)
        .map(|w| b.meta_carried(&format!("pfc_ports_w{w}"), 32, true, true))
        .collect();
    let arrival_flags = b.meta_carried("arrival_flags", 8, false, true);
    let arrival_port = b.meta_carried("arrival_port", 16, false, true);
    let lookup_src = b.meta("lookup_src_addr", 32);
    let lookup_dst = b.meta("lookup_dst_addr", 32);
    let lookup_sport = b.meta("lookup_src_port", 16);
    let lookup_dport = b.meta("lookup_dst_port", 16);
    let routed_port = b.meta("routed_port", 16);
    let route_found = b.meta("route_found", 1);
    // The dedupe key: the event and the port it arrived by (see `polling_dedupe`).
    let dedupe_key = b.meta("dedupe_key", 32);
    let dedupe_port = b.meta("dedupe_port", 16);
    let now_coarse = b.meta("now_coarse", 32);
    let dedupe_index = b.meta("dedupe_index", dedupe_bits);
    let duplicate = b.meta("polling_duplicate", 32);

    // ---- forwarding ----------------------------------------------------------------
    let set_route = b.action(
        "set_route",
        "L3/ECMP result: the egress port of the next hop",
        &[("port", 16)],
        |p| {
            vec![
                Stmt::Assign(routed_port, f(p[0])),
                Stmt::Assign(route_found, c(1, 1)),
            ]
        },
    );
    let no_route = b.action("no_route", "No route: the packet is dropped", &[], |_| {
        vec![Stmt::Assign(route_found, c(0, 1))]
    });
    let forward = b.table(Table {
        name: "forward".into(),
        keys: vec![(lookup_dst, MatchKind::Exact)],
        actions: vec![set_route, no_route],
        default_action: (no_route, vec![]),
        size: 4096,
        doc: "The switch's L3/ECMP forwarding: exact match on the destination IPv4 address, ECMP member chosen by an action selector over the 5-tuple; installed by the control plane. For polling packets the lookup uses the victim's 5-tuple so the polling packet follows the victim's own ECMP choice (HAWKEYE §3.4). The executable model takes this table's result as an input from the simulator's routing.".into(),
        forwarding: true,
        selector: vec![lookup_src, lookup_dst, lookup_sport, lookup_dport],
    });

    // ---- polling dedupe (ingress) --------------------------------------------------
    let dedupe_reg = b.register(
        "polling_dedupe",
        64,
        params.dedupe_slots,
        "polling dedupe",
        "Per switch polling duplicate suppression: lo = low 32 bits of the event id XOR the arrival port << 23, hi = arrival time in 1024-ns units (HAWKEYE §3.4: drop polling packets of the same event within an interval). The key includes the arrival port because the PFC branch depends on it: a polling packet that comes back by another port (around a routing loop, or where two branches meet) carries a branch this switch has not followed yet",
    );
    let dedupe_hash = b.hash("dedupe_hash", vec![po_event, dedupe_port], dedupe_bits);
    let dedupe_check = ra(
        &mut b,
        "polling_dedupe_check",
        dedupe_reg,
        "Returns 1 when the same event was seen within DEDUPE_INTERVAL_UNITS; otherwise records (event, now)",
        vec![
            cond(LO, Some((true, Phv(dedupe_key))), CmpOp::Eq, 0),
            cond(Phv(now_coarse), Some((true, HI)), CmpOp::Lt, params.dedupe_interval_units as i64),
        ],
        vec![
            upd(Pred(0b0111), Word::Lo, SaluOp::Set, Phv(dedupe_key), K(0)),
            upd(Pred(0b0111), Word::Hi, SaluOp::Set, Phv(now_coarse), K(0)),
        ],
        vec![out(Pred::when(Some(true), Some(true)), SaluOutputValue::Const(1))],
    );

    // ---- Elastic Sketch (ingress, ToR) ---------------------------------------------
    let mut sketch_stmts: Vec<Stmt> = Vec::new();
    if let Some(sp) = &params.sketch {
        let hb = log2("sketch.heavy_buckets", sp.heavy_buckets, 2, 1 << 20)?;
        let lb = log2("sketch.light_counters", sp.light_counters, 2, 1 << 24)?;
        if sp.lambda == 0 || sp.lambda > 1 << 16 {
            return Err(BuildError::Parameter {
                name: "sketch.lambda",
                message: format!("{} must be in 1..=65536", sp.lambda),
            });
        }
        b.constant(
            "SKETCH_HEAVY_BUCKETS",
            sp.heavy_buckets as u64,
            32,
            "Elastic Sketch heavy-part buckets",
        );
        b.constant(
            "SKETCH_LIGHT_COUNTERS",
            sp.light_counters as u64,
            32,
            "Elastic Sketch light-part 8-bit counters",
        );
        b.constant(
            "SKETCH_LAMBDA",
            sp.lambda as u64,
            32,
            "Elastic Sketch eviction threshold λ (vote- >= λ vote+)",
        );
        let mark = b.constant("SKETCH_MARK_DSCP_BIT", 1, 6, "DSCP bit marking a packet already inserted into a sketch on its path (PARALEON Keypoint 1)");
        b.constant(
            "SKETCH_FLAG_BIT",
            1 << 31,
            32,
            "Flag bit in sketch_votes: the flow may have earlier packets in the light part",
        );
        let fp = b.meta("sketch_fp", 32);
        let bucket = b.meta("sketch_bucket", hb);
        let total = b.meta("sketch_total", 32);
        let code = b.meta("sketch_code", 32);
        let replace = b.meta("sketch_replace", 1);
        let evicting = b.meta("sketch_evicting", 1);
        let new_votes = b.meta("sketch_new_votes", 32);
        let old_votes = b.meta("sketch_old_votes", 32);
        let light_key = b.meta("sketch_light_key", 32);
        let light_value = b.meta("sketch_light_value", 8);
        let fp_hash = b.hash(
            "sketch_fp_hash",
            vec![ip_src, ip_dst, udp_sport, udp_dport],
            32,
        );
        let total_reg = b.register("sketch_total", 32, sp.heavy_buckets, "elastic sketch", "Packets hashed to the heavy bucket since the last control-plane reset (Elastic Sketch vote+ + vote-, cumulative)");
        let key_reg = b.register("sketch_key", 64, sp.heavy_buckets, "elastic sketch", "Heavy part: lo = flow fingerprint, hi = Q = base + (λ+1)·vote+ where base is sketch_total when the flow took the bucket; vote- ≥ λ·vote+ ⇔ total − Q ≥ 0");
        let votes_reg = b.register(
            "sketch_votes",
            32,
            sp.heavy_buckets,
            "elastic sketch",
            "Heavy part vote+ with the flag in bit 31 (Elastic Sketch §3.1)",
        );
        let light_reg = b.register("sketch_light", 8, sp.light_counters, "elastic sketch", "Light part: 8-bit saturating counters (Elastic Sketch §3.2, one array as in the hardware version)");
        let total_add = ra(
            &mut b,
            "sketch_total_add",
            total_reg,
            "vote_all += 1, returns the new value",
            vec![],
            vec![always(Word::Lo, SaluOp::Add, LO, K(1))],
            vec![out(Pred::ALWAYS, SaluOutputValue::New(Word::Lo))],
        );
        let l = sp.lambda as u64;
        let key_vote = ra(
            &mut b,
            "sketch_key_vote",
            key_reg,
            "Ostracism (Elastic Sketch §3.1): same flow → vote+; else if vote- ≥ λ vote+ (or empty) → the flow takes the bucket; returns the old key, or 0xFFFFFFFF when the flow lost the vote",
            vec![
                cond(LO, Some((true, Phv(fp))), CmpOp::Eq, 0),
                cond(Phv(total), Some((true, HI)), CmpOp::SGe, 0),
            ],
            vec![
                upd(Pred::when(Some(false), Some(true)), Word::Lo, SaluOp::Set, Phv(fp), K(0)),
                upd(Pred::when(Some(true), None), Word::Hi, SaluOp::Add, HI, K(l + 1)),
                upd(Pred::when(Some(false), Some(true)), Word::Hi, SaluOp::Add, Phv(total), K(l)),
            ],
            vec![
                out(Pred(0b1111 & !Pred::when(Some(false), Some(false)).0), SaluOutputValue::Old(Word::Lo)),
                out(Pred::when(Some(false), Some(false)), SaluOutputValue::Const(0xFFFF_FFFF)),
            ],
        );
        let votes_update = ra(
            &mut b,
            "sketch_votes_update",
            votes_reg,
            "vote+ += 1 for the resident flow; a new resident starts at 1 (flagged when it evicted another flow); returns the old value",
            vec![cond(Phv(replace), None, CmpOp::Ne, 0)],
            vec![
                upd(Pred::when(Some(true), None), Word::Lo, SaluOp::Set, Phv(new_votes), K(0)),
                upd(Pred::when(Some(false), None), Word::Lo, SaluOp::Add, LO, K(1)),
            ],
            vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Lo))],
        );
        let light_add = ra(
            &mut b,
            "sketch_light_add",
            light_reg,
            "light[i] |+|= v (a losing packet, or an evicted flagged flow)",
            vec![],
            vec![always(Word::Lo, SaluOp::SatAdd, LO, Phv(light_value))],
            vec![],
        );
        let light_max = ra(
            &mut b,
            "sketch_light_max",
            light_reg,
            "light[i] = max(light[i], v) (an evicted unflagged flow)",
            vec![],
            vec![always(Word::Lo, SaluOp::Max, LO, Phv(light_value))],
            vec![],
        );
        let _ = mark;
        sketch_stmts = vec![
            Stmt::Assign(ip_dscp, or(f(ip_dscp), c(mark, 6))),
            Stmt::Hash(fp_hash, fp),
            // Fingerprints 0 (empty bucket) and 0xFFFFFFFF (lost-vote code) are reserved.
            Stmt::If(
                any(eq(f(fp), c(0, 32)), eq(f(fp), c(0xFFFF_FFFF, 32))),
                vec![Stmt::Assign(fp, c(1, 32))],
                vec![],
            ),
            Stmt::Assign(bucket, slice(f(fp), 31, 32 - hb)),
            exec(total_add, f(bucket), Some(total)),
            exec(key_vote, f(bucket), Some(code)),
            Stmt::If(
                eq(f(code), c(0xFFFF_FFFF, 32)),
                vec![
                    // Lost the vote: the packet goes to the light part.
                    Stmt::Assign(light_key, f(fp)),
                    Stmt::Assign(light_value, c(1, 8)),
                    exec(light_add, slice(f(light_key), lb - 1, 0), None),
                ],
                vec![
                    Stmt::Assign(replace, c(0, 1)),
                    Stmt::Assign(evicting, c(0, 1)),
                    Stmt::Assign(new_votes, c(1, 32)),
                    Stmt::If(
                        ne(f(code), f(fp)),
                        vec![Stmt::Assign(replace, c(1, 1))],
                        vec![],
                    ),
                    Stmt::If(
                        all(ne(f(code), f(fp)), ne(f(code), c(0, 32))),
                        vec![
                            Stmt::Assign(evicting, c(1, 1)),
                            Stmt::Assign(new_votes, c(0x8000_0001, 32)),
                        ],
                        vec![],
                    ),
                    exec(votes_update, f(bucket), Some(old_votes)),
                    Stmt::If(
                        eq(f(evicting), c(1, 1)),
                        vec![
                            Stmt::Assign(light_key, f(code)),
                            Stmt::Assign(
                                light_value,
                                cast(min(and(f(old_votes), c(0x7FFF_FFFF, 32)), c(255, 32)), 8),
                            ),
                            Stmt::If(
                                ne(and(f(old_votes), c(0x8000_0000, 32)), c(0, 32)),
                                vec![exec(light_add, slice(f(light_key), lb - 1, 0), None)],
                                vec![exec(light_max, slice(f(light_key), lb - 1, 0), None)],
                            ),
                        ],
                        vec![],
                    ),
                ],
            ),
        ];
        let sketch_if = Stmt::If(
            all(valid(bth), eq(and(f(ip_dscp), c(mark, 6)), c(0, 6))),
            std::mem::take(&mut sketch_stmts),
            vec![],
        );
        sketch_stmts = vec![sketch_if];
    }

    // ---- ingress: PFC status (HAWKEYE §3.3, Fig. 3 "port status") -------------------
    // A PFC frame arrives on the ingress of the port it pauses; a data packet checks the
    // pause of its (egress port, priority) when it is enqueued, i.e. in ingress.
    let now = b.meta("now", 32);
    let tc = b.meta("traffic_class", 8);
    let paused = b.meta("paused", 32);
    let mut pause_set = Vec::new();
    let mut pause_check = Vec::new();
    let mut pause_ns = Vec::new();
    let mut pause_end = Vec::new();
    for q in 0..8 {
        let r = b.register(
            &pause_end_register(q as u8),
            32,
            params.ports,
            "pfc status",
            &format!("Per port: low 32 bits of the ns time when the PFC pause of priority {q} ends (IEEE 802.1Qbb; quanta 0 = XON ends it now)"),
        );
        pause_ns.push(b.meta(&format!("pause_ns_{q}"), 32));
        pause_end.push(b.meta(&format!("pause_end_{q}"), 32));
        pause_set.push(ra(
            &mut b,
            &format!("pause_end_p{q}_set"),
            r,
            "Records when the pause ends",
            vec![],
            vec![always(Word::Lo, SaluOp::Set, Phv(pause_end[q]), K(0))],
            vec![],
        ));
        pause_check.push(ra(
            &mut b,
            &format!("pause_end_p{q}_check"),
            r,
            "Returns 1 when the packet is enqueued before the pause ends (a paused packet, HAWKEYE §3.3): 0 < end − now ≤ MAX_PAUSE_NS, so a stale or never-written end read across the 32-bit wrap of the ns clock is not a pause",
            vec![
                cond(LO, Some((true, Phv(now))), CmpOp::SGt, 0),
                cond(
                    LO,
                    Some((true, Phv(now))),
                    CmpOp::SLe,
                    max_pause_ns as i64,
                ),
            ],
            vec![],
            vec![out(
                Pred::when(Some(true), Some(true)),
                SaluOutputValue::Const(1),
            )],
        ));
    }
    // One quantum is 512 bit times: 5.12 ns at 100 Gbit/s. The pipeline has no multiplier,
    // so the table shifts quanta by the speed's power of two (1.28 ns × 2^k) and the
    // control multiplies by 1.28125 = 1 + 1/4 + 1/32 (0.1 % long).
    let speeds: [(&str, u8); 5] = [
        ("400g", 0),
        ("200g", 1),
        ("100g", 2),
        ("50g", 3),
        ("25g", 4),
    ];
    let mut speed_actions = Vec::new();
    for (name, k) in speeds {
        let pq = pause_ns.clone();
        let quanta = pfc_quanta.clone();
        speed_actions.push(b.action(
            &format!("pfc_quanta_{name}"),
            &format!("Port speed {name}: one quantum is 1.28 ns × 2^{k}"),
            &[],
            move |_| {
                (0..8)
                    .map(|q| Stmt::Assign(pq[q], shl(cast(f(quanta[q]), 32), k)))
                    .collect()
            },
        ));
    }
    let port_speed = b.table(Table {
        name: "pfc_port_speed".into(),
        keys: vec![(ig_port, MatchKind::Exact)],
        actions: speed_actions.clone(),
        default_action: (speed_actions[2], vec![]),
        size: 512,
        doc: "Port speed for converting PFC quanta to time (installed by the control plane; default 100G)".into(),
        forwarding: false,
        selector: vec![],
    });

    // One-hot port masks (Tofino's ALUs shift by immediates only, so `1 << port` is a table
    // the control plane fills: see `port_mask_entries`).
    let mask_port = b.meta("mask_port", 16);
    let masks: Vec<FieldId> = word_meta(&mut b, "port_mask", mask_words);
    let mask_params: Vec<(String, u8)> = (0..mask_words).map(|w| (format!("w{w}"), 32)).collect();
    let mask_param_refs: Vec<(&str, u8)> =
        mask_params.iter().map(|(n, w)| (n.as_str(), *w)).collect();
    let set_masks = masks.clone();
    let port_mask_set = b.action(
        "port_mask_set",
        "The one-hot mask of the port, in 32-port words",
        &mask_param_refs,
        move |p| {
            set_masks
                .iter()
                .zip(p)
                .map(|(m, v)| Stmt::Assign(*m, f(*v)))
                .collect()
        },
    );
    let zero_masks = masks.clone();
    let port_mask_none = b.action("port_mask_none", "No port: an empty mask", &[], move |_| {
        zero_masks
            .iter()
            .map(|m| Stmt::Assign(*m, c(0, 32)))
            .collect()
    });
    let port_mask = b.table(Table {
        name: "port_mask".into(),
        keys: vec![(mask_port, MatchKind::Exact)],
        actions: vec![port_mask_set, port_mask_none],
        default_action: (port_mask_none, vec![]),
        size: params.ports,
        doc: "Port → one-hot mask (ingress): the egress port of a data or polling packet, the port a PFC frame pauses".into(),
        forwarding: false,
        selector: vec![],
    });

    // Bitmaps for the polling PFC branch (HAWKEYE Fig. 6), read by the polling packet in
    // ingress and bridged to the egress copies.
    let module_bitmap = "pfc branch";
    // One bitmap register per ring slot (and 32-port word), so that a polling packet sees
    // every epoch of the ring, as the per-epoch causality meters do (HAWKEYE Fig. 6), and
    // not only the latest one: [slot][word].
    let slots = params.epochs as usize;
    let mut fanout_or: Vec<Vec<RegisterActionId>> = vec![Vec::new(); slots];
    let mut fanout_read: Vec<Vec<RegisterActionId>> = vec![Vec::new(); slots];
    let mut seen_or: Vec<Vec<RegisterActionId>> = vec![Vec::new(); slots];
    let mut seen_read: Vec<Vec<RegisterActionId>> = vec![Vec::new(); slots];
    let mut xoff_or: Vec<Vec<RegisterActionId>> = vec![Vec::new(); slots];
    let mut xoff_read: Vec<Vec<RegisterActionId>> = vec![Vec::new(); slots];
    // The lap (stored epoch id) each slot's data must carry to be one of the ring's last
    // `slots` epochs: the current lap for slots up to the current one, the previous lap
    // for the slots after it.
    let slot_laps: Vec<FieldId> = (0..slots)
        .map(|k| b.meta(&format!("ring_slot_lap_{k}"), 16))
        .collect();
    // Held fanout: per ingress port, the egress ports whose latest packet from it was
    // enqueued while they were paused. The ring's bitmaps forget a pair once the ring has
    // turned, but a frozen pause (a deadlock, a storm) enqueues nothing new: its last
    // packets went in paused, and this bit stays until a packet from that ingress goes in
    // unpaused. The branch still needs the pause in force (or paused arrivals in the ring).
    let held_set: Vec<FieldId> = word_meta(&mut b, "fanout_held_set", mask_words);
    let held_keep: Vec<FieldId> = word_meta(&mut b, "fanout_held_keep", mask_words);
    let held_now: Vec<FieldId> = word_meta(&mut b, "fanout_held_now", mask_words);
    let last_now: Vec<FieldId> = word_meta(&mut b, "fanout_last_now", mask_words);
    let mut held_update = Vec::new();
    let mut held_read = Vec::new();
    let mut last_or = Vec::new();
    let mut last_read = Vec::new();
    let mut xoff_set = Vec::new();
    let mut xon_clear = Vec::new();
    let mut pfc_read = Vec::new();
    let ig_epoch_index = b.meta("ig_epoch_index", epoch_bits.max(1));
    let ig_epoch_id = b.meta("ig_epoch_id", 16);
    let xoff_ns = b.meta("pfc_xoff_ns", 32);
    let xoff_end = b.meta("pfc_xoff_end", 32);
    let inv_masks: Vec<FieldId> = word_meta(&mut b, "port_unmask", mask_words);
    for w in 0..mask_words {
        let lo_port = w * 32;
        for k in 0..slots {
            let fanout = b.register(
                &format!("fanout_e{k}_w{w}"),
                64,
                params.ports,
                module_bitmap,
                &format!("Ring slot {k}, per ingress port: lo = epoch id, hi = bitmap of egress ports {lo_port}.. that traffic from it was enqueued at in that epoch (the causality meter's non-zero pairs as a bitmap)"),
            );
            let seen = b.register(
                &format!("paused_seen_e{k}_w{w}"),
                64,
                1,
                module_bitmap,
                &format!("Ring slot {k}: lo = epoch id, hi = bitmap of egress ports {lo_port}.. where a packet was enqueued while paused in that epoch"),
            );
            fanout_or[k].push(epoch_bitmap_or(
                &mut b,
                &format!("fanout_e{k}_w{w}_or"),
                fanout,
                ig_epoch_id,
                masks[w],
            ));
            fanout_read[k].push(slot_bitmap_read(
                &mut b,
                &format!("fanout_e{k}_w{w}_read"),
                fanout,
                slot_laps[k],
            ));
            seen_or[k].push(epoch_bitmap_or(
                &mut b,
                &format!("paused_seen_e{k}_w{w}_or"),
                seen,
                ig_epoch_id,
                masks[w],
            ));
            seen_read[k].push(slot_bitmap_read(
                &mut b,
                &format!("paused_seen_e{k}_w{w}_read"),
                seen,
                slot_laps[k],
            ));
            // A pause can freeze a queue with nothing new enqueued behind it (its upstream
            // is paused too) and end just before a polling packet comes: the ring then
            // holds no paused arrival at the port, yet the pause delayed traffic within
            // the ring's time. The XOFFs the port received within the ring stand for it.
            let xoff = b.register(
                &format!("pfc_xoff_e{k}_w{w}"),
                64,
                1,
                module_bitmap,
                &format!("Ring slot {k}: lo = epoch id, hi = bitmap of ports {lo_port}.. that received a PFC XOFF (IEEE 802.1Qbb, non-zero quanta) in that epoch"),
            );
            xoff_or[k].push(epoch_bitmap_or(
                &mut b,
                &format!("pfc_xoff_e{k}_w{w}_or"),
                xoff,
                ig_epoch_id,
                masks[w],
            ));
            xoff_read[k].push(slot_bitmap_read(
                &mut b,
                &format!("pfc_xoff_e{k}_w{w}_read"),
                xoff,
                slot_laps[k],
            ));
        }
        let held = b.register(
            &format!("fanout_held_w{w}"),
            32,
            params.ports,
            module_bitmap,
            &format!("Per ingress port: bitmap of egress ports {lo_port}.. whose latest packet from it was enqueued while the port was paused (no epoch: a frozen pause keeps its bit)"),
        );
        held_update.push(ra(
            &mut b,
            &format!("fanout_held_w{w}_update"),
            held,
            "A paused enqueue sets the egress port's bit (set mask non-zero), an unpaused one clears it (keep mask without the bit)",
            vec![cond(Phv(held_set[w]), None, CmpOp::Ne, 0)],
            vec![
                upd(
                    Pred::when(Some(true), None),
                    Word::Lo,
                    SaluOp::Or,
                    LO,
                    Phv(held_set[w]),
                ),
                upd(
                    Pred::when(Some(false), None),
                    Word::Lo,
                    SaluOp::And,
                    LO,
                    Phv(held_keep[w]),
                ),
            ],
            vec![],
        ));
        // The latest epoch's fanout of each ingress port, however old: a switch frozen
        // behind a deadlock or a storm gets nothing new from that ingress, so the ring forgets
        // it, yet the queues the ingress filled then still hold its packets (the analyzer's
        // newest earlier epoch stands in the same way).
        let last = b.register(
            &format!("fanout_last_w{w}"),
            64,
            params.ports,
            module_bitmap,
            &format!("Per ingress port: lo = epoch id of its latest enqueue, hi = bitmap of egress ports {lo_port}.. that traffic from it was enqueued at in that epoch (no ring: kept until the ingress sends again)"),
        );
        last_or.push(epoch_bitmap_or(
            &mut b,
            &format!("fanout_last_w{w}_or"),
            last,
            ig_epoch_id,
            masks[w],
        ));
        last_read.push(ra(
            &mut b,
            &format!("fanout_last_w{w}_read"),
            last,
            "Returns the bitmap, whatever its epoch",
            vec![],
            vec![],
            vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Hi))],
        ));
        held_read.push(ra(
            &mut b,
            &format!("fanout_held_w{w}_read"),
            held,
            "Returns the bitmap",
            vec![],
            vec![],
            vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Lo))],
        ));
        let pfc_state = b.register(
            &format!("pfc_paused_w{w}"),
            64,
            1,
            module_bitmap,
            &format!("lo = bitmap of ports {lo_port}.. paused by a PFC XOFF not yet resumed by XON, hi = the latest pause end, ns (all expired when it is past)"),
        );
        xoff_set.push(ra(
            &mut b,
            &format!("pfc_paused_w{w}_xoff"),
            pfc_state,
            "XOFF: the port's bit is set; the latest pause end moves later (or replaces a stale one, further ahead than MAX_PAUSE_NS across the 32-bit clock wrap)",
            vec![
                cond(HI, Some((true, Phv(xoff_end))), CmpOp::SLt, 0),
                // The new end is at most MAX_PAUSE_NS ahead of now: a stored end more
                // than that beyond it is stale (one stateful ALU reads two PHV operands,
                // so this compares with the new end rather than with now).
                cond(HI, Some((true, Phv(xoff_end))), CmpOp::SGt, max_pause_ns as i64),
            ],
            vec![
                always(Word::Lo, SaluOp::Or, LO, Phv(masks[w])),
                upd(
                    Pred(Pred::when(Some(true), None).0 | Pred::when(None, Some(true)).0),
                    Word::Hi,
                    SaluOp::Set,
                    Phv(xoff_end),
                    K(0),
                ),
            ],
            vec![],
        ));
        xon_clear.push(ra(
            &mut b,
            &format!("pfc_paused_w{w}_xon"),
            pfc_state,
            "XON: the port's bit is cleared",
            vec![],
            vec![always(Word::Lo, SaluOp::And, LO, Phv(inv_masks[w]))],
            vec![],
        ));
        pfc_read.push(ra(
            &mut b,
            &format!("pfc_paused_w{w}_read"),
            pfc_state,
            "Returns the paused-port bitmap unless every pause has expired (0 < latest end − now ≤ MAX_PAUSE_NS)",
            vec![
                cond(HI, Some((true, Phv(now))), CmpOp::SGt, 0),
                cond(HI, Some((true, Phv(now))), CmpOp::SLe, max_pause_ns as i64),
            ],
            vec![],
            vec![out(
                Pred::when(Some(true), Some(true)),
                SaluOutputValue::Old(Word::Lo),
            )],
        ));
    }

    // Now and the ring slot of the ingress timestamp.
    let mut ig_prologue = vec![Stmt::Assign(now, slice(f(ig_tstamp), 31, 0))];
    ig_prologue.extend(epoch_of(
        ig_tstamp,
        ig_epoch_index,
        ig_epoch_id,
        eb,
        epoch_bits,
    ));
    let mut pfc_stmts = ig_prologue.clone();
    pfc_stmts.push(Stmt::Apply(port_speed));
    for q in 0..8 {
        pfc_stmts.push(Stmt::Assign(
            pause_ns[q],
            add(
                add(f(pause_ns[q]), shr(f(pause_ns[q]), 2)),
                shr(f(pause_ns[q]), 5),
            ),
        ));
        pfc_stmts.push(Stmt::Assign(pause_end[q], add(f(now), f(pause_ns[q]))));
    }
    pfc_stmts.push(Stmt::Assign(xoff_ns, c(0, 32)));
    for (q, set) in pause_set.iter().enumerate() {
        pfc_stmts.push(Stmt::If(
            ne(and(f(pfc_cev), c(1 << q, 16)), c(0, 16)),
            vec![
                exec(*set, slice(f(ig_port), port_bits - 1, 0), None),
                Stmt::Assign(xoff_ns, max(f(xoff_ns), f(pause_ns[q]))),
            ],
            vec![],
        ));
    }
    pfc_stmts.push(Stmt::Assign(xoff_end, add(f(now), f(xoff_ns))));
    for w in 0..mask_words {
        pfc_stmts.push(Stmt::Assign(
            inv_masks[w],
            xor(f(masks[w]), c(0xFFFF_FFFF, 32)),
        ));
    }
    // The paused-port bitmap (approximation per port: a frame pausing any enabled class
    // sets the bit, a frame resuming every enabled class clears it).
    let mut on_xoff: Vec<Stmt> = (0..mask_words)
        .map(|w| exec(xoff_set[w], c(0, 1), None))
        .collect();
    // The XOFF ring: the port's bit in the current slot (each slot register is touched on
    // one path only).
    for (k, actions) in xoff_or.iter().enumerate() {
        on_xoff.push(Stmt::If(
            eq(f(ig_epoch_index), c(k as u64, epoch_bits.max(1))),
            actions.iter().map(|a| exec(*a, c(0, 1), None)).collect(),
            vec![],
        ));
    }
    pfc_stmts.push(Stmt::If(
        ne(f(xoff_ns), c(0, 32)),
        on_xoff,
        (0..mask_words)
            .map(|w| exec(xon_clear[w], c(0, 1), None))
            .collect(),
    ));

    // ---- ingress: enqueue telemetry and causality meter (HAWKEYE §3.3, Fig. 3-4) ------
    let module_port = MODULE_PORT_TELEMETRY;
    let module_meter = MODULE_CAUSALITY_METER;
    let port_enq_epoch = b.register("port_enq_epoch", 16, params.epochs * params.ports, module_port, "Epoch id stored in each (epoch, port) slot of the enqueue counters; a newer id resets the slot on first touch");
    let port_packets = b.register(
        "port_packets",
        32,
        params.epochs * params.ports,
        module_port,
        "RoCEv2 packets enqueued at the port in the epoch (counted in ingress, at enqueue)",
    );
    let port_paused = b.register(
        "port_paused_packets",
        32,
        params.epochs * params.ports,
        module_port,
        "Of those, paused packets (enqueued while the port's priority was paused)",
    );
    let meter_epoch = b.register(
        "meter_epoch",
        16,
        params.epochs * params.ports * params.ports,
        module_meter,
        "Epoch id of each (epoch, ingress, egress) meter slot",
    );
    let meter_bytes = b.register(
        "meter_bytes",
        32,
        params.epochs * params.ports * params.ports,
        module_meter,
        "Bytes from ingress port to egress port enqueued in the epoch (HAWKEYE Fig. 3 causality meter)",
    );
    let enq_index = b.meta("enq_port_index", epoch_bits + port_bits);
    let meter_index = b.meta("meter_index", epoch_bits + 2 * port_bits);
    let enq_old_epoch = b.meta("enq_old_epoch", 16);
    let enq_fresh = b.meta("enq_fresh", 1);
    let meter_old_epoch = b.meta("meter_old_epoch", 16);
    let meter_fresh = b.meta("meter_fresh", 1);
    let ig_len = b.meta("packet_bytes", 32);
    let port_enq_swap = epoch_swap(&mut b, "port_enq_epoch_swap", port_enq_epoch, ig_epoch_id);
    let port_packets_add = epoch_counter(&mut b, "port_packets_add", port_packets, enq_fresh, K(1));
    let port_paused_add = epoch_counter(
        &mut b,
        "port_paused_packets_add",
        port_paused,
        enq_fresh,
        Phv(paused),
    );
    let meter_swap = epoch_swap(&mut b, "meter_epoch_swap", meter_epoch, ig_epoch_id);
    let meter_add = epoch_counter(
        &mut b,
        "meter_bytes_add",
        meter_bytes,
        meter_fresh,
        Phv(ig_len),
    );

    let mut pause_chain: Vec<Stmt> = vec![];
    for q in (0..8).rev() {
        let this = vec![exec(
            pause_check[q],
            slice(f(routed_port), port_bits - 1, 0),
            Some(paused),
        )];
        pause_chain = if q == 7 {
            this
        } else {
            vec![Stmt::If(eq(f(tc), c(q as u64, 8)), this, pause_chain)]
        };
    }
    let data_ingress = {
        let mut v = ig_prologue.clone();
        v.extend([
            // Traffic class from DSCP (RFC 2474 class selector: priority = DSCP >> 3, the
            // usual trust-DSCP map; RoCEv2 DSCP 26 → priority 3).
            Stmt::Assign(tc, cast(slice(f(ip_dscp), 5, 3), 8)),
            Stmt::Assign(paused, c(0, 32)),
        ]);
        v.extend(pause_chain);
        v.extend([
            Stmt::Assign(paused_bridged, c(0, 1)),
            Stmt::If(
                ne(f(paused), c(0, 32)),
                vec![Stmt::Assign(paused_bridged, c(1, 1))],
                vec![],
            ),
            // Frame bytes without preamble: IP total length + Ethernet header + FCS.
            Stmt::Assign(ig_len, add(cast(f(ip_total_len), 32), c(18, 32))),
            Stmt::Assign(
                enq_index,
                concat(
                    f(ig_epoch_index),
                    epoch_bits,
                    slice(f(routed_port), port_bits - 1, 0),
                    port_bits,
                ),
            ),
            exec(port_enq_swap, f(enq_index), Some(enq_old_epoch)),
            Stmt::Assign(enq_fresh, c(0, 1)),
            Stmt::If(
                ne(f(enq_old_epoch), f(ig_epoch_id)),
                vec![Stmt::Assign(enq_fresh, c(1, 1))],
                vec![],
            ),
            exec(port_packets_add, f(enq_index), None),
            exec(port_paused_add, f(enq_index), None),
            Stmt::Assign(
                meter_index,
                concat(
                    f(ig_epoch_index),
                    epoch_bits,
                    concat(
                        slice(f(ig_port), port_bits - 1, 0),
                        port_bits,
                        slice(f(routed_port), port_bits - 1, 0),
                        port_bits,
                    ),
                    2 * port_bits,
                ),
            ),
            exec(meter_swap, f(meter_index), Some(meter_old_epoch)),
            Stmt::Assign(meter_fresh, c(0, 1)),
            Stmt::If(
                ne(f(meter_old_epoch), f(ig_epoch_id)),
                vec![Stmt::Assign(meter_fresh, c(1, 1))],
                vec![],
            ),
            exec(meter_add, f(meter_index), None),
        ]);
        // The held fanout: set the egress port's bit when paused, clear it when not.
        for w in 0..mask_words {
            v.extend([
                Stmt::Assign(held_set[w], c(0, 32)),
                Stmt::Assign(held_keep[w], xor(f(masks[w]), c(0xFFFF_FFFF, 32))),
                Stmt::If(
                    eq(f(paused_bridged), c(1, 1)),
                    vec![
                        Stmt::Assign(held_set[w], f(masks[w])),
                        Stmt::Assign(held_keep[w], c(0xFFFF_FFFF, 32)),
                    ],
                    vec![],
                ),
                exec(held_update[w], slice(f(ig_port), port_bits - 1, 0), None),
                exec(last_or[w], slice(f(ig_port), port_bits - 1, 0), None),
            ]);
        }
        // The current ring slot's bitmaps (each slot register is touched on one path only).
        for k in 0..slots {
            let mut slot_stmts: Vec<Stmt> = fanout_or[k]
                .iter()
                .map(|action| exec(*action, slice(f(ig_port), port_bits - 1, 0), None))
                .collect();
            slot_stmts.push(Stmt::If(
                eq(f(paused_bridged), c(1, 1)),
                seen_or[k]
                    .iter()
                    .map(|action| exec(*action, c(0, 1), None))
                    .collect(),
                vec![],
            ));
            v.push(Stmt::If(
                eq(f(ig_epoch_index), c(k as u64, epoch_bits.max(1))),
                slot_stmts,
                vec![],
            ));
        }
        v
    };

    // ---- ingress control -----------------------------------------------------------
    let polling_front = vec![Stmt::If(
        any(
            eq(f(po_hop), c(0, 8)),
            ne(f(po_version), c(polling_version, 8)),
        ),
        vec![Stmt::Drop],
        vec![
            Stmt::Assign(dedupe_port, cast(f(ig_port), 16)),
            Stmt::Assign(
                dedupe_key,
                xor(slice(f(po_event), 31, 0), shl(cast(f(ig_port), 32), 23)),
            ),
            // Coarse time shifted by one interval: an empty dedupe cell (event 0, time 0)
            // then always looks older than the interval, so an event whose low 32 bits
            // are 0 is never taken for a duplicate of nothing.
            Stmt::Assign(
                now_coarse,
                add(
                    slice(f(ig_tstamp), 41, 10),
                    c(params.dedupe_interval_units as u64, 32),
                ),
            ),
            Stmt::Hash(dedupe_hash, dedupe_index),
            exec(dedupe_check, f(dedupe_index), Some(duplicate)),
            Stmt::If(
                ne(f(duplicate), c(0, 32)),
                vec![Stmt::Drop],
                vec![
                    // Every switch that takes the polling packet tells its CPU (HAWKEYE
                    // §3.4), also on a PFC-only branch and at the last hop.
                    Stmt::Assign(arrival_flags, cast(f(po_flag), 8)),
                    Stmt::Assign(arrival_port, f(ig_port)),
                    Stmt::CloneToCpu,
                    Stmt::Assign(lookup_src, f(po_vsrc)),
                    Stmt::Assign(lookup_dst, f(po_vdst)),
                    Stmt::Assign(lookup_sport, f(po_vsport)),
                    Stmt::Assign(lookup_dport, f(po_vdport)),
                ],
            ),
        ],
    )];
    let fan: Vec<FieldId> = word_meta(&mut b, "fanout_seen", mask_words);
    let seen: Vec<FieldId> = word_meta(&mut b, "paused_seen_now", mask_words);
    let held: Vec<FieldId> = word_meta(&mut b, "pfc_paused_now", mask_words);
    let mut polling_decide = vec![Stmt::Assign(victim_port, c(no_port, 16))];
    polling_decide.extend(ig_prologue.clone());
    for (k, lap) in slot_laps.iter().enumerate() {
        polling_decide.push(Stmt::If(
            gt(c(k as u64, epoch_bits.max(1)), f(ig_epoch_index)),
            vec![Stmt::Assign(*lap, sub(f(ig_epoch_id), c(1, 16)))],
            vec![Stmt::Assign(*lap, f(ig_epoch_id))],
        ));
    }
    polling_decide.push(Stmt::If(
        all(
            ne(and(f(po_flag), c(1, 2)), c(0, 2)),
            eq(f(route_found), c(1, 1)),
        ),
        vec![Stmt::Assign(victim_port, f(routed_port))],
        vec![],
    ));
    let mut victim_hit: Option<Expr> = None;
    for w in 0..mask_words {
        // Every slot of the ring, OR-ed: traffic and paused packets of any epoch it keeps.
        let mut fan_any: Option<Expr> = None;
        let mut seen_any: Option<Expr> = None;
        for k in 0..slots {
            let fan_k = b.meta(&format!("fanout_e{k}_seen_w{w}"), 32);
            let seen_k = b.meta(&format!("paused_seen_e{k}_now_w{w}"), 32);
            let xoff_k = b.meta(&format!("pfc_xoff_e{k}_now_w{w}"), 32);
            polling_decide.extend([
                exec(
                    fanout_read[k][w],
                    slice(f(ig_port), port_bits - 1, 0),
                    Some(fan_k),
                ),
                exec(seen_read[k][w], c(0, 1), Some(seen_k)),
                exec(xoff_read[k][w], c(0, 1), Some(xoff_k)),
            ]);
            fan_any = Some(match fan_any {
                None => f(fan_k),
                Some(e) => or(e, f(fan_k)),
            });
            let paused_k = or(f(seen_k), f(xoff_k));
            seen_any = Some(match seen_any {
                None => paused_k,
                Some(e) => or(e, paused_k),
            });
        }
        if let (Some(fan_any), Some(seen_any)) = (fan_any, seen_any) {
            polling_decide.extend([
                exec(
                    held_read[w],
                    slice(f(ig_port), port_bits - 1, 0),
                    Some(held_now[w]),
                ),
                exec(
                    last_read[w],
                    slice(f(ig_port), port_bits - 1, 0),
                    Some(last_now[w]),
                ),
                // Traffic from the arrival port within the ring, in its latest epoch, or
                // held behind a pause since before it.
                Stmt::Assign(fan[w], or(or(fan_any, f(last_now[w])), f(held_now[w]))),
                Stmt::Assign(seen[w], seen_any),
            ]);
        }
        polling_decide.extend([
            exec(pfc_read[w], c(0, 1), Some(held[w])),
            // Paused ports: paused packets enqueued or XOFFs received within the ring, or
            // a pause in force.
            Stmt::Assign(seen[w], or(f(seen[w]), f(held[w]))),
            Stmt::Assign(pfc_ports[w], c(0, 32)),
        ]);
        let hit = ne(and(f(seen[w]), f(masks[w])), c(0, 32));
        victim_hit = Some(match victim_hit {
            None => hit,
            Some(e) => any(e, hit),
        });
    }
    polling_decide.push(Stmt::Assign(victim_paused, c(0, 1)));
    if let Some(hit) = victim_hit {
        polling_decide.push(Stmt::If(
            all(ne(f(victim_port), c(no_port, 16)), hit),
            vec![Stmt::Assign(victim_paused, c(1, 1))],
            vec![],
        ));
    }
    polling_decide.push(Stmt::If(
        ne(and(f(po_flag), c(2, 2)), c(0, 2)),
        // PFC bit: the ports that are paused and took traffic from the port the polling
        // packet came in by (where the PFC it follows was sent), HAWKEYE Fig. 6.
        (0..mask_words)
            .map(|w| Stmt::Assign(pfc_ports[w], and(f(fan[w]), f(seen[w]))))
            .collect(),
        vec![],
    ));
    polling_decide.push(Stmt::If(
        ne(and(f(po_flag), c(2, 2)), c(0, 2)),
        // PFC bit: every port checks its causality (HAWKEYE Fig. 6).
        vec![Stmt::SetMulticastGroup(all_ports_group as u16)],
        vec![Stmt::If(
            ne(f(victim_port), c(no_port, 16)),
            vec![Stmt::SetEgressPort(f(victim_port))],
            vec![Stmt::Drop],
        )],
    ));
    let classify = vec![
        Stmt::Assign(mask_port, c(no_port, 16)),
        Stmt::If(
            valid(pfc),
            vec![Stmt::If(
                eq(f(pfc_opcode_f), c(pfc_opcode, 16)),
                vec![Stmt::Assign(mask_port, f(ig_port))],
                vec![],
            )],
            vec![Stmt::If(
                valid(ipv4),
                vec![
                    Stmt::If(
                        valid(polling),
                        polling_front,
                        vec![
                            Stmt::Assign(lookup_src, f(ip_src)),
                            Stmt::Assign(lookup_dst, f(ip_dst)),
                            Stmt::Assign(lookup_sport, f(udp_sport)),
                            Stmt::Assign(lookup_dport, f(udp_dport)),
                        ],
                    ),
                    Stmt::Apply(forward),
                    Stmt::If(
                        eq(f(route_found), c(1, 1)),
                        vec![Stmt::Assign(mask_port, f(routed_port))],
                        vec![],
                    ),
                ],
                vec![],
            )],
        ),
        Stmt::Apply(port_mask),
    ];
    let ip_branch = vec![Stmt::If(valid(polling), polling_decide, {
        let mut v = vec![Stmt::If(
            eq(f(route_found), c(1, 1)),
            vec![Stmt::SetEgressPort(f(routed_port))],
            vec![Stmt::Drop],
        )];
        v.extend(sketch_stmts);
        v.push(Stmt::If(
            all(valid(bth), eq(f(route_found), c(1, 1))),
            data_ingress,
            vec![],
        ));
        v
    })];
    let mut ingress = classify;
    ingress.push(Stmt::If(
        valid(pfc),
        vec![Stmt::If(
            eq(f(pfc_opcode_f), c(pfc_opcode, 16)),
            // HAWKEYE §3.3: the PFC frame updates the port status; it is consumed.
            {
                let mut v = pfc_stmts;
                v.push(Stmt::Drop);
                v
            },
            // Other MAC control frames (802.3x PAUSE) are consumed.
            vec![Stmt::Drop],
        )],
        vec![Stmt::If(valid(ipv4), ip_branch, vec![Stmt::Drop])],
    ));
    b.ingress(ingress);

    // ---- egress: epoch ring (HAWKEYE §3.3, Fig. 4) ---------------------------------
    let epoch_index = b.meta("epoch_index", epoch_bits.max(1));
    let epoch_id = b.meta_carried("epoch_id", 16, false, true);
    let epoch_offset = b.meta("epoch_offset", 32);
    let qdepth = b.meta("qdepth", 32);
    let unpaused_qdepth = b.meta("unpaused_qdepth", 32);
    let eg_paused = b.meta("eg_paused", 32);
    let port_index = b.meta("port_index", epoch_bits + port_bits);
    let flow_slot = b.meta("flow_slot", flow_bits);
    let flow_index = b.meta("flow_index", epoch_bits + flow_bits);
    let port_old_epoch = b.meta("port_old_epoch", 16);
    let port_fresh = b.meta("port_fresh", 1);

    let mut epoch_prologue = epoch_of(enq_tstamp, epoch_index, epoch_id, eb, epoch_bits).to_vec();
    epoch_prologue.extend([
        Stmt::Assign(epoch_offset, cast(slice(f(enq_tstamp), eb - 1, 0), 32)),
        Stmt::Assign(
            port_index,
            concat(
                f(epoch_index),
                epoch_bits,
                slice(f(eg_port), port_bits - 1, 0),
                port_bits,
            ),
        ),
    ]);

    // Port queue-depth sums (the queue depth at enqueue is only known in egress), keyed by
    // the enqueue epoch like the ingress counters.
    let port_epoch = b.register("port_epoch", 16, params.epochs * params.ports, module_port, "Epoch id (timestamp bits above the ring index) stored in each (epoch, port) slot of the queue-depth sums; a newer id resets the slot on first touch");
    let port_qdepth = b.register(
        "port_qdepth_sum",
        32,
        params.epochs * params.ports,
        module_port,
        "Sum of enqueue queue depths (target unit) over all packets enqueued in the epoch",
    );
    let port_unpaused = b.register(
        "port_unpaused_qdepth_sum",
        32,
        params.epochs * params.ports,
        module_port,
        "Sum of enqueue queue depths over non-paused packets",
    );
    let port_epoch_swap = epoch_swap(&mut b, "port_epoch_swap", port_epoch, epoch_id);
    let port_qdepth_add = epoch_counter(
        &mut b,
        "port_qdepth_sum_add",
        port_qdepth,
        port_fresh,
        Phv(qdepth),
    );
    let port_unpaused_add = epoch_counter(
        &mut b,
        "port_unpaused_qdepth_sum_add",
        port_unpaused,
        port_fresh,
        Phv(unpaused_qdepth),
    );

    // Flow telemetry registers (HAWKEYE §3.3 flow-level telemetry).
    let module_flow = MODULE_FLOW_TELEMETRY;
    let fsize = params.epochs * params.flow_slots;
    let flow_epoch = b.register(
        "flow_epoch",
        16,
        fsize,
        module_flow,
        "Epoch id of the flow slot",
    );
    let flow_src = b.register(
        "flow_key_src",
        32,
        fsize,
        module_flow,
        "Flow key: IPv4 source",
    );
    let flow_dst = b.register(
        "flow_key_dst",
        32,
        fsize,
        module_flow,
        "Flow key: IPv4 destination",
    );
    let flow_ports = b.register(
        "flow_key_ports",
        32,
        fsize,
        module_flow,
        "Flow key: UDP source port << 16 | destination port (RoCEv2: protocol is always UDP)",
    );
    let flow_packets = b.register(
        "flow_packets",
        32,
        fsize,
        module_flow,
        "Packets of the flow in the epoch",
    );
    let flow_paused = b.register(
        "flow_paused_packets",
        32,
        fsize,
        module_flow,
        "Paused packets of the flow",
    );
    let flow_qdepth = b.register(
        "flow_unpaused_qdepth_sum",
        32,
        fsize,
        module_flow,
        "Queue depth sum over the flow's non-paused packets",
    );
    let flow_first = b.register(
        "flow_first_offset",
        32,
        fsize,
        module_flow,
        "ns from the epoch start to the flow's first enqueue",
    );
    let flow_last = b.register(
        "flow_last_offset",
        32,
        fsize,
        module_flow,
        "ns from the epoch start to the flow's last enqueue",
    );
    let flow_port = b.register(
        "flow_egress_port",
        16,
        fsize,
        module_flow,
        "Egress port of the flow",
    );
    let flow_hash = b.hash(
        "flow_hash",
        vec![ip_src, ip_dst, udp_sport, udp_dport],
        flow_bits,
    );
    let key_ports = b.meta("flow_ports", 32);
    let flow_continue = b.meta("flow_continue", 1);
    let flow_evict = b.meta("flow_evict", 1);
    let old_epoch = b.meta_carried("flow_old_epoch", 16, false, true);
    let old_src = b.meta_carried("flow_old_src", 32, false, true);
    let old_dst = b.meta_carried("flow_old_dst", 32, false, true);
    let old_ports = b.meta_carried("flow_old_ports", 32, false, true);
    let old_pkts = b.meta_carried("flow_old_packets", 32, false, true);
    let old_paused = b.meta_carried("flow_old_paused", 32, false, true);
    let old_qsum = b.meta_carried("flow_old_qdepth_sum", 32, false, true);
    let old_first = b.meta_carried("flow_old_first", 32, false, true);
    let old_last = b.meta_carried("flow_old_last", 32, false, true);
    let old_port = b.meta_carried("flow_old_egress_port", 16, false, true);
    let old_epoch_index = b.meta_carried("flow_old_epoch_index", 8, false, true);
    let swap = |b: &mut ProgramBuilder, name: &str, r: RegisterId, v: FieldId| {
        ra(
            b,
            name,
            r,
            "Stores this packet's value, returns the previous occupant's",
            vec![],
            vec![always(Word::Lo, SaluOp::Set, Phv(v), K(0))],
            vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Lo))],
        )
    };
    let flow_epoch_swap = swap(&mut b, "flow_epoch_swap", flow_epoch, epoch_id);
    let flow_src_swap = swap(&mut b, "flow_key_src_swap", flow_src, ip_src);
    let flow_dst_swap = swap(&mut b, "flow_key_dst_swap", flow_dst, ip_dst);
    let flow_ports_swap = swap(&mut b, "flow_key_ports_swap", flow_ports, key_ports);
    let flow_port_swap = swap(&mut b, "flow_egress_port_swap", flow_port, eg_port);
    let flow_last_swap = swap(&mut b, "flow_last_offset_swap", flow_last, epoch_offset);
    let flow_counter = |b: &mut ProgramBuilder, name: &str, r: RegisterId, v: SaluOperand| {
        ra(
            b,
            name,
            r,
            "Same flow in the same epoch adds (saturating); a new occupant starts over; returns the previous value (for the eviction report)",
            vec![cond(Phv(flow_continue), None, CmpOp::Ne, 0)],
            vec![
                upd(Pred::when(Some(true), None), Word::Lo, SaluOp::SatAdd, LO, v),
                upd(Pred::when(Some(false), None), Word::Lo, SaluOp::Set, v, K(0)),
            ],
            vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Lo))],
        )
    };
    let flow_packets_add = flow_counter(&mut b, "flow_packets_add", flow_packets, K(1));
    let flow_paused_add = flow_counter(
        &mut b,
        "flow_paused_packets_add",
        flow_paused,
        Phv(eg_paused),
    );
    let flow_qdepth_add = flow_counter(
        &mut b,
        "flow_unpaused_qdepth_sum_add",
        flow_qdepth,
        Phv(unpaused_qdepth),
    );
    let flow_first_set = ra(
        &mut b,
        "flow_first_offset_update",
        flow_first,
        "A new occupant records its first enqueue offset; returns the previous value",
        vec![cond(Phv(flow_continue), None, CmpOp::Ne, 0)],
        vec![upd(
            Pred::when(Some(false), None),
            Word::Lo,
            SaluOp::Set,
            Phv(epoch_offset),
            K(0),
        )],
        vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Lo))],
    );

    let data_egress = {
        let mut v = epoch_prologue.clone();
        v.extend([
            // Paused at enqueue: decided in ingress (the pause state lives there).
            Stmt::Assign(eg_paused, cast(f(paused_bridged), 32)),
            Stmt::Assign(qdepth, f(enq_qdepth)),
            Stmt::Assign(unpaused_qdepth, f(qdepth)),
            Stmt::If(
                ne(f(eg_paused), c(0, 32)),
                vec![Stmt::Assign(unpaused_qdepth, c(0, 32))],
                vec![],
            ),
            // Port queue-depth sums.
            exec(port_epoch_swap, f(port_index), Some(port_old_epoch)),
            Stmt::Assign(port_fresh, c(0, 1)),
            Stmt::If(
                ne(f(port_old_epoch), f(epoch_id)),
                vec![Stmt::Assign(port_fresh, c(1, 1))],
                vec![],
            ),
            exec(port_qdepth_add, f(port_index), None),
            exec(port_unpaused_add, f(port_index), None),
            // Flow telemetry: slot = hash(5-tuple), key check, eviction.
            Stmt::Hash(flow_hash, flow_slot),
            Stmt::Assign(
                flow_index,
                concat(f(epoch_index), epoch_bits, f(flow_slot), flow_bits),
            ),
            Stmt::Assign(key_ports, concat(f(udp_sport), 16, f(udp_dport), 16)),
            exec(flow_epoch_swap, f(flow_index), Some(old_epoch)),
            exec(flow_src_swap, f(flow_index), Some(old_src)),
            exec(flow_dst_swap, f(flow_index), Some(old_dst)),
            exec(flow_ports_swap, f(flow_index), Some(old_ports)),
            Stmt::Assign(flow_continue, c(0, 1)),
            Stmt::If(
                all(
                    all(eq(f(old_epoch), f(epoch_id)), eq(f(old_src), f(ip_src))),
                    all(eq(f(old_dst), f(ip_dst)), eq(f(old_ports), f(key_ports))),
                ),
                vec![Stmt::Assign(flow_continue, c(1, 1))],
                vec![],
            ),
            Stmt::Assign(flow_evict, c(0, 1)),
            Stmt::If(
                all(
                    eq(f(flow_continue), c(0, 1)),
                    all(eq(f(old_epoch), f(epoch_id)), ne(f(old_src), c(0, 32))),
                ),
                vec![Stmt::Assign(flow_evict, c(1, 1))],
                vec![],
            ),
            exec(flow_packets_add, f(flow_index), Some(old_pkts)),
            exec(flow_paused_add, f(flow_index), Some(old_paused)),
            exec(flow_qdepth_add, f(flow_index), Some(old_qsum)),
            exec(flow_first_set, f(flow_index), Some(old_first)),
            exec(flow_last_swap, f(flow_index), Some(old_last)),
            exec(flow_port_swap, f(flow_index), Some(old_port)),
            Stmt::Assign(old_epoch_index, cast(f(epoch_index), 8)),
            // The evicted flow's counters reach the CPU (an egress clone carrying them).
            Stmt::If(eq(f(flow_evict), c(1, 1)), vec![Stmt::CloneToCpu], vec![]),
        ]);
        v
    };

    // ---- egress: polling (HAWKEYE §3.4, Fig. 6) ------------------------------------
    let eg_masks: Vec<FieldId> = word_meta(&mut b, "egress_port_mask", mask_words);
    let set_eg_masks = eg_masks.clone();
    let eg_mask_set = b.action(
        "egress_port_mask_set",
        "The one-hot mask of the egress port, in 32-port words",
        &mask_param_refs,
        move |p| {
            set_eg_masks
                .iter()
                .zip(p)
                .map(|(m, v)| Stmt::Assign(*m, f(*v)))
                .collect()
        },
    );
    let zero_eg_masks = eg_masks.clone();
    let eg_mask_none = b.action(
        "egress_port_mask_none",
        "No port: an empty mask",
        &[],
        move |_| {
            zero_eg_masks
                .iter()
                .map(|m| Stmt::Assign(*m, c(0, 32)))
                .collect()
        },
    );
    let eg_mask_table = b.table(Table {
        name: "egress_port_mask".into(),
        keys: vec![(eg_port, MatchKind::Exact)],
        actions: vec![eg_mask_set, eg_mask_none],
        default_action: (eg_mask_none, vec![]),
        size: params.ports,
        doc: "Egress port → one-hot mask, to test it against the bridged PFC-branch bitmap".into(),
        forwarding: false,
        selector: vec![],
    });
    let reason_victim = b.meta("reason_victim", 1);
    let reason_pfc = b.meta("reason_pfc", 1);
    let new_flag = b.meta("new_flag", 2);
    let mut on_branch: Option<Expr> = None;
    for w in 0..mask_words {
        let hit = ne(and(f(pfc_ports[w]), f(eg_masks[w])), c(0, 32));
        on_branch = Some(match on_branch {
            None => hit,
            Some(e) => any(e, hit),
        });
    }
    let on_branch = on_branch.unwrap_or_else(|| eq(c(0, 1), c(1, 1)));
    let polling_egress = vec![
        Stmt::Apply(eg_mask_table),
        Stmt::Assign(reason_victim, c(0, 1)),
        Stmt::If(
            all(
                ne(and(f(po_flag), c(1, 2)), c(0, 2)),
                eq(f(eg_port), f(victim_port)),
            ),
            vec![Stmt::Assign(reason_victim, c(1, 1))],
            vec![],
        ),
        Stmt::Assign(reason_pfc, c(0, 1)),
        // The arrival port is a candidate too: traffic that came in by it and went back out
        // by it is a routing loop between two switches, and the PAUSE it met there is the
        // loop's own edge (in loop-free routing no traffic makes that U-turn, so the meter
        // keeps the port off the branch).
        Stmt::If(
            all(ne(and(f(po_flag), c(2, 2)), c(0, 2)), on_branch),
            vec![Stmt::Assign(reason_pfc, c(1, 1))],
            vec![],
        ),
        Stmt::If(
            all(eq(f(reason_victim), c(0, 1)), eq(f(reason_pfc), c(0, 1))),
            vec![Stmt::Drop],
            vec![
                Stmt::Assign(new_flag, c(0, 2)),
                Stmt::If(
                    eq(f(reason_victim), c(1, 1)),
                    vec![
                        Stmt::Assign(new_flag, c(1, 2)),
                        // The victim is paused here: the next switch (where the PFC came
                        // from) traces the causality (HAWKEYE §3.4).
                        Stmt::If(
                            eq(f(victim_paused), c(1, 1)),
                            vec![Stmt::Assign(new_flag, c(3, 2))],
                            vec![],
                        ),
                    ],
                    vec![],
                ),
                Stmt::If(
                    eq(f(reason_pfc), c(1, 1)),
                    vec![Stmt::Assign(new_flag, or(f(new_flag), c(2, 2)))],
                    vec![],
                ),
                Stmt::Assign(po_flag, f(new_flag)),
                Stmt::Assign(po_hop, sub(f(po_hop), c(1, 8))),
                Stmt::Assign(po_kind, c(0, 8)),
                Stmt::Assign(po_arrival, c(0, 8)),
                Stmt::Assign(po_ctx_in, c(0, 16)),
                Stmt::Assign(po_ctx_out, c(0, 16)),
                Stmt::Assign(po_ctx_flags, c(0, 8)),
                Stmt::Assign(po_ctx_pfc, c(0, 64)),
            ],
        ),
    ];

    let pfc_ports_wide = if mask_words == 1 {
        cast(f(pfc_ports[0]), 64)
    } else {
        concat(f(pfc_ports[1]), 32, f(pfc_ports[0]), 32)
    };
    let clone_egress = vec![Stmt::If(
        eq(f(clone_kind), c(CLONE_INGRESS, 8)),
        vec![Stmt::If(
            valid(polling),
            vec![
                // The CPU copy carries the port context (HAWKEYE §3.4): where it came in,
                // the port the victim's own forwarding chose and whether the victim is
                // paused there, and the PFC-branch egress ports (the mirror metadata holds
                // the ingress pipeline's final values), so the agent and the analyzer know
                // which switches come next.
                Stmt::Assign(po_kind, c(ctx_cpu, 8)),
                Stmt::Assign(po_arrival, f(arrival_flags)),
                Stmt::Assign(po_ctx_in, f(arrival_port)),
                Stmt::Assign(po_ctx_out, f(victim_port)),
                Stmt::Assign(po_ctx_flags, cast(f(victim_paused), 8)),
                Stmt::Assign(po_ctx_pfc, pfc_ports_wide),
            ],
            vec![],
        )],
        vec![
            Stmt::SetValid(eviction),
            Stmt::Assign(ev_epoch_id, f(epoch_id)),
            Stmt::Assign(ev_epoch_index, f(old_epoch_index)),
            Stmt::Assign(ev_port, f(old_port)),
            Stmt::Assign(ev_src, f(old_src)),
            Stmt::Assign(ev_dst, f(old_dst)),
            Stmt::Assign(ev_sport, slice(f(old_ports), 31, 16)),
            Stmt::Assign(ev_dport, slice(f(old_ports), 15, 0)),
            Stmt::Assign(ev_pkts, f(old_pkts)),
            Stmt::Assign(ev_paused, f(old_paused)),
            Stmt::Assign(ev_qsum, f(old_qsum)),
            Stmt::Assign(ev_first, f(old_first)),
            Stmt::Assign(ev_last, f(old_last)),
        ],
    )];
    let _ = old_epoch;

    b.egress(vec![Stmt::If(
        ne(f(clone_kind), c(0, 8)),
        clone_egress,
        vec![Stmt::If(
            valid(polling),
            polling_egress,
            vec![Stmt::If(valid(bth), data_egress, vec![])],
        )],
    )]);
    b.build()
}
