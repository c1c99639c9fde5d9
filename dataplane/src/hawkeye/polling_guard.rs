//! Protection against forged polling packets (ingress; hawkmesh's addition — HAWKEYE §3.4
//! trusts every sender). A polling packet makes every switch on the victim path and the
//! PFC branch copy it to its CPU and read its registers, so a host that sends many is a
//! cheap way to load every switch CPU of a fabric. The control plane says per port where
//! polling may come from (`polling_port`): a host-facing port passes a fixed-window rate
//! limit of its own (`polling_rate`: at most `POLLING_PER_WINDOW` per 2^`POLLING_WINDOW_LOG2_NS`
//! ns, so one flooding host does not take another's share), a fabric-facing port is trusted
//! (the polling packet was limited at its ToR), any other port refuses polling. Refused
//! polling packets are counted per port (`polling_refused`), for the operator.

use super::dsl::*;
use super::Ctx;
use crate::ir::e::*;
use crate::ir::*;

/// `polling_from` of a port the control plane has not configured: polling refused.
pub(super) const FROM_NOWHERE: u64 = 0;
/// `polling_from` of a host-facing port: rate-limited.
pub(super) const FROM_HOST: u64 = 1;
/// `polling_from` of a fabric-facing port: trusted.
pub(super) const FROM_FABRIC: u64 = 2;

/// The `polling_port` table and the register actions of the guard.
pub(super) struct PollingGuard {
    table: TableId,
    from: FieldId,
    window: FieldId,
    allowed: FieldId,
    check: RegisterActionId,
    refused: RegisterActionId,
}

/// Declares the guard's table, metadata and registers.
pub(super) fn polling_guard(b: &mut ProgramBuilder, cx: &Ctx) -> PollingGuard {
    let params = cx.params;
    let from = b.meta("polling_from", 2);
    let window = b.meta("polling_window", 32);
    let allowed = b.meta("polling_allowed", 32);
    let set_from = |b: &mut ProgramBuilder, name: &str, doc: &str, value: u64| {
        b.action(name, doc, &[], move |_| {
            vec![Stmt::Assign(from, c(value, 2))]
        })
    };
    let host = set_from(
        b,
        "polling_from_host",
        "A host-facing port: polling accepted within the port's rate limit",
        FROM_HOST,
    );
    let fabric = set_from(
        b,
        "polling_from_fabric",
        "A fabric-facing port: polling from the neighbouring switch accepted",
        FROM_FABRIC,
    );
    let refuse = set_from(
        b,
        "polling_refuse",
        "No polling from this port (the default)",
        FROM_NOWHERE,
    );
    let table = b.table(Table {
        name: "polling_port".into(),
        keys: vec![(cx.intr.ig_port, MatchKind::Exact)],
        actions: vec![host, fabric, refuse],
        default_action: (refuse, vec![]),
        size: params.ports,
        doc: "Ingress port → where polling packets may come from (host-facing: rate-limited; fabric-facing: trusted; otherwise refused)".into(),
        forwarding: false,
    });
    let rate = b.register(
        "polling_rate",
        64,
        params.ports,
        "polling guard",
        "Per host-facing ingress port: lo = the current rate window (the ingress timestamp >> POLLING_WINDOW_LOG2_NS, low 32 bits), hi = polling packets accepted in it",
    );
    let per_window = i64::from(params.polling_per_window);
    let under = Pred::when(Some(true), Some(true));
    let new_window = Pred::when(Some(false), None);
    let check = ra(
        b,
        "polling_rate_check",
        rate,
        "Returns 1 and counts the packet while the port's window has accepted fewer than POLLING_PER_WINDOW; a new window starts the count at 1",
        vec![
            cond(LO, Some((true, Phv(window))), CmpOp::Eq, 0),
            cond(HI, None, CmpOp::Lt, per_window),
        ],
        vec![
            upd(under, Word::Hi, SaluOp::SatAdd, HI, K(1)),
            upd(new_window, Word::Hi, SaluOp::Set, K(1), K(0)),
            upd(new_window, Word::Lo, SaluOp::Set, Phv(window), K(0)),
        ],
        vec![out(Pred(under.0 | new_window.0), SaluOutputValue::Const(1))],
    );
    let refused_reg = b.register(
        "polling_refused",
        32,
        params.ports,
        "polling guard",
        "Per ingress port: polling packets refused (port not configured for polling, or over its rate limit)",
    );
    let refused = ra(
        b,
        "polling_refused_count",
        refused_reg,
        "One more refused polling packet",
        vec![],
        vec![always(Word::Lo, SaluOp::SatAdd, LO, K(1))],
        vec![],
    );
    PollingGuard {
        table,
        from,
        window,
        allowed,
        check,
        refused,
    }
}

/// The guard's statements: `accepted` runs for a polling packet the port may send now;
/// anything else is counted and dropped.
pub(super) fn guard(cx: &Ctx, g: &PollingGuard, accepted: Vec<Stmt>) -> Vec<Stmt> {
    let (ig_port, ig_tstamp) = (cx.intr.ig_port, cx.intr.ig_tstamp);
    let (port_bits, wb) = (cx.dims.port_bits, cx.params.polling_window_log2_ns);
    let port = slice(f(ig_port), port_bits - 1, 0);
    let refuse = vec![exec(g.refused, port.clone(), None), Stmt::Drop];
    let top = (47u8).min(wb + 31);
    vec![
        Stmt::Apply(g.table),
        Stmt::Assign(g.allowed, c(0, 32)),
        Stmt::If(
            eq(f(g.from), c(FROM_FABRIC, 2)),
            vec![Stmt::Assign(g.allowed, c(1, 32))],
            vec![Stmt::If(
                eq(f(g.from), c(FROM_HOST, 2)),
                vec![
                    Stmt::Assign(g.window, cast(slice(f(ig_tstamp), top, wb), 32)),
                    exec(g.check, port.clone(), Some(g.allowed)),
                ],
                vec![],
            )],
        ),
        Stmt::If(ne(f(g.allowed), c(0, 32)), accepted, refuse),
    ]
}
