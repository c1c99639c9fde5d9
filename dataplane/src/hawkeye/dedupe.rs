//! Polling duplicate suppression (ingress, HAWKEYE §3.4).

use super::dsl::*;
use super::Ctx;
use crate::ir::*;

/// The dedupe hash unit and the register action that checks and records an event.
pub(super) struct Dedupe {
    pub(super) hash: HashId,
    pub(super) fingerprint: HashId,
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
        "Per switch polling duplicate suppression: lo = CRC32 of the event id and the arrival port (the whole 64-bit id: event ids are host << 40 | sequence, so their low 32 bits repeat across hosts and only the fingerprint of the whole id tells two hosts' n-th events apart when they share a slot), hi = arrival time in 1024-ns units (HAWKEYE §3.4: drop polling packets of the same event within an interval). The key includes the arrival port because the PFC branch depends on it: a polling packet that comes back by another port (around a routing loop, or where two branches meet) carries a branch this switch has not followed yet",
    );
    let dedupe_hash = b.hash("dedupe_hash", vec![po_event, dedupe_port], dedupe_bits);
    // The stored key: all 32 bits of the same CRC (the index is its low bits). Two ids that
    // differ only within 32 contiguous bits (another host, same sequence number) never
    // share it: their difference is a nonzero polynomial of degree < 32 times x^k, which the
    // degree-32 CRC generator cannot divide.
    let dedupe_fp = b.hash("dedupe_fingerprint", vec![po_event, dedupe_port], 32);
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
        fingerprint: dedupe_fp,
        check: dedupe_check,
    }
}
