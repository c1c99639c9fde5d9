//! The executable model: an interpreter of a [`Program`] with the semantics of the emitted
//! P4 (same parser, same statements, same register actions, same CRC-32 hashes).
//!
//! The model is one switch. A pass takes packet **bytes** and intrinsic metadata and fills
//! a reusable output (no allocation per packet once the buffers have grown):
//! [`DataPlane::ingress`] (parser → ingress control → deparser; the decision: unicast,
//! multicast group, drop, clone to CPU, digests, bridged metadata) and
//! [`DataPlane::egress`] (egress parser → egress control → deparser). [`DataPlane::process`]
//! runs a whole switch with zero queueing (ingress, replication, egress, CPU copies), which is
//! what the packet-trace tests and the BMv2 harness compare.
//!
//! Target differences and how the model handles them:
//! - Timestamps: the model takes ns (Tofino). BMv2 counts µs; the v1model program scales
//!   them by 1000, so BMv2 behaves like the model with µs-granular clocks.
//! - Queue depth: the model takes [`EgressInput::enq_qdepth`] in the target's unit (Tofino:
//!   80-byte cells; BMv2: packets). Registers store that unit; the agent converts.
//! - Clones: an ingress clone carries the headers as parsed (the rule checker forbids header
//!   rewrites before a clone in ingress, because Tofino and BMv2 differ there); an egress
//!   clone carries the packet as deparsed by egress. Cloned metadata has its end-of-pass
//!   value on both targets.
//! - Parser: a header that does not fit the remaining bytes stops parsing (the header stays
//!   invalid) and the packet continues, as with v1model `parser_error`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::error::ModelError;
use crate::ir::*;

#[rustfmt::skip]
mod generated;
mod native;

/// Largest packet the model accepts.
pub const MAX_PACKET_BYTES: usize = 16 * 1024;
/// Most bridged / cloned metadata fields a program may have.
pub const MAX_CARRIED: usize = 24;

/// Ingress intrinsic inputs.
#[derive(Clone, Copy, Debug, Default)]
pub struct IngressInput {
    /// Arrival port.
    pub ingress_port: u16,
    /// 48-bit arrival timestamp, ns.
    pub tstamp_ns: u64,
    /// The egress port the fabric's L3/ECMP chose (used by [`Routing::FromInput`]).
    pub routed_egress_port: Option<u16>,
}

/// Egress intrinsic inputs.
#[derive(Clone, Copy, Debug, Default)]
pub struct EgressInput {
    /// Port it entered the switch by.
    pub ingress_port: u16,
    /// Port it leaves by.
    pub egress_port: u16,
    /// Queue (priority).
    pub queue: u8,
    /// 48-bit enqueue time, ns.
    pub enq_tstamp_ns: u64,
    /// Queue depth at enqueue in the target's unit.
    pub enq_qdepth: u32,
    /// Wire bytes.
    pub packet_length: u16,
}

/// Metadata carried between passes (bridged ingress → egress, or preserved in a clone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Carried {
    /// Values in the order of [`Program::bridged_fields`] / [`Program::cloned_fields`].
    pub values: [u64; MAX_CARRIED],
    /// 0 = normal packet, [`CLONE_INGRESS`], [`CLONE_EGRESS`].
    pub clone_kind: u8,
}

impl Default for Carried {
    fn default() -> Self {
        Carried {
            values: [0; MAX_CARRIED],
            clone_kind: 0,
        }
    }
}

/// What ingress decided about the packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Forward {
    /// No destination (dropped by the traffic manager).
    #[default]
    None,
    /// One port.
    Unicast(u16),
    /// A multicast group.
    Multicast(u16),
}

/// A digest message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestMessage {
    /// Digest name.
    pub digest: DigestId,
    /// Field values in declaration order.
    pub values: Vec<u64>,
}

/// Result of a pass.
#[derive(Clone, Debug, Default)]
pub struct PassOutput {
    /// The deparsed packet.
    pub bytes: Vec<u8>,
    /// Dropped by the program.
    pub dropped: bool,
    /// Ingress only: where it goes.
    pub forward: Forward,
    /// Bridged metadata (ingress → egress).
    pub bridged: Carried,
    /// A clone to the CPU was requested: its bytes and metadata.
    pub clone: Option<Carried>,
    /// Bytes of the clone (valid when `clone` is set).
    pub clone_bytes: Vec<u8>,
    /// Digests.
    pub digests: Vec<DigestMessage>,
}

impl PassOutput {
    fn reset(&mut self) {
        self.bridged = Carried::default();
        self.reset_but_bridged();
    }

    /// [`PassOutput::reset`] except `bridged` (a pass that hands the bridged fields over
    /// packed leaves it as it is).
    fn reset_but_bridged(&mut self) {
        self.bytes.clear();
        self.dropped = false;
        self.forward = Forward::None;
        self.clone = None;
        self.clone_bytes.clear();
        self.digests.clear();
    }
}

/// What a whole switch emitted for one input packet ([`DataPlane::process`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchOutput {
    /// (egress port, bytes), in port order.
    pub ports: Vec<(u16, Vec<u8>)>,
    /// Copies that reached the CPU port.
    pub cpu: Vec<Vec<u8>>,
    /// Digests.
    pub digests: Vec<DigestMessage>,
}

pub use hawkmesh_wire::control::TableEntry;

/// How the forwarding table gets its result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// From [`IngressInput::routed_egress_port`] (netsim computes L3/ECMP).
    FromInput,
    /// From entries added with [`DataPlane::table_add`].
    FromTable,
}

/// The small trait the simulator, tests and the switch agent use.
pub trait DataPlane {
    /// Runs the ingress pipeline on `packet`.
    fn ingress(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
    ) -> Result<(), ModelError>;
    /// Runs the egress pipeline on `packet` with the metadata carried from ingress (or
    /// preserved in a clone).
    fn egress(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        carried: &Carried,
        out: &mut PassOutput,
    ) -> Result<(), ModelError>;
    /// A whole switch with zero queueing time.
    fn process(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        queue: u8,
    ) -> Result<SwitchOutput, ModelError>;
    /// Reads one register cell (pairs: `hi << 32 | lo`).
    fn register_read(&self, register: &str, index: u64) -> Result<u64, ModelError>;
    /// Writes one register cell.
    fn register_write(&mut self, register: &str, index: u64, value: u64) -> Result<(), ModelError>;
    /// Reads a whole register (BF Runtime bulk read after REGISTER_SYNC).
    fn register_read_all(&self, register: &str) -> Result<&[u64], ModelError>;
    /// Makes data-plane register values visible to the control plane (BF Runtime
    /// `REGISTER_SYNC`); immediate in the model.
    fn register_sync(&mut self, register: &str) -> Result<(), ModelError>;
    /// Clears a whole register.
    fn register_reset(&mut self, register: &str) -> Result<(), ModelError>;
    /// Adds a table entry.
    fn table_add(&mut self, table: &str, entry: TableEntry) -> Result<(), ModelError>;
    /// Configures a multicast group's member ports.
    fn multicast_group_set(&mut self, group: u16, ports: Vec<u16>);
}

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
const MAX_HEADERS: usize = 64;
/// Most bytes a hash unit hashes.
const MAX_HASH_BYTES: usize = 64;
/// Most conditions of a register action the model evaluates (TNA allows two).
const MAX_SALU_CONDITIONS: usize = 3;
const NO_SLOT: u16 = u16::MAX;
/// PHV slots are `u16` indices.
const PHV_SLOTS: usize = 1 << 16;
/// The PHV: one `u64` per slot.
type PhvBuf = [u64; PHV_SLOTS];
const NO_HEADER: u8 = u8::MAX;
const NONE: u8 = u8::MAX;

/// Exact-match key hasher (keys are installed by the control plane; no need for SipHash).
#[derive(Clone, Copy, Debug, Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ *b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ ((v >> 64) as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    }
}

/// Most parameters of an action of a [`CTable::direct`] table.
const DIRECT_PARAMS: usize = 2;
/// Keys below this are looked up in [`TableState::direct`] (ports); others in the hash map.
const DIRECT_KEYS: u128 = 1024;

/// An entry of a directly indexed exact table (`action` is `NO_SLOT` where none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Direct {
    action: u16,
    params: [u64; DIRECT_PARAMS],
}

const NO_DIRECT: Direct = Direct {
    action: NO_SLOT,
    params: [0; DIRECT_PARAMS],
};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct TableState {
    /// The entries of `exact` with a key below `direct.len()` (ports), by key: one load per
    /// lookup instead of a hash probe and the parameters' own allocation.
    direct: Vec<Direct>,
    exact: HashMap<u128, (ActionId, Vec<u64>), BuildHasherDefault<KeyHasher>>,
    ternary: Vec<(u128, u128, u32, ActionId, Vec<u64>)>,
    entries: usize,
}

impl TableState {
    /// A hash of the entries (equal tables hash alike, whatever the order of insertion).
    fn content_hash(&self) -> u64 {
        use std::hash::{BuildHasher, Hash};
        let build = BuildHasherDefault::<KeyHasher>::default();
        let mut h = build.build_hasher();
        self.direct.hash(&mut h);
        self.ternary.hash(&mut h);
        self.entries.hash(&mut h);
        let exact = self
            .exact
            .iter()
            .map(|e| build.hash_one(e))
            .fold(0u64, u64::wrapping_add);
        exact.hash(&mut h);
        h.finish()
    }
}

/// Tables with the same entries, shared by the models that installed them (a fabric's
/// switches mostly install the same port tables): one copy stays in cache for all of them.
static TABLES: Mutex<Vec<(u64, Weak<TableState>)>> = Mutex::new(Vec::new());

/// The shared copy of `table` (registered if it is the first with these entries).
fn intern_table(table: Arc<TableState>) -> Arc<TableState> {
    let Ok(mut all) = TABLES.lock() else {
        return table;
    };
    all.retain(|(_, t)| t.strong_count() > 0);
    let hash = table.content_hash();
    for (h, t) in all.iter() {
        if *h == hash {
            if let Some(t) = t.upgrade() {
                if *t == *table {
                    return t;
                }
            }
        }
    }
    all.push((hash, Arc::downgrade(&table)));
    table
}

/// Sets of (shared) tables, shared in turn by the models whose tables are all equal: a
/// lookup starts from a slice that stays in cache however many switches take turns.
static TABLE_SETS: Mutex<Vec<Weak<[Arc<TableState>]>>> = Mutex::new(Vec::new());

/// The shared copy of a set of shared tables.
fn intern_table_set(tables: Vec<Arc<TableState>>) -> Arc<[Arc<TableState>]> {
    let Ok(mut all) = TABLE_SETS.lock() else {
        return tables.into();
    };
    all.retain(|s| s.strong_count() > 0);
    let same = |s: &[Arc<TableState>]| {
        s.len() == tables.len() && s.iter().zip(&tables).all(|(a, b)| Arc::ptr_eq(a, b))
    };
    if let Some(found) = all.iter().filter_map(Weak::upgrade).find(|s| same(s)) {
        return found;
    }
    let set: Arc<[Arc<TableState>]> = tables.into();
    all.push(Arc::downgrade(&set));
    set
}

/// One instruction. Slots index the PHV (fields, then temporaries); every result is
/// `op(..) & mask`.
#[derive(Clone, Copy, Debug)]
enum Ins {
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
fn bin(op: BinOp, x: u64, y: u64, mask: u64) -> u64 {
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
fn smear(v: u64) -> u64 {
    if v == 0 {
        0
    } else {
        u64::MAX >> v.leading_zeros()
    }
}

fn negate(op: CmpOp) -> CmpOp {
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
fn mirror(op: CmpOp) -> CmpOp {
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
struct Cmp {
    /// Bit 0: true when less; bit 1: when equal; bit 2: when greater.
    rel: u8,
    /// `64 - width` for signed comparisons, else 0.
    shift: u8,
    signed: bool,
}

impl Cmp {
    /// A comparison by its parts (emitted code).
    const fn raw(rel: u8, shift: u8, signed: bool) -> Cmp {
        Cmp { rel, shift, signed }
    }

    fn new(op: CmpOp, width: u8) -> Cmp {
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
    fn norm(self, v: u64) -> u64 {
        ((((v << self.shift) as i64) >> self.shift) as u64) ^ ((self.signed as u64) << 63)
    }

    /// Whether `a op b` holds, `b` already normalised.
    #[inline(always)]
    fn test(self, a: u64, b: u64) -> bool {
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
enum COperand {
    Lo,
    Hi,
    Phv(u16),
    Const(u64),
}

impl COperand {
    fn new(o: SaluOperand) -> COperand {
        match o {
            SaluOperand::Reg(Word::Lo) => COperand::Lo,
            SaluOperand::Reg(Word::Hi) => COperand::Hi,
            SaluOperand::Phv(f) => COperand::Phv(f.0),
            SaluOperand::Const(c) => COperand::Const(c),
        }
    }

    #[inline(always)]
    fn get(self, phv: &[u64; PHV_SLOTS], lo: u64, hi: u64) -> u64 {
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
struct CCond {
    left: COperand,
    /// `None`, or the second operand and whether it is subtracted.
    right: Option<(bool, COperand)>,
    cmp: Cmp,
    constant: u64,
}

impl CCond {
    #[inline(always)]
    fn test(&self, phv: &[u64; PHV_SLOTS], lo: u64, hi: u64, m: u64) -> bool {
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
struct CUpdate {
    op: SaluOp,
    a: COperand,
    b: COperand,
}

impl CUpdate {
    #[inline(always)]
    fn apply(&self, phv: &[u64; PHV_SLOTS], lo: u64, hi: u64, m: u64) -> u64 {
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
struct Outcome {
    lo: u8,
    hi: u8,
    out: u8,
}

#[derive(Clone, Debug)]
struct CRegisterAction {
    register: u16,
    slab: u16,
    kind: SlabKind,
    /// First element of the slab in its kind's array of [`Regs`].
    base: usize,
    size_mask: usize,
    stride: usize,
    offset: usize,
    pair: bool,
    word_mask: u64,
    /// Some update may change the cell.
    writes: bool,
    conditions: Vec<CCond>,
    updates: Vec<CUpdate>,
    outputs: Vec<SaluOutputValue>,
    outcomes: [Outcome; 1 << MAX_SALU_CONDITIONS],
}

/// The operation of a [`WordStep`] on the stored word and its source operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WordOp {
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
struct WordStep {
    op: WordOp,
    phv: bool,
    slot: u16,
    konst: u32,
    out_old: u32,
    out_new: u32,
    out_konst: u32,
}

/// [`WordAction::cond`]: no condition, `(phv[cond_slot] & word_mask) == cond_k`, `!=`, or
/// [`Code::word_conds`]`[cond_k]`.
const COND_NONE: u8 = 0;
const COND_EQ: u8 = 1;
const COND_NE: u8 = 2;
const COND_ANY: u8 = 3;

/// A register action on a register of single words stored as 32-bit words, with at most
/// one condition, no update of a high word and 32-bit constants: most actions, run by a
/// shorter path than the general one. One cache line.
#[repr(align(64))]
#[derive(Clone, Copy, Debug)]
struct WordAction {
    /// First word of the slab in [`Regs::words`] (a multiple of 16).
    base: u32,
    size_mask: u32,
    stride: u16,
    offset: u16,
    word_mask: u32,
    slab: u16,
    cond_slot: u16,
    cond_k: u32,
    cond: u8,
    writes: bool,
    /// By the condition's outcome (`[0]` when there is none).
    on: [WordStep; 2],
}

#[derive(Clone, Debug)]
struct CHash {
    inputs: Vec<(u16, u8)>,
    mask: u64,
}

#[derive(Clone, Debug)]
struct CTable {
    forwarding: bool,
    /// The table's actions.
    actions: Vec<u16>,
    first_action: Option<u16>,
    default_action: u16,
    default_params: Vec<u64>,
    keys: Vec<(u16, u8)>,
    all_exact: bool,
    /// Exact keys and actions of at most [`DIRECT_PARAMS`] parameters: entries with small
    /// keys also live in [`TableState::direct`].
    direct: bool,
}

/// A header field as the parser and deparser see it.
#[derive(Clone, Copy, Debug)]
struct CField {
    phv: u16,
    /// Bit offset in the header.
    bit: u16,
    width: u8,
    /// First byte in the header.
    byte: u16,
    /// Right shift of the big-endian 64-bit word read at `byte` (when `window`).
    shift: u8,
    /// The field fits a 64-bit word read at `byte`.
    window: bool,
}

#[derive(Clone, Debug)]
struct CHeader {
    bytes: usize,
    /// Every field (emitted when the header is new or was made valid again).
    fields: Vec<CField>,
    /// The fields the program reads or writes (the parser extracts only these).
    parse: Vec<CField>,
    /// The fields the program writes (re-emitted over the input bytes of a header that
    /// was written; the others still hold their input bytes).
    emit: Vec<CField>,
}

/// A field the parser extracts: the big-endian 64-bit word at byte `byte` of the header
/// shifted right by `shift` (`NO_WINDOW`: the field does not fit such a word; read at
/// bit `bit`).
#[derive(Clone, Copy, Debug)]
struct PField {
    phv: u16,
    byte: u16,
    bit: u16,
    shift: u8,
    width: u8,
}

const NO_WINDOW: u8 = u8::MAX;
const ACCEPT: u8 = 0;
const GOTO: u8 = 1;
const SELECT: u8 = 2;

/// A parser state: the header it extracts (its fields are `pfields[fields..fields_end]`),
/// then accept, go to `next`, or select on `select` among `pcases[cases..cases_end]`.
#[derive(Clone, Copy, Debug)]
struct PState {
    header: u8,
    kind: u8,
    bytes: u16,
    select: u16,
    next: u16,
    fields: u16,
    fields_end: u16,
    cases: u16,
    cases_end: u16,
}

/// Where a register's cells live: cell `i` is word `i * stride + offset` of slab `slab`
/// (a pair uses that word and the next).
#[derive(Clone, Copy, Debug)]
struct RegLoc {
    slab: u16,
    kind: SlabKind,
    /// First element of the slab in its kind's array of [`Regs`].
    base: usize,
    stride: usize,
    offset: usize,
    pair: bool,
    size: usize,
}

/// The kind of storage of a slab.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlabKind {
    Bytes,
    Halves,
    Words,
}

#[derive(Debug)]
struct Code {
    ins: Vec<Ins>,
    ingress: u32,
    egress: u32,
    action_start: Vec<u32>,
    action_params: Vec<Vec<(u16, u64)>>,
    tables: Vec<CTable>,
    register_actions: Vec<CRegisterAction>,
    word_actions: Vec<WordAction>,
    /// The register of each word action.
    word_registers: Vec<u16>,
    /// The conditions of word actions with [`COND_ANY`].
    word_conds: Vec<CCond>,
    /// (word action, output slot, output mask) of the members of [`Ins::ExecuteGroup`].
    group_members: Vec<(u16, u16, u64)>,
    registers: Vec<RegLoc>,
    /// Elements of [`Regs::bytes`], [`Regs::halves`] and [`Regs::words`].
    regs_len: [usize; 3],
    hashes: Vec<CHash>,
    headers: Vec<CHeader>,
    parser: Vec<PState>,
    /// Extracted fields of every parser state, contiguous.
    pfields: Vec<PField>,
    /// Select cases: (value, next state or `NO_SLOT` to accept).
    pcases: Vec<(u64, u16)>,
    /// Each header's extracted fields in `pfields` (zeroed when the header is stale).
    header_fields: Vec<(u16, u16)>,
    /// PHV index ranges of metadata and action parameters (zeroed at each pass start).
    meta_ranges: Vec<(usize, usize)>,
    /// The ranges of [`Code::meta_ranges`] an ingress (`[0]`) or egress (`[1]`) pass may
    /// read before writing them ([`exposed_reads`]): what a pass clears when it starts.
    meta_exposed: [Vec<(usize, usize)>; 2],
    /// Each field's all-ones value (what [`State::reset`] poisons unexposed metadata with).
    masks: Vec<u64>,
    digests: Vec<Vec<u16>>,
    /// (slot, mask) of the bridged / cloned fields.
    bridged: Vec<(u16, u64)>,
    cloned: Vec<(u16, u64)>,
    /// (slot, mask, bit) of the bridged fields packed into 128 bits one after the other.
    bridge_packing: Vec<(u16, u64, u32)>,
    /// (slot, mask) of each intrinsic.
    intrinsics: [(u16, u64); Intrinsic::ALL.len()],
    /// The emitted variant of this code in [`generated::VARIANTS`], if any (set after the
    /// fingerprint is taken).
    native: Option<usize>,
}

fn program_error(message: String) -> ModelError {
    ModelError::TableEntry {
        table: "(program)".into(),
        message,
    }
}

/// A compiled operand: a PHV slot with an upper bound of its value (as a mask), or an
/// immediate.
#[derive(Clone, Copy, Debug)]
enum Opnd {
    Slot(u16, u64),
    Imm(u64),
}

impl Opnd {
    fn bound(self) -> u64 {
        match self {
            Opnd::Slot(_, b) => b,
            Opnd::Imm(v) => smear(v),
        }
    }
}

struct Compiler<'p> {
    program: &'p Program,
    field_header: Vec<u8>,
    masks: Vec<u64>,
    ins: Vec<Ins>,
    temp_base: usize,
    next_temp: usize,
    max_temp: usize,
}

impl Compiler<'_> {
    fn width(&self, e: &Expr) -> u8 {
        match e {
            Expr::Field(f) => self.program.fields[f.0 as usize].width,
            Expr::Const { width, .. } => *width,
            Expr::Bin(_, a, b) => self.width(a).max(self.width(b)),
            Expr::Shl(a, _) | Expr::Shr(a, _) => self.width(a),
            Expr::Slice(_, hi, lo) => hi.wrapping_sub(*lo).wrapping_add(1),
            Expr::Cast(_, w) => *w,
            _ => 1,
        }
    }

    fn temp(&mut self) -> Result<u16, ModelError> {
        let t = self.next_temp;
        if t >= NO_SLOT as usize {
            return Err(program_error(
                "the program needs more than 65535 PHV slots".into(),
            ));
        }
        self.next_temp += 1;
        self.max_temp = self.max_temp.max(self.next_temp);
        Ok(t as u16)
    }

    /// The operand in a slot (immediates are loaded into a temporary).
    fn slot(&mut self, o: Opnd) -> Result<u16, ModelError> {
        match o {
            Opnd::Slot(s, _) => Ok(s),
            Opnd::Imm(v) => {
                let t = self.temp()?;
                self.ins.push(Ins::Imm { dst: t, value: v });
                Ok(t)
            }
        }
    }

    /// Compiles `e` as a value. Returns the operand and, when the value is a temporary
    /// computed by exactly one instruction, that instruction's index.
    fn value(&mut self, e: &Expr) -> Result<(Opnd, Option<usize>), ModelError> {
        Ok(match e {
            Expr::Field(f) => (Opnd::Slot(f.0, self.masks[f.0 as usize]), None),
            Expr::Const { value, .. } => (Opnd::Imm(*value), None),
            Expr::Bin(BinOp::Or, a, b)
                if matches!(**a, Expr::Shl(..)) || matches!(**b, Expr::Shl(..)) =>
            {
                if let Some(v) = self.concat(a, b)? {
                    return Ok(v);
                }
                self.bin(e)?
            }
            Expr::Bin(..) => self.bin(e)?,
            Expr::Shl(a, n) => {
                let m = mask(self.width(a));
                let (x, _) = self.value(a)?;
                if let Opnd::Imm(v) = x {
                    return Ok((Opnd::Imm(v.wrapping_shl(*n as u32) & m), None));
                }
                let bound = if *n < 64 {
                    (smear(x.bound()) << n) & m
                } else {
                    m
                };
                let xs = self.slot(x)?;
                let t = self.temp()?;
                self.ins.push(Ins::Shl {
                    dst: t,
                    a: xs,
                    n: *n,
                    mask: m,
                });
                (Opnd::Slot(t, bound), Some(self.ins.len() - 1))
            }
            Expr::Shr(a, n) => {
                let x = self.value(a)?;
                self.shr(x, *n, u64::MAX)?
            }
            Expr::Slice(a, hi, lo) => {
                let m = mask(hi.wrapping_sub(*lo).wrapping_add(1));
                let x = self.value(a)?;
                self.shr(x, *lo, m)?
            }
            Expr::Cast(a, w) => {
                let x = self.value(a)?;
                self.shr(x, 0, mask(*w))?
            }
            Expr::Cmp(..) | Expr::And(..) | Expr::Or(..) | Expr::Not(..) | Expr::IsValid(_) => {
                // A boolean as a value: 0 or 1.
                let t = self.temp()?;
                self.ins.push(Ins::Imm { dst: t, value: 0 });
                let mut skip = Vec::new();
                self.branch(e, false, &mut skip)?;
                self.ins.push(Ins::Imm { dst: t, value: 1 });
                self.patch(&skip);
                (Opnd::Slot(t, 1), None)
            }
        })
    }

    /// A binary operation (not a concatenation).
    fn bin(&mut self, e: &Expr) -> Result<(Opnd, Option<usize>), ModelError> {
        let Expr::Bin(op, a, b) = e else {
            return Err(program_error("not a binary operation".into()));
        };
        let m = mask(self.width(e));
        let omask = match op {
            BinOp::Add | BinOp::Sub | BinOp::SatAdd => m,
            _ => u64::MAX,
        };
        let (x, _) = self.value(a)?;
        let (y, _) = self.value(b)?;
        if let (Opnd::Imm(x), Opnd::Imm(y)) = (x, y) {
            return Ok((Opnd::Imm(bin(*op, x, y, omask)), None));
        }
        let commutative = !matches!(op, BinOp::Sub);
        let (x, y) = match (x, y) {
            (Opnd::Imm(_), Opnd::Slot(..)) if commutative => (y, x),
            _ => (x, y),
        };
        let (bx, by) = (smear(x.bound()), smear(y.bound()));
        let bound = match op {
            BinOp::Add | BinOp::Sub | BinOp::SatAdd => omask,
            BinOp::And | BinOp::Min => bx & by,
            BinOp::Or | BinOp::Xor | BinOp::Max => bx | by,
        };
        let xs = self.slot(x)?;
        let t = self.temp()?;
        let i = self.ins.len();
        self.ins.push(match y {
            Opnd::Slot(ys, _) => Ins::Bin {
                op: *op,
                dst: t,
                a: xs,
                b: ys,
                mask: omask,
            },
            Opnd::Imm(k) => Ins::BinImm {
                op: *op,
                dst: t,
                a: xs,
                b: k,
                mask: omask,
            },
        });
        Ok((Opnd::Slot(t, bound), Some(i)))
    }

    /// `((x << n) & mask(width x)) | y` as one instruction when `y` fits the mask (a
    /// concatenation), else `None`.
    fn concat(&mut self, a: &Expr, b: &Expr) -> Result<Option<(Opnd, Option<usize>)>, ModelError> {
        let (shl, y) = match (a, b) {
            (Expr::Shl(..), _) => (a, b),
            _ => (b, a),
        };
        let Expr::Shl(x, n) = shl else {
            return Ok(None);
        };
        let m = mask(self.width(x));
        let start = self.ins.len();
        let (xo, _) = self.value(x)?;
        let (yo, _) = self.value(y)?;
        match (xo, yo) {
            (Opnd::Slot(xs, bx), Opnd::Slot(ys, by)) if smear(by) & !m == 0 && *n < 64 => {
                let t = self.temp()?;
                self.ins.push(Ins::ShlOr {
                    dst: t,
                    a: xs,
                    n: *n,
                    b: ys,
                    mask: m,
                });
                let bound = ((smear(bx) << n) & m) | smear(by);
                Ok(Some((Opnd::Slot(t, bound), Some(self.ins.len() - 1))))
            }
            _ => {
                // Not a concatenation: compile it as written.
                self.ins.truncate(start);
                Ok(None)
            }
        }
    }

    /// `(x >> n) & m`, dropped when it cannot change the value.
    fn shr(
        &mut self,
        (x, producer): (Opnd, Option<usize>),
        n: u8,
        m: u64,
    ) -> Result<(Opnd, Option<usize>), ModelError> {
        if let Opnd::Imm(v) = x {
            return Ok((Opnd::Imm(v.wrapping_shr(n as u32) & m), None));
        }
        if n == 0 && x.bound() & !m == 0 {
            return Ok((x, producer));
        }
        let bound = smear(x.bound()).wrapping_shr(n as u32) & m;
        let xs = self.slot(x)?;
        let t = self.temp()?;
        self.ins.push(Ins::Shr {
            dst: t,
            a: xs,
            n,
            mask: m,
        });
        Ok((Opnd::Slot(t, bound), Some(self.ins.len() - 1)))
    }

    /// Emits code that jumps (to a target patched later, recorded in `out`) when `e`
    /// evaluates to `when`, and falls through otherwise.
    fn branch(&mut self, e: &Expr, when: bool, out: &mut Vec<usize>) -> Result<(), ModelError> {
        match e {
            Expr::Cmp(op, a, b) => {
                let w = self.width(a).max(self.width(b));
                let (x, _) = self.value(a)?;
                let (y, _) = self.value(b)?;
                let op = if when { *op } else { negate(*op) };
                let (op, x, y) = match (x, y) {
                    (Opnd::Imm(_), Opnd::Slot(..)) => (mirror(op), y, x),
                    _ => (op, x, y),
                };
                match (x, y) {
                    (Opnd::Imm(x), Opnd::Imm(y)) => {
                        if op.eval(x, y, w) {
                            out.push(self.ins.len());
                            self.ins.push(Ins::Jump(0));
                        }
                    }
                    (Opnd::Slot(a, _), Opnd::Slot(b, _)) => {
                        out.push(self.ins.len());
                        self.ins.push(Ins::JumpCmp {
                            cmp: Cmp::new(op, w),
                            a,
                            b,
                            target: 0,
                        });
                    }
                    (Opnd::Slot(a, _), Opnd::Imm(b)) => {
                        let cmp = Cmp::new(op, w);
                        out.push(self.ins.len());
                        self.ins.push(Ins::JumpCmpImm {
                            cmp,
                            a,
                            b: cmp.norm(b),
                            target: 0,
                        });
                    }
                    (Opnd::Imm(_), Opnd::Slot(..)) => unreachable!("operands were swapped"),
                }
            }
            Expr::IsValid(h) => {
                out.push(self.ins.len());
                self.ins.push(if when {
                    Ins::JumpValid(h.0 as u8, 0)
                } else {
                    Ins::JumpInvalid(h.0 as u8, 0)
                });
            }
            Expr::Not(a) => self.branch(a, !when, out)?,
            Expr::And(a, b) | Expr::Or(a, b) => {
                let and = matches!(e, Expr::And(..));
                if and != when {
                    // `a && b` is false when either is; `a || b` true when either is.
                    self.branch(a, when, out)?;
                    self.branch(b, when, out)?;
                } else {
                    let mut skip = Vec::new();
                    self.branch(a, !when, &mut skip)?;
                    self.branch(b, when, out)?;
                    self.patch(&skip);
                }
            }
            _ => {
                // A value as a condition: true when non-zero.
                let (x, _) = self.value(e)?;
                match x {
                    Opnd::Imm(v) => {
                        if (v != 0) == when {
                            out.push(self.ins.len());
                            self.ins.push(Ins::Jump(0));
                        }
                    }
                    Opnd::Slot(a, _) => {
                        out.push(self.ins.len());
                        self.ins.push(Ins::JumpCmpImm {
                            cmp: Cmp::new(if when { CmpOp::Ne } else { CmpOp::Eq }, 64),
                            a,
                            b: 0,
                            target: 0,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Points the jumps at `list` to the next instruction.
    fn patch(&mut self, list: &[usize]) {
        let here = self.ins.len() as u32;
        for i in list {
            match &mut self.ins[*i] {
                Ins::Jump(t)
                | Ins::JumpValid(_, t)
                | Ins::JumpInvalid(_, t)
                | Ins::JumpCmp { target: t, .. }
                | Ins::JumpCmpImm { target: t, .. } => *t = here,
                _ => {}
            }
        }
    }

    fn dirty(&mut self, field: u16) {
        let h = self.field_header[field as usize];
        if h != NO_HEADER {
            self.ins.push(Ins::Dirty(h));
        }
    }

    fn assign(&mut self, dst: u16, e: &Expr) -> Result<(), ModelError> {
        let dmask = self.masks[dst as usize];
        let (v, producer) = self.value(e)?;
        let retargeted = match producer.map(|i| (i, self.ins[i])) {
            Some((i, ins)) if i + 1 == self.ins.len() => {
                let new = match ins {
                    Ins::Bin { op, a, b, mask, .. }
                        if op != BinOp::SatAdd || mask & !dmask == 0 =>
                    {
                        Some(Ins::Bin {
                            op,
                            dst,
                            a,
                            b,
                            mask: if op == BinOp::SatAdd {
                                mask
                            } else {
                                mask & dmask
                            },
                        })
                    }
                    Ins::BinImm { op, a, b, mask, .. }
                        if op != BinOp::SatAdd || mask & !dmask == 0 =>
                    {
                        Some(Ins::BinImm {
                            op,
                            dst,
                            a,
                            b,
                            mask: if op == BinOp::SatAdd {
                                mask
                            } else {
                                mask & dmask
                            },
                        })
                    }
                    Ins::Shl { a, n, mask, .. } => Some(Ins::Shl {
                        dst,
                        a,
                        n,
                        mask: mask & dmask,
                    }),
                    Ins::Shr { a, n, mask, .. } => Some(Ins::Shr {
                        dst,
                        a,
                        n,
                        mask: mask & dmask,
                    }),
                    Ins::ShlOr { a, n, b, mask, .. } => Some(Ins::ShlOr {
                        dst,
                        a,
                        n,
                        b,
                        mask: mask & dmask,
                    }),
                    _ => None,
                };
                if let Some(new) = new {
                    self.ins[i] = new;
                    true
                } else {
                    false
                }
            }
            _ => false,
        };
        if !retargeted {
            match v {
                Opnd::Imm(value) => self.ins.push(Ins::Imm {
                    dst,
                    value: value & dmask,
                }),
                Opnd::Slot(src, _) => self.ins.push(Ins::Mov {
                    dst,
                    src,
                    mask: dmask,
                }),
            }
        }
        self.dirty(dst);
        Ok(())
    }

    /// `if (a op b) { dst = constant; }` as one [`Ins::CondSet`]; `false` (nothing
    /// emitted) when the comparison folds to a constant.
    fn cond_set(&mut self, op: CmpOp, a: &Expr, b: &Expr, then: &Stmt) -> Result<bool, ModelError> {
        let Stmt::Assign(dst, Expr::Const { value, .. }) = then else {
            return Ok(false);
        };
        let (dst, value) = (dst.0, value & self.masks[dst.0 as usize]);
        let w = self.width(a).max(self.width(b));
        let start = self.ins.len();
        let (x, _) = self.value(a)?;
        let (y, _) = self.value(b)?;
        let (op, x, y) = match (x, y) {
            (Opnd::Imm(_), Opnd::Slot(..)) => (mirror(op), y, x),
            _ => (op, x, y),
        };
        let cmp = Cmp::new(op, w);
        match (x, y) {
            (Opnd::Slot(a, _), Opnd::Slot(b, _)) => self.ins.push(Ins::CondSet {
                cmp,
                a,
                b,
                dst,
                value,
            }),
            (Opnd::Slot(a, _), Opnd::Imm(b)) => self.ins.push(Ins::CondSetImm {
                cmp,
                a,
                dst,
                b: cmp.norm(b),
                value,
            }),
            _ => {
                self.ins.truncate(start);
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn body(&mut self, body: &[Stmt]) -> Result<(), ModelError> {
        for s in body {
            // Temporaries live within one statement (conditions are consumed by the jumps
            // before the branches run).
            self.next_temp = self.temp_base;
            match s {
                Stmt::Assign(dst, e) => self.assign(dst.0, e)?,
                Stmt::If(Expr::Cmp(op, a, b), then, otherwise)
                    if otherwise.is_empty()
                        && matches!(
                            then.as_slice(),
                            [Stmt::Assign(dst, Expr::Const { .. })]
                                if self.field_header[dst.0 as usize] == NO_HEADER
                        )
                        && self.cond_set(*op, a, b, &then[0])? => {}
                Stmt::If(c, then, otherwise) => {
                    let mut skip = Vec::new();
                    self.branch(c, false, &mut skip)?;
                    self.body(then)?;
                    if otherwise.is_empty() {
                        self.patch(&skip);
                    } else {
                        let jump = self.ins.len();
                        self.ins.push(Ins::Jump(0));
                        self.patch(&skip);
                        self.body(otherwise)?;
                        self.patch(&[jump]);
                    }
                }
                Stmt::Apply(t) => self.ins.push(Ins::Apply(t.0)),
                Stmt::Execute {
                    action,
                    index,
                    output,
                } => {
                    let (x, _) = self.value(index)?;
                    let index = self.slot(x)?;
                    let (out, mask) = match output {
                        Some(o) => (o.0, self.masks[o.0 as usize]),
                        None => (NO_SLOT, 0),
                    };
                    self.ins.push(Ins::Execute {
                        ra: action.0,
                        index,
                        out,
                        mask,
                    });
                    if out != NO_SLOT {
                        self.dirty(out);
                    }
                }
                Stmt::Hash(h, dst) => {
                    self.ins.push(Ins::Hash {
                        unit: h.0,
                        dst: dst.0,
                        mask: self.masks[dst.0 as usize],
                    });
                    self.dirty(dst.0);
                }
                Stmt::SetValid(h) => self.ins.push(Ins::SetValid(h.0 as u8)),
                Stmt::SetInvalid(h) => self.ins.push(Ins::SetInvalid(h.0 as u8)),
                Stmt::SetEgressPort(e) => {
                    let (x, _) = self.value(e)?;
                    let port = self.slot(x)?;
                    self.ins.push(Ins::Unicast(port));
                }
                Stmt::SetMulticastGroup(g) => self.ins.push(Ins::Multicast(*g)),
                Stmt::Drop => self.ins.push(Ins::Drop),
                Stmt::CloneToCpu => self.ins.push(Ins::Clone),
                Stmt::Digest(d) => self.ins.push(Ins::Digest(d.0)),
            }
        }
        Ok(())
    }
}

/// Calls `f` for every statement of `body`, nested ones included.
fn visit(body: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    for s in body {
        f(s);
        if let Stmt::If(_, then, otherwise) = s {
            visit(then, f);
            visit(otherwise, f);
        }
    }
}

/// Register storage layout: registers whose register actions all use the same index
/// expression (and have the same size) share one interleaved slab of 32-bit words, each
/// cell group padded to a power of two of words up to a 64-byte line; the others get a
/// slab of their native width.
fn layout_registers(program: &Program) -> (Vec<RegLoc>, Vec<(SlabKind, usize)>) {
    // The index expression (as text) of each register, `None` when it has several or
    // none.
    let mut index: Vec<Option<Option<String>>> = vec![None; program.registers.len()];
    let mut note = |s: &Stmt| {
        if let Stmt::Execute {
            action, index: e, ..
        } = s
        {
            if let Some(ra) = program.register_actions.get(action.0 as usize) {
                let r = ra.register.0 as usize;
                if r < index.len() {
                    let key = format!("{e:?}");
                    index[r] = match &index[r] {
                        None => Some(Some(key)),
                        Some(Some(k)) if *k == key => Some(Some(key)),
                        _ => Some(None),
                    };
                }
            }
        }
    };
    visit(&program.ingress, &mut note);
    visit(&program.egress, &mut note);
    for a in &program.actions {
        visit(&a.body, &mut note);
    }
    let mut groups: Vec<((String, u32), Vec<usize>)> = Vec::new();
    for (r, key) in index.into_iter().enumerate() {
        if let Some(Some(key)) = key {
            let k = (key, program.registers[r].size);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, members)) => members.push(r),
                None => groups.push((k, vec![r])),
            }
        }
    }
    let mut locs: Vec<Option<RegLoc>> = vec![None; program.registers.len()];
    let mut slabs = Vec::new();
    for (_, members) in groups.iter().filter(|(_, m)| m.len() > 1) {
        let words: usize = members
            .iter()
            .map(|r| {
                if program.registers[*r].is_pair() {
                    2
                } else {
                    1
                }
            })
            .sum();
        let stride = if words <= 16 {
            words.next_power_of_two()
        } else {
            words.div_ceil(16) * 16
        };
        let size = program.registers[members[0]].size as usize;
        let mut offset = 0;
        for r in members {
            let pair = program.registers[*r].is_pair();
            locs[*r] = Some(RegLoc {
                slab: slabs.len() as u16,
                kind: SlabKind::Words,
                base: 0,
                stride,
                offset,
                pair,
                size,
            });
            offset += if pair { 2 } else { 1 };
        }
        slabs.push((SlabKind::Words, size * stride));
    }
    let locs = locs
        .into_iter()
        .enumerate()
        .map(|(r, loc)| {
            loc.unwrap_or_else(|| {
                let reg = &program.registers[r];
                let size = reg.size as usize;
                let (kind, stride) = match reg.width {
                    0..=8 => (SlabKind::Bytes, 1),
                    9..=16 => (SlabKind::Halves, 1),
                    17..=32 => (SlabKind::Words, 1),
                    _ => (SlabKind::Words, 2),
                };
                slabs.push((kind, size * stride));
                RegLoc {
                    slab: slabs.len() as u16 - 1,
                    kind,
                    base: 0,
                    stride,
                    offset: 0,
                    pair: reg.is_pair(),
                    size,
                }
            })
        })
        .collect::<Vec<RegLoc>>();
    let bases = slab_bases(&slabs).0;
    let locs = locs
        .into_iter()
        .map(|l| RegLoc {
            kind: slabs[l.slab as usize].0,
            base: bases[l.slab as usize],
            ..l
        })
        .collect();
    (locs, slabs)
}

/// Where each slab starts in its kind's array of [`Regs`] (slabs of words on a line
/// boundary, so that a cell group stays within one line), and the arrays' lengths.
fn slab_bases(slabs: &[(SlabKind, usize)]) -> (Vec<usize>, [usize; 3]) {
    let mut len = [0usize; 3];
    let bases = slabs
        .iter()
        .map(|(kind, words)| {
            let (i, size) = match kind {
                SlabKind::Bytes => (0, *words),
                SlabKind::Halves => (1, *words),
                SlabKind::Words => (2, words.div_ceil(16) * 16),
            };
            let base = len[i];
            len[i] += size;
            base
        })
        .collect();
    (bases, len)
}

/// The single-word form of a register action, if it has one: a register of single words
/// stored as 32-bit words, at most one condition, no update of a high word.
fn word_action(
    ra: &CRegisterAction,
    slabs: &[(SlabKind, usize)],
    conds: &mut Vec<CCond>,
) -> Option<WordAction> {
    if ra.pair || ra.conditions.len() > 1 || slabs[ra.slab as usize].0 != SlabKind::Words {
        return None;
    }
    let m = ra.word_mask;
    // A source operand: (is a PHV field, slot, constant); the high word of a single-word
    // register is 0; constants are used masked to the word.
    let src = |o: COperand| match o {
        COperand::Phv(f) => Some((true, f, 0)),
        COperand::Const(c) => Some((false, 0, (c & m) as u32)),
        COperand::Hi => Some((false, 0, 0)),
        COperand::Lo => None,
    };
    let mut on = [WordStep {
        op: WordOp::Keep,
        phv: false,
        slot: 0,
        konst: 0,
        out_old: 0,
        out_new: 0,
        out_konst: 0,
    }; 2];
    for (outcome, step) in on.iter_mut().enumerate() {
        let o = ra.outcomes[outcome];
        if o.hi != NONE {
            return None;
        }
        if o.lo != NONE {
            let u = ra.updates[o.lo as usize];
            let (op, s) = match u.op {
                SaluOp::Set | SaluOp::Shl | SaluOp::Mul => match u.a {
                    COperand::Lo => (WordOp::Keep, (false, 0, 0)),
                    a => (WordOp::Set, src(a)?),
                },
                op => {
                    let op = match op {
                        SaluOp::Add => WordOp::Add,
                        SaluOp::Sub => WordOp::Sub,
                        SaluOp::SatAdd => WordOp::SatAdd,
                        SaluOp::SatSub => WordOp::SatSub,
                        SaluOp::Min => WordOp::Min,
                        SaluOp::Max => WordOp::Max,
                        SaluOp::And => WordOp::And,
                        SaluOp::Or => WordOp::Or,
                        _ => WordOp::Xor,
                    };
                    let commutative = !matches!(op, WordOp::Sub | WordOp::SatSub);
                    match (u.a, u.b) {
                        (COperand::Lo, b) => (op, src(b)?),
                        (a, COperand::Lo) if commutative => (op, src(a)?),
                        _ => return None,
                    }
                }
            };
            step.op = op;
            (step.phv, step.slot, step.konst) = s;
        }
        if o.out != NONE {
            match ra.outputs[o.out as usize] {
                SaluOutputValue::Old(Word::Lo) => step.out_old = u32::MAX,
                SaluOutputValue::New(Word::Lo) => step.out_new = u32::MAX,
                // A register of single words has no high word (it reads as 0).
                SaluOutputValue::Old(Word::Hi) | SaluOutputValue::New(Word::Hi) => {}
                SaluOutputValue::Const(c) => step.out_konst = u32::try_from(c).ok()?,
            }
        }
    }
    let (cond, cond_slot, cond_k) = match ra.conditions.first() {
        None => (COND_NONE, 0, 0),
        Some(CCond {
            left: COperand::Phv(f),
            right: None,
            cmp,
            constant,
        }) if (cmp.rel == 0b010 || cmp.rel == 0b101) && *constant <= u32::MAX as u64 => (
            if cmp.rel == 0b010 { COND_EQ } else { COND_NE },
            *f,
            *constant as u32,
        ),
        Some(c) => {
            conds.push(*c);
            (COND_ANY, 0, u32::try_from(conds.len() - 1).ok()?)
        }
    };
    Some(WordAction {
        base: u32::try_from(ra.base).ok()?,
        size_mask: u32::try_from(ra.size_mask).ok()?,
        stride: u16::try_from(ra.stride).ok()?,
        offset: u16::try_from(ra.offset).ok()?,
        word_mask: u32::try_from(m).ok()?,
        slab: ra.slab,
        cond_slot,
        cond_k,
        cond,
        writes: ra.writes,
        on,
    })
}

/// Where a jump goes, if `ins` is one.
fn jump_target(ins: &mut Ins) -> Option<&mut u32> {
    match ins {
        Ins::Jump(t)
        | Ins::JumpValid(_, t)
        | Ins::JumpInvalid(_, t)
        | Ins::JumpCmp { target: t, .. }
        | Ins::JumpCmpImm { target: t, .. } => Some(t),
        _ => None,
    }
}

/// Jumps to jumps go straight to the final target; a jump to a return returns.
fn thread_jumps(ins: &mut [Ins]) {
    for i in 0..ins.len() {
        let mut this = ins[i];
        let Some(t) = jump_target(&mut this) else {
            continue;
        };
        for _ in 0..ins.len() {
            match ins.get(*t as usize) {
                Some(Ins::Jump(next)) if *next != *t => *t = *next,
                _ => break,
            }
        }
        let to_return = matches!(ins.get(*t as usize), Some(Ins::Return));
        ins[i] = match this {
            Ins::Jump(_) if to_return => Ins::Return,
            other => other,
        };
    }
}

/// Fuses runs of [`Ins::ExecuteWord`] on the same cell group (same slab, same index slot,
/// no jump into the run, the index not overwritten inside it) into [`Ins::ExecuteGroup`].
fn group_word_actions(
    ins: &mut [Ins],
    entries: &[u32],
    actions: &[WordAction],
) -> Vec<(u16, u16, u64)> {
    let mut target = vec![false; ins.len() + 1];
    for e in entries {
        target[*e as usize] = true;
    }
    for i in ins.iter() {
        let mut this = *i;
        if let Some(t) = jump_target(&mut this) {
            if let Some(t) = target.get_mut(*t as usize) {
                *t = true;
            }
        }
    }
    let word = |i: &Ins| match *i {
        Ins::ExecuteWord {
            wa,
            index,
            out,
            mask,
        } => Some((wa, index, out, mask)),
        _ => None,
    };
    let mut members = Vec::new();
    let mut i = 0;
    while i < ins.len() {
        let Some((wa, index, out, mask)) = word(&ins[i]) else {
            i += 1;
            continue;
        };
        let slab = actions[wa as usize].slab;
        let mut run = vec![(wa, out, mask)];
        let mut last_out = out;
        let mut j = i + 1;
        while j < ins.len() && !target[j] && last_out != index {
            match word(&ins[j]) {
                Some((wa, idx, out, mask)) if idx == index && actions[wa as usize].slab == slab => {
                    run.push((wa, out, mask));
                    last_out = out;
                    j += 1;
                }
                _ => break,
            }
        }
        if run.len() > 1 && members.len() + run.len() < u16::MAX as usize {
            ins[i] = Ins::ExecuteGroup {
                first: members.len() as u16,
                count: run.len() as u16,
                index,
            };
            members.extend(run);
        }
        i = j;
    }
    members
}

/// One single-word register action on its cell; returns the output.
#[inline(always)]
fn word_step(wa: &WordAction, conds: &[CCond], cell: &mut u32, phv: &[u64; PHV_SLOTS]) -> u64 {
    let m = wa.word_mask;
    let lo = *cell & m;
    let outcome = match wa.cond {
        COND_NONE => false,
        COND_EQ => phv[wa.cond_slot as usize] as u32 & m == wa.cond_k,
        COND_NE => phv[wa.cond_slot as usize] as u32 & m != wa.cond_k,
        _ => conds[wa.cond_k as usize].test(phv, lo as u64, 0, m as u64),
    };
    let step = &wa.on[outcome as usize];
    let s = if step.phv {
        phv[step.slot as usize] as u32 & m
    } else {
        step.konst
    };
    let new = match step.op {
        WordOp::Keep => lo,
        WordOp::Set => s,
        WordOp::Add => lo.wrapping_add(s) & m,
        WordOp::Sub => lo.wrapping_sub(s) & m,
        WordOp::SatAdd => lo.saturating_add(s).min(m),
        WordOp::SatSub => lo.saturating_sub(s),
        WordOp::Min => lo.min(s),
        WordOp::Max => lo.max(s),
        WordOp::And => lo & s,
        WordOp::Or => lo | s,
        WordOp::Xor => lo ^ s,
    };
    if wa.writes {
        *cell = new;
    }
    ((lo & step.out_old) | (new & step.out_new) | step.out_konst) as u64
}

/// Calls `read` with every field `e` reads.
fn expr_fields(e: &Expr, read: &mut impl FnMut(FieldId)) {
    match e {
        Expr::Field(f) => read(*f),
        Expr::Const { .. } | Expr::IsValid(_) => {}
        Expr::Bin(_, a, b) | Expr::Cmp(_, a, b) | Expr::And(a, b) | Expr::Or(a, b) => {
            expr_fields(a, read);
            expr_fields(b, read);
        }
        Expr::Shl(a, _)
        | Expr::Shr(a, _)
        | Expr::Slice(a, _, _)
        | Expr::Cast(a, _)
        | Expr::Not(a) => expr_fields(a, read),
    }
}

/// The PHV fields a register action reads (condition and update operands).
fn salu_phv_operands(ra: &RegisterAction) -> impl Iterator<Item = FieldId> + '_ {
    ra.conditions
        .iter()
        .flat_map(|c| [Some(c.left), c.right.map(|r| r.1)])
        .chain(ra.updates.iter().flat_map(|u| [Some(u.a), Some(u.b)]))
        .flatten()
        .filter_map(|o| match o {
            SaluOperand::Phv(f) => Some(f),
            _ => None,
        })
}

/// The fields whose value at the start of a pass may be observed: read (by an expression,
/// a table key or selector, a register action operand, a hash input, a parser select) on
/// some path before every path to the read has written them, or read after the pass
/// (`read_at_end`: bridged, cloned and digest fields). Only these must be zero when a pass
/// starts (TNA/v1model user metadata is zero at the start of each pass); any other field
/// is written before anything reads it.
fn exposed_reads(program: &Program, body: &[Stmt], read_at_end: &[FieldId]) -> Vec<bool> {
    struct Walk<'a> {
        program: &'a Program,
        exposed: Vec<bool>,
    }
    impl Walk<'_> {
        fn read(&mut self, f: FieldId, w: &[bool]) {
            let i = f.0 as usize;
            if !w.get(i).copied().unwrap_or(false) {
                if let Some(e) = self.exposed.get_mut(i) {
                    *e = true;
                }
            }
        }
        fn expr(&mut self, e: &Expr, w: &[bool]) {
            expr_fields(e, &mut |f| self.read(f, w));
        }
        fn write(f: FieldId, w: &mut [bool]) {
            if let Some(x) = w.get_mut(f.0 as usize) {
                *x = true;
            }
        }
        /// Walks `body` from the definitely-written set `w`, leaving in `w` what every
        /// path through `body` writes.
        fn body(&mut self, body: &[Stmt], w: &mut Vec<bool>) {
            let program = self.program;
            for s in body {
                match s {
                    Stmt::Assign(dst, e) => {
                        self.expr(e, w);
                        Self::write(*dst, w);
                    }
                    Stmt::If(c, then, otherwise) => {
                        self.expr(c, w);
                        let mut a = w.clone();
                        self.body(then, &mut a);
                        let mut b = w.clone();
                        self.body(otherwise, &mut b);
                        for (x, (a, b)) in w.iter_mut().zip(a.iter().zip(&b)) {
                            *x = *a && *b;
                        }
                    }
                    Stmt::Apply(t) => {
                        let Some(table) = program.tables.get(t.0 as usize) else {
                            continue;
                        };
                        for (f, _) in &table.keys {
                            self.read(*f, w);
                        }
                        for f in &table.selector {
                            self.read(*f, w);
                        }
                        // One of the actions runs, its parameters written first (from
                        // the entry or the default action's data).
                        let mut all: Option<Vec<bool>> = None;
                        let actions = table.actions.iter().chain([&table.default_action.0]);
                        for a in actions {
                            let Some(action) = program.actions.get(a.0 as usize) else {
                                continue;
                            };
                            let mut aw = w.clone();
                            for p in &action.params {
                                Self::write(*p, &mut aw);
                            }
                            self.body(&action.body, &mut aw);
                            match &mut all {
                                None => all = Some(aw),
                                Some(all) => {
                                    for (x, y) in all.iter_mut().zip(&aw) {
                                        *x = *x && *y;
                                    }
                                }
                            }
                        }
                        if let Some(all) = all {
                            *w = all;
                        }
                    }
                    Stmt::Execute {
                        action,
                        index,
                        output,
                    } => {
                        self.expr(index, w);
                        if let Some(ra) = program.register_actions.get(action.0 as usize) {
                            for f in salu_phv_operands(ra) {
                                self.read(f, w);
                            }
                        }
                        if let Some(o) = output {
                            Self::write(*o, w);
                        }
                    }
                    Stmt::Hash(h, dst) => {
                        if let Some(unit) = program.hashes.get(h.0 as usize) {
                            for f in &unit.inputs {
                                self.read(*f, w);
                            }
                        }
                        Self::write(*dst, w);
                    }
                    Stmt::SetEgressPort(e) => self.expr(e, w),
                    Stmt::Digest(d) => {
                        if let Some(d) = program.digests.get(d.0 as usize) {
                            for f in &d.fields {
                                self.read(*f, w);
                            }
                        }
                    }
                    Stmt::SetValid(_)
                    | Stmt::SetInvalid(_)
                    | Stmt::SetMulticastGroup(_)
                    | Stmt::Drop
                    | Stmt::CloneToCpu => {}
                }
            }
        }
    }
    let n = program.fields.len();
    let mut walk = Walk {
        program,
        exposed: vec![false; n],
    };
    let mut w = vec![false; n];
    for s in &program.parser {
        if let Transition::Select { field, .. } = &s.transition {
            walk.read(*field, &w);
        }
    }
    walk.body(body, &mut w);
    for f in read_at_end {
        walk.read(*f, &w);
    }
    walk.exposed
}

/// Which PHV fields the program reads and which it writes.
fn field_use(program: &Program) -> (Vec<bool>, Vec<bool>) {
    fn expr(e: &Expr, read: &mut [bool]) {
        expr_fields(e, &mut |f| {
            if let Some(r) = read.get_mut(f.0 as usize) {
                *r = true;
            }
        });
    }
    let n = program.fields.len();
    let (mut read, mut written) = (vec![false; n], vec![false; n]);
    let mut note = |s: &Stmt| match s {
        Stmt::Assign(dst, e) => {
            written[dst.0 as usize] = true;
            expr(e, &mut read);
        }
        Stmt::If(c, _, _) => expr(c, &mut read),
        Stmt::Execute { index, output, .. } => {
            expr(index, &mut read);
            if let Some(o) = output {
                written[o.0 as usize] = true;
            }
        }
        Stmt::Hash(_, dst) => written[dst.0 as usize] = true,
        Stmt::SetEgressPort(e) => expr(e, &mut read),
        _ => {}
    };
    visit(&program.ingress, &mut note);
    visit(&program.egress, &mut note);
    for a in &program.actions {
        visit(&a.body, &mut note);
    }
    let mut mark = |f: FieldId| {
        if let Some(r) = read.get_mut(f.0 as usize) {
            *r = true;
        }
    };
    for ra in &program.register_actions {
        salu_phv_operands(ra).for_each(&mut mark);
    }
    for h in &program.hashes {
        h.inputs.iter().for_each(|f| mark(*f));
    }
    for t in &program.tables {
        t.keys.iter().for_each(|(f, _)| mark(*f));
    }
    for d in &program.digests {
        d.fields.iter().for_each(|f| mark(*f));
    }
    for s in &program.parser {
        if let Transition::Select { field, .. } = &s.transition {
            mark(*field);
        }
    }
    (read, written)
}

impl Code {
    fn compile(program: &Program) -> Result<Code, ModelError> {
        if program.headers.len() > MAX_HEADERS {
            return Err(program_error(format!(
                "{} headers; the model tracks at most {MAX_HEADERS}",
                program.headers.len()
            )));
        }
        if program.fields.len() >= NO_SLOT as usize {
            return Err(program_error(format!(
                "{} fields; the model allows {}",
                program.fields.len(),
                NO_SLOT - 1
            )));
        }
        let masks: Vec<u64> = program.fields.iter().map(|f| mask(f.width)).collect();
        let (read, written) = field_use(program);
        let mut field_header = vec![NO_HEADER; program.fields.len()];
        let mut headers = Vec::new();
        for (h, header) in program.headers.iter().enumerate() {
            let mut bit = 0u16;
            let mut fields = Vec::new();
            for f in &header.fields {
                let width = program.field(*f).width;
                field_header[f.0 as usize] = h as u8;
                let in_byte = bit % 8;
                let window = in_byte as u32 + width as u32 <= 64 && width > 0;
                fields.push(CField {
                    phv: f.0,
                    bit,
                    width,
                    byte: bit / 8,
                    shift: if window {
                        (64 - in_byte as u32 - width as u32) as u8
                    } else {
                        0
                    },
                    window,
                });
                bit += width as u16;
            }
            let used = |f: &&CField| read[f.phv as usize] || written[f.phv as usize];
            headers.push(CHeader {
                bytes: bit as usize / 8,
                parse: fields.iter().filter(used).copied().collect(),
                emit: fields
                    .iter()
                    .filter(|f| written[f.phv as usize])
                    .copied()
                    .collect(),
                fields,
            });
        }
        let mut c = Compiler {
            program,
            field_header,
            masks: masks.clone(),
            ins: Vec::new(),
            temp_base: program.fields.len(),
            next_temp: program.fields.len(),
            max_temp: program.fields.len(),
        };
        let ingress = c.ins.len() as u32;
        c.body(&program.ingress)?;
        c.ins.push(Ins::Return);
        let egress = c.ins.len() as u32;
        c.body(&program.egress)?;
        c.ins.push(Ins::Return);
        let mut action_start = Vec::new();
        let mut action_params = Vec::new();
        for a in &program.actions {
            action_start.push(c.ins.len() as u32);
            c.body(&a.body)?;
            c.ins.push(Ins::Return);
            action_params.push(
                a.params
                    .iter()
                    .map(|p| (p.0, mask(program.field(*p).width)))
                    .collect(),
            );
        }
        let tables = program
            .tables
            .iter()
            .map(|t| CTable {
                forwarding: t.forwarding,
                actions: t.actions.iter().map(|a| a.0).collect(),
                first_action: t.actions.first().map(|a| a.0),
                default_action: t.default_action.0 .0,
                default_params: t.default_action.1.clone(),
                keys: t
                    .keys
                    .iter()
                    .map(|(f, _)| (f.0, program.field(*f).width))
                    .collect(),
                all_exact: t.keys.iter().all(|(_, k)| *k == MatchKind::Exact),
                direct: t.keys.iter().all(|(_, k)| *k == MatchKind::Exact)
                    && t.actions
                        .iter()
                        .all(|a| program.actions[a.0 as usize].params.len() <= DIRECT_PARAMS),
            })
            .collect();
        let (registers, slabs) = layout_registers(program);
        let mut register_actions = Vec::new();
        for ra in &program.register_actions {
            let r = ra.register.0 as usize;
            let reg = &program.registers[r];
            let loc = registers[r];
            if ra.conditions.len() > MAX_SALU_CONDITIONS {
                return Err(program_error(format!(
                    "register action `{}` has {} conditions; the model allows {MAX_SALU_CONDITIONS}",
                    ra.name,
                    ra.conditions.len()
                )));
            }
            if ra.updates.len() >= NONE as usize || ra.outputs.len() >= NONE as usize {
                return Err(program_error(format!(
                    "register action `{}` has too many updates or outputs",
                    ra.name
                )));
            }
            if !reg.size.is_power_of_two() {
                return Err(program_error(format!(
                    "register `{}` has {} cells (not a power of two)",
                    reg.name, reg.size
                )));
            }
            // Per outcome: the last update of each word that covers it (later ones
            // overwrite earlier ones), and the first output that covers it.
            let mut outcomes = [Outcome {
                lo: NONE,
                hi: NONE,
                out: NONE,
            }; 1 << MAX_SALU_CONDITIONS];
            for (outcome, o) in outcomes.iter_mut().enumerate() {
                for (i, u) in ra.updates.iter().enumerate() {
                    if u.when.covers(outcome as u8) {
                        if u.word == Word::Hi {
                            o.hi = i as u8;
                        } else {
                            o.lo = i as u8;
                        }
                    }
                }
                o.out = ra
                    .outputs
                    .iter()
                    .position(|out| out.when.covers(outcome as u8))
                    .map_or(NONE, |i| i as u8);
            }
            register_actions.push(CRegisterAction {
                register: r as u16,
                slab: loc.slab,
                kind: loc.kind,
                base: loc.base,
                size_mask: reg.size as usize - 1,
                stride: loc.stride,
                offset: loc.offset,
                pair: reg.is_pair(),
                word_mask: mask(reg.word_width()),
                writes: !ra.updates.is_empty(),
                conditions: ra
                    .conditions
                    .iter()
                    .map(|k| {
                        let cmp = Cmp::new(k.cmp, reg.word_width());
                        CCond {
                            left: COperand::new(k.left),
                            right: k.right.map(|(sub, r)| (sub, COperand::new(r))),
                            cmp,
                            constant: cmp.norm((k.constant as u64) & mask(reg.word_width())),
                        }
                    })
                    .collect(),
                updates: ra
                    .updates
                    .iter()
                    .map(|u| CUpdate {
                        op: u.op,
                        a: COperand::new(u.a),
                        b: COperand::new(u.b),
                    })
                    .collect(),
                outputs: ra.outputs.iter().map(|o| o.value).collect(),
                outcomes,
            });
        }
        let mut word_conds = Vec::new();
        let word_actions: Vec<Option<WordAction>> = register_actions
            .iter()
            .map(|ra| word_action(ra, &slabs, &mut word_conds))
            .collect();
        let word_registers: Vec<u16> = register_actions
            .iter()
            .zip(&word_actions)
            .filter(|(_, wa)| wa.is_some())
            .map(|(ra, _)| ra.register)
            .collect();
        // Register actions with a single-word form run by the shorter path.
        let mut word_index = vec![NO_SLOT; word_actions.len()];
        let mut n = 0;
        for (i, wa) in word_actions.iter().enumerate() {
            if wa.is_some() {
                word_index[i] = n;
                n += 1;
            }
        }
        let mut ins = c.ins;
        for i in ins.iter_mut() {
            if let Ins::Execute {
                ra,
                index,
                out,
                mask,
            } = *i
            {
                if word_index[ra as usize] != NO_SLOT {
                    *i = Ins::ExecuteWord {
                        wa: word_index[ra as usize],
                        index,
                        out,
                        mask,
                    };
                }
            }
        }
        let mut hashes = Vec::new();
        for h in &program.hashes {
            let inputs: Vec<(u16, u8)> = h
                .inputs
                .iter()
                .map(|f| (f.0, program.field(*f).width / 8))
                .collect();
            let bytes: usize = inputs.iter().map(|(_, b)| *b as usize).sum();
            if bytes > MAX_HASH_BYTES {
                return Err(program_error(format!(
                    "hash `{}` hashes {bytes} bytes; the model allows {MAX_HASH_BYTES}",
                    h.name
                )));
            }
            hashes.push(CHash {
                inputs,
                mask: mask(h.width),
            });
        }
        let mut pfields = Vec::new();
        let mut header_fields = Vec::new();
        for h in &headers {
            let start = pfields.len();
            for f in &h.parse {
                pfields.push(PField {
                    phv: f.phv,
                    byte: f.byte,
                    bit: f.bit,
                    shift: if f.window { f.shift } else { NO_WINDOW },
                    width: f.width,
                });
            }
            header_fields.push((start, pfields.len()));
        }
        let too_big = || program_error("the parser is too large for the model".into());
        let small = |v: usize| u16::try_from(v).map_err(|_| too_big());
        let header_fields: Vec<(u16, u16)> = header_fields
            .into_iter()
            .map(|(a, b)| Ok((small(a)?, small(b)?)))
            .collect::<Result<_, ModelError>>()?;
        let mut pcases = Vec::new();
        let mut parser = Vec::new();
        for st in &program.parser {
            let header = st.extract.map_or(NO_HEADER, |h| h.0 as u8);
            let (fields, fields_end, bytes) = match st.extract {
                Some(h) => {
                    let (a, b) = header_fields[h.0 as usize];
                    (a, b, small(headers[h.0 as usize].bytes)?)
                }
                None => (0, 0, 0),
            };
            let cases = small(pcases.len())?;
            let (kind, select, next) = match &st.transition {
                Transition::Accept => (ACCEPT, 0, 0),
                Transition::Goto(t) => (GOTO, 0, small(*t)?),
                Transition::Select { field, cases } => {
                    for (v, t) in cases {
                        pcases.push((*v, t.map_or(Ok(NO_SLOT), small)?));
                    }
                    (SELECT, field.0, 0)
                }
            };
            parser.push(PState {
                header,
                kind,
                bytes,
                select,
                next,
                fields,
                fields_end,
                cases,
                cases_end: small(pcases.len())?,
            });
        }
        let mut meta_ranges: Vec<(usize, usize)> = Vec::new();
        for (i, f) in program.fields.iter().enumerate() {
            if matches!(
                f.owner,
                FieldOwner::Metadata { .. } | FieldOwner::ActionParam(_)
            ) {
                match meta_ranges.last_mut() {
                    Some((_, end)) if *end == i => *end = i + 1,
                    _ => meta_ranges.push((i, i + 1)),
                }
            }
        }
        let mut intrinsics = [(0u16, 0u64); Intrinsic::ALL.len()];
        for (i, which) in Intrinsic::ALL.iter().enumerate() {
            if *which as usize != i {
                return Err(program_error(
                    "Intrinsic::ALL is not in declaration order".into(),
                ));
            }
            let f = program.intrinsic(*which).0;
            intrinsics[i] = (f, masks.get(f as usize).copied().unwrap_or(0));
        }
        thread_jumps(&mut ins);
        let word_actions: Vec<WordAction> = word_actions.into_iter().flatten().collect();
        let mut entries = vec![ingress, egress];
        entries.extend(&action_start);
        let group_members = group_word_actions(&mut ins, &entries, &word_actions);
        // What a pass must find zeroed: its exposed reads among metadata and parameters.
        let digest_fields: Vec<FieldId> = program
            .digests
            .iter()
            .flat_map(|d| d.fields.iter().copied())
            .collect();
        let at_end_ingress: Vec<FieldId> = program
            .bridged_fields()
            .into_iter()
            .chain(program.cloned_fields())
            .chain(digest_fields)
            .collect();
        let exposed = |body: &[Stmt], at_end: &[FieldId]| {
            let reads = exposed_reads(program, body, at_end);
            let mut ranges: Vec<(usize, usize)> = Vec::new();
            for (start, end) in &meta_ranges {
                for i in (*start..*end).filter(|i| reads[*i]) {
                    match ranges.last_mut() {
                        Some((_, e)) if *e == i => *e = i + 1,
                        _ => ranges.push((i, i + 1)),
                    }
                }
            }
            ranges
        };
        let meta_exposed = [
            exposed(&program.ingress, &at_end_ingress),
            exposed(&program.egress, &program.cloned_fields()),
        ];
        Ok(Code {
            meta_exposed,
            masks: masks.clone(),
            ins,
            group_members,
            ingress,
            egress,
            action_start,
            action_params,
            tables,
            register_actions,
            word_actions,
            word_registers,
            word_conds,
            registers,
            regs_len: slab_bases(&slabs).1,
            hashes,
            headers,
            parser,
            pfields,
            pcases,
            header_fields,
            meta_ranges,
            digests: program
                .digests
                .iter()
                .map(|d| d.fields.iter().map(|f| f.0).collect())
                .collect(),
            bridged: program
                .bridged_fields()
                .iter()
                .map(|f| (f.0, masks[f.0 as usize]))
                .collect(),
            cloned: program
                .cloned_fields()
                .iter()
                .map(|f| (f.0, masks[f.0 as usize]))
                .collect(),
            bridge_packing: program
                .bridged_fields()
                .iter()
                .scan(0u32, |bit, f| {
                    let at = *bit;
                    *bit = bit.saturating_add(program.field(*f).width as u32);
                    Some((f.0, masks[f.0 as usize], at))
                })
                .collect(),
            intrinsics,
            native: None,
        })
    }

    fn intrinsic(&self, which: Intrinsic) -> (u16, u64) {
        self.intrinsics[which as usize]
    }
}

/// Compiled programs, shared by every model of the same `Arc<Program>` (a fabric of many
/// switches runs one or two programs; one copy of the code stays in cache).
static COMPILED: Mutex<Vec<(Weak<Program>, Arc<Code>)>> = Mutex::new(Vec::new());

fn compiled(program: &Arc<Program>) -> Result<Arc<Code>, ModelError> {
    if let Ok(mut cache) = COMPILED.lock() {
        cache.retain(|(p, _)| p.strong_count() > 0);
        if let Some((_, code)) = cache
            .iter()
            .find(|(p, _)| std::ptr::eq(p.as_ptr(), Arc::as_ptr(program)))
        {
            return Ok(Arc::clone(code));
        }
    }
    let mut code = Code::compile(program)?;
    code.native = native::lookup(&code);
    let code = Arc::new(code);
    if let Ok(mut cache) = COMPILED.lock() {
        cache.push((Arc::downgrade(program), Arc::clone(&code)));
    }
    Ok(code)
}

/// A PHV shared by the models of one program on one thread.
struct Scratch {
    code: Weak<Code>,
    phv: Box<[u64; PHV_SLOTS]>,
    /// Headers whose fields may be non-zero in `phv`.
    stale: u64,
    /// Which metadata may be non-zero in `phv` (`META_*`).
    meta: u8,
}

/// All metadata is zero.
const META_CLEAN: u8 = 0;
/// An ingress pass ran last: metadata it wrote may be non-zero.
const META_INGRESS: u8 = 1;
/// An egress pass ran last: metadata it wrote may be non-zero.
const META_EGRESS: u8 = 2;
/// Any metadata may be non-zero.
const META_ANY: u8 = 3;

/// Most programs a thread keeps a shared PHV for.
const MAX_SCRATCH: usize = 8;

thread_local! {
    static SCRATCH: RefCell<Vec<Scratch>> = const { RefCell::new(Vec::new()) };
}

fn new_phv() -> Box<[u64; PHV_SLOTS]> {
    match vec![0u64; PHV_SLOTS].into_boxed_slice().try_into() {
        Ok(phv) => phv,
        Err(_) => unreachable!("the vector has PHV_SLOTS elements"),
    }
}

/// 64-byte aligned words, so that an interleaved cell group never straddles two lines.
#[repr(align(64))]
#[derive(Clone, Copy, Debug, Default)]
struct Line([u32; 16]);

/// Register storage: the slabs of each kind one after another in one array (a slab of
/// words starts on a line), so that a register access goes straight to its cell, without
/// a per-slab descriptor to load first.
#[derive(Clone, Debug, Default)]
struct Regs {
    bytes: Vec<u8>,
    halves: Vec<u16>,
    words: Vec<Line>,
}

impl Regs {
    fn new(code: &Code) -> Regs {
        let [bytes, halves, words] = code.regs_len;
        Regs {
            bytes: vec![0; bytes],
            halves: vec![0; halves],
            words: vec![Line::default(); words.div_ceil(16)],
        }
    }

    #[inline(always)]
    fn get(&self, kind: SlabKind, w: usize) -> u64 {
        match kind {
            SlabKind::Bytes => self.bytes[w] as u64,
            SlabKind::Halves => self.halves[w] as u64,
            SlabKind::Words => self.words[w >> 4].0[w & 15] as u64,
        }
    }

    /// Stores the low bits of `value` (values always fit the register's width).
    #[inline(always)]
    fn set(&mut self, kind: SlabKind, w: usize, value: u64) {
        match kind {
            SlabKind::Bytes => self.bytes[w] = value as u8,
            SlabKind::Halves => self.halves[w] = value as u16,
            SlabKind::Words => self.words[w >> 4].0[w & 15] = value as u32,
        }
    }
}

/// Per-pass and persistent state of the interpreter. The fields a pass touches come first,
/// in declaration order (`repr(C)`): a switch's pass finds them in a few adjacent lines.
#[derive(Debug)]
#[repr(C)]
struct State {
    /// Header validity (bit per header).
    valid: u64,
    /// Headers the parser extracted this pass.
    parsed: u64,
    /// Headers whose fields were written (or made valid) this pass.
    dirty: u64,
    /// Headers whose PHV fields may be non-zero from an earlier pass.
    stale: u64,
    /// Headers made valid (all fields zeroed) by the program this pass.
    zeroed: u64,
    payload_offset: usize,
    /// Which metadata may be non-zero in `phv` (`META_*`).
    meta: u8,
    regs: Regs,
    /// Shared with other models while equal ([`intern_table`]); copied on write.
    tables: Arc<[Arc<TableState>]>,
    /// How many views exist (a register action checks its register's view only then).
    live_views: AtomicUsize,
    routed: Option<u16>,
    /// Whether the parser extracted headers in deparse (declaration) order.
    in_order: bool,
    /// A table changed since the tables were last shared.
    tables_changed: bool,
    routing: Routing,
    /// Byte offset of each extracted header in the input.
    offsets: [u32; MAX_HEADERS],
    /// Each register as the control plane reads it (`hi << 32 | lo`), built on demand by
    /// [`DataPlane::register_read_all`] and dropped when the data plane writes it.
    views: Vec<OnceLock<Vec<u64>>>,
    /// The PHV of a pass that cannot use the thread's shared one (a pass started inside
    /// another pass of the same program), made on first use.
    own_phv: Option<Box<PhvBuf>>,
}

struct PassCtx<'a> {
    packet: &'a [u8],
    clone_bytes: &'a mut Vec<u8>,
    digests: &'a mut Vec<DigestMessage>,
    forward: Forward,
    dropped: bool,
    clone: bool,
}

/// A header field at byte `offset` of the packet (the header fits): the big-endian 64-bit
/// word at its first byte shifted right by `shift`, or read bit by bit (`NO_WINDOW`, or
/// the word runs past the end of the packet).
#[inline(always)]
fn extract(packet: &[u8], offset: usize, byte: u16, bit: u16, shift: u8, width: u8) -> u64 {
    let at = offset + byte as usize;
    match packet.get(at..at + 8) {
        Some(b) if shift != NO_WINDOW => {
            let w = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            (w >> shift) & mask(width)
        }
        _ => read_bits(packet, offset * 8 + bit as usize, width),
    }
}

/// The big-endian 64-bit word at `at`, if the buffer holds it.
#[inline(always)]
fn window(buf: &[u8], at: usize) -> Option<u64> {
    buf.get(at..at + 8)
        .map(|b| u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
}

impl State {
    /// Runs `pass` with this thread's PHV for `code`'s program (shared by every model of the
    /// program, so it stays in cache however many switches take turns). The PHV is handed
    /// to the pass apart from the state, so that the emitted code knows the two do not
    /// alias and keeps PHV values in registers.
    fn with_phv<R>(
        &mut self,
        code: &Arc<Code>,
        pass: impl FnOnce(&mut State, &mut PhvBuf) -> R,
    ) -> R {
        let mut pass = Some(pass);
        let shared = SCRATCH.with(|scratch| {
            let Ok(mut scratch) = scratch.try_borrow_mut() else {
                return None;
            };
            let at = match scratch
                .iter()
                .position(|s| std::ptr::eq(s.code.as_ptr(), Arc::as_ptr(code)))
            {
                Some(at) => at,
                None => {
                    scratch.retain(|s| s.code.strong_count() > 0);
                    if scratch.len() >= MAX_SCRATCH {
                        scratch.remove(0);
                    }
                    scratch.push(Scratch {
                        code: Arc::downgrade(code),
                        phv: new_phv(),
                        stale: 0,
                        meta: META_CLEAN,
                    });
                    scratch.len() - 1
                }
            };
            let s = &mut scratch[at];
            self.stale = s.stale;
            // While the pass runs its fields count as stale (if the pass panics, they
            // stay so).
            s.stale = u64::MAX;
            self.meta = s.meta;
            s.meta = META_ANY;
            self.dirty = 0;
            let r = pass.take().map(|pass| pass(self, &mut s.phv));
            s.stale = self.stale | self.dirty;
            s.meta = self.meta;
            r
        });
        match (shared, pass) {
            (Some(r), _) => r,
            (None, Some(pass)) => {
                // This model's own PHV, as another pass (or none) left it.
                self.stale = u64::MAX;
                self.meta = META_ANY;
                self.dirty = 0;
                let mut own = std::mem::take(&mut self.own_phv);
                let phv = own.get_or_insert_with(new_phv);
                let r = pass(self, phv);
                self.own_phv = own;
                r
            }
            (None, None) => unreachable!("the pass ran with the shared PHV"),
        }
    }

    /// Starts a pass: no header is valid. The interpreter (`emitted` false) also makes the
    /// metadata and action parameters the pass may read before writing
    /// ([`Code::meta_exposed`] of `gress`, 0 ingress, 1 egress) read as zero, and gives
    /// every other metadata field an all-ones value, so a read the analysis missed changes
    /// the interpreter's result and the differential test fails; the emitted pass clears
    /// the same ranges itself, with constant bounds.
    fn reset(&mut self, code: &Code, gress: usize, emitted: bool, phv: &mut PhvBuf) {
        self.stale |= self.dirty;
        if !emitted {
            for (start, end) in &code.meta_ranges {
                phv[*start..*end].copy_from_slice(&code.masks[*start..*end]);
            }
            for (start, end) in &code.meta_exposed[gress] {
                phv[*start..*end].fill(0);
            }
            self.meta = META_ANY;
        }
        self.valid = 0;
        self.parsed = 0;
        self.dirty = 0;
        self.zeroed = 0;
        self.in_order = true;
    }

    fn parse(&mut self, code: &Code, packet: &[u8], phv: &mut PhvBuf) {
        let mut state = 0usize;
        let mut offset = 0usize;
        let mut last: i32 = -1;
        while let Some(s) = code.parser.get(state) {
            if s.header != NO_HEADER {
                let h = s.header as usize;
                if offset + s.bytes as usize > packet.len() {
                    break;
                }
                for f in &code.pfields[s.fields as usize..s.fields_end as usize] {
                    phv[f.phv as usize] = extract(packet, offset, f.byte, f.bit, f.shift, f.width);
                }
                self.extracted(h, offset, &mut last);
                offset += s.bytes as usize;
            }
            match s.kind {
                GOTO => state = s.next as usize,
                SELECT => {
                    let v = phv[s.select as usize];
                    match code.pcases[s.cases as usize..s.cases_end as usize]
                        .iter()
                        .find(|(c, _)| *c == v)
                    {
                        Some((_, t)) if *t != NO_SLOT => state = *t as usize,
                        _ => break,
                    }
                }
                _ => break,
            }
        }
        self.parse_done(code, offset, phv);
    }

    /// Header `h` was extracted at byte `offset`; `last` is the previous header extracted.
    #[inline(always)]
    fn extracted(&mut self, h: usize, offset: usize, last: &mut i32) {
        self.valid |= 1 << h;
        self.parsed |= 1 << h;
        self.offsets[h] = offset as u32;
        if (h as i32) < *last {
            self.in_order = false;
        }
        *last = h as i32;
    }

    /// The parser stopped at byte `offset`.
    #[inline(always)]
    fn parse_done(&mut self, code: &Code, offset: usize, phv: &mut PhvBuf) {
        self.payload_offset = offset;
        // Fields of headers not extracted now read as zero, as after a fresh reset. A
        // switch mostly sees the header stack of its previous pass again: nothing to clear.
        let stale = self.stale & !self.parsed;
        if stale != 0 {
            self.clear_unparsed(code, stale, phv);
        }
        self.stale = self.parsed;
    }

    /// Zeroes the fields of the headers in `stale` (set by an earlier pass, not extracted
    /// by this one).
    #[inline(never)]
    fn clear_unparsed(&mut self, code: &Code, mut stale: u64, phv: &mut PhvBuf) {
        while stale != 0 {
            let h = stale.trailing_zeros() as usize;
            stale &= stale - 1;
            let (a, b) = code.header_fields[h];
            for f in &code.pfields[a as usize..b as usize] {
                phv[f.phv as usize] = 0;
            }
        }
    }

    /// Writes `fields` (of a header at byte `base`) from the PHV into `out`.
    fn emit_fields(&self, fields: &[CField], out: &mut [u8], base: usize, phv: &PhvBuf) {
        for f in fields {
            write_bits(out, base * 8 + f.bit as usize, f.width, phv[f.phv as usize]);
        }
    }

    /// Shares each table, and the set of them, with the models that have the same entries.
    #[cold]
    fn share_tables(&mut self) {
        let tables: Vec<Arc<TableState>> = self
            .tables
            .iter()
            .map(|t| intern_table(Arc::clone(t)))
            .collect();
        self.tables = intern_table_set(tables);
        self.tables_changed = false;
    }

    /// Whether the deparser would emit the input packet as it is: the valid headers are
    /// the parsed ones, in order, and none was written.
    #[inline(always)]
    fn unchanged(&self) -> bool {
        self.valid == self.parsed && self.in_order && self.dirty & self.valid == 0
    }

    /// Writes the packet as the deparser emits it. A parsed header starts from its input
    /// bytes and gets the fields the program writes re-emitted if it was written; a header
    /// the program made valid is emitted whole. When the valid headers are the parsed ones
    /// (in order), the output is a copy of the input with the written headers patched.
    fn deparse(&self, code: &Code, packet: &[u8], out: &mut Vec<u8>, phv: &PhvBuf) {
        out.clear();
        if self.valid == self.parsed && self.in_order {
            out.extend_from_slice(packet);
            let mut dirty = self.dirty & self.valid;
            while dirty != 0 {
                let h = dirty.trailing_zeros() as usize;
                dirty &= dirty - 1;
                let header = &code.headers[h];
                let fields = if self.zeroed & (1 << h) != 0 {
                    &header.fields
                } else {
                    &header.emit
                };
                self.emit_fields(fields, out, self.offsets[h] as usize, phv);
            }
            return;
        }
        for (h, header) in code.headers.iter().enumerate() {
            let bit = 1 << h;
            if self.valid & bit == 0 {
                continue;
            }
            let start = out.len();
            if self.parsed & !self.zeroed & bit != 0 {
                let at = self.offsets[h] as usize;
                out.extend_from_slice(&packet[at..at + header.bytes]);
                if self.dirty & bit != 0 {
                    self.emit_fields(&header.emit, out, start, phv);
                }
            } else {
                out.resize(start + header.bytes, 0);
                self.emit_fields(&header.fields, out, start, phv);
            }
        }
        if self.payload_offset < packet.len() {
            out.extend_from_slice(&packet[self.payload_offset..]);
        }
    }

    /// One TNA RegisterAction: conditions, predicated updates, one output.
    fn execute(&mut self, code: &Code, ra: u16, index: u64, phv: &PhvBuf) -> u64 {
        let ra = &code.register_actions[ra as usize];
        // Registers are powers of two; masking the index is the hardware's behaviour.
        let w = ra.base + ((index as usize) & ra.size_mask) * ra.stride + ra.offset;
        let lo = self.regs.get(ra.kind, w);
        let hi = if ra.pair {
            self.regs.get(ra.kind, w + 1)
        } else {
            0
        };
        let m = ra.word_mask;
        let mut outcome = 0usize;
        for (i, c) in ra.conditions.iter().enumerate() {
            if c.test(phv, lo, hi, m) {
                outcome |= 1 << i;
            }
        }
        let o = ra.outcomes[outcome];
        let update = |u: u8| ra.updates[u as usize].apply(phv, lo, hi, m);
        let new_lo = if o.lo == NONE { lo } else { update(o.lo) };
        let new_hi = if o.hi == NONE { hi } else { update(o.hi) };
        if ra.writes {
            self.regs.set(ra.kind, w, new_lo);
            if ra.pair {
                self.regs.set(ra.kind, w + 1, new_hi);
            }
            if *self.live_views.get_mut() != 0 {
                self.drop_view(ra.register as usize);
            }
        }
        if o.out == NONE {
            return 0;
        }
        match ra.outputs[o.out as usize] {
            SaluOutputValue::Old(Word::Lo) => lo,
            SaluOutputValue::Old(Word::Hi) => hi,
            SaluOutputValue::New(Word::Lo) => new_lo,
            SaluOutputValue::New(Word::Hi) => new_hi,
            SaluOutputValue::Const(c) => c,
        }
    }

    /// A [`WordAction`] on word `w` of its slab (emitted code passes a constant action).
    #[inline(always)]
    fn word_at(&mut self, code: &Code, a: &WordAction, w: usize, phv: &PhvBuf) -> u64 {
        let w = a.base as usize + w;
        let cell = &mut self.regs.words[w >> 4].0[w & 15];
        word_step(a, &code.word_conds, cell, phv)
    }

    /// Drops every control-plane view: a pass is about to run and may write any register
    /// (emitted code then needs no check per register write).
    #[cold]
    fn drop_views(&mut self) {
        for v in self.views.iter_mut() {
            v.take();
        }
        *self.live_views.get_mut() = 0;
    }

    /// A register action in its [`WordAction`] form.
    #[inline(always)]
    fn execute_word(&mut self, code: &Code, wa: u16, index: u64, phv: &PhvBuf) -> u64 {
        let a = &code.word_actions[wa as usize];
        let w = a.base as usize
            + ((index as usize) & a.size_mask as usize) * a.stride as usize
            + a.offset as usize;
        let cell = &mut self.regs.words[w >> 4].0[w & 15];
        let value = word_step(a, &code.word_conds, cell, phv);
        if a.writes && *self.live_views.get_mut() != 0 {
            self.drop_view(code.word_registers[wa as usize] as usize);
        }
        value
    }

    /// The word actions of an [`Ins::ExecuteGroup`]: one cell group, one address.
    fn execute_group(
        &mut self,
        code: &Code,
        members: &[(u16, u16, u64)],
        index: u64,
        phv: &mut PhvBuf,
    ) {
        let Some(&(first, _, _)) = members.first() else {
            return;
        };
        let first = &code.word_actions[first as usize];
        let base = first.base as usize
            + ((index as usize) & first.size_mask as usize) * first.stride as usize;
        let lines = &mut self.regs.words;
        for &(wa, out, mask) in members {
            let wa = &code.word_actions[wa as usize];
            let w = base + wa.offset as usize;
            let value = word_step(wa, &code.word_conds, &mut lines[w >> 4].0[w & 15], phv);
            if out != NO_SLOT {
                phv[out as usize] = value & mask;
            }
        }
        if *self.live_views.get_mut() != 0 {
            for &(wa, _, _) in members {
                if code.word_actions[wa as usize].writes {
                    self.drop_view(code.word_registers[wa as usize] as usize);
                }
            }
        }
    }

    fn hash(&self, code: &Code, unit: u16, phv: &PhvBuf) -> u64 {
        let h = &code.hashes[unit as usize];
        hash_inputs(phv, &h.inputs, h.mask)
    }

    fn set_params(&mut self, code: &Code, action: u16, args: &[u64], phv: &mut PhvBuf) {
        for ((p, m), v) in code.action_params[action as usize].iter().zip(args) {
            phv[*p as usize] = v & m;
        }
    }

    /// The direct entry of table `t` for `key` (emitted code only): `None` beyond the direct
    /// array (the generic [`State::select`] then looks the key up), an entry whose action
    /// is `NO_SLOT` where no entry is installed (the default action applies).
    #[inline(always)]
    fn direct_entry(&self, t: u16, key: u64) -> Option<Direct> {
        let direct = &self.tables[t as usize].direct;
        usize::try_from(key)
            .ok()
            .and_then(|k| direct.get(k))
            .copied()
    }

    /// Whether this model takes the forwarding table's result from its input (emitted
    /// code: the table is then not looked up), and the routed port if there is one.
    #[inline(always)]
    fn routed_from_input(&self) -> Option<Option<u16>> {
        (self.routing == Routing::FromInput).then_some(self.routed)
    }

    /// Looks `t` up: sets the chosen action's parameters and returns the action.
    fn select(&mut self, code: &Code, t: u16, phv: &mut PhvBuf) -> u16 {
        let table = &code.tables[t as usize];
        if table.forwarding && self.routing == Routing::FromInput {
            if let (Some(port), Some(action)) = (self.routed, table.first_action) {
                if let Some((p, m)) = code.action_params[action as usize].first() {
                    phv[*p as usize] = port as u64 & m;
                }
                return action;
            }
            self.set_params(code, table.default_action, &table.default_params, phv);
            return table.default_action;
        }
        let mut key: u128 = 0;
        for (f, w) in &table.keys {
            key = (key << w) | phv[*f as usize] as u128;
        }
        let state = &self.tables[t as usize];
        if key < state.direct.len() as u128 {
            let d = state.direct[key as usize];
            if d.action == NO_SLOT {
                self.set_params(code, table.default_action, &table.default_params, phv);
                return table.default_action;
            }
            for ((p, m), v) in code.action_params[d.action as usize].iter().zip(d.params) {
                phv[*p as usize] = v & m;
            }
            return d.action;
        }
        let hit = if table.all_exact {
            state.exact.get(&key).map(|(a, p)| (a.0, p))
        } else {
            state
                .ternary
                .iter()
                .find(|(v, m, _, _, _)| key & m == *v & m)
                .map(|(_, _, _, a, p)| (a.0, p))
        };
        match hit {
            Some((a, params)) => {
                for ((p, m), v) in code.action_params[a as usize].iter().zip(params) {
                    phv[*p as usize] = v & m;
                }
                a
            }
            None => {
                self.set_params(code, table.default_action, &table.default_params, phv);
                table.default_action
            }
        }
    }

    fn run(&mut self, code: &Code, start: u32, ctx: &mut PassCtx, phv: &mut PhvBuf) {
        let mut pc = start as usize;
        while let Some(ins) = code.ins.get(pc) {
            pc += 1;
            match *ins {
                Ins::Mov { dst, src, mask } => {
                    phv[dst as usize] = phv[src as usize] & mask;
                }
                Ins::Imm { dst, value } => phv[dst as usize] = value,
                Ins::Bin {
                    op,
                    dst,
                    a,
                    b,
                    mask,
                } => {
                    phv[dst as usize] = bin(op, phv[a as usize], phv[b as usize], mask);
                }
                Ins::BinImm {
                    op,
                    dst,
                    a,
                    b,
                    mask,
                } => {
                    phv[dst as usize] = bin(op, phv[a as usize], b, mask);
                }
                Ins::Shl { dst, a, n, mask } => {
                    phv[dst as usize] = phv[a as usize].wrapping_shl(n as u32) & mask;
                }
                Ins::Shr { dst, a, n, mask } => {
                    phv[dst as usize] = phv[a as usize].wrapping_shr(n as u32) & mask;
                }
                Ins::ShlOr { dst, a, n, b, mask } => {
                    phv[dst as usize] =
                        (phv[a as usize].wrapping_shl(n as u32) | phv[b as usize]) & mask;
                }
                Ins::JumpCmp { cmp, a, b, target } => {
                    if cmp.test(phv[a as usize], cmp.norm(phv[b as usize])) {
                        pc = target as usize;
                    }
                }
                Ins::JumpCmpImm { cmp, a, b, target } => {
                    if cmp.test(phv[a as usize], b) {
                        pc = target as usize;
                    }
                }
                Ins::JumpValid(h, target) => {
                    if self.valid & (1 << h) != 0 {
                        pc = target as usize;
                    }
                }
                Ins::JumpInvalid(h, target) => {
                    if self.valid & (1 << h) == 0 {
                        pc = target as usize;
                    }
                }
                Ins::Jump(target) => pc = target as usize,
                Ins::Dirty(h) => self.dirty |= 1 << h,
                Ins::Execute {
                    ra,
                    index,
                    out,
                    mask,
                } => {
                    let v = self.execute(code, ra, phv[index as usize], phv);
                    if out != NO_SLOT {
                        phv[out as usize] = v & mask;
                    }
                }
                Ins::ExecuteGroup {
                    first,
                    count,
                    index,
                } => {
                    let members = &code.group_members[first as usize..][..count as usize];
                    self.execute_group(code, members, phv[index as usize], phv);
                    pc += count as usize - 1;
                }
                Ins::CondSet {
                    cmp,
                    a,
                    b,
                    dst,
                    value,
                } => {
                    if cmp.test(phv[a as usize], cmp.norm(phv[b as usize])) {
                        phv[dst as usize] = value;
                    }
                }
                Ins::CondSetImm {
                    cmp,
                    a,
                    dst,
                    b,
                    value,
                } => {
                    if cmp.test(phv[a as usize], b) {
                        phv[dst as usize] = value;
                    }
                }
                Ins::ExecuteWord {
                    wa,
                    index,
                    out,
                    mask,
                } => {
                    let v = self.execute_word(code, wa, phv[index as usize], phv);
                    if out != NO_SLOT {
                        phv[out as usize] = v & mask;
                    }
                }
                Ins::Hash { unit, dst, mask } => {
                    phv[dst as usize] = self.hash(code, unit, phv) & mask;
                }
                Ins::SetValid(h) => self.set_valid(code, h, phv),
                Ins::SetInvalid(h) => self.valid &= !(1 << h),
                Ins::Unicast(port) => {
                    ctx.forward = Forward::Unicast(phv[port as usize] as u16);
                }
                Ins::Multicast(g) => ctx.forward = Forward::Multicast(g),
                Ins::Drop => ctx.dropped = true,
                Ins::Clone => {
                    // The copy is taken here; in ingress the rule checker guarantees that no
                    // header was rewritten before this point.
                    ctx.clone = true;
                    self.deparse(code, ctx.packet, ctx.clone_bytes, phv);
                }
                // The values are filled in at the end of the pass (the deparser sends
                // the digest with the fields' final values).
                Ins::Digest(d) => ctx.digests.push(DigestMessage {
                    digest: DigestId(d),
                    values: Vec::new(),
                }),
                Ins::Apply(t) => {
                    let action = self.select(code, t, phv);
                    self.run(code, code.action_start[action as usize], ctx, phv);
                }
                Ins::Return => return,
            }
        }
    }

    fn set_valid(&mut self, code: &Code, h: u8, phv: &mut PhvBuf) {
        if self.valid & (1 << h) == 0 {
            self.valid |= 1 << h;
            self.dirty |= 1 << h;
            self.zeroed |= 1 << h;
            self.stale |= 1 << h;
            for f in &code.headers[h as usize].fields {
                phv[f.phv as usize] = 0;
            }
        }
    }

    /// Fills `c` (which holds the default) with the values of `fields`.
    fn carry_into(&self, fields: &[(u16, u64)], c: &mut Carried, phv: &PhvBuf) {
        for (v, (f, _)) in c.values.iter_mut().zip(fields) {
            *v = phv[*f as usize];
        }
    }

    fn carry(&self, fields: &[(u16, u64)], phv: &PhvBuf) -> Carried {
        let mut c = Carried::default();
        self.carry_into(fields, &mut c, phv);
        c
    }

    /// Restores what ingress carried in a [`Carried`]: a clone's cloned fields, or a
    /// normal packet's bridged ones.
    fn restore_carried(&mut self, code: &Code, carried: &Carried, phv: &mut PhvBuf) {
        let fields = if carried.clone_kind != 0 {
            &code.cloned
        } else {
            &code.bridged
        };
        self.restore(fields, carried, phv);
    }

    fn restore(&mut self, fields: &[(u16, u64)], carried: &Carried, phv: &mut PhvBuf) {
        for (v, (f, m)) in carried.values.iter().zip(fields) {
            phv[*f as usize] = v & m;
        }
    }

    #[inline(always)]
    fn set_intrinsic(&mut self, code: &Code, which: Intrinsic, value: u64, phv: &mut PhvBuf) {
        let (f, m) = code.intrinsic(which);
        phv[f as usize] = value & m;
    }

    /// Drops the control-plane view of register `r` (its cells changed).
    fn drop_view(&mut self, r: usize) {
        if self.views[r].take().is_some() {
            *self.live_views.get_mut() -= 1;
        }
    }

    /// The control-plane view of register `r`, built if needed.
    fn view(&self, code: &Code, r: usize) -> &[u64] {
        let loc = &code.registers[r];
        self.views[r].get_or_init(|| {
            self.live_views.fetch_add(1, Ordering::Relaxed);
            (0..loc.size).map(|i| self.cell(loc, i)).collect()
        })
    }

    /// A register cell as the control plane sees it (`hi << 32 | lo` for pairs).
    fn cell(&self, loc: &RegLoc, index: usize) -> u64 {
        let w = loc.base + index * loc.stride + loc.offset;
        if loc.pair {
            (self.regs.get(loc.kind, w + 1) << 32) | self.regs.get(loc.kind, w)
        } else {
            self.regs.get(loc.kind, w)
        }
    }
}

/// The CRC-32 byte table of [`crate::hash::crc32`] extended for eight bytes per step
/// (`T[k][x]` is the CRC of byte `x` followed by `k` zero bytes). The hashed keys are 4 to
/// 12 bytes: one or two steps whose table loads are independent, instead of a chain of
/// one dependent load per byte.
const fn crc_slice_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    t[0] = crate::hash::table();
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

static CRC_SLICES: [[u32; 256]; 8] = crc_slice_tables();

/// Eight message bytes through the slicing-by-8 tables: `lo` (the first four, little-endian,
/// already xor'ed with the running CRC) and `hi` (the next four).
#[inline(always)]
fn crc_slice8(lo: u32, hi: u32) -> u32 {
    let t = &CRC_SLICES;
    t[7][(lo & 0xFF) as usize]
        ^ t[6][((lo >> 8) & 0xFF) as usize]
        ^ t[5][((lo >> 16) & 0xFF) as usize]
        ^ t[4][(lo >> 24) as usize]
        ^ t[3][(hi & 0xFF) as usize]
        ^ t[2][((hi >> 8) & 0xFF) as usize]
        ^ t[1][((hi >> 16) & 0xFF) as usize]
        ^ t[0][(hi >> 24) as usize]
}

/// Four message bytes (little-endian, xor'ed with the running CRC) through the tables.
#[inline(always)]
fn crc_slice4(x: u32) -> u32 {
    let t = &CRC_SLICES;
    t[3][(x & 0xFF) as usize]
        ^ t[2][((x >> 8) & 0xFF) as usize]
        ^ t[1][((x >> 16) & 0xFF) as usize]
        ^ t[0][(x >> 24) as usize]
}

/// The CRC-32 of [`crate::hash::crc32`].
#[inline(always)]
fn crc32_fast(bytes: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    let mut chunks = bytes.chunks_exact(8);
    for b in &mut chunks {
        let lo = c ^ u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let hi = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        c = crc_slice8(lo, hi);
    }
    let mut rest = chunks.remainder();
    if let [b0, b1, b2, b3, tail @ ..] = rest {
        c = crc_slice4(c ^ u32::from_le_bytes([*b0, *b1, *b2, *b3]));
        rest = tail;
    }
    for b in rest {
        c = CRC_SLICES[0][((c ^ *b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

/// The CRC-32 of the `(PHV slot, bytes)` inputs, big-endian one after another, masked
/// with `mask`. Emitted code passes the unit's inputs as a constant, so the whole hash
/// unrolls.
#[inline(always)]
fn hash_inputs(phv: &PhvBuf, inputs: &[(u16, u8)], mask: u64) -> u64 {
    let total: usize = inputs.iter().map(|(_, b)| (*b as usize).min(8)).sum();
    if total <= 16 {
        // The inputs one after another in a 128-bit register: no stores and loads of
        // different widths (which stall store forwarding) on the packet's path.
        let mut acc = 0u128;
        for (f, bytes) in inputs {
            let bits = 8 * (*bytes as u32).min(8);
            if bits > 0 {
                let v = phv[*f as usize] as u128 & ((1u128 << bits) - 1);
                acc = acc << bits | v;
            }
        }
        return (crc32_u128(acc, total) as u64) & mask;
    }
    // Each input is stored as a whole big-endian word whose tail the next input
    // overwrites (fixed-size stores).
    let mut buf = [0u8; MAX_HASH_BYTES + 8];
    let mut n = 0;
    for (f, bytes) in inputs {
        let b = (*bytes as usize).min(8);
        if b > 0 {
            let v = phv[*f as usize] << (64 - 8 * b as u32);
            buf[n..n + 8].copy_from_slice(&v.to_be_bytes());
            n += b;
        }
    }
    (crc32_fast(&buf[..n]) as u64) & mask
}

/// The CRC-32 of [`crate::hash::crc32`] over the `n` (≤ 16) low bytes of `acc`, most
/// significant first: [`crc32_fast`] with the bytes taken from a register.
#[inline(always)]
fn crc32_u128(acc: u128, n: usize) -> u32 {
    // The message's first byte at the top.
    let mut m = if n == 0 { 0 } else { acc << (8 * (16 - n)) };
    let mut c = 0xFFFF_FFFFu32;
    let mut left = n;
    while left >= 8 {
        let lo = ((m >> 96) as u32).swap_bytes();
        let hi = ((m >> 64) as u32).swap_bytes();
        c = crc_slice8(c ^ lo, hi);
        m <<= 64;
        left -= 8;
    }
    if left >= 4 {
        c = crc_slice4(c ^ ((m >> 96) as u32).swap_bytes());
        m <<= 32;
        left -= 4;
    }
    for _ in 0..left {
        c = CRC_SLICES[0][((c ^ (m >> 120) as u32) & 0xFF) as usize] ^ (c >> 8);
        m <<= 8;
    }
    c ^ 0xFFFF_FFFF
}

/// The Rust source of the native back end for `variants` (name, program): the file
/// `dataplane/src/model/generated.rs` that `hawkmesh-codegen --write` writes.
pub fn emit_native(variants: &[(&str, &Program)]) -> Result<String, ModelError> {
    native::emit(variants)
}

/// The interpreter: the program compiled once (see the module docs), then run per packet
/// without allocation.
#[derive(Debug)]
#[repr(C)]
pub struct Model {
    // What a pass touches first (see [`State`]).
    code: Arc<Code>,
    /// The emitted variant the passes run, `None` for the interpreter (no variant, or the
    /// differential tests run the interpreter on purpose).
    native: Option<&'static native::Native>,
    st: State,
    program: Arc<Program>,
    groups: HashMap<u16, Vec<u16>>,
    cpu_port: u16,
    scratch: [PassOutput; 2],
}

fn mask(width: u8) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// Reads `width` bits (big-endian, at most 64) from `buf` at `bit_offset`.
#[inline]
pub fn read_bits(buf: &[u8], bit_offset: usize, width: u8) -> u64 {
    let first = bit_offset / 8;
    let in_byte = bit_offset % 8;
    let span = in_byte + width as usize;
    if span <= 8 && width > 0 {
        // Within one byte.
        return (buf[first] as u64 >> (8 - span)) & mask(width);
    }
    if span <= 64 && width > 0 {
        if let Some(w) = window(buf, first) {
            return (w >> (64 - in_byte - width as usize)) & mask(width);
        }
    }
    if in_byte == 0 && width % 8 == 0 {
        // Byte-aligned fields near the end of the buffer: a plain big-endian read.
        let n = width as usize / 8;
        let mut v = 0u64;
        for b in &buf[first..first + n] {
            v = (v << 8) | *b as u64;
        }
        return v;
    }
    let mut v: u128 = 0;
    let last = (bit_offset + width as usize - 1) / 8;
    for b in &buf[first..=last] {
        v = (v << 8) | *b as u128;
    }
    let trailing = (last + 1) * 8 - (bit_offset + width as usize);
    ((v >> trailing) as u64) & mask(width)
}

/// Writes `value` into `width` bits at `bit_offset` (big-endian). Only the bytes the field
/// covers are touched (no wide read-modify-write of neighbouring bytes that were just
/// written, which would stall on store forwarding); whole-byte fields are plain stores.
#[inline(always)]
pub fn write_bits(buf: &mut [u8], bit_offset: usize, width: u8, value: u64) {
    let at = bit_offset / 8;
    if bit_offset % 8 == 0 {
        match width {
            8 => {
                buf[at] = value as u8;
                return;
            }
            16 => {
                buf[at..at + 2].copy_from_slice(&(value as u16).to_be_bytes());
                return;
            }
            32 => {
                buf[at..at + 4].copy_from_slice(&(value as u32).to_be_bytes());
                return;
            }
            24 => {
                buf[at..at + 3].copy_from_slice(&(value as u32).to_be_bytes()[1..]);
                return;
            }
            48 => {
                buf[at..at + 6].copy_from_slice(&value.to_be_bytes()[2..]);
                return;
            }
            64 => {
                buf[at..at + 8].copy_from_slice(&value.to_be_bytes());
                return;
            }
            _ => {}
        }
    }
    write_bits_masked(buf, bit_offset, width, value);
}

/// [`write_bits`] for fields that do not cover whole bytes: read-modify-write of the bytes
/// they cover.
#[inline(never)]
fn write_bits_masked(buf: &mut [u8], bit_offset: usize, width: u8, value: u64) {
    if width == 0 {
        return;
    }
    let first = bit_offset / 8;
    let span = bit_offset % 8 + width as usize;
    if span <= 8 {
        // Within one byte.
        let shift = 8 - span;
        let m = (mask(width) << shift) as u8;
        buf[first] = (buf[first] & !m) | ((value << shift) as u8 & m);
        return;
    }
    write_bits_spanning(buf, bit_offset, width, value);
}

/// [`write_bits_masked`] for fields over several bytes.
#[inline(never)]
fn write_bits_spanning(buf: &mut [u8], bit_offset: usize, width: u8, value: u64) {
    let first = bit_offset / 8;
    let end = bit_offset + width as usize;
    let last = (end - 1) / 8;
    let bytes = &mut buf[first..=last];
    let n = bytes.len();
    let trailing = (last + 1) * 8 - end;
    let m = (mask(width) as u128) << trailing;
    let v = ((value & mask(width)) as u128) << trailing;
    for (i, b) in bytes.iter_mut().enumerate() {
        let shift = 8 * (n - 1 - i);
        let bm = (m >> shift) as u8;
        let bv = (v >> shift) as u8;
        *b = (*b & !bm) | bv;
    }
}

impl Model {
    /// A model of `program` with empty registers and tables. The program is compiled into
    /// a flat instruction list here (once per `Arc<Program>`: models of the same program
    /// share the code); a program the model cannot run (more than [`MAX_CARRIED`] bridged
    /// fields, 64 headers, register sizes that are not powers of two) is an error.
    pub fn new(program: Arc<Program>, routing: Routing, cpu_port: u16) -> Result<Self, ModelError> {
        let code = compiled(&program)?;
        if code.bridged.len() > MAX_CARRIED || code.cloned.len() > MAX_CARRIED {
            return Err(program_error(format!(
                "more than {MAX_CARRIED} bridged or cloned fields"
            )));
        }
        let st = State {
            own_phv: None,
            valid: 0,
            parsed: 0,
            dirty: 0,
            stale: 0,
            zeroed: 0,
            meta: META_ANY,
            offsets: [0; MAX_HEADERS],
            in_order: true,
            payload_offset: 0,
            regs: Regs::new(&code),
            views: (0..program.registers.len())
                .map(|_| OnceLock::new())
                .collect(),
            live_views: AtomicUsize::new(0),
            tables: code
                .tables
                .iter()
                .zip(&program.tables)
                .map(|(c, t)| {
                    Arc::new(TableState {
                        direct: if c.direct {
                            let bits: u32 = t
                                .keys
                                .iter()
                                .map(|(f, _)| program.field(*f).width as u32)
                                .sum();
                            let keys = (1u128 << bits.min(64)).min(DIRECT_KEYS);
                            vec![NO_DIRECT; keys as usize]
                        } else {
                            Vec::new()
                        },
                        ..TableState::default()
                    })
                })
                .collect::<Vec<_>>()
                .into(),
            tables_changed: true,
            routing,
            routed: None,
        };
        Ok(Model {
            native: code.native.map(|n| &generated::VARIANTS[n]),
            code,
            st,
            groups: HashMap::new(),
            cpu_port,
            scratch: [PassOutput::default(), PassOutput::default()],
            program,
        })
    }

    /// Whether passes run as emitted Rust (the program's compiled code has a variant in
    /// the generated native back end) rather than on the interpreter.
    pub fn is_native(&self) -> bool {
        self.native.is_some()
    }

    /// The program.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The program as shared by the models of it.
    pub fn program_arc(&self) -> &Arc<Program> {
        &self.program
    }

    /// The CPU port number.
    pub fn cpu_port(&self) -> u16 {
        self.cpu_port
    }

    /// The member ports of a multicast group (`None` when it was never configured).
    pub fn multicast_group(&self, group: u16) -> Option<&[u16]> {
        self.groups.get(&group).map(|ports| ports.as_slice())
    }

    fn register_id(&self, name: &str) -> Result<usize, ModelError> {
        self.program
            .register_by_name(name)
            .map(|r| r.0 as usize)
            .ok_or_else(|| ModelError::UnknownRegister(name.to_string()))
    }

    /// Number of entries in a table.
    pub fn table_len(&self, table: &str) -> Result<usize, ModelError> {
        let t = self
            .program
            .table_by_name(table)
            .ok_or_else(|| ModelError::UnknownTable(table.to_string()))?;
        Ok(self.st.tables[t.0 as usize].entries)
    }
}

/// Packs the values of `fields` (slot, mask, shift) into 128 bits: each field at its
/// shift, its width (the mask's) wide, from bit 0 up in field order (the netsim adapter's
/// `Packet.bridge`; fields from bit 128 on are left out).
#[inline(always)]
fn pack_fields(phv: &[u64; PHV_SLOTS], fields: &[(u16, u64, u32)]) -> [u64; 2] {
    let mut acc: u128 = 0;
    for (f, m, shift) in fields {
        if *shift < 128 {
            acc |= ((phv[*f as usize] & m) as u128) << shift;
        }
    }
    [acc as u64, (acc >> 64) as u64]
}

/// Restores `fields` from 128 bits packed by [`pack_fields`].
#[inline(always)]
fn unpack_fields(phv: &mut [u64; PHV_SLOTS], fields: &[(u16, u64, u32)], packed: [u64; 2]) {
    let acc = packed[0] as u128 | (packed[1] as u128) << 64;
    for (f, m, shift) in fields {
        phv[*f as usize] = if *shift < 128 {
            (acc >> shift) as u64 & m
        } else {
            0
        };
    }
}

/// How a pass hands over bridged metadata and the deparsed packet: as
/// [`DataPlane::ingress`] / [`DataPlane::egress`] do, or as the netsim adapter wants them
/// (bridged fields packed into 128 bits; no deparsed copy when the headers are unchanged).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Handover {
    Full,
    Packed,
}

const FULL: bool = false;
const PACKED: bool = true;

impl Model {
    /// [`DataPlane::ingress`] for simulator glue that carries the bridged metadata itself: the bridged fields go into `bridge`
    /// (packed in declaration order into 128 bits, `out.bridged` is left as it is) and,
    /// when the program left every header as parsed, `out.bytes` is not written and the
    /// result is `true` (the output packet is the input).
    pub fn ingress_packed(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
        bridge: &mut [u64; 2],
    ) -> Result<bool, ModelError> {
        self.ingress_pass::<PACKED>(packet, input, out, bridge)
    }

    /// [`DataPlane::egress`] for simulator glue that carries the bridged metadata itself: the bridged fields of a normal packet
    /// come packed in `bridge`; `true` when the output packet is the input (`out.bytes` not
    /// written).
    pub fn egress_packed(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        bridge: [u64; 2],
        out: &mut PassOutput,
    ) -> Result<bool, ModelError> {
        self.egress_pass::<PACKED>(packet, input, Err(bridge), out)
    }

    fn ingress_pass<const H: bool>(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
        bridge: &mut [u64; 2],
    ) -> Result<bool, ModelError> {
        let handover = if H { Handover::Packed } else { Handover::Full };
        if packet.len() > MAX_PACKET_BYTES {
            return Err(ModelError::PacketTooLarge {
                len: packet.len(),
                max: MAX_PACKET_BYTES,
            });
        }
        if handover == Handover::Full {
            out.reset();
        } else {
            out.reset_but_bridged();
        }
        if self.st.tables_changed {
            self.st.share_tables();
        }
        if *self.st.live_views.get_mut() != 0 {
            self.st.drop_views();
        }
        let code = &self.code;
        let native = self.native;
        Ok(self.st.with_phv(code, |st, phv| {
            st.reset(code, 0, native.is_some(), phv);
            st.routed = input.routed_egress_port;
            let mut ctx = PassCtx {
                packet,
                clone_bytes: &mut out.clone_bytes,
                digests: &mut out.digests,
                forward: Forward::None,
                dropped: false,
                clone: false,
            };
            match native {
                Some(n) => (n.ingress)(st, phv, code, &mut ctx, input),
                None => {
                    st.set_intrinsic(code, Intrinsic::IngressPort, input.ingress_port as u64, phv);
                    st.set_intrinsic(code, Intrinsic::IngressTstamp, input.tstamp_ns, phv);
                    st.parse(code, packet, phv);
                    st.run(code, code.ingress, &mut ctx, phv);
                }
            }
            let (dropped, forward, clone) = (ctx.dropped, ctx.forward, ctx.clone);
            let same = handover == Handover::Packed && st.unchanged();
            if !same {
                st.deparse(code, packet, &mut out.bytes, phv);
            }
            out.dropped = dropped;
            out.forward = forward;
            match handover {
                Handover::Full => st.carry_into(&code.bridged, &mut out.bridged, phv),
                Handover::Packed => {
                    *bridge = match native {
                        Some(n) => (n.pack)(phv),
                        None => pack_fields(phv, &code.bridge_packing),
                    }
                }
            }
            for d in out.digests.iter_mut() {
                d.values = code.digests[d.digest.0 as usize]
                    .iter()
                    .map(|f| phv[*f as usize])
                    .collect();
            }
            if clone {
                let mut c = st.carry(&code.cloned, phv);
                c.clone_kind = CLONE_INGRESS as u8;
                out.clone = Some(c);
            }
            st.meta = META_INGRESS;
            same
        }))
    }

    /// An egress pass with the metadata carried from ingress (`Ok`), or a normal packet's
    /// bridged fields packed into 128 bits (`Err`).
    fn egress_pass<const H: bool>(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        carried: Result<&Carried, [u64; 2]>,
        out: &mut PassOutput,
    ) -> Result<bool, ModelError> {
        let handover = if H { Handover::Packed } else { Handover::Full };
        if packet.len() > MAX_PACKET_BYTES {
            return Err(ModelError::PacketTooLarge {
                len: packet.len(),
                max: MAX_PACKET_BYTES,
            });
        }
        if handover == Handover::Full {
            out.reset();
        } else {
            out.reset_but_bridged();
        }
        if self.st.tables_changed {
            self.st.share_tables();
        }
        if *self.st.live_views.get_mut() != 0 {
            self.st.drop_views();
        }
        let code = &self.code;
        let native = self.native;
        Ok(self.st.with_phv(code, |st, phv| {
            st.reset(code, 1, native.is_some(), phv);
            let mut unused = Vec::new();
            let mut ctx = PassCtx {
                packet,
                clone_bytes: &mut unused,
                digests: &mut out.digests,
                forward: Forward::None,
                dropped: false,
                clone: false,
            };
            match native {
                Some(n) => (n.egress)(st, phv, code, &mut ctx, input, carried),
                None => {
                    let clone_kind = carried.map_or(0, |c| c.clone_kind);
                    let port = input.ingress_port as u64;
                    st.set_intrinsic(code, Intrinsic::EgressIngressPort, port, phv);
                    st.set_intrinsic(code, Intrinsic::EgressPort, input.egress_port as u64, phv);
                    st.set_intrinsic(code, Intrinsic::EgressQueue, input.queue as u64, phv);
                    st.set_intrinsic(code, Intrinsic::EnqTstamp, input.enq_tstamp_ns, phv);
                    st.set_intrinsic(code, Intrinsic::EnqQdepth, input.enq_qdepth as u64, phv);
                    let len = input.packet_length as u64;
                    st.set_intrinsic(code, Intrinsic::PacketLength, len, phv);
                    st.set_intrinsic(code, Intrinsic::CloneKind, clone_kind as u64, phv);
                    match carried {
                        Ok(c) => st.restore_carried(code, c, phv),
                        Err(packed) => unpack_fields(phv, &code.bridge_packing, packed),
                    }
                    st.parse(code, packet, phv);
                    st.run(code, code.egress, &mut ctx, phv);
                }
            }
            let (dropped, clone) = (ctx.dropped, ctx.clone);
            let same = handover == Handover::Packed && !clone && st.unchanged();
            if !same {
                st.deparse(code, packet, &mut out.bytes, phv);
            }
            out.dropped = dropped;
            if clone {
                let mut c = st.carry(&code.cloned, phv);
                c.clone_kind = CLONE_EGRESS as u8;
                out.clone = Some(c);
                out.clone_bytes.clear();
                out.clone_bytes.extend_from_slice(&out.bytes);
            }
            st.meta = META_EGRESS;
            same
        }))
    }
}

impl DataPlane for Model {
    fn ingress(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
    ) -> Result<(), ModelError> {
        let mut unused = [0; 2];
        self.ingress_pass::<FULL>(packet, input, out, &mut unused)
            .map(|_| ())
    }

    fn egress(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        carried: &Carried,
        out: &mut PassOutput,
    ) -> Result<(), ModelError> {
        self.egress_pass::<FULL>(packet, input, Ok(carried), out)
            .map(|_| ())
    }

    fn process(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        queue: u8,
    ) -> Result<SwitchOutput, ModelError> {
        let mut result = SwitchOutput::default();
        let mut ing = std::mem::take(&mut self.scratch[0]);
        let mut eg = std::mem::take(&mut self.scratch[1]);
        let outcome = (|| {
            self.ingress(packet, input, &mut ing)?;
            result.digests.append(&mut ing.digests);
            let cpu_input = EgressInput {
                ingress_port: input.ingress_port,
                egress_port: self.cpu_port,
                queue,
                enq_tstamp_ns: input.tstamp_ns,
                enq_qdepth: 0,
                packet_length: 0,
            };
            if let Some(c) = ing.clone {
                let bytes = ing.clone_bytes.clone();
                let mut ci = cpu_input;
                ci.packet_length = bytes.len() as u16;
                self.egress(&bytes, &ci, &c, &mut eg)?;
                if !eg.dropped {
                    result.cpu.push(eg.bytes.clone());
                }
            }
            if ing.dropped {
                return Ok(());
            }
            let ports: Vec<u16> = match ing.forward {
                Forward::None => vec![],
                Forward::Unicast(p) => vec![p],
                Forward::Multicast(g) => self.groups.get(&g).cloned().unwrap_or_default(),
            };
            let bytes = ing.bytes.clone();
            for port in ports {
                let ei = EgressInput {
                    ingress_port: input.ingress_port,
                    egress_port: port,
                    queue,
                    enq_tstamp_ns: input.tstamp_ns,
                    enq_qdepth: 0,
                    packet_length: bytes.len() as u16,
                };
                self.egress(&bytes, &ei, &ing.bridged, &mut eg)?;
                if let Some(c) = eg.clone {
                    let clone_bytes = eg.clone_bytes.clone();
                    let kept = (!eg.dropped).then(|| eg.bytes.clone());
                    let mut ci = cpu_input;
                    ci.ingress_port = input.ingress_port;
                    ci.packet_length = clone_bytes.len() as u16;
                    self.egress(&clone_bytes, &ci, &c, &mut eg)?;
                    if !eg.dropped {
                        result.cpu.push(eg.bytes.clone());
                    }
                    if let Some(k) = kept {
                        result.ports.push((port, k));
                    }
                } else if !eg.dropped {
                    result.ports.push((port, eg.bytes.clone()));
                }
            }
            Ok(())
        })();
        self.scratch[0] = ing;
        self.scratch[1] = eg;
        outcome.map(|_| {
            result.ports.sort_by_key(|(p, _)| *p);
            result
        })
    }

    fn register_read(&self, register: &str, index: u64) -> Result<u64, ModelError> {
        let r = self.register_id(register)?;
        let loc = &self.code.registers[r];
        if index >= loc.size as u64 {
            return Err(ModelError::RegisterIndex {
                register: register.to_string(),
                index,
                size: self.program.registers[r].size,
            });
        }
        Ok(self.st.cell(loc, index as usize))
    }

    fn register_write(&mut self, register: &str, index: u64, value: u64) -> Result<(), ModelError> {
        let r = self.register_id(register)?;
        let def = &self.program.registers[r];
        if def.width < 64 && value >> def.width != 0 {
            return Err(ModelError::RegisterValue {
                register: register.to_string(),
                value,
                width: def.width,
            });
        }
        let loc = self.code.registers[r];
        if index >= loc.size as u64 {
            return Err(ModelError::RegisterIndex {
                register: register.to_string(),
                index,
                size: def.size,
            });
        }
        let w = loc.base + index as usize * loc.stride + loc.offset;
        let regs = &mut self.st.regs;
        if loc.pair {
            regs.set(loc.kind, w, value & 0xFFFF_FFFF);
            regs.set(loc.kind, w + 1, value >> 32);
        } else {
            regs.set(loc.kind, w, value);
        }
        self.st.drop_view(r);
        Ok(())
    }

    fn register_read_all(&self, register: &str) -> Result<&[u64], ModelError> {
        let r = self.register_id(register)?;
        Ok(self.st.view(&self.code, r))
    }

    fn register_sync(&mut self, register: &str) -> Result<(), ModelError> {
        self.register_id(register).map(|_| ())
    }

    fn register_reset(&mut self, register: &str) -> Result<(), ModelError> {
        let r = self.register_id(register)?;
        let loc = self.code.registers[r];
        let regs = &mut self.st.regs;
        match loc.kind {
            // A register alone in its slab: the slab's range at once.
            SlabKind::Bytes if loc.stride == 1 => {
                regs.bytes[loc.base..loc.base + loc.size].fill(0);
            }
            SlabKind::Halves if loc.stride == 1 => {
                regs.halves[loc.base..loc.base + loc.size].fill(0);
            }
            _ => {
                for i in 0..loc.size {
                    let w = loc.base + i * loc.stride + loc.offset;
                    regs.set(loc.kind, w, 0);
                    if loc.pair {
                        regs.set(loc.kind, w + 1, 0);
                    }
                }
            }
        }
        self.st.drop_view(r);
        Ok(())
    }

    fn table_add(&mut self, table: &str, entry: TableEntry) -> Result<(), ModelError> {
        let t = self
            .program
            .table_by_name(table)
            .ok_or_else(|| ModelError::UnknownTable(table.to_string()))?;
        let def = &self.program.tables[t.0 as usize];
        let bad = |message: String| ModelError::TableEntry {
            table: table.to_string(),
            message,
        };
        let action = def
            .actions
            .iter()
            .copied()
            .find(|a| self.program.actions[a.0 as usize].name == entry.action)
            .ok_or_else(|| ModelError::UnknownAction {
                table: table.to_string(),
                action: entry.action.clone(),
            })?;
        let params = &self.program.actions[action.0 as usize].params;
        if params.len() != entry.params.len() {
            return Err(bad(format!(
                "action `{}` takes {} parameters, {} given",
                entry.action,
                params.len(),
                entry.params.len()
            )));
        }
        for (p, v) in params.iter().zip(&entry.params) {
            let w = self.program.field(*p).width;
            if w < 64 && v >> w != 0 {
                return Err(bad(format!("parameter value {v:#x} does not fit {w} bits")));
            }
        }
        if entry.key.len() != def.keys.len() {
            return Err(bad(format!(
                "{} key values for {} key fields",
                entry.key.len(),
                def.keys.len()
            )));
        }
        let exact = def.keys.iter().all(|(_, k)| *k == MatchKind::Exact);
        if !exact && entry.mask.len() != def.keys.len() {
            return Err(bad("ternary entries need one mask per key field".into()));
        }
        let mut key: u128 = 0;
        let mut m: u128 = 0;
        for (i, (f, kind)) in def.keys.iter().enumerate() {
            let w = self.program.field(*f).width;
            let v = entry.key[i];
            if w < 64 && v >> w != 0 {
                return Err(bad(format!("key value {v:#x} does not fit {w} bits")));
            }
            let km = if *kind == MatchKind::Exact || exact {
                mask(w)
            } else {
                entry.mask[i] & mask(w)
            };
            key = (key << w) | v as u128;
            m = (m << w) | km as u128;
        }
        self.st.tables_changed = true;
        let mut tables = self.st.tables.to_vec();
        let state = Arc::make_mut(&mut tables[t.0 as usize]);
        let size = def.size;
        if exact {
            if !state.exact.contains_key(&key) && state.entries >= size as usize {
                return Err(ModelError::TableFull {
                    table: table.to_string(),
                    size,
                });
            }
            if key < state.direct.len() as u128 {
                let d = &mut state.direct[key as usize];
                d.action = action.0;
                for (slot, v) in d.params.iter_mut().zip(&entry.params) {
                    *slot = *v;
                }
            }
            if state.exact.insert(key, (action, entry.params)).is_none() {
                state.entries += 1;
            }
        } else {
            if state.entries >= size as usize {
                return Err(ModelError::TableFull {
                    table: table.to_string(),
                    size,
                });
            }
            state
                .ternary
                .push((key, m, entry.priority, action, entry.params));
            state.ternary.sort_by_key(|e| e.2);
            state.entries += 1;
        }
        self.st.tables = tables.into();
        Ok(())
    }

    fn multicast_group_set(&mut self, group: u16, ports: Vec<u16>) {
        self.groups.insert(group, ports);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::crc32;

    #[test]
    fn bits_round_trip_at_odd_offsets() {
        let mut buf = [0u8; 10];
        write_bits(&mut buf, 3, 13, 0x1ABC);
        write_bits(&mut buf, 16, 48, 0xDEAD_BEEF_CAFE);
        assert_eq!(read_bits(&buf, 3, 13), 0x1ABC);
        assert_eq!(read_bits(&buf, 16, 48), 0xDEAD_BEEF_CAFE);
        assert_eq!(buf[0] >> 5, 0);
        let mut long = [0u8; 24];
        for (bit, width, value) in [
            (0, 64, u64::MAX),
            (70, 3, 5),
            (77, 61, 0x0123_4567_89AB_CDEF),
            (130, 9, 0x1FF),
        ] {
            write_bits(&mut long, bit, width, value);
            assert_eq!(
                read_bits(&long, bit, width),
                value,
                "bit {bit} width {width}"
            );
        }
        assert_eq!(read_bits(&long, 0, 64), u64::MAX);
    }

    #[test]
    fn sliced_crc_matches_the_reference() {
        let bytes: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        for start in 0..8 {
            for n in start..bytes.len() {
                let b = &bytes[start..n];
                assert_eq!(crc32_fast(b), crc32(b), "bytes {start}..{n}");
            }
        }
        // Up to 16 bytes from a register, as hash units with few inputs are computed.
        for start in 0..8 {
            for n in 0..=16 {
                let b = &bytes[start..start + n];
                let acc = b.iter().fold(0u128, |a, x| a << 8 | *x as u128);
                assert_eq!(crc32_u128(acc, n), crc32(b), "{n} bytes from {start}");
            }
        }
    }
}
