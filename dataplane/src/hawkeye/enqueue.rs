//! Ingress enqueue telemetry and causality meter (HAWKEYE §3.3, Fig. 3-4): per (epoch,
//! egress port) packets and paused packets, per (epoch, ingress, egress) bytes, and the PFC
//! branch's fanout bitmaps, counted when a RoCEv2 packet is enqueued.

use super::dsl::*;
use super::pfc_branch::Branch;
use super::pfc_status::PauseEnds;
use super::port_mask::PortMask;
use super::{Ctx, MODULE_CAUSALITY_METER, MODULE_PORT_TELEMETRY};
use crate::ir::e::*;
use crate::ir::*;

/// Declares the enqueue counters and returns the statements a routed RoCEv2 packet runs.
pub(super) fn enqueue_telemetry(
    b: &mut ProgramBuilder,
    cx: &Ctx,
    pause: &PauseEnds,
    mask: &PortMask,
    branch: &Branch,
    ig_prologue: &[Stmt],
) -> Vec<Stmt> {
    let params = cx.params;
    let (port_bits, mask_words, epoch_bits, slots) = (
        cx.dims.port_bits,
        cx.dims.mask_words,
        cx.dims.epoch_bits,
        cx.dims.slots,
    );
    let (ig_port, ip_dscp, ip_total_len) = (cx.intr.ig_port, cx.h.ipv4.dscp, cx.h.ipv4.total_len);
    let (routed_port, paused_bridged) = (cx.meta.route.routed_port, cx.meta.carried.paused_bridged);
    let (tc, paused, pause_check) = (pause.tc, pause.paused, &pause.check);
    let masks = &mask.masks;
    let (ig_epoch_index, ig_epoch_id) = (branch.epoch.index, branch.epoch.id);
    let (held_set, held_keep, held_update, last_or) = (
        &branch.held_set,
        &branch.held_keep,
        &branch.held_update,
        &branch.last_or,
    );
    let (fanout_or, seen_or) = (&branch.fanout_or, &branch.seen_or);
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
    let port_enq_swap = epoch_swap(b, "port_enq_epoch_swap", port_enq_epoch, ig_epoch_id);
    let port_packets_add = epoch_counter(b, "port_packets_add", port_packets, enq_fresh, K(1));
    let port_paused_add = epoch_counter(
        b,
        "port_paused_packets_add",
        port_paused,
        enq_fresh,
        Phv(paused),
    );
    let meter_swap = epoch_swap(b, "meter_epoch_swap", meter_epoch, ig_epoch_id);
    let meter_add = epoch_counter(b, "meter_bytes_add", meter_bytes, meter_fresh, Phv(ig_len));

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
    let mut v = ig_prologue.to_vec();
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
}
