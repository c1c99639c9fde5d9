//! Polling duplicate suppression (ingress, HAWKEYE §3.4).

use super::dsl::*;
use super::Ctx;
use crate::ir::*;

/// The dedupe hash unit and the register action that checks and records an event.
pub(super) struct Dedupe {
    pub(super) hash: HashId,
    pub(super) check: RegisterActionId,
}

/// The `polling_dedupe` register, keyed by the event and the arrival port.
pub(super) fn polling_dedupe(b: &mut ProgramBuilder, cx: &Ctx) -> Dedupe {
    let params = cx.params;
    let dedupe_bits = cx.dims.dedupe_bits;
    let po_event = cx.h.polling.event_id;
    let d = &cx.meta.dedupe;
    let (dedupe_key, dedupe_port, now_coarse) = (d.dedupe_key, d.dedupe_port, d.now_coarse);
    let dedupe_reg = b.register(
        "polling_dedupe",
        64,
        params.dedupe_slots,
        "polling dedupe",
        "Per switch polling duplicate suppression: lo = low 32 bits of the event id XOR the arrival port << 23, hi = arrival time in 1024-ns units (HAWKEYE §3.4: drop polling packets of the same event within an interval). The key includes the arrival port because the PFC branch depends on it: a polling packet that comes back by another port (around a routing loop, or where two branches meet) carries a branch this switch has not followed yet",
    );
    let dedupe_hash = b.hash("dedupe_hash", vec![po_event, dedupe_port], dedupe_bits);
    let dedupe_check = ra(
        b,
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
    Dedupe {
        hash: dedupe_hash,
        check: dedupe_check,
    }
}
