//! Egress epoch ring (HAWKEYE §3.3, Fig. 4): the port queue-depth sums (the queue depth
//! at enqueue is only known in egress) and the flow telemetry with its eviction, keyed by
//! the enqueue epoch.

use super::dsl::*;
use super::{Ctx, MODULE_FLOW_TELEMETRY, MODULE_PORT_TELEMETRY};
use crate::ir::e::*;
use crate::ir::*;

/// The ring's fields and the statements that start every counted egress pass (ring slot,
/// epoch id and offset of the enqueue timestamp, the port index).
pub(super) struct Ring {
    pub(super) epoch_index: FieldId,
    /// Carried to the eviction CPU copy.
    pub(super) epoch_id: FieldId,
    pub(super) epoch_offset: FieldId,
    pub(super) qdepth: FieldId,
    pub(super) unpaused_qdepth: FieldId,
    pub(super) eg_paused: FieldId,
    pub(super) port_index: FieldId,
    pub(super) flow_slot: FieldId,
    pub(super) flow_index: FieldId,
    pub(super) port_old_epoch: FieldId,
    pub(super) port_fresh: FieldId,
    pub(super) prologue: Vec<Stmt>,
}

/// Declares the ring's fields.
pub(super) fn ring_fields(b: &mut ProgramBuilder, cx: &Ctx) -> Ring {
    let (port_bits, eb, epoch_bits, flow_bits) = (
        cx.dims.port_bits,
        cx.dims.eb,
        cx.dims.epoch_bits,
        cx.dims.flow_bits,
    );
    let (eg_port, enq_tstamp) = (cx.intr.eg_port, cx.intr.enq_tstamp);
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

    Ring {
        epoch_index,
        epoch_id,
        epoch_offset,
        qdepth,
        unpaused_qdepth,
        eg_paused,
        port_index,
        flow_slot,
        flow_index,
        port_old_epoch,
        port_fresh,
        prologue: epoch_prologue,
    }
}

/// Port queue-depth sums: declares the registers and returns the statements.
pub(super) fn port_qdepth_sums(b: &mut ProgramBuilder, cx: &Ctx, ring: &Ring) -> Vec<Stmt> {
    let params = cx.params;
    let module_port = MODULE_PORT_TELEMETRY;
    let (paused_bridged, enq_qdepth) = (cx.meta.carried.paused_bridged, cx.intr.enq_qdepth);
    let Ring {
        epoch_id,
        qdepth,
        unpaused_qdepth,
        eg_paused,
        port_index,
        port_old_epoch,
        port_fresh,
        ..
    } = *ring;
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
    let port_epoch_swap = epoch_swap(b, "port_epoch_swap", port_epoch, epoch_id);
    let port_qdepth_add = epoch_counter(
        b,
        "port_qdepth_sum_add",
        port_qdepth,
        port_fresh,
        Phv(qdepth),
    );
    let port_unpaused_add = epoch_counter(
        b,
        "port_unpaused_qdepth_sum_add",
        port_unpaused,
        port_fresh,
        Phv(unpaused_qdepth),
    );
    vec![
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
    ]
}

/// The evicted flow's record, carried to the eviction CPU copy.
pub(super) struct Evicted {
    pub(super) epoch_index: FieldId,
    pub(super) egress_port: FieldId,
    pub(super) src: FieldId,
    pub(super) dst: FieldId,
    /// UDP source port << 16 | destination port.
    pub(super) ports: FieldId,
    pub(super) packets: FieldId,
    pub(super) paused: FieldId,
    pub(super) qdepth_sum: FieldId,
    pub(super) first: FieldId,
    pub(super) last: FieldId,
}

/// Flow telemetry: its statements and what an eviction carries.
pub(super) struct Flows {
    pub(super) stmts: Vec<Stmt>,
    pub(super) evicted: Evicted,
}

/// Flow telemetry (HAWKEYE §3.3 flow-level telemetry): slot = hash(5-tuple), key check,
/// eviction to the CPU.
pub(super) fn flow_telemetry(b: &mut ProgramBuilder, cx: &Ctx, ring: &Ring) -> Flows {
    let params = cx.params;
    let (epoch_bits, flow_bits) = (cx.dims.epoch_bits, cx.dims.flow_bits);
    let eg_port = cx.intr.eg_port;
    let (ip_src, ip_dst) = (cx.h.ipv4.src_addr, cx.h.ipv4.dst_addr);
    let (udp_sport, udp_dport) = (cx.h.udp.src_port, cx.h.udp.dst_port);
    let Ring {
        epoch_index,
        epoch_id,
        epoch_offset,
        unpaused_qdepth,
        eg_paused,
        flow_slot,
        flow_index,
        ..
    } = *ring;
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
    let flow_epoch_swap = swap(b, "flow_epoch_swap", flow_epoch, epoch_id);
    let flow_src_swap = swap(b, "flow_key_src_swap", flow_src, ip_src);
    let flow_dst_swap = swap(b, "flow_key_dst_swap", flow_dst, ip_dst);
    let flow_ports_swap = swap(b, "flow_key_ports_swap", flow_ports, key_ports);
    let flow_port_swap = swap(b, "flow_egress_port_swap", flow_port, eg_port);
    let flow_last_swap = swap(b, "flow_last_offset_swap", flow_last, epoch_offset);
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
    let flow_packets_add = flow_counter(b, "flow_packets_add", flow_packets, K(1));
    let flow_paused_add = flow_counter(b, "flow_paused_packets_add", flow_paused, Phv(eg_paused));
    let flow_qdepth_add = flow_counter(
        b,
        "flow_unpaused_qdepth_sum_add",
        flow_qdepth,
        Phv(unpaused_qdepth),
    );
    let flow_first_set = ra(
        b,
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
    let stmts = vec![
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
    ];
    Flows {
        stmts,
        evicted: Evicted {
            epoch_index: old_epoch_index,
            egress_port: old_port,
            src: old_src,
            dst: old_dst,
            ports: old_ports,
            packets: old_pkts,
            paused: old_paused,
            qdepth_sum: old_qsum,
            first: old_first,
            last: old_last,
        },
    }
}

/// A RoCEv2 packet's egress pass: the ring prologue, the port sums, the flow telemetry.
pub(super) fn data_egress(ring: &Ring, port_sums: Vec<Stmt>, flows: Vec<Stmt>) -> Vec<Stmt> {
    let mut v = ring.prologue.clone();
    v.extend(port_sums);
    v.extend(flows);
    v
}
