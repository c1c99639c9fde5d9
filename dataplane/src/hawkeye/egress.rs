//! Egress polling (HAWKEYE §3.4, Fig. 6), the CPU copies (the polling copy's port
//! context, the eviction report) and the egress control.

use super::epoch_ring::{Evicted, Ring};
use super::Ctx;
use super::{dsl::*, port_mask};
use crate::ir::e::*;
use crate::ir::*;

/// A polling copy: kept on the victim's port or a port of the bridged PFC branch, with its
/// trace flag, hop limit and context rewritten; other copies are dropped.
fn polling_egress(b: &mut ProgramBuilder, cx: &Ctx) -> Vec<Stmt> {
    let mask_words = cx.dims.mask_words;
    let eg_port = cx.intr.eg_port;
    let po = &cx.h.polling;
    let (po_flag, po_hop, po_kind, po_arrival) = (
        po.trace_flag,
        po.hop_limit,
        po.context_kind,
        po.arrival_flags,
    );
    let (po_ctx_in, po_ctx_out, po_ctx_flags, po_ctx_pfc) = (
        po.context_ingress_port,
        po.context_egress_port,
        po.context_flags,
        po.context_pfc_ports,
    );
    let carried = &cx.meta.carried;
    let (victim_port, victim_paused, pfc_ports) = (
        carried.victim_port,
        carried.victim_paused,
        &carried.pfc_ports,
    );
    let eg_masks: Vec<FieldId> = word_meta(b, "egress_port_mask", mask_words);
    let eg_mask_table = port_mask::mask_table(
        b,
        cx,
        "egress_port_mask",
        eg_port,
        &eg_masks,
        "The one-hot mask of the egress port, in 32-port words",
        "Egress port → one-hot mask, to test it against the bridged PFC-branch bitmap",
    );
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
                Stmt::Assign(po.context_tstamp, c(0, 64)),
            ],
        ),
    ];
    polling_egress
}

/// A clone: the polling CPU copy gets the port context; an egress clone is an eviction
/// report.
fn clone_egress(cx: &Ctx, ring: &Ring, evicted: &Evicted) -> Vec<Stmt> {
    let mask_words = cx.dims.mask_words;
    let ctx_cpu = cx.k.ctx_cpu;
    let clone_kind = cx.intr.clone_kind;
    let po = &cx.h.polling;
    let (polling, po_kind, po_arrival) = (po.header, po.context_kind, po.arrival_flags);
    let (po_ctx_in, po_ctx_out, po_ctx_flags, po_ctx_pfc) = (
        po.context_ingress_port,
        po.context_egress_port,
        po.context_flags,
        po.context_pfc_ports,
    );
    let carried = &cx.meta.carried;
    let (victim_port, victim_paused, pfc_ports) = (
        carried.victim_port,
        carried.victim_paused,
        &carried.pfc_ports,
    );
    let (arrival_flags, arrival_port, arrival_tstamp) = (
        carried.arrival_flags,
        carried.arrival_port,
        carried.arrival_tstamp,
    );
    let ev = &cx.h.eviction;
    let eviction = ev.header;
    let (ev_epoch_id, ev_epoch_index, ev_port, ev_src, ev_dst, ev_sport, ev_dport) = (
        ev.epoch_id,
        ev.epoch_index,
        ev.egress_port,
        ev.src_addr,
        ev.dst_addr,
        ev.src_port,
        ev.dst_port,
    );
    let (ev_pkts, ev_paused, ev_qsum, ev_first, ev_last) = (
        ev.packets,
        ev.paused_packets,
        ev.unpaused_qdepth_sum,
        ev.first_offset_ns,
        ev.last_offset_ns,
    );
    let epoch_id = ring.epoch_id;
    let (old_epoch_index, old_port, old_src, old_dst, old_ports) = (
        evicted.epoch_index,
        evicted.egress_port,
        evicted.src,
        evicted.dst,
        evicted.ports,
    );
    let (old_pkts, old_paused, old_qsum, old_first, old_last) = (
        evicted.packets,
        evicted.paused,
        evicted.qdepth_sum,
        evicted.first,
        evicted.last,
    );
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
                // which switches come next; and the switch's time of its arrival, the
                // clock the agent's epochs are in.
                Stmt::Assign(po_kind, c(ctx_cpu, 8)),
                Stmt::Assign(po_arrival, f(arrival_flags)),
                Stmt::Assign(po_ctx_in, f(arrival_port)),
                Stmt::Assign(po_ctx_out, f(victim_port)),
                Stmt::Assign(po_ctx_flags, cast(f(victim_paused), 8)),
                Stmt::Assign(po_ctx_pfc, pfc_ports_wide),
                Stmt::Assign(po.context_tstamp, cast(f(arrival_tstamp), 64)),
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
    clone_egress
}

/// The egress control: clones, polling copies, and other packets: ECN marking (`ecn`),
/// then RoCEv2 telemetry (`data`). Marking comes first so that an eviction report (an
/// egress clone, which carries the packet as egress leaves it on Tofino) and the model's
/// copy taken at the clone statement carry the same ECN bits.
pub(super) fn egress_control(
    b: &mut ProgramBuilder,
    cx: &Ctx,
    ring: &Ring,
    evicted: &Evicted,
    ecn: Vec<Stmt>,
    data_egress: Vec<Stmt>,
) -> Vec<Stmt> {
    let clone_kind = cx.intr.clone_kind;
    let (polling, bth) = (cx.h.polling.header, cx.h.bth);
    let polling_egress = polling_egress(b, cx);
    let clone_egress = clone_egress(cx, ring, evicted);
    vec![Stmt::If(
        ne(f(clone_kind), c(0, 8)),
        clone_egress,
        vec![Stmt::If(
            valid(polling),
            polling_egress,
            ecn.into_iter()
                .chain([Stmt::If(valid(bth), data_egress, vec![])])
                .collect(),
        )],
    )]
}
