//! Shorthands for building the program: register actions and their parts, one-hot bitmap
//! words, the per-epoch register patterns every module shares, and a few expressions.

use crate::error::BuildError;
use crate::ir::e::*;
use crate::ir::*;

/// `log2(v)` when `v` is a power of two in `min..=max`, else a parameter error naming `name`.
pub(super) fn log2(name: &'static str, v: u32, min: u32, max: u32) -> Result<u8, BuildError> {
    if !v.is_power_of_two() || v < min || v > max {
        return Err(BuildError::Parameter {
            name,
            message: format!("{v} must be a power of two in {min}..={max}"),
        });
    }
    Ok(v.trailing_zeros() as u8)
}

pub(super) fn always(word: Word, op: SaluOp, a: SaluOperand, b: SaluOperand) -> SaluUpdate {
    SaluUpdate {
        when: Pred::ALWAYS,
        word,
        op,
        a,
        b,
    }
}

pub(super) fn upd(
    when: Pred,
    word: Word,
    op: SaluOp,
    a: SaluOperand,
    b: SaluOperand,
) -> SaluUpdate {
    SaluUpdate {
        when,
        word,
        op,
        a,
        b,
    }
}

pub(super) fn out(when: Pred, value: SaluOutputValue) -> SaluOutput {
    SaluOutput { when, value }
}

pub(super) fn cond(
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

pub(super) use SaluOperand::{Const as K, Phv, Reg};
pub(super) const LO: SaluOperand = Reg(Word::Lo);
pub(super) const HI: SaluOperand = Reg(Word::Hi);

/// A register action, shorthand.
pub(super) fn ra(
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
pub(super) fn word_meta(b: &mut ProgramBuilder, name: &str, words: usize) -> Vec<FieldId> {
    (0..words)
        .map(|w| b.meta(&format!("{name}_w{w}"), 32))
        .collect()
}

pub(super) fn exec(action: RegisterActionId, index: Expr, output: Option<FieldId>) -> Stmt {
    Stmt::Execute {
        action,
        index,
        output,
    }
}

/// `(a ++ b)` for an index: `a << b_width | b`, at `a_width + b_width` bits.
pub(super) fn concat(a: Expr, a_width: u8, b: Expr, b_width: u8) -> Expr {
    let w = a_width + b_width;
    or(shl(cast(a, w), b_width), cast(b, w))
}

/// Stores the current epoch id in a ring slot and returns the previous one (a different id
/// means the slot is stale and its counters restart now: no stale value survives).
pub(super) fn epoch_swap(
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
pub(super) fn epoch_counter(
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
pub(super) fn epoch_bitmap_or(
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
pub(super) fn epoch_of(
    tstamp: FieldId,
    index: FieldId,
    id: FieldId,
    eb: u8,
    epoch_bits: u8,
) -> [Stmt; 2] {
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
pub(super) fn slot_bitmap_read(
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
pub(super) fn xor(a: Expr, b: Expr) -> Expr {
    Expr::Bin(BinOp::Xor, Box::new(a), Box::new(b))
}

/// `max(a, b)`.
pub(super) fn max(a: Expr, b: Expr) -> Expr {
    Expr::Bin(BinOp::Max, Box::new(a), Box::new(b))
}
