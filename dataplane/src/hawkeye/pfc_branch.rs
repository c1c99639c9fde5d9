//! The polling PFC branch's bitmaps (HAWKEYE Fig. 6), written by every enqueue and PFC
//! frame in ingress, read by the polling packet in ingress and bridged to the egress copies.

use super::dsl::*;
use super::pfc_status::PauseEnds;
use super::port_mask::PortMask;
use super::Ctx;
use crate::ir::*;

/// The ring slot and epoch id of the ingress timestamp.
pub(super) struct IngressEpoch {
    pub(super) index: FieldId,
    pub(super) id: FieldId,
}

/// The branch's fields and register actions; per ring slot `[slot][word]`, else `[word]`.
pub(super) struct Branch {
    /// Per slot: the lap its data must carry to be one of the ring's epochs.
    pub(super) slot_laps: Vec<FieldId>,
    pub(super) held_set: Vec<FieldId>,
    pub(super) held_keep: Vec<FieldId>,
    pub(super) held_now: Vec<FieldId>,
    pub(super) last_now: Vec<FieldId>,
    pub(super) epoch: IngressEpoch,
    /// The longest pause a PFC frame asks for, ns (0: XON).
    pub(super) xoff_ns: FieldId,
    pub(super) xoff_end: FieldId,
    /// The complement of the port mask.
    pub(super) inv_masks: Vec<FieldId>,
    pub(super) fanout_or: Vec<Vec<RegisterActionId>>,
    pub(super) fanout_read: Vec<Vec<RegisterActionId>>,
    pub(super) seen_or: Vec<Vec<RegisterActionId>>,
    pub(super) seen_read: Vec<Vec<RegisterActionId>>,
    pub(super) xoff_or: Vec<Vec<RegisterActionId>>,
    pub(super) xoff_read: Vec<Vec<RegisterActionId>>,
    pub(super) held_update: Vec<RegisterActionId>,
    pub(super) held_read: Vec<RegisterActionId>,
    pub(super) last_or: Vec<RegisterActionId>,
    pub(super) last_read: Vec<RegisterActionId>,
    pub(super) xoff_set: Vec<RegisterActionId>,
    pub(super) xon_clear: Vec<RegisterActionId>,
    pub(super) pfc_read: Vec<RegisterActionId>,
}

/// Declares the branch's fields, registers (`fanout_e{k}_w*`, `paused_seen_e{k}_w*`,
/// `pfc_xoff_e{k}_w*`, `fanout_held_w*`, `fanout_last_w*`, `pfc_paused_w*`) and actions.
pub(super) fn bitmaps(
    b: &mut ProgramBuilder,
    cx: &Ctx,
    mask: &PortMask,
    pause: &PauseEnds,
) -> Branch {
    let params = cx.params;
    let (mask_words, epoch_bits) = (cx.dims.mask_words, cx.dims.epoch_bits);
    let max_pause_ns = cx.k.max_pause_ns;
    let masks = &mask.masks;
    let now = pause.now;
    // Bitmaps for the polling PFC branch (HAWKEYE Fig. 6), read by the polling packet in
    // ingress and bridged to the egress copies.
    let module_bitmap = "pfc branch";
    // One bitmap register per ring slot (and 32-port word), so that a polling packet sees
    // every epoch of the ring, as the per-epoch causality meters do (HAWKEYE Fig. 6), and
    // not only the latest one: [slot][word].
    let slots = cx.dims.slots;
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
    let held_set: Vec<FieldId> = word_meta(b, "fanout_held_set", mask_words);
    let held_keep: Vec<FieldId> = word_meta(b, "fanout_held_keep", mask_words);
    let held_now: Vec<FieldId> = word_meta(b, "fanout_held_now", mask_words);
    let last_now: Vec<FieldId> = word_meta(b, "fanout_last_now", mask_words);
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
    let inv_masks: Vec<FieldId> = word_meta(b, "port_unmask", mask_words);
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
                b,
                &format!("fanout_e{k}_w{w}_or"),
                fanout,
                ig_epoch_id,
                masks[w],
            ));
            fanout_read[k].push(slot_bitmap_read(
                b,
                &format!("fanout_e{k}_w{w}_read"),
                fanout,
                slot_laps[k],
            ));
            seen_or[k].push(epoch_bitmap_or(
                b,
                &format!("paused_seen_e{k}_w{w}_or"),
                seen,
                ig_epoch_id,
                masks[w],
            ));
            seen_read[k].push(slot_bitmap_read(
                b,
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
                b,
                &format!("pfc_xoff_e{k}_w{w}_or"),
                xoff,
                ig_epoch_id,
                masks[w],
            ));
            xoff_read[k].push(slot_bitmap_read(
                b,
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
            b,
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
            b,
            &format!("fanout_last_w{w}_or"),
            last,
            ig_epoch_id,
            masks[w],
        ));
        last_read.push(ra(
            b,
            &format!("fanout_last_w{w}_read"),
            last,
            "Returns the bitmap, whatever its epoch",
            vec![],
            vec![],
            vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Hi))],
        ));
        held_read.push(ra(
            b,
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
            b,
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
            b,
            &format!("pfc_paused_w{w}_xon"),
            pfc_state,
            "XON: the port's bit is cleared",
            vec![],
            vec![always(Word::Lo, SaluOp::And, LO, Phv(inv_masks[w]))],
            vec![],
        ));
        pfc_read.push(ra(
            b,
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
    Branch {
        slot_laps,
        held_set,
        held_keep,
        held_now,
        last_now,
        epoch: IngressEpoch {
            index: ig_epoch_index,
            id: ig_epoch_id,
        },
        xoff_ns,
        xoff_end,
        inv_masks,
        fanout_or,
        fanout_read,
        seen_or,
        seen_read,
        xoff_or,
        xoff_read,
        held_update,
        held_read,
        last_or,
        last_read,
        xoff_set,
        xon_clear,
        pfc_read,
    }
}
