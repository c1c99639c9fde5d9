//! Ingress PFC status (HAWKEYE §3.3, Fig. 3 "port status"). A PFC frame arrives on the
//! ingress of the port it pauses; a data packet checks the pause of its (egress port,
//! priority) when it is enqueued, i.e. in ingress.

use super::dsl::*;
use super::pfc_branch::{Branch, IngressEpoch};
use super::port_mask::PortMask;
use super::{pause_end_register, Ctx, MODULE_PORT_TELEMETRY};
use crate::ir::e::*;
use crate::ir::*;

/// The per-priority pause ends and the fields that decide a packet's pause.
pub(super) struct PauseEnds {
    /// Low 32 bits of the ingress timestamp, ns.
    pub(super) now: FieldId,
    /// The packet's traffic class (priority).
    pub(super) tc: FieldId,
    /// Non-zero when the packet is enqueued while its (egress port, priority) is paused.
    pub(super) paused: FieldId,
    /// Per priority: the pause a PFC frame asks for, ns.
    pub(super) pause_ns: Vec<FieldId>,
    /// Per priority: when that pause ends.
    pub(super) pause_end: Vec<FieldId>,
    /// Per priority: records the pause end (`pause_end_p{q}_set`).
    pub(super) set: Vec<RegisterActionId>,
    /// Per priority: returns 1 for a paused packet (`pause_end_p{q}_check`).
    pub(super) check: Vec<RegisterActionId>,
}

/// The `pause_end_p{q}` registers and their actions.
pub(super) fn pause_ends(b: &mut ProgramBuilder, cx: &Ctx) -> PauseEnds {
    let params = cx.params;
    let max_pause_ns = cx.k.max_pause_ns;
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
            b,
            &format!("pause_end_p{q}_set"),
            r,
            "Records when the pause ends",
            vec![],
            vec![always(Word::Lo, SaluOp::Set, Phv(pause_end[q]), K(0))],
            vec![],
        ));
        pause_check.push(ra(
            b,
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
    PauseEnds {
        now,
        tc,
        paused,
        pause_ns,
        pause_end,
        set: pause_set,
        check: pause_check,
    }
}

/// The `pfc_port_speed` table: PFC quanta to ns per port speed.
pub(super) fn port_speed_table(b: &mut ProgramBuilder, cx: &Ctx, pause: &PauseEnds) -> TableId {
    let ig_port = cx.intr.ig_port;
    let pause_ns = &pause.pause_ns;
    let pfc_quanta = &cx.h.pfc.quanta;
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
    b.table(Table {
        name: "pfc_port_speed".into(),
        keys: vec![(ig_port, MatchKind::Exact)],
        actions: speed_actions.clone(),
        default_action: (speed_actions[2], vec![]),
        size: 512,
        doc: "Port speed for converting PFC quanta to time (installed by the control plane; default 100G)".into(),
        forwarding: false,
    })
}

/// Now and the ring slot of the ingress timestamp (the start of every ingress path that
/// counts).
pub(super) fn ingress_prologue(cx: &Ctx, pause: &PauseEnds, epoch: &IngressEpoch) -> Vec<Stmt> {
    let (now, ig_tstamp) = (pause.now, cx.intr.ig_tstamp);
    let (ig_epoch_index, ig_epoch_id) = (epoch.index, epoch.id);
    let (eb, epoch_bits) = (cx.dims.eb, cx.dims.epoch_bits);
    let mut ig_prologue = vec![Stmt::Assign(now, slice(f(ig_tstamp), 31, 0))];
    ig_prologue.extend(epoch_of(
        ig_tstamp,
        ig_epoch_index,
        ig_epoch_id,
        eb,
        epoch_bits,
    ));
    ig_prologue
}

/// Per (epoch, port): the XON frames the port received in the epoch (`port_xon`).
pub(super) struct XonCount {
    /// Ring slot ++ ingress port.
    index: FieldId,
    /// Counts one XON in the current epoch.
    count: RegisterActionId,
}

/// The `port_xon` register (lo = epoch id, hi = XON frames) and its action. A device whose
/// receive buffer drives its PAUSEs releases each with an XON (quanta 0, IEEE 802.1Qbb)
/// once it drained: a receiver draining slower than its link pauses and resumes its
/// switch port over and over. A PFC injection (a storm) only ever refreshes its XOFF and
/// lets the pause expire. So XONs tell a drain-rate limit from an injection even while
/// the port enqueues nothing (its upstream held by the pause) — what its packets cannot.
pub(super) fn xon_count(b: &mut ProgramBuilder, cx: &Ctx, epoch: &IngressEpoch) -> XonCount {
    let (epoch_bits, port_bits) = (cx.dims.epoch_bits, cx.dims.port_bits);
    let index = b.meta("xon_index", epoch_bits + port_bits);
    let r = b.register(
        "port_xon",
        64,
        cx.params.epochs * cx.params.ports,
        MODULE_PORT_TELEMETRY,
        "Per (epoch, port): lo = epoch id, hi = PFC XON frames (IEEE 802.1Qbb, every enabled class resumed) the port received in that epoch",
    );
    let count = ra(
        b,
        "port_xon_count",
        r,
        "Same epoch: one more XON; a new epoch starts the count over at 1",
        vec![cond(LO, Some((true, Phv(epoch.id))), CmpOp::Eq, 0)],
        vec![
            upd(
                Pred::when(Some(true), None),
                Word::Hi,
                SaluOp::SatAdd,
                HI,
                K(1),
            ),
            upd(
                Pred::when(Some(false), None),
                Word::Hi,
                SaluOp::Set,
                K(1),
                K(0),
            ),
            always(Word::Lo, SaluOp::Set, Phv(epoch.id), K(0)),
        ],
        vec![],
    );
    XonCount { index, count }
}

/// A PFC frame: the pause ends of the classes it enables, the paused-port bitmap, the
/// XOFF ring and the XON count (the frame is consumed by the ingress control).
pub(super) fn pfc_frame(
    cx: &Ctx,
    pause: &PauseEnds,
    port_speed: TableId,
    mask: &PortMask,
    branch: &Branch,
    xon: &XonCount,
    ig_prologue: &[Stmt],
) -> Vec<Stmt> {
    let (ig_port, pfc_cev) = (cx.intr.ig_port, cx.h.pfc.class_enable);
    let (port_bits, mask_words, epoch_bits) =
        (cx.dims.port_bits, cx.dims.mask_words, cx.dims.epoch_bits);
    let (now, pause_ns, pause_end, pause_set) =
        (pause.now, &pause.pause_ns, &pause.pause_end, &pause.set);
    let masks = &mask.masks;
    let (xoff_ns, xoff_end, inv_masks) = (branch.xoff_ns, branch.xoff_end, &branch.inv_masks);
    let (xoff_set, xoff_or, xon_clear) = (&branch.xoff_set, &branch.xoff_or, &branch.xon_clear);
    let ig_epoch_index = branch.epoch.index;
    let mut pfc_stmts = ig_prologue.to_vec();
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
    let mut on_xon: Vec<Stmt> = (0..mask_words)
        .map(|w| exec(xon_clear[w], c(0, 1), None))
        .collect();
    // An XON resumes at least one class (a frame enabling none is no XON).
    on_xon.push(Stmt::If(
        ne(and(f(pfc_cev), c(0xFF, 16)), c(0, 16)),
        vec![
            Stmt::Assign(
                xon.index,
                concat(
                    f(ig_epoch_index),
                    epoch_bits,
                    slice(f(ig_port), port_bits - 1, 0),
                    port_bits,
                ),
            ),
            exec(xon.count, f(xon.index), None),
        ],
        vec![],
    ));
    pfc_stmts.push(Stmt::If(ne(f(xoff_ns), c(0, 32)), on_xoff, on_xon));
    pfc_stmts
}
