//! The typed description of a switch data plane, shaped like what Tofino can do.
//!
//! A [`Program`] is built with [`ProgramBuilder`]; [`ProgramBuilder::build`] runs the
//! Tofino rule checks of [`crate::check`] so a program that would not fit the hardware fails
//! with a clear message before anything is emitted or executed.
//!
//! Vocabulary (TNA names in brackets):
//! - headers with bit fields and a parser of states with `select` transitions;
//! - fields live in one flat PHV ("packet header vector"): header fields, metadata,
//!   intrinsic inputs; each has a width ≤ 64 bits;
//! - registers [`Register`] of 8/16/32-bit cells or 2×32-bit pairs, changed only by
//!   register actions [`RegisterAction`] (TNA `RegisterAction`): at most two conditions,
//!   at most two updates per 32-bit word, one output value, the ALU operations of a stateful
//!   ALU, at most two PHV operands;
//! - hash units [`HashUnit`] (TNA `Hash<bit<W>>(HashAlgorithm_t.CRC32)`);
//! - exact / ternary tables [`Table`] with straight-line actions [`Action`];
//! - statements in the ingress and egress controls [`Stmt`]: assignments, `if`, table
//!   apply, register-action execute, hash, random number, unicast / multicast / drop, clone to the CPU port
//!   (TNA `Mirror`, v1model `clone_preserving_field_list`), digests (TNA `Digest`).

use std::fmt;

/// Index of a field in the program's PHV.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FieldId(pub u16);
/// Index of a header instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HeaderId(pub u16);
/// Index of a register.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegisterId(pub u16);
/// Index of a register action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegisterActionId(pub u16);
/// Index of a hash unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HashId(pub u16);
/// Index of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableId(pub u16);
/// Index of an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionId(pub u16);
/// Index of a digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DigestId(pub u16);

/// Ingress or egress pipeline (Tofino: a register or table belongs to exactly one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Gress {
    /// Before the traffic manager.
    Ingress,
    /// After the traffic manager.
    Egress,
}

impl fmt::Display for Gress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Gress::Ingress => "ingress",
            Gress::Egress => "egress",
        })
    }
}

/// Intrinsic metadata the target provides (read-only inputs of a pass).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    /// Ingress: port the packet arrived on (TNA `ig_intr_md.ingress_port`).
    IngressPort,
    /// Ingress: 48-bit MAC timestamp, ns (TNA `ig_intr_md.ingress_mac_tstamp`).
    IngressTstamp,
    /// Egress: port the packet entered the switch by (bridged).
    EgressIngressPort,
    /// Egress: port it leaves by (TNA `eg_intr_md.egress_port`).
    EgressPort,
    /// Egress: 48-bit enqueue time, ns (TNA `global_tstamp - deq_timedelta`).
    EnqTstamp,
    /// Egress: queue depth at enqueue in the target's unit (TNA: 80-byte cells;
    /// BMv2: packets; netsim adapter: 80-byte cells computed from bytes).
    EnqQdepth,
    /// Egress: wire bytes of the packet (TNA `eg_intr_md.pkt_length`).
    PacketLength,
    /// Egress: 0 for a normal packet, [`CLONE_INGRESS`] for an ingress clone,
    /// [`CLONE_EGRESS`] for an egress clone (v1model `instance_type`, TNA bridged
    /// `pkt_type`).
    CloneKind,
}

/// [`Intrinsic::CloneKind`] of an ingress-to-egress clone.
pub const CLONE_INGRESS: u64 = 1;
/// [`Intrinsic::CloneKind`] of an egress-to-egress clone.
pub const CLONE_EGRESS: u64 = 2;

impl Intrinsic {
    /// Width in bits.
    pub fn width(self) -> u8 {
        match self {
            Intrinsic::IngressTstamp | Intrinsic::EnqTstamp => 48,
            Intrinsic::EnqQdepth => 32,
            Intrinsic::CloneKind => 8,
            _ => 16,
        }
    }
    /// Which pipeline may read it.
    pub fn gress(self) -> Gress {
        match self {
            Intrinsic::IngressPort | Intrinsic::IngressTstamp => Gress::Ingress,
            _ => Gress::Egress,
        }
    }
    /// The name used in the PHV.
    pub fn name(self) -> &'static str {
        match self {
            Intrinsic::IngressPort => "ingress_port",
            Intrinsic::IngressTstamp => "ingress_tstamp",
            Intrinsic::EgressIngressPort => "eg_ingress_port",
            Intrinsic::EgressPort => "egress_port",
            Intrinsic::EnqTstamp => "enq_tstamp",
            Intrinsic::EnqQdepth => "enq_qdepth",
            Intrinsic::PacketLength => "packet_length",
            Intrinsic::CloneKind => "clone_kind",
        }
    }
    /// Every intrinsic, in PHV order.
    pub const ALL: [Intrinsic; 8] = [
        Intrinsic::IngressPort,
        Intrinsic::IngressTstamp,
        Intrinsic::EgressIngressPort,
        Intrinsic::EgressPort,
        Intrinsic::EnqTstamp,
        Intrinsic::EnqQdepth,
        Intrinsic::PacketLength,
        Intrinsic::CloneKind,
    ];
}

/// Who owns a PHV field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldOwner {
    /// A header field.
    Header(HeaderId),
    /// User metadata (zero at the start of each pass unless bridged / preserved).
    Metadata {
        /// Carried from ingress to egress (TNA bridged header; v1model user metadata).
        bridged: bool,
        /// Preserved in clones to the CPU (TNA mirror header; v1model `@field_list(1)`),
        /// with its value at the end of the pass that cloned.
        cloned: bool,
    },
    /// An action parameter (action data from a table entry).
    ActionParam(ActionId),
    /// Target intrinsic metadata.
    Intrinsic(Intrinsic),
}

/// A PHV field.
#[derive(Clone, Debug)]
pub struct Field {
    /// Short name (`ttl`, `flow_index`).
    pub name: String,
    /// Width in bits, 1..=64.
    pub width: u8,
    /// Owner.
    pub owner: FieldOwner,
}

/// A header instance (one type per instance; the type name is `<name>_h`).
#[derive(Clone, Debug)]
pub struct Header {
    /// Instance name (`ipv4`).
    pub name: String,
    /// Its fields in wire order.
    pub fields: Vec<FieldId>,
    /// Comment for the emitted P4.
    pub doc: String,
    /// Not on the wire: set valid by the program (e.g. a report header for a CPU copy).
    pub synthesized: bool,
}

impl Header {
    /// Total width in bits.
    pub fn bits(&self, program: &Program) -> u32 {
        self.fields
            .iter()
            .map(|f| program.fields[f.0 as usize].width as u32)
            .sum()
    }
}

/// Binary operators of PHV expressions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// Wrapping add.
    Add,
    /// Wrapping subtract.
    Sub,
    /// Saturating add (P4 `|+|`).
    SatAdd,
    /// Bitwise and.
    And,
    /// Bitwise or.
    Or,
    /// Bitwise xor.
    Xor,
    /// Minimum (TNA `min`).
    Min,
    /// Maximum (TNA `max`).
    Max,
}

/// Comparison operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmpOp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// unsigned `<`
    Lt,
    /// unsigned `<=`
    Le,
    /// unsigned `>`
    Gt,
    /// unsigned `>=`
    Ge,
    /// signed `<` (two's complement at the operand width)
    SLt,
    /// signed `>=`
    SGe,
    /// signed `>`
    SGt,
    /// signed `<=`
    SLe,
}

impl CmpOp {
    /// P4 operator text.
    pub fn p4(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt | CmpOp::SLt => "<",
            CmpOp::Le | CmpOp::SLe => "<=",
            CmpOp::Gt | CmpOp::SGt => ">",
            CmpOp::Ge | CmpOp::SGe => ">=",
        }
    }
    /// Whether the comparison is signed.
    pub fn signed(self) -> bool {
        matches!(self, CmpOp::SLt | CmpOp::SGe | CmpOp::SGt | CmpOp::SLe)
    }
    /// Evaluates on `width`-bit values.
    #[inline]
    pub fn eval(self, a: u64, b: u64, width: u8) -> bool {
        if self.signed() {
            let shift = 64 - width as u32;
            let sa = ((a << shift) as i64) >> shift;
            let sb = ((b << shift) as i64) >> shift;
            match self {
                CmpOp::SLt => sa < sb,
                CmpOp::SGe => sa >= sb,
                CmpOp::SGt => sa > sb,
                _ => sa <= sb,
            }
        } else {
            match self {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                CmpOp::Lt => a < b,
                CmpOp::Le => a <= b,
                CmpOp::Gt => a > b,
                _ => a >= b,
            }
        }
    }
}

/// A PHV expression. Bit expressions have a width; comparisons, `&&`, `||`, `!` and
/// `isValid` are booleans (usable only as conditions).
#[derive(Clone, Debug)]
pub enum Expr {
    /// A field.
    Field(FieldId),
    /// A constant of a width.
    Const {
        /// Value (must fit the width).
        value: u64,
        /// Width.
        width: u8,
    },
    /// Binary arithmetic / logic at the wider operand's width.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// Shift left by a constant (PHV ALUs shift by immediates only).
    Shl(Box<Expr>, u8),
    /// Logical shift right by a constant.
    Shr(Box<Expr>, u8),
    /// Bits `hi..=lo`.
    Slice(Box<Expr>, u8, u8),
    /// Zero-extend or truncate to a width.
    Cast(Box<Expr>, u8),
    /// Comparison (boolean).
    Cmp(CmpOp, Box<Expr>, Box<Expr>),
    /// Boolean and.
    And(Box<Expr>, Box<Expr>),
    /// Boolean or.
    Or(Box<Expr>, Box<Expr>),
    /// Boolean not.
    Not(Box<Expr>),
    /// Header validity (boolean).
    IsValid(HeaderId),
}

/// Shorthand constructors for expressions.
pub mod e {
    use super::*;
    /// A field.
    pub fn f(id: FieldId) -> Expr {
        Expr::Field(id)
    }
    /// A constant.
    pub fn c(value: u64, width: u8) -> Expr {
        Expr::Const { value, width }
    }
    /// `a + b`.
    pub fn add(a: Expr, b: Expr) -> Expr {
        Expr::Bin(BinOp::Add, Box::new(a), Box::new(b))
    }
    /// `a - b`.
    pub fn sub(a: Expr, b: Expr) -> Expr {
        Expr::Bin(BinOp::Sub, Box::new(a), Box::new(b))
    }
    /// `a |+| b`.
    pub fn sat_add(a: Expr, b: Expr) -> Expr {
        Expr::Bin(BinOp::SatAdd, Box::new(a), Box::new(b))
    }
    /// `a & b`.
    pub fn and(a: Expr, b: Expr) -> Expr {
        Expr::Bin(BinOp::And, Box::new(a), Box::new(b))
    }
    /// `a | b`.
    pub fn or(a: Expr, b: Expr) -> Expr {
        Expr::Bin(BinOp::Or, Box::new(a), Box::new(b))
    }
    /// `min(a, b)`.
    pub fn min(a: Expr, b: Expr) -> Expr {
        Expr::Bin(BinOp::Min, Box::new(a), Box::new(b))
    }
    /// `a << n`.
    pub fn shl(a: Expr, n: u8) -> Expr {
        Expr::Shl(Box::new(a), n)
    }
    /// `a >> n`.
    pub fn shr(a: Expr, n: u8) -> Expr {
        Expr::Shr(Box::new(a), n)
    }
    /// `a[hi:lo]`.
    pub fn slice(a: Expr, hi: u8, lo: u8) -> Expr {
        Expr::Slice(Box::new(a), hi, lo)
    }
    /// `(bit<w>)a`.
    pub fn cast(a: Expr, w: u8) -> Expr {
        Expr::Cast(Box::new(a), w)
    }
    /// `a == b`.
    pub fn eq(a: Expr, b: Expr) -> Expr {
        Expr::Cmp(CmpOp::Eq, Box::new(a), Box::new(b))
    }
    /// `a != b`.
    pub fn ne(a: Expr, b: Expr) -> Expr {
        Expr::Cmp(CmpOp::Ne, Box::new(a), Box::new(b))
    }
    /// `a > b` (unsigned).
    pub fn gt(a: Expr, b: Expr) -> Expr {
        Expr::Cmp(CmpOp::Gt, Box::new(a), Box::new(b))
    }
    /// `a && b`.
    pub fn all(a: Expr, b: Expr) -> Expr {
        Expr::And(Box::new(a), Box::new(b))
    }
    /// `a || b`.
    pub fn any(a: Expr, b: Expr) -> Expr {
        Expr::Or(Box::new(a), Box::new(b))
    }
    /// `!a`.
    pub fn not(a: Expr) -> Expr {
        Expr::Not(Box::new(a))
    }
    /// `h.isValid()`.
    pub fn valid(h: HeaderId) -> Expr {
        Expr::IsValid(h)
    }
    /// Field `!= 0` (a 1-bit flag is set).
    pub fn set(id: FieldId) -> Expr {
        Expr::Cmp(CmpOp::Ne, Box::new(Expr::Field(id)), Box::new(c(0, 1)))
    }
}

/// A statement of a control or an action.
#[derive(Clone, Debug)]
pub enum Stmt {
    /// `dst = value;`
    Assign(FieldId, Expr),
    /// `if (cond) { .. } else { .. }`
    If(Expr, Vec<Stmt>, Vec<Stmt>),
    /// `table.apply();`
    Apply(TableId),
    /// `out = action.execute(index);` (TNA RegisterAction).
    Execute {
        /// The register action.
        action: RegisterActionId,
        /// Cell index.
        index: Expr,
        /// Where the action's output value goes.
        output: Option<FieldId>,
    },
    /// `out = hash.get({inputs});`
    Hash(HashId, FieldId),
    /// `out = random.get();`: a uniform random value of the field's width (TNA
    /// `Random<bit<W>>().get()`, v1model `random(out, 0, 2^W - 1)`). The model draws it from
    /// a seeded SplitMix64 stream ([`crate::model::Model::seed_random`]), so a run is
    /// reproducible; the targets' generators are not, and tests compare shares, not draws.
    Random(FieldId),
    /// `h.setValid();` (all its fields become 0 unless assigned).
    SetValid(HeaderId),
    /// `h.setInvalid();`
    SetInvalid(HeaderId),
    /// Unicast to a port (TNA `ucast_egress_port`, v1model `egress_spec`). Ingress only.
    SetEgressPort(Expr),
    /// Replicate to a multicast group (TNA `mcast_grp_a`, v1model `mcast_grp`). Ingress
    /// only; a path may not also unicast.
    SetMulticastGroup(u16),
    /// Drop the packet (clones already requested still happen).
    Drop,
    /// Send a copy to the CPU port through mirror session `session` (TNA `Mirror`,
    /// v1model `clone_preserving_field_list`). The copy keeps the headers as parsed (the
    /// program must not rewrite headers before cloning) and the bridged metadata, and
    /// runs the egress control with [`Intrinsic::CloneKind`] set.
    CloneToCpu,
    /// Send a digest to the control plane (TNA `Digest`, v1model `digest`). Ingress only.
    Digest(DigestId),
}

impl Stmt {
    /// Calls `f` for every statement of `body` in program order, the statements nested in
    /// an `if` right after the `if` itself (then-branch before else-branch). The one walk
    /// for analyses that do not depend on control flow (what a control uses); flow-sensitive
    /// ones (`check`, the model's must-write analysis) follow the branches themselves.
    pub fn visit(body: &[Stmt], f: &mut impl FnMut(&Stmt)) {
        for s in body {
            f(s);
            if let Stmt::If(_, then, otherwise) = s {
                Stmt::visit(then, f);
                Stmt::visit(otherwise, f);
            }
        }
    }
}

/// A word of a register cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    /// The low (or only) word.
    Lo,
    /// The high word of a pair.
    Hi,
}

/// An operand of a stateful ALU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaluOperand {
    /// The stored low word (before the update).
    Reg(Word),
    /// A PHV field (at most two distinct per register action, ≤ 32 bits each).
    Phv(FieldId),
    /// An immediate.
    Const(u64),
}

/// Stateful ALU operations. TNA allows `Set`, `Add`, `Sub`, `SatAdd`, `SatSub`, `Min`,
/// `Max`, `And`, `Or`, `Xor`; `Shl` and `Mul` exist only so that programs using them are
/// rejected with a clear message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaluOp {
    /// `a`
    Set,
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a |+| b`
    SatAdd,
    /// `a |-| b`
    SatSub,
    /// `min(a, b)`
    Min,
    /// `max(a, b)`
    Max,
    /// `a & b`
    And,
    /// `a | b`
    Or,
    /// `a ^ b`
    Xor,
    /// `a << b` (not available in a stateful ALU).
    Shl,
    /// `a * b` (not available in a stateful ALU).
    Mul,
}

/// Which of the (up to) four condition outcomes a branch covers: bit `i` set covers the
/// outcome where condition 0 is `i & 1` and condition 1 is `i >> 1 & 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pred(pub u8);

impl Pred {
    /// Every outcome.
    pub const ALWAYS: Pred = Pred(0b1111);
    /// Outcomes where condition 0 is `c0` and (if given) condition 1 is `c1`.
    pub fn when(c0: Option<bool>, c1: Option<bool>) -> Pred {
        let mut mask = 0;
        for i in 0..4u8 {
            let ok0 = c0.is_none_or(|v| (i & 1 != 0) == v);
            let ok1 = c1.is_none_or(|v| (i & 2 != 0) == v);
            if ok0 && ok1 {
                mask |= 1 << i;
            }
        }
        Pred(mask)
    }
    /// Whether outcome `i` is covered.
    #[inline]
    pub fn covers(self, outcome: u8) -> bool {
        self.0 & (1 << outcome) != 0
    }
}

/// A stateful ALU condition: `(left [± right]) cmp constant`, at the register word width
/// (Tofino SALU condition form).
#[derive(Clone, Copy, Debug)]
pub struct SaluCondition {
    /// First operand.
    pub left: SaluOperand,
    /// Optional second operand and whether it is subtracted (`true`) or added.
    pub right: Option<(bool, SaluOperand)>,
    /// Comparison.
    pub cmp: CmpOp,
    /// Constant compared against (two's complement at the word width when signed).
    pub constant: i64,
}

/// One update of a register word under a predicate.
#[derive(Clone, Copy, Debug)]
pub struct SaluUpdate {
    /// When it applies.
    pub when: Pred,
    /// Which word.
    pub word: Word,
    /// Operation.
    pub op: SaluOp,
    /// First operand.
    pub a: SaluOperand,
    /// Second operand (ignored by `Set`).
    pub b: SaluOperand,
}

/// What a register action returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaluOutputValue {
    /// A word before the update.
    Old(Word),
    /// A word after the update.
    New(Word),
    /// An immediate.
    Const(u64),
}

/// The register action's output under a predicate (otherwise 0).
#[derive(Clone, Copy, Debug)]
pub struct SaluOutput {
    /// When it applies.
    pub when: Pred,
    /// The value.
    pub value: SaluOutputValue,
}

/// A TNA `RegisterAction`: one read-modify-write of one register cell.
#[derive(Clone, Debug)]
pub struct RegisterAction {
    /// Name (P4 identifier).
    pub name: String,
    /// The register.
    pub register: RegisterId,
    /// Comment.
    pub doc: String,
    /// Up to two conditions.
    pub conditions: Vec<SaluCondition>,
    /// Updates (≤ 2 per word, disjoint predicates).
    pub updates: Vec<SaluUpdate>,
    /// Output (one value; several entries must have disjoint predicates).
    pub outputs: Vec<SaluOutput>,
}

/// A register array.
#[derive(Clone, Debug)]
pub struct Register {
    /// Name (P4 identifier; also the control-plane name).
    pub name: String,
    /// Cell width: 8, 16, 32 or 64 (a pair of 32-bit words `lo`, `hi`).
    pub width: u8,
    /// Number of cells (a power of two).
    pub size: u32,
    /// Module for the resource report (`flow telemetry`, `causality meter` …).
    pub module: String,
    /// Comment.
    pub doc: String,
}

impl Register {
    /// Index width in bits.
    pub fn index_bits(&self) -> u8 {
        self.size.max(2).next_power_of_two().trailing_zeros() as u8
    }
    /// Whether cells are 2×32-bit pairs.
    pub fn is_pair(&self) -> bool {
        self.width == 64
    }
    /// Width of one word.
    pub fn word_width(&self) -> u8 {
        if self.is_pair() {
            32
        } else {
            self.width
        }
    }
}

/// Hash algorithms (identical in TNA `HashAlgorithm_t` and v1model `HashAlgorithm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashAlgorithm {
    /// IEEE 802.3 CRC-32 (reflected 0x04C11DB7, init and xor-out 0xFFFFFFFF).
    Crc32,
}

/// A hash unit over byte-aligned fields.
#[derive(Clone, Debug)]
pub struct HashUnit {
    /// Name.
    pub name: String,
    /// Algorithm.
    pub algorithm: HashAlgorithm,
    /// Inputs, concatenated big-endian (each a multiple of 8 bits).
    pub inputs: Vec<FieldId>,
    /// Output width (the low bits of the CRC).
    pub width: u8,
}

/// Match kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatchKind {
    /// Exact.
    Exact,
    /// Ternary (value, mask, priority).
    Ternary,
}

/// A straight-line action.
#[derive(Clone, Debug)]
pub struct Action {
    /// Name.
    pub name: String,
    /// Parameters (action data), as PHV fields owned by the action.
    pub params: Vec<FieldId>,
    /// Body (no `if`, no table apply, no register execute).
    pub body: Vec<Stmt>,
    /// Comment.
    pub doc: String,
}

/// A match-action table.
#[derive(Clone, Debug)]
pub struct Table {
    /// Name.
    pub name: String,
    /// Key fields.
    pub keys: Vec<(FieldId, MatchKind)>,
    /// Actions an entry may name.
    pub actions: Vec<ActionId>,
    /// Action when nothing matches, with its parameters.
    pub default_action: (ActionId, Vec<u64>),
    /// Capacity.
    pub size: u32,
    /// Comment.
    pub doc: String,
    /// The switch's L3/ECMP forwarding table: in the model with
    /// [`crate::model::Routing::FromInput`] its hit action is its first action with the
    /// externally computed egress port as the only parameter.
    pub forwarding: bool,
}

/// A digest (learning) message.
#[derive(Clone, Debug)]
pub struct Digest {
    /// Name.
    pub name: String,
    /// Fields sent, in order.
    pub fields: Vec<FieldId>,
}

/// Where a parser state goes next.
#[derive(Clone, Debug)]
pub enum Transition {
    /// Done.
    Accept,
    /// Unconditionally to a state (index).
    Goto(usize),
    /// On a field's value.
    Select {
        /// The field.
        field: FieldId,
        /// (value, state index or `None` = accept).
        cases: Vec<(u64, Option<usize>)>,
    },
}

/// A parser state.
#[derive(Clone, Debug)]
pub struct ParserState {
    /// Name.
    pub name: String,
    /// Header extracted in this state.
    pub extract: Option<HeaderId>,
    /// Next.
    pub transition: Transition,
}

/// A named constant shared with Rust and P4.
#[derive(Clone, Debug)]
pub struct Constant {
    /// SCREAMING_CASE name.
    pub name: String,
    /// Value.
    pub value: u64,
    /// Width in bits (for P4 typing).
    pub width: u8,
    /// Comment.
    pub doc: String,
}

/// A complete data-plane program.
#[derive(Clone, Debug)]
pub struct Program {
    /// Name.
    pub name: String,
    /// Top comment.
    pub doc: String,
    /// PHV fields.
    pub fields: Vec<Field>,
    /// Header instances in deparse order.
    pub headers: Vec<Header>,
    /// Parser states; state 0 is the start state.
    pub parser: Vec<ParserState>,
    /// Registers.
    pub registers: Vec<Register>,
    /// Register actions.
    pub register_actions: Vec<RegisterAction>,
    /// Hash units.
    pub hashes: Vec<HashUnit>,
    /// Actions.
    pub actions: Vec<Action>,
    /// Tables.
    pub tables: Vec<Table>,
    /// Digests.
    pub digests: Vec<Digest>,
    /// Constants shared with Rust.
    pub constants: Vec<Constant>,
    /// Ingress control.
    pub ingress: Vec<Stmt>,
    /// Egress control.
    pub egress: Vec<Stmt>,
    /// Mirror session used by [`Stmt::CloneToCpu`].
    pub cpu_mirror_session: u16,
    /// Multicast groups the control plane must configure: (id, description).
    pub multicast_groups: Vec<(u16, String)>,
}

impl Program {
    /// The field.
    pub fn field(&self, id: FieldId) -> &Field {
        &self.fields[id.0 as usize]
    }
    /// Field by P4-style path (`hdr.ipv4.ttl`, `meta.flow_index`, `intr.egress_port`).
    pub fn field_by_path(&self, path: &str) -> Option<FieldId> {
        (0..self.fields.len())
            .map(|i| FieldId(i as u16))
            .find(|id| self.field_path(*id) == path)
    }
    /// The P4-style path of a field.
    pub fn field_path(&self, id: FieldId) -> String {
        let field = self.field(id);
        match field.owner {
            FieldOwner::Header(h) => {
                format!("hdr.{}.{}", self.headers[h.0 as usize].name, field.name)
            }
            FieldOwner::Metadata { .. } => format!("meta.{}", field.name),
            FieldOwner::ActionParam(_) => field.name.clone(),
            FieldOwner::Intrinsic(_) => format!("intr.{}", field.name),
        }
    }
    /// Register by name.
    pub fn register_by_name(&self, name: &str) -> Option<RegisterId> {
        self.registers
            .iter()
            .position(|r| r.name == name)
            .map(|i| RegisterId(i as u16))
    }
    /// Table by name.
    pub fn table_by_name(&self, name: &str) -> Option<TableId> {
        self.tables
            .iter()
            .position(|t| t.name == name)
            .map(|i| TableId(i as u16))
    }
    /// Header by name.
    pub fn header_by_name(&self, name: &str) -> Option<HeaderId> {
        self.headers
            .iter()
            .position(|h| h.name == name)
            .map(|i| HeaderId(i as u16))
    }
    /// Constant by name.
    pub fn constant(&self, name: &str) -> Option<u64> {
        self.constants
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.value)
    }
    /// Bridged metadata fields (ingress → egress and clones), in order.
    pub fn bridged_fields(&self) -> Vec<FieldId> {
        (0..self.fields.len())
            .map(|i| FieldId(i as u16))
            .filter(|id| {
                matches!(
                    self.field(*id).owner,
                    FieldOwner::Metadata { bridged: true, .. }
                )
            })
            .collect()
    }
    /// Metadata fields preserved in clones, in order.
    pub fn cloned_fields(&self) -> Vec<FieldId> {
        (0..self.fields.len())
            .map(|i| FieldId(i as u16))
            .filter(|id| {
                matches!(
                    self.field(*id).owner,
                    FieldOwner::Metadata { cloned: true, .. }
                )
            })
            .collect()
    }
    /// The intrinsic field.
    pub fn intrinsic(&self, which: Intrinsic) -> FieldId {
        // Intrinsics are always the first fields, in `Intrinsic::ALL` order.
        FieldId(Intrinsic::ALL.iter().position(|i| *i == which).unwrap_or(0) as u16)
    }
}

/// Builds a [`Program`] step by step; [`ProgramBuilder::build`] checks it.
#[derive(Debug)]
pub struct ProgramBuilder {
    program: Program,
}

impl ProgramBuilder {
    /// A new program with the intrinsic fields declared.
    pub fn new(name: &str, doc: &str) -> Self {
        let mut program = Program {
            name: name.to_string(),
            doc: doc.to_string(),
            fields: Vec::new(),
            headers: Vec::new(),
            parser: Vec::new(),
            registers: Vec::new(),
            register_actions: Vec::new(),
            hashes: Vec::new(),
            actions: Vec::new(),
            tables: Vec::new(),
            digests: Vec::new(),
            constants: Vec::new(),
            ingress: Vec::new(),
            egress: Vec::new(),
            cpu_mirror_session: 1,
            multicast_groups: Vec::new(),
        };
        for which in Intrinsic::ALL {
            program.fields.push(Field {
                name: which.name().to_string(),
                width: which.width(),
                owner: FieldOwner::Intrinsic(which),
            });
        }
        ProgramBuilder { program }
    }

    /// The intrinsic field.
    pub fn intrinsic(&self, which: Intrinsic) -> FieldId {
        self.program.intrinsic(which)
    }

    /// Declares a header instance with `(field name, width)` in wire order; returns the
    /// header and its field ids.
    pub fn header(
        &mut self,
        name: &str,
        doc: &str,
        fields: &[(&str, u8)],
    ) -> (HeaderId, Vec<FieldId>) {
        self.header_inner(name, doc, fields, false)
    }

    /// Declares a header the program creates (never parsed), e.g. a report for the CPU.
    pub fn synthesized_header(
        &mut self,
        name: &str,
        doc: &str,
        fields: &[(&str, u8)],
    ) -> (HeaderId, Vec<FieldId>) {
        self.header_inner(name, doc, fields, true)
    }

    fn header_inner(
        &mut self,
        name: &str,
        doc: &str,
        fields: &[(&str, u8)],
        synthesized: bool,
    ) -> (HeaderId, Vec<FieldId>) {
        let id = HeaderId(self.program.headers.len() as u16);
        let mut ids = Vec::new();
        for (field, width) in fields {
            ids.push(self.push_field(field, *width, FieldOwner::Header(id)));
        }
        self.program.headers.push(Header {
            name: name.to_string(),
            fields: ids.clone(),
            doc: doc.to_string(),
            synthesized,
        });
        (id, ids)
    }

    fn push_field(&mut self, name: &str, width: u8, owner: FieldOwner) -> FieldId {
        let id = FieldId(self.program.fields.len() as u16);
        self.program.fields.push(Field {
            name: name.to_string(),
            width,
            owner,
        });
        id
    }

    /// Declares a metadata field.
    pub fn meta(&mut self, name: &str, width: u8) -> FieldId {
        self.push_field(
            name,
            width,
            FieldOwner::Metadata {
                bridged: false,
                cloned: false,
            },
        )
    }

    /// Declares a metadata field with explicit bridging (ingress → egress) and clone
    /// preservation.
    pub fn meta_carried(&mut self, name: &str, width: u8, bridged: bool, cloned: bool) -> FieldId {
        self.push_field(name, width, FieldOwner::Metadata { bridged, cloned })
    }

    /// Adds a parser state; returns its index.
    pub fn parser_state(
        &mut self,
        name: &str,
        extract: Option<HeaderId>,
        transition: Transition,
    ) -> usize {
        self.program.parser.push(ParserState {
            name: name.to_string(),
            extract,
            transition,
        });
        self.program.parser.len() - 1
    }

    /// Replaces a state's transition (to close forward references).
    pub fn set_transition(&mut self, state: usize, transition: Transition) {
        if let Some(s) = self.program.parser.get_mut(state) {
            s.transition = transition;
        }
    }

    /// Declares a register.
    pub fn register(
        &mut self,
        name: &str,
        width: u8,
        size: u32,
        module: &str,
        doc: &str,
    ) -> RegisterId {
        self.program.registers.push(Register {
            name: name.to_string(),
            width,
            size,
            module: module.to_string(),
            doc: doc.to_string(),
        });
        RegisterId(self.program.registers.len() as u16 - 1)
    }

    /// Declares a register action.
    pub fn register_action(&mut self, action: RegisterAction) -> RegisterActionId {
        self.program.register_actions.push(action);
        RegisterActionId(self.program.register_actions.len() as u16 - 1)
    }

    /// Declares a hash unit.
    pub fn hash(&mut self, name: &str, inputs: Vec<FieldId>, width: u8) -> HashId {
        self.program.hashes.push(HashUnit {
            name: name.to_string(),
            algorithm: HashAlgorithm::Crc32,
            inputs,
            width,
        });
        HashId(self.program.hashes.len() as u16 - 1)
    }

    /// Declares an action with `(param name, width)`; the body is given by `body`, which
    /// receives the parameter fields.
    pub fn action(
        &mut self,
        name: &str,
        doc: &str,
        params: &[(&str, u8)],
        body: impl FnOnce(&[FieldId]) -> Vec<Stmt>,
    ) -> ActionId {
        let id = ActionId(self.program.actions.len() as u16);
        let ids: Vec<FieldId> = params
            .iter()
            .map(|(n, w)| self.push_field(n, *w, FieldOwner::ActionParam(id)))
            .collect();
        let body = body(&ids);
        self.program.actions.push(Action {
            name: name.to_string(),
            params: ids,
            body,
            doc: doc.to_string(),
        });
        id
    }

    /// Declares a table.
    pub fn table(&mut self, table: Table) -> TableId {
        self.program.tables.push(table);
        TableId(self.program.tables.len() as u16 - 1)
    }

    /// Declares a digest.
    pub fn digest(&mut self, name: &str, fields: Vec<FieldId>) -> DigestId {
        self.program.digests.push(Digest {
            name: name.to_string(),
            fields,
        });
        DigestId(self.program.digests.len() as u16 - 1)
    }

    /// Declares a shared constant; returns its value for convenience.
    pub fn constant(&mut self, name: &str, value: u64, width: u8, doc: &str) -> u64 {
        self.program.constants.push(Constant {
            name: name.to_string(),
            value,
            width,
            doc: doc.to_string(),
        });
        value
    }

    /// Declares a multicast group the control plane configures.
    pub fn multicast_group(&mut self, id: u16, doc: &str) {
        self.program.multicast_groups.push((id, doc.to_string()));
    }

    /// Sets the CPU mirror session id.
    pub fn cpu_mirror_session(&mut self, session: u16) {
        self.program.cpu_mirror_session = session;
    }

    /// Sets the ingress control.
    pub fn ingress(&mut self, body: Vec<Stmt>) {
        self.program.ingress = body;
    }

    /// Sets the egress control.
    pub fn egress(&mut self, body: Vec<Stmt>) {
        self.program.egress = body;
    }

    /// Read access while building.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Checks every Tofino rule of [`crate::check`] and returns the program.
    pub fn build(self) -> Result<Program, crate::error::BuildError> {
        crate::check::check(&self.program)?;
        Ok(self.program)
    }
}
