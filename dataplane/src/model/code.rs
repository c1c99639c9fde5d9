//! The compiled program's types: instructions, compiled register actions, hash units, tables,
//! fields, headers and parser states, and [`Code`], what a pass runs.

use super::*;

// ---------------------------------------------------------------------------------------
// The compiled program. `Code::compile` turns the IR once into:
// - a flat list of three-address instructions over PHV slots (program fields, then
//   temporaries for intermediate values), with every width and mask precomputed, constant
//   sub-expressions folded, casts and slices that cannot change a value dropped, and
//   conditions compiled into short-circuit jumps;
// - register actions resolved to a storage location and per-outcome tables (which update
//   applies to each word, which output is returned);
// - parser states with every field's byte offset, shift and mask.
// Registers live at native width; registers that every register action indexes with the
// same expression are interleaved in one array (one cache line per packet instead of one
// per register). Nothing is looked up by name or hashed per packet (except exact-match
// tables installed by the control plane).
// ---------------------------------------------------------------------------------------

/// Most header instances (validity is a 64-bit mask).
pub(super) const MAX_HEADERS: usize = 64;
/// Most bytes a hash unit hashes.
pub(super) const MAX_HASH_BYTES: usize = 64;
/// Most conditions of a register action the model evaluates (TNA allows two).
pub(super) const MAX_SALU_CONDITIONS: usize = 3;
pub(super) const NO_SLOT: u16 = u16::MAX;
/// PHV slots are `u16` indices.
pub(super) const PHV_SLOTS: usize = 1 << 16;
/// The PHV: one `u64` per slot.
pub(super) type PhvBuf = [u64; PHV_SLOTS];
pub(super) const NO_HEADER: u8 = u8::MAX;
pub(super) const NONE: u8 = u8::MAX;

/// One instruction. Slots index the PHV (fields, then temporaries); every result is
/// `op(..) & mask`.
#[derive(Clone, Copy, Debug)]
pub(super) enum Ins {
    Mov {
        dst: u16,
        src: u16,
        mask: u64,
    },
    Imm {
        dst: u16,
        value: u64,
    },
    /// `bin(op, a, b, mask)`.
    Bin {
        op: BinOp,
        dst: u16,
        a: u16,
        b: u16,
        mask: u64,
    },
    BinImm {
        op: BinOp,
        dst: u16,
        a: u16,
        b: u64,
        mask: u64,
    },
    /// `(a << n) & mask`.
    Shl {
        dst: u16,
        a: u16,
        n: u8,
        mask: u64,
    },
    /// `(a >> n) & mask` (shifts, slices, casts).
    Shr {
        dst: u16,
        a: u16,
        n: u8,
        mask: u64,
    },
    /// `((a << n) | b) & mask` (concatenation).
    ShlOr {
        dst: u16,
        a: u16,
        n: u8,
        b: u16,
        mask: u64,
    },
    /// Jumps when `a cmp b` holds.
    JumpCmp {
        cmp: Cmp,
        a: u16,
        b: u16,
        target: u32,
    },
    /// Jumps when `a cmp b` holds (`b` normalised).
    JumpCmpImm {
        cmp: Cmp,
        a: u16,
        b: u64,
        target: u32,
    },
    JumpValid(u8, u32),
    JumpInvalid(u8, u32),
    Jump(u32),
    /// The header was written (re-emit it in the deparser).
    Dirty(u8),
    Execute {
        ra: u16,
        index: u16,
        out: u16,
        mask: u64,
    },
    /// A register action with a [`WordAction`] form.
    ExecuteWord {
        wa: u16,
        index: u16,
        out: u16,
        mask: u64,
    },
    /// `count` consecutive [`Ins::ExecuteWord`] on the same cell group (same slab and
    /// index), members `first..first + count` of [`Code::group_members`]; the members'
    /// own instructions follow and are skipped.
    ExecuteGroup {
        first: u16,
        count: u16,
        index: u16,
    },
    /// `if a cmp b { dst = value }` (`b` a slot).
    CondSet {
        cmp: Cmp,
        a: u16,
        b: u16,
        dst: u16,
        value: u64,
    },
    /// `if a cmp b { dst = value }` (`b` normalised).
    CondSetImm {
        cmp: Cmp,
        a: u16,
        dst: u16,
        b: u64,
        value: u64,
    },
    Hash {
        unit: u16,
        dst: u16,
        mask: u64,
    },
    /// `dst = next random & mask` ([`State::random`]).
    Random {
        dst: u16,
        mask: u64,
    },
    SetValid(u8),
    SetInvalid(u8),
    Unicast(u16),
    Multicast(u16),
    Drop,
    Clone,
    Digest(u16),
    Apply(u16),
    Return,
}

#[inline(always)]
pub(super) fn bin(op: BinOp, x: u64, y: u64, mask: u64) -> u64 {
    match op {
        BinOp::Add => x.wrapping_add(y) & mask,
        BinOp::Sub => x.wrapping_sub(y) & mask,
        // The saturation bound is the mask (the expression's width).
        BinOp::SatAdd => x.saturating_add(y).min(mask),
        BinOp::And => x & y & mask,
        BinOp::Or => (x | y) & mask,
        BinOp::Xor => (x ^ y) & mask,
        BinOp::Min => x.min(y) & mask,
        BinOp::Max => x.max(y) & mask,
    }
}

/// All ones up to the highest set bit of `v` (an upper bound of values `<= v`).
pub(super) fn smear(v: u64) -> u64 {
    if v == 0 {
        0
    } else {
        u64::MAX >> v.leading_zeros()
    }
}

pub(super) fn negate(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Ne,
        CmpOp::Ne => CmpOp::Eq,
        CmpOp::Lt => CmpOp::Ge,
        CmpOp::Ge => CmpOp::Lt,
        CmpOp::Le => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Le,
        CmpOp::SLt => CmpOp::SGe,
        CmpOp::SGe => CmpOp::SLt,
        CmpOp::SGt => CmpOp::SLe,
        CmpOp::SLe => CmpOp::SGt,
    }
}

/// The comparison with its operands swapped.
pub(super) fn mirror(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::Eq,
        CmpOp::Ne => CmpOp::Ne,
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Le => CmpOp::Ge,
        CmpOp::Ge => CmpOp::Le,
        CmpOp::SLt => CmpOp::SGt,
        CmpOp::SGt => CmpOp::SLt,
        CmpOp::SLe => CmpOp::SGe,
        CmpOp::SGe => CmpOp::SLe,
    }
}

/// A comparison compiled to be evaluated without branching on the operator: both operands
/// are normalised (signed ones sign-extended from the width and offset by 2^63, so that
/// an unsigned comparison orders them), then the relation (less, equal, greater) picks a
/// bit of `rel`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cmp {
    /// Bit 0: true when less; bit 1: when equal; bit 2: when greater.
    pub(super) rel: u8,
    /// `64 - width` for signed comparisons, else 0.
    pub(super) shift: u8,
    pub(super) signed: bool,
}

impl Cmp {
    /// A comparison by its parts (emitted code).
    pub(super) const fn raw(rel: u8, shift: u8, signed: bool) -> Cmp {
        Cmp { rel, shift, signed }
    }

    pub(super) fn new(op: CmpOp, width: u8) -> Cmp {
        let rel = match op {
            CmpOp::Eq => 0b010,
            CmpOp::Ne => 0b101,
            CmpOp::Lt | CmpOp::SLt => 0b001,
            CmpOp::Le | CmpOp::SLe => 0b011,
            CmpOp::Gt | CmpOp::SGt => 0b100,
            CmpOp::Ge | CmpOp::SGe => 0b110,
        };
        let signed = op.signed();
        Cmp {
            rel,
            shift: if signed { 64 - width.clamp(1, 64) } else { 0 },
            signed,
        }
    }

    #[inline(always)]
    pub(super) fn norm(self, v: u64) -> u64 {
        ((((v << self.shift) as i64) >> self.shift) as u64) ^ ((self.signed as u64) << 63)
    }

    /// Whether `a op b` holds, `b` already normalised.
    #[inline(always)]
    pub(super) fn test(self, a: u64, b: u64) -> bool {
        // Equality (never signed) is the common case.
        match self.rel {
            0b010 => return a == b,
            0b101 => return a != b,
            _ => {}
        }
        let a = self.norm(a);
        let rel = ((a > b) as u32) << 1 | (a == b) as u32;
        (self.rel >> rel) & 1 != 0
    }
}

/// An operand of a stateful ALU.
#[derive(Clone, Copy, Debug)]
pub(super) enum COperand {
    Lo,
    Hi,
    Phv(u16),
    Const(u64),
}

impl COperand {
    pub(super) fn new(o: SaluOperand) -> COperand {
        match o {
            SaluOperand::Reg(Word::Lo) => COperand::Lo,
            SaluOperand::Reg(Word::Hi) => COperand::Hi,
            SaluOperand::Phv(f) => COperand::Phv(f.0),
            SaluOperand::Const(c) => COperand::Const(c),
        }
    }

    #[inline(always)]
    pub(super) fn get(self, phv: &[u64; PHV_SLOTS], lo: u64, hi: u64) -> u64 {
        match self {
            COperand::Lo => lo,
            COperand::Hi => hi,
            COperand::Phv(f) => phv[f as usize],
            COperand::Const(c) => c,
        }
    }
}

/// `(left ± right) & word_mask` compared with a constant (normalised for `cmp`).
#[derive(Clone, Copy, Debug)]
pub(super) struct CCond {
    pub(super) left: COperand,
    /// `None`, or the second operand and whether it is subtracted.
    pub(super) right: Option<(bool, COperand)>,
    pub(super) cmp: Cmp,
    pub(super) constant: u64,
}

impl CCond {
    #[inline(always)]
    pub(super) fn test(&self, phv: &[u64; PHV_SLOTS], lo: u64, hi: u64, m: u64) -> bool {
        let l = self.left.get(phv, lo, hi);
        let v = match self.right {
            None => l,
            Some((true, r)) => l.wrapping_sub(r.get(phv, lo, hi)),
            Some((false, r)) => l.wrapping_add(r.get(phv, lo, hi)),
        } & m;
        self.cmp.test(v, self.constant)
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct CUpdate {
    pub(super) op: SaluOp,
    pub(super) a: COperand,
    pub(super) b: COperand,
}

impl CUpdate {
    #[inline(always)]
    pub(super) fn apply(&self, phv: &[u64; PHV_SLOTS], lo: u64, hi: u64, m: u64) -> u64 {
        let a = self.a.get(phv, lo, hi) & m;
        let b = self.b.get(phv, lo, hi) & m;
        match self.op {
            SaluOp::Set => a,
            SaluOp::Add => a.wrapping_add(b) & m,
            SaluOp::Sub => a.wrapping_sub(b) & m,
            SaluOp::SatAdd => a.saturating_add(b).min(m),
            SaluOp::SatSub => a.saturating_sub(b),
            SaluOp::Min => a.min(b),
            SaluOp::Max => a.max(b),
            SaluOp::And => a & b,
            SaluOp::Or => a | b,
            SaluOp::Xor => a ^ b,
            // Rejected by the rule checker; the model keeps the word unchanged.
            SaluOp::Shl | SaluOp::Mul => a,
        }
    }
}

/// What happens for one condition outcome: the update of each word and the output
/// (indices into the action's lists, [`NONE`] for none).
#[derive(Clone, Copy, Debug)]
pub(super) struct Outcome {
    pub(super) lo: u8,
    pub(super) hi: u8,
    pub(super) out: u8,
}

#[derive(Clone, Debug)]
pub(super) struct CRegisterAction {
    pub(super) register: u16,
    pub(super) slab: u16,
    pub(super) kind: SlabKind,
    /// First element of the slab in its kind's array of [`Regs`].
    pub(super) base: usize,
    pub(super) size_mask: usize,
    pub(super) stride: usize,
    pub(super) offset: usize,
    pub(super) pair: bool,
    pub(super) word_mask: u64,
    /// Some update may change the cell.
    pub(super) writes: bool,
    pub(super) conditions: Vec<CCond>,
    pub(super) updates: Vec<CUpdate>,
    pub(super) outputs: Vec<SaluOutputValue>,
    pub(super) outcomes: [Outcome; 1 << MAX_SALU_CONDITIONS],
}

/// The operation of a [`WordStep`] on the stored word and its source operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WordOp {
    Keep,
    Set,
    Add,
    Sub,
    SatAdd,
    SatSub,
    Min,
    Max,
    And,
    Or,
    Xor,
}

/// What a single-word action does for one condition outcome: `word = op(word, src)` with
/// `src` a PHV field (`phv`) or a constant, and returns
/// `old & out_old | new & out_new | out_konst` (single words are at most 32 bits).
#[derive(Clone, Copy, Debug)]
pub(super) struct WordStep {
    pub(super) op: WordOp,
    pub(super) phv: bool,
    pub(super) slot: u16,
    pub(super) konst: u32,
    pub(super) out_old: u32,
    pub(super) out_new: u32,
    pub(super) out_konst: u32,
}

/// [`WordAction::cond`]: no condition, `(phv[cond_slot] & word_mask) == cond_k`, `!=`, or
/// [`Code::word_conds`]`[cond_k]`.
pub(super) const COND_NONE: u8 = 0;
pub(super) const COND_EQ: u8 = 1;
pub(super) const COND_NE: u8 = 2;
pub(super) const COND_ANY: u8 = 3;

/// A register action on a register of single words stored as 32-bit words, with at most
/// one condition, no update of a high word and 32-bit constants: most actions, run by a
/// shorter path than the general one. One cache line.
#[repr(align(64))]
#[derive(Clone, Copy, Debug)]
pub(super) struct WordAction {
    /// First word of the slab in [`Regs::words`] (a multiple of 16).
    pub(super) base: u32,
    pub(super) size_mask: u32,
    pub(super) stride: u16,
    pub(super) offset: u16,
    pub(super) word_mask: u32,
    pub(super) slab: u16,
    pub(super) cond_slot: u16,
    pub(super) cond_k: u32,
    pub(super) cond: u8,
    pub(super) writes: bool,
    /// By the condition's outcome (`[0]` when there is none).
    pub(super) on: [WordStep; 2],
}

#[derive(Clone, Debug)]
pub(super) struct CHash {
    pub(super) inputs: Vec<(u16, u8)>,
    pub(super) mask: u64,
}

#[derive(Clone, Debug)]
pub(super) struct CTable {
    pub(super) forwarding: bool,
    /// The table's actions.
    pub(super) actions: Vec<u16>,
    pub(super) first_action: Option<u16>,
    pub(super) default_action: u16,
    pub(super) default_params: Vec<u64>,
    pub(super) keys: Vec<(u16, u8)>,
    pub(super) all_exact: bool,
    /// Exact keys and actions of at most [`DIRECT_PARAMS`] parameters: entries with small
    /// keys also live in [`TableState::direct`].
    pub(super) direct: bool,
}

/// A header field as the parser and deparser see it.
#[derive(Clone, Copy, Debug)]
pub(super) struct CField {
    pub(super) phv: u16,
    /// Bit offset in the header.
    pub(super) bit: u16,
    pub(super) width: u8,
    /// First byte in the header.
    pub(super) byte: u16,
    /// Right shift of the big-endian 64-bit word read at `byte` (when `window`).
    pub(super) shift: u8,
    /// The field fits a 64-bit word read at `byte`.
    pub(super) window: bool,
}

#[derive(Clone, Debug)]
pub(super) struct CHeader {
    pub(super) bytes: usize,
    /// Every field (emitted when the header is new or was made valid again).
    pub(super) fields: Vec<CField>,
    /// The fields the program reads or writes (the parser extracts only these).
    pub(super) parse: Vec<CField>,
    /// The fields the program writes (re-emitted over the input bytes of a header that
    /// was written; the others still hold their input bytes).
    pub(super) emit: Vec<CField>,
}

/// A field the parser extracts: the big-endian 64-bit word at byte `byte` of the header
/// shifted right by `shift` (`NO_WINDOW`: the field does not fit such a word; read at
/// bit `bit`).
#[derive(Clone, Copy, Debug)]
pub(super) struct PField {
    pub(super) phv: u16,
    pub(super) byte: u16,
    pub(super) bit: u16,
    pub(super) shift: u8,
    pub(super) width: u8,
}

pub(super) const NO_WINDOW: u8 = u8::MAX;
pub(super) const ACCEPT: u8 = 0;
pub(super) const GOTO: u8 = 1;
pub(super) const SELECT: u8 = 2;

/// A parser state: the header it extracts (its fields are `pfields[fields..fields_end]`),
/// then accept, go to `next`, or select on `select` among `pcases[cases..cases_end]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct PState {
    pub(super) header: u8,
    pub(super) kind: u8,
    pub(super) bytes: u16,
    pub(super) select: u16,
    pub(super) next: u16,
    pub(super) fields: u16,
    pub(super) fields_end: u16,
    pub(super) cases: u16,
    pub(super) cases_end: u16,
}

/// Where a register's cells live: cell `i` is word `i * stride + offset` of slab `slab`
/// (a pair uses that word and the next).
#[derive(Clone, Copy, Debug)]
pub(super) struct RegLoc {
    pub(super) slab: u16,
    pub(super) kind: SlabKind,
    /// First element of the slab in its kind's array of [`Regs`].
    pub(super) base: usize,
    pub(super) stride: usize,
    pub(super) offset: usize,
    pub(super) pair: bool,
    pub(super) size: usize,
}

/// The kind of storage of a slab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SlabKind {
    Bytes,
    Halves,
    Words,
}

#[derive(Debug)]
pub(super) struct Code {
    pub(super) ins: Vec<Ins>,
    pub(super) ingress: u32,
    pub(super) egress: u32,
    pub(super) action_start: Vec<u32>,
    pub(super) action_params: Vec<Vec<(u16, u64)>>,
    pub(super) tables: Vec<CTable>,
    pub(super) register_actions: Vec<CRegisterAction>,
    pub(super) word_actions: Vec<WordAction>,
    /// The register of each word action.
    pub(super) word_registers: Vec<u16>,
    /// The conditions of word actions with [`COND_ANY`].
    pub(super) word_conds: Vec<CCond>,
    /// (word action, output slot, output mask) of the members of [`Ins::ExecuteGroup`].
    pub(super) group_members: Vec<(u16, u16, u64)>,
    pub(super) registers: Vec<RegLoc>,
    /// Elements of [`Regs::bytes`], [`Regs::halves`] and [`Regs::words`].
    pub(super) regs_len: [usize; 3],
    pub(super) hashes: Vec<CHash>,
    pub(super) headers: Vec<CHeader>,
    pub(super) parser: Vec<PState>,
    /// Extracted fields of every parser state, contiguous.
    pub(super) pfields: Vec<PField>,
    /// Select cases: (value, next state or `NO_SLOT` to accept).
    pub(super) pcases: Vec<(u64, u16)>,
    /// Each header's extracted fields in `pfields` (zeroed when the header is stale).
    pub(super) header_fields: Vec<(u16, u16)>,
    /// PHV index ranges of metadata and action parameters (zeroed at each pass start).
    pub(super) meta_ranges: Vec<(usize, usize)>,
    /// The ranges of [`Code::meta_ranges`] an ingress (`[0]`) or egress (`[1]`) pass may
    /// read before writing them ([`exposed_reads`]): what a pass clears when it starts.
    pub(super) meta_exposed: [Vec<(usize, usize)>; 2],
    /// Each field's all-ones value (what [`State::reset`] poisons unexposed metadata with).
    pub(super) masks: Vec<u64>,
    pub(super) digests: Vec<Vec<u16>>,
    /// (slot, mask) of the bridged / cloned fields.
    pub(super) bridged: Vec<(u16, u64)>,
    pub(super) cloned: Vec<(u16, u64)>,
    /// (slot, mask, bit) of the bridged fields packed into 128 bits one after the other.
    pub(super) bridge_packing: Vec<(u16, u64, u32)>,
    /// (slot, mask) of each intrinsic.
    pub(super) intrinsics: [(u16, u64); Intrinsic::ALL.len()],
    /// The emitted variant of this code in [`generated::VARIANTS`], if any (set after the
    /// fingerprint is taken).
    pub(super) native: Option<usize>,
}
