//! The ingress control: PFC frames update the port status and are consumed; polling
//! packets are checked, deduplicated, copied to the CPU and sent along the victim's path
//! or the PFC branch (HAWKEYE §3.4, Fig. 6); data packets are forwarded, inserted into the
//! sketch and counted at enqueue.

use super::dedupe::Dedupe;
use super::dsl::*;
use super::pfc_branch::Branch;
use super::port_mask::PortMask;
use super::Ctx;
use crate::ir::e::*;
use crate::ir::*;

/// What the ingress modules hand to the ingress control.
pub(super) struct Parts {
    /// The forwarding table and its ECMP bucket hash.
    pub(super) forward: super::forwarding::Forwarding,
    pub(super) dedupe: Dedupe,
    /// Where polling may come from, and the host ports' rate limit.
    pub(super) guard: super::polling_guard::PollingGuard,
    /// Elastic Sketch insertion (empty without a sketch).
    pub(super) sketch: Vec<Stmt>,
    pub(super) mask: PortMask,
    pub(super) branch: Branch,
    /// Now and the ingress ring slot.
    pub(super) prologue: Vec<Stmt>,
    /// A PFC frame's statements.
    pub(super) pfc_frame: Vec<Stmt>,
    /// Enqueue telemetry of a routed RoCEv2 packet.
    pub(super) data: Vec<Stmt>,
}

/// A polling packet's checks: hop limit and version, the port's permission and rate limit
/// ([`super::polling_guard`]), duplicate suppression, the CPU copy, and the victim's 5-tuple
/// as the forwarding lookup.
fn polling_front(
    cx: &Ctx,
    dedupe: &Dedupe,
    guard: &super::polling_guard::PollingGuard,
) -> Vec<Stmt> {
    let params = cx.params;
    let polling_version = cx.k.polling_version;
    let (ig_port, ig_tstamp) = (cx.intr.ig_port, cx.intr.ig_tstamp);
    let po = &cx.h.polling;
    let (po_hop, po_version, po_flag) = (po.hop_limit, po.version, po.trace_flag);
    let (po_vsrc, po_vdst, po_vsport, po_vdport) = (
        po.victim_src_addr,
        po.victim_dst_addr,
        po.victim_src_port,
        po.victim_dst_port,
    );
    let d = &cx.meta.dedupe;
    let (dedupe_port, dedupe_key, now_coarse, dedupe_index, duplicate) = (
        d.dedupe_port,
        d.dedupe_key,
        d.now_coarse,
        d.dedupe_index,
        d.duplicate,
    );
    let (dedupe_hash, dedupe_fp, dedupe_check) = (dedupe.hash, dedupe.fingerprint, dedupe.check);
    let (arrival_flags, arrival_port, arrival_tstamp) = (
        cx.meta.carried.arrival_flags,
        cx.meta.carried.arrival_port,
        cx.meta.carried.arrival_tstamp,
    );
    let r = &cx.meta.route;
    let (lookup_src, lookup_dst, lookup_sport, lookup_dport) =
        (r.lookup_src, r.lookup_dst, r.lookup_sport, r.lookup_dport);
    vec![Stmt::If(
        any(
            eq(f(po_hop), c(0, 8)),
            ne(f(po_version), c(polling_version, 8)),
        ),
        vec![Stmt::Drop],
        super::polling_guard::guard(
            cx,
            guard,
            vec![
                Stmt::Assign(dedupe_port, cast(f(ig_port), 16)),
                Stmt::Hash(dedupe_fp, dedupe_key),
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
                        Stmt::Assign(arrival_tstamp, f(ig_tstamp)),
                        Stmt::CloneToCpu,
                        Stmt::Assign(lookup_src, f(po_vsrc)),
                        Stmt::Assign(lookup_dst, f(po_vdst)),
                        Stmt::Assign(lookup_sport, f(po_vsport)),
                        Stmt::Assign(lookup_dport, f(po_vdport)),
                    ],
                ),
            ],
        ),
    )]
}

/// A polling packet's decision: the victim's egress port and whether it is paused there,
/// the PFC branch (`fanout[ingress port] ∩ paused`), then multicast or the victim's port.
fn polling_decide(
    b: &mut ProgramBuilder,
    cx: &Ctx,
    mask: &PortMask,
    branch: &Branch,
    ig_prologue: &[Stmt],
) -> Vec<Stmt> {
    let (port_bits, mask_words, epoch_bits, slots) = (
        cx.dims.port_bits,
        cx.dims.mask_words,
        cx.dims.epoch_bits,
        cx.dims.slots,
    );
    let (no_port, all_ports_group) = (cx.k.no_port, cx.k.all_ports_group);
    let ig_port = cx.intr.ig_port;
    let po_flag = cx.h.polling.trace_flag;
    let carried = &cx.meta.carried;
    let (victim_port, victim_paused, pfc_ports) = (
        carried.victim_port,
        carried.victim_paused,
        &carried.pfc_ports,
    );
    let (routed_port, route_found) = (cx.meta.route.routed_port, cx.meta.route.route_found);
    let masks = &mask.masks;
    let (ig_epoch_index, ig_epoch_id) = (branch.epoch.index, branch.epoch.id);
    let slot_laps = &branch.slot_laps;
    let (fanout_read, seen_read, xoff_read) =
        (&branch.fanout_read, &branch.seen_read, &branch.xoff_read);
    let (held_read, held_now, last_read, last_now, pfc_read) = (
        &branch.held_read,
        &branch.held_now,
        &branch.last_read,
        &branch.last_now,
        &branch.pfc_read,
    );
    let fan: Vec<FieldId> = word_meta(b, "fanout_seen", mask_words);
    let seen: Vec<FieldId> = word_meta(b, "paused_seen_now", mask_words);
    let held: Vec<FieldId> = word_meta(b, "pfc_paused_now", mask_words);
    let mut polling_decide = vec![Stmt::Assign(victim_port, c(no_port, 16))];
    polling_decide.extend(ig_prologue.iter().cloned());
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
    polling_decide
}

/// Every packet: the port to mask (a PFC frame's port, a routed packet's egress port), the
/// polling checks, the forwarding lookup, the port mask.
fn classify(
    cx: &Ctx,
    polling_front: Vec<Stmt>,
    forward: &super::forwarding::Forwarding,
    mask: &PortMask,
) -> Vec<Stmt> {
    let no_port = cx.k.no_port;
    let pfc_opcode = cx.k.pfc_opcode;
    let ig_port = cx.intr.ig_port;
    let h = &cx.h;
    let (pfc, pfc_opcode_f, ipv4, polling) =
        (h.pfc.header, h.pfc.opcode, h.ipv4.header, h.polling.header);
    let (ip_src, ip_dst, udp_sport, udp_dport) = (
        h.ipv4.src_addr,
        h.ipv4.dst_addr,
        h.udp.src_port,
        h.udp.dst_port,
    );
    let r = &cx.meta.route;
    let (lookup_src, lookup_dst, lookup_sport, lookup_dport) =
        (r.lookup_src, r.lookup_dst, r.lookup_sport, r.lookup_dport);
    let (routed_port, route_found) = (r.routed_port, r.route_found);
    let (mask_port, port_mask) = (mask.mask_port, mask.table);
    vec![
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
                    forward.bucket_hash.clone(),
                    Stmt::Apply(forward.table),
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
    ]
}

/// The ingress control.
pub(super) fn ingress_control(b: &mut ProgramBuilder, cx: &Ctx, parts: Parts) -> Vec<Stmt> {
    let Parts {
        forward,
        dedupe,
        guard,
        sketch,
        mask,
        branch,
        prologue,
        pfc_frame,
        data,
    } = parts;
    let pfc_opcode = cx.k.pfc_opcode;
    let h = &cx.h;
    let (pfc, pfc_opcode_f, ipv4, polling, bth) = (
        h.pfc.header,
        h.pfc.opcode,
        h.ipv4.header,
        h.polling.header,
        h.bth,
    );
    let (routed_port, route_found) = (cx.meta.route.routed_port, cx.meta.route.route_found);
    let polling_front = polling_front(cx, &dedupe, &guard);
    let polling_decide = polling_decide(b, cx, &mask, &branch, &prologue);
    let ip_branch = vec![Stmt::If(valid(polling), polling_decide, {
        let mut v = vec![Stmt::If(
            eq(f(route_found), c(1, 1)),
            vec![Stmt::SetEgressPort(f(routed_port))],
            vec![Stmt::Drop],
        )];
        v.extend(sketch);
        v.push(Stmt::If(
            all(valid(bth), eq(f(route_found), c(1, 1))),
            data,
            vec![],
        ));
        v
    })];
    let mut ingress = classify(cx, polling_front, &forward, &mask);
    ingress.push(Stmt::If(
        valid(pfc),
        vec![Stmt::If(
            eq(f(pfc_opcode_f), c(pfc_opcode, 16)),
            // HAWKEYE §3.3: the PFC frame updates the port status; it is consumed.
            {
                let mut v = pfc_frame;
                v.push(Stmt::Drop);
                v
            },
            // Other MAC control frames (802.3x PAUSE) are consumed.
            vec![Stmt::Drop],
        )],
        vec![Stmt::If(valid(ipv4), ip_branch, vec![Stmt::Drop])],
    ));
    ingress
}
