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

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::ModelError;
use crate::hash::crc32;
use crate::ir::*;

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
        self.bytes.clear();
        self.dropped = false;
        self.forward = Forward::None;
        self.bridged = Carried::default();
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

/// A table entry as the control plane adds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableEntry {
    /// Key values, one per key field (ternary: value).
    pub key: Vec<u64>,
    /// Ternary masks (empty for exact tables).
    pub mask: Vec<u64>,
    /// Ternary priority (lower wins).
    pub priority: u32,
    /// Action name.
    pub action: String,
    /// Action parameters.
    pub params: Vec<u64>,
}

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

#[derive(Clone, Debug, Default)]
struct TableState {
    exact: HashMap<u128, (ActionId, Vec<u64>)>,
    ternary: Vec<(u128, u128, u32, ActionId, Vec<u64>)>,
    entries: usize,
}

// ---------------------------------------------------------------------------------------
// The compiled program: a flat instruction list with jumps, expressions in postfix form
// with every width and mask precomputed, register actions / hash units / tables / header
// layouts resolved to indices. Nothing is looked up by name or hashed per packet (except
// exact-match tables installed by the control plane).
// ---------------------------------------------------------------------------------------

/// Deepest expression stack the compiler accepts.
const STACK: usize = 8;
/// Most header instances (validity is a 64-bit mask).
const MAX_HEADERS: usize = 64;
/// Most bytes a hash unit hashes.
const MAX_HASH_BYTES: usize = 64;
const NO_FIELD: u16 = u16::MAX;
const NO_HEADER: u8 = u8::MAX;

/// A postfix expression operation.
#[derive(Clone, Copy, Debug)]
enum EOp {
    Field(u16),
    Const(u64),
    Valid(u8),
    /// `op` at a width whose mask is given.
    Bin(BinOp, u64),
    /// `(a << n) & mask`.
    Shl(u8, u64),
    Shr(u8),
    /// `(a >> lo) & mask` (slices and casts).
    Slice(u8, u64),
    Cmp(CmpOp, u8),
    /// Fused `field cmp constant`.
    CmpFieldConst(u16, CmpOp, u64, u8),
    And,
    Or,
    Not,
}

type Span = (u32, u32);

#[derive(Clone, Debug)]
enum Ins {
    Assign {
        dst: u16,
        mask: u64,
        expr: Span,
        header: u8,
    },
    AssignField {
        dst: u16,
        src: u16,
        mask: u64,
        header: u8,
    },
    AssignConst {
        dst: u16,
        value: u64,
        header: u8,
    },
    JumpUnless(Span, u32),
    /// Fused `if (field cmp constant)`: jump when false.
    JumpUnlessCmp(u16, CmpOp, u64, u8, u32),
    /// Fused `if (h.isValid())`: jump when false.
    JumpUnlessValid(u8, u32),
    Jump(u32),
    Execute {
        ra: u16,
        index: Span,
        out: u16,
        out_mask: u64,
    },
    Hash {
        unit: u16,
        dst: u16,
    },
    SetValid(u8),
    SetInvalid(u8),
    Unicast(Span),
    Multicast(u16),
    Drop,
    Clone,
    Digest(u16),
    Apply(u16),
    Return,
}

#[derive(Clone, Copy, Debug)]
enum COperand {
    Lo,
    Hi,
    Phv(u16),
    Const(u64),
}

#[derive(Clone, Copy, Debug)]
struct CCond {
    left: COperand,
    right: Option<(bool, COperand)>,
    cmp: CmpOp,
    constant: u64,
}

#[derive(Clone, Copy, Debug)]
struct CUpdate {
    when: Pred,
    hi: bool,
    op: SaluOp,
    a: COperand,
    b: COperand,
}

#[derive(Clone, Debug)]
struct CRegisterAction {
    register: usize,
    size_mask: usize,
    pair: bool,
    word_width: u8,
    word_mask: u64,
    conditions: Vec<CCond>,
    updates: Vec<CUpdate>,
    outputs: Vec<(Pred, SaluOutputValue)>,
}

#[derive(Clone, Debug)]
struct CHash {
    inputs: Vec<(u16, u8)>,
    mask: u64,
}

#[derive(Clone, Debug)]
struct CTable {
    forwarding: bool,
    first_action: Option<u16>,
    default_action: u16,
    default_params: Vec<u64>,
    keys: Vec<(u16, u8)>,
    all_exact: bool,
}

#[derive(Clone, Copy, Debug)]
struct CField {
    phv: u16,
    bit: u16,
    width: u8,
}

#[derive(Clone, Debug)]
struct CHeader {
    bytes: usize,
    fields: Vec<CField>,
}

#[derive(Clone, Debug)]
enum CTransition {
    Accept,
    Goto(usize),
    Select(u16, Vec<(u64, Option<usize>)>),
}

#[derive(Clone, Debug)]
struct CState {
    extract: u8,
    transition: CTransition,
}

#[derive(Debug)]
struct Code {
    eops: Vec<EOp>,
    ins: Vec<Ins>,
    ingress: u32,
    egress: u32,
    action_start: Vec<u32>,
    action_params: Vec<Vec<(u16, u64)>>,
    tables: Vec<CTable>,
    register_actions: Vec<CRegisterAction>,
    hashes: Vec<CHash>,
    headers: Vec<CHeader>,
    parser: Vec<CState>,
    /// PHV index ranges of metadata and action parameters (zeroed at each pass start).
    meta_ranges: Vec<(usize, usize)>,
    masks: Vec<u64>,
    digests: Vec<Vec<u16>>,
    bridged: Vec<u16>,
    cloned: Vec<u16>,
    intrinsics: [u16; Intrinsic::ALL.len()],
}

fn program_error(message: String) -> ModelError {
    ModelError::TableEntry {
        table: "(program)".into(),
        message,
    }
}

struct Compiler<'p> {
    program: &'p Program,
    field_header: Vec<u8>,
    eops: Vec<EOp>,
    ins: Vec<Ins>,
}

impl Compiler<'_> {
    fn width(&self, e: &Expr) -> u8 {
        match e {
            Expr::Field(f) => self.program.fields[f.0 as usize].width,
            Expr::Const { width, .. } => *width,
            Expr::Bin(_, a, b) => self.width(a).max(self.width(b)),
            Expr::Shl(a, _) | Expr::Shr(a, _) => self.width(a),
            Expr::Slice(_, hi, lo) => hi - lo + 1,
            Expr::Cast(_, w) => *w,
            _ => 1,
        }
    }

    /// Appends `e` in postfix form; returns the stack depth it needs.
    fn expr(&mut self, e: &Expr) -> usize {
        match e {
            Expr::Field(f) => {
                self.eops.push(EOp::Field(f.0));
                1
            }
            Expr::Const { value, .. } => {
                self.eops.push(EOp::Const(*value));
                1
            }
            Expr::IsValid(h) => {
                self.eops.push(EOp::Valid(h.0 as u8));
                1
            }
            Expr::Bin(op, a, b) => {
                let w = self.width(e);
                let da = self.expr(a);
                let db = self.expr(b);
                self.eops.push(EOp::Bin(*op, mask(w)));
                da.max(db + 1)
            }
            Expr::Shl(a, n) => {
                let w = self.width(a);
                let d = self.expr(a);
                self.eops.push(EOp::Shl(*n, mask(w)));
                d
            }
            Expr::Shr(a, n) => {
                let d = self.expr(a);
                self.eops.push(EOp::Shr(*n));
                d
            }
            Expr::Slice(a, hi, lo) => {
                let d = self.expr(a);
                self.eops.push(EOp::Slice(*lo, mask(hi - lo + 1)));
                d
            }
            Expr::Cast(a, w) => {
                let d = self.expr(a);
                self.eops.push(EOp::Slice(0, mask(*w)));
                d
            }
            Expr::Cmp(op, a, b) => {
                let w = self.width(a).max(self.width(b));
                if let (Expr::Field(f), Expr::Const { value, .. }) = (&**a, &**b) {
                    self.eops.push(EOp::CmpFieldConst(f.0, *op, *value, w));
                    return 1;
                }
                let da = self.expr(a);
                let db = self.expr(b);
                self.eops.push(EOp::Cmp(*op, w));
                da.max(db + 1)
            }
            Expr::And(a, b) | Expr::Or(a, b) => {
                let da = self.expr(a);
                let db = self.expr(b);
                self.eops.push(if matches!(e, Expr::And(..)) {
                    EOp::And
                } else {
                    EOp::Or
                });
                da.max(db + 1)
            }
            Expr::Not(a) => {
                let d = self.expr(a);
                self.eops.push(EOp::Not);
                d
            }
        }
    }

    fn span(&mut self, e: &Expr) -> Result<Span, ModelError> {
        let start = self.eops.len() as u32;
        let depth = self.expr(e);
        if depth > STACK {
            return Err(program_error(format!(
                "an expression needs a stack of {depth} (the model allows {STACK})"
            )));
        }
        Ok((start, self.eops.len() as u32))
    }

    fn body(&mut self, body: &[Stmt]) -> Result<(), ModelError> {
        for s in body {
            match s {
                Stmt::Assign(dst, e) => {
                    let header = self.field_header[dst.0 as usize];
                    let m = mask(self.program.fields[dst.0 as usize].width);
                    match e {
                        Expr::Field(src) => self.ins.push(Ins::AssignField {
                            dst: dst.0,
                            src: src.0,
                            mask: m,
                            header,
                        }),
                        Expr::Const { value, .. } => self.ins.push(Ins::AssignConst {
                            dst: dst.0,
                            value: value & m,
                            header,
                        }),
                        _ => {
                            let expr = self.span(e)?;
                            self.ins.push(Ins::Assign {
                                dst: dst.0,
                                mask: m,
                                expr,
                                header,
                            });
                        }
                    }
                }
                Stmt::If(c, then, otherwise) => {
                    let cond = self.span(c)?;
                    // One-op conditions become fused jumps.
                    let fused = if cond.1 - cond.0 == 1 {
                        match self.eops[cond.0 as usize] {
                            EOp::CmpFieldConst(f, op, k, w) => Some(Err((f, op, k, w))),
                            EOp::Valid(h) => Some(Ok(h)),
                            _ => None,
                        }
                    } else {
                        None
                    };
                    let jump_to = move |target: u32| match fused {
                        Some(Err((f, op, k, w))) => Ins::JumpUnlessCmp(f, op, k, w, target),
                        Some(Ok(h)) => Ins::JumpUnlessValid(h, target),
                        None => Ins::JumpUnless(cond, target),
                    };
                    let jump_unless = self.ins.len();
                    self.ins.push(jump_to(0));
                    self.body(then)?;
                    if otherwise.is_empty() {
                        let end = self.ins.len() as u32;
                        self.ins[jump_unless] = jump_to(end);
                    } else {
                        let jump = self.ins.len();
                        self.ins.push(Ins::Jump(0));
                        let else_start = self.ins.len() as u32;
                        self.ins[jump_unless] = jump_to(else_start);
                        self.body(otherwise)?;
                        self.ins[jump] = Ins::Jump(self.ins.len() as u32);
                    }
                }
                Stmt::Apply(t) => self.ins.push(Ins::Apply(t.0)),
                Stmt::Execute {
                    action,
                    index,
                    output,
                } => {
                    let index = self.span(index)?;
                    let (out, out_mask) = match output {
                        Some(o) => (o.0, mask(self.program.fields[o.0 as usize].width)),
                        None => (NO_FIELD, 0),
                    };
                    self.ins.push(Ins::Execute {
                        ra: action.0,
                        index,
                        out,
                        out_mask,
                    });
                }
                Stmt::Hash(h, dst) => self.ins.push(Ins::Hash {
                    unit: h.0,
                    dst: dst.0,
                }),
                Stmt::SetValid(h) => self.ins.push(Ins::SetValid(h.0 as u8)),
                Stmt::SetInvalid(h) => self.ins.push(Ins::SetInvalid(h.0 as u8)),
                Stmt::SetEgressPort(e) => {
                    let span = self.span(e)?;
                    self.ins.push(Ins::Unicast(span));
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

fn operand(o: SaluOperand) -> COperand {
    match o {
        SaluOperand::Reg(Word::Lo) => COperand::Lo,
        SaluOperand::Reg(Word::Hi) => COperand::Hi,
        SaluOperand::Phv(f) => COperand::Phv(f.0),
        SaluOperand::Const(c) => COperand::Const(c),
    }
}

impl Code {
    fn compile(program: &Program) -> Result<Code, ModelError> {
        if program.headers.len() > MAX_HEADERS {
            return Err(program_error(format!(
                "{} headers; the model tracks at most {MAX_HEADERS}",
                program.headers.len()
            )));
        }
        let mut field_header = vec![NO_HEADER; program.fields.len()];
        let mut headers = Vec::new();
        for (h, header) in program.headers.iter().enumerate() {
            let mut bit = 0u16;
            let mut fields = Vec::new();
            for f in &header.fields {
                let width = program.field(*f).width;
                field_header[f.0 as usize] = h as u8;
                fields.push(CField {
                    phv: f.0,
                    bit,
                    width,
                });
                bit += width as u16;
            }
            headers.push(CHeader {
                bytes: bit as usize / 8,
                fields,
            });
        }
        let mut c = Compiler {
            program,
            field_header,
            eops: Vec::new(),
            ins: Vec::new(),
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
                first_action: t.actions.first().map(|a| a.0),
                default_action: t.default_action.0 .0,
                default_params: t.default_action.1.clone(),
                keys: t
                    .keys
                    .iter()
                    .map(|(f, _)| (f.0, program.field(*f).width))
                    .collect(),
                all_exact: t.keys.iter().all(|(_, k)| *k == MatchKind::Exact),
            })
            .collect();
        let register_actions = program
            .register_actions
            .iter()
            .map(|ra| {
                let reg = &program.registers[ra.register.0 as usize];
                CRegisterAction {
                    register: ra.register.0 as usize,
                    size_mask: reg.size as usize - 1,
                    pair: reg.is_pair(),
                    word_width: reg.word_width(),
                    word_mask: mask(reg.word_width()),
                    conditions: ra
                        .conditions
                        .iter()
                        .map(|k| CCond {
                            left: operand(k.left),
                            right: k.right.map(|(sub, r)| (sub, operand(r))),
                            cmp: k.cmp,
                            constant: (k.constant as u64) & mask(reg.word_width()),
                        })
                        .collect(),
                    updates: ra
                        .updates
                        .iter()
                        .map(|u| CUpdate {
                            when: u.when,
                            hi: u.word == Word::Hi,
                            op: u.op,
                            a: operand(u.a),
                            b: operand(u.b),
                        })
                        .collect(),
                    outputs: ra.outputs.iter().map(|o| (o.when, o.value)).collect(),
                }
            })
            .collect();
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
        let parser = program
            .parser
            .iter()
            .map(|s| CState {
                extract: s.extract.map_or(NO_HEADER, |h| h.0 as u8),
                transition: match &s.transition {
                    Transition::Accept => CTransition::Accept,
                    Transition::Goto(t) => CTransition::Goto(*t),
                    Transition::Select { field, cases } => {
                        CTransition::Select(field.0, cases.clone())
                    }
                },
            })
            .collect();
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
        let mut intrinsics = [0u16; Intrinsic::ALL.len()];
        for (i, which) in Intrinsic::ALL.iter().enumerate() {
            if *which as usize != i {
                return Err(program_error(
                    "Intrinsic::ALL is not in declaration order".into(),
                ));
            }
            intrinsics[i] = program.intrinsic(*which).0;
        }
        Ok(Code {
            eops: c.eops,
            ins: c.ins,
            ingress,
            egress,
            action_start,
            action_params,
            tables,
            register_actions,
            hashes,
            headers,
            parser,
            meta_ranges,
            masks: program.fields.iter().map(|f| mask(f.width)).collect(),
            digests: program
                .digests
                .iter()
                .map(|d| d.fields.iter().map(|f| f.0).collect())
                .collect(),
            bridged: program.bridged_fields().iter().map(|f| f.0).collect(),
            cloned: program.cloned_fields().iter().map(|f| f.0).collect(),
            intrinsics,
        })
    }

    fn intrinsic(&self, which: Intrinsic) -> usize {
        self.intrinsics[which as usize] as usize
    }
}

/// Per-pass and persistent state of the interpreter.
#[derive(Debug)]
struct State {
    phv: Vec<u64>,
    /// Header validity (bit per header).
    valid: u64,
    /// Headers the parser extracted this pass.
    parsed: u64,
    /// Headers whose fields were written (or made valid) this pass.
    dirty: u64,
    /// Headers whose PHV fields may be non-zero from an earlier pass.
    stale: u64,
    /// Byte offset of each extracted header in the input.
    offsets: [u32; MAX_HEADERS],
    /// Whether the parser extracted headers in deparse (declaration) order.
    in_order: bool,
    payload_offset: usize,
    registers: Vec<Vec<u64>>,
    tables: Vec<TableState>,
    routing: Routing,
    routed: Option<u16>,
}

struct PassCtx<'a> {
    packet: &'a [u8],
    clone_bytes: &'a mut Vec<u8>,
    digests: &'a mut Vec<DigestMessage>,
    forward: Forward,
    dropped: bool,
    clone: bool,
}

impl State {
    fn reset(&mut self, code: &Code) {
        self.stale |= self.dirty;
        for (start, end) in &code.meta_ranges {
            self.phv[*start..*end].fill(0);
        }
        self.valid = 0;
        self.parsed = 0;
        self.dirty = 0;
        self.in_order = true;
    }

    fn parse(&mut self, code: &Code, packet: &[u8]) {
        let mut state = 0usize;
        let mut offset = 0usize;
        let mut last: i32 = -1;
        while let Some(s) = code.parser.get(state) {
            if s.extract != NO_HEADER {
                let h = s.extract as usize;
                let header = &code.headers[h];
                if offset + header.bytes > packet.len() {
                    break;
                }
                let base = offset * 8;
                for f in &header.fields {
                    self.phv[f.phv as usize] = read_bits(packet, base + f.bit as usize, f.width);
                }
                self.valid |= 1 << h;
                self.parsed |= 1 << h;
                self.offsets[h] = offset as u32;
                if (h as i32) < last {
                    self.in_order = false;
                }
                last = h as i32;
                offset += header.bytes;
            }
            match &s.transition {
                CTransition::Accept => break,
                CTransition::Goto(t) => state = *t,
                CTransition::Select(field, cases) => {
                    let v = self.phv[*field as usize];
                    match cases.iter().find(|(c, _)| *c == v) {
                        Some((_, Some(t))) => state = *t,
                        _ => break,
                    }
                }
            }
        }
        self.payload_offset = offset;
        // Fields of headers not extracted now read as zero, as after a fresh reset.
        let mut stale = self.stale & !self.parsed;
        while stale != 0 {
            let h = stale.trailing_zeros() as usize;
            stale &= stale - 1;
            for f in &code.headers[h].fields {
                self.phv[f.phv as usize] = 0;
            }
        }
        self.stale = self.parsed;
    }

    /// Writes the packet as the deparser emits it. When the valid headers are the parsed
    /// ones (in order), only the headers written in this pass are re-emitted over a copy of
    /// the input.
    fn deparse(&self, code: &Code, packet: &[u8], out: &mut Vec<u8>) {
        out.clear();
        if self.valid == self.parsed && self.in_order {
            out.extend_from_slice(packet);
            let mut dirty = self.dirty & self.valid;
            while dirty != 0 {
                let h = dirty.trailing_zeros() as usize;
                dirty &= dirty - 1;
                let base = self.offsets[h] as usize * 8;
                for f in &code.headers[h].fields {
                    write_bits(
                        out,
                        base + f.bit as usize,
                        f.width,
                        self.phv[f.phv as usize],
                    );
                }
            }
            return;
        }
        for (h, header) in code.headers.iter().enumerate() {
            if self.valid & (1 << h) == 0 {
                continue;
            }
            let start = out.len();
            out.resize(start + header.bytes, 0);
            for f in &header.fields {
                write_bits(
                    &mut out[start..],
                    f.bit as usize,
                    f.width,
                    self.phv[f.phv as usize],
                );
            }
        }
        if self.payload_offset < packet.len() {
            out.extend_from_slice(&packet[self.payload_offset..]);
        }
    }

    #[inline]
    fn eval(&self, code: &Code, span: Span) -> u64 {
        let mut stack = [0u64; STACK];
        let mut sp = 0usize;
        for op in &code.eops[span.0 as usize..span.1 as usize] {
            match *op {
                EOp::Field(f) => {
                    stack[sp] = self.phv[f as usize];
                    sp += 1;
                }
                EOp::Const(v) => {
                    stack[sp] = v;
                    sp += 1;
                }
                EOp::Valid(h) => {
                    stack[sp] = (self.valid >> h) & 1;
                    sp += 1;
                }
                EOp::CmpFieldConst(f, op, c, w) => {
                    stack[sp] = op.eval(self.phv[f as usize], c, w) as u64;
                    sp += 1;
                }
                EOp::Shl(n, m) => stack[sp - 1] = (stack[sp - 1] << n) & m,
                EOp::Shr(n) => stack[sp - 1] >>= n,
                EOp::Slice(lo, m) => stack[sp - 1] = (stack[sp - 1] >> lo) & m,
                EOp::Not => stack[sp - 1] = (stack[sp - 1] == 0) as u64,
                EOp::Bin(op, m) => {
                    sp -= 1;
                    let (x, y) = (stack[sp - 1], stack[sp]);
                    stack[sp - 1] = match op {
                        BinOp::Add => x.wrapping_add(y) & m,
                        BinOp::Sub => x.wrapping_sub(y) & m,
                        BinOp::SatAdd => x.saturating_add(y).min(m),
                        BinOp::And => x & y,
                        BinOp::Or => x | y,
                        BinOp::Xor => x ^ y,
                        BinOp::Min => x.min(y),
                        BinOp::Max => x.max(y),
                    };
                }
                EOp::Cmp(op, w) => {
                    sp -= 1;
                    stack[sp - 1] = op.eval(stack[sp - 1], stack[sp], w) as u64;
                }
                EOp::And => {
                    sp -= 1;
                    stack[sp - 1] = (stack[sp - 1] != 0 && stack[sp] != 0) as u64;
                }
                EOp::Or => {
                    sp -= 1;
                    stack[sp - 1] = (stack[sp - 1] != 0 || stack[sp] != 0) as u64;
                }
            }
        }
        if sp == 0 {
            0
        } else {
            stack[sp - 1]
        }
    }

    #[inline]
    fn operand(&self, o: COperand, lo: u64, hi: u64) -> u64 {
        match o {
            COperand::Lo => lo,
            COperand::Hi => hi,
            COperand::Phv(f) => self.phv[f as usize],
            COperand::Const(c) => c,
        }
    }

    /// One TNA RegisterAction: conditions, predicated updates, one output.
    fn execute(&mut self, code: &Code, ra: u16, index: u64) -> u64 {
        let ra = &code.register_actions[ra as usize];
        // Registers are powers of two; masking the index is the hardware's behaviour.
        let idx = (index as usize) & ra.size_mask;
        let cell = self.registers[ra.register][idx];
        let m = ra.word_mask;
        let (lo, hi) = if ra.pair {
            (cell & 0xFFFF_FFFF, cell >> 32)
        } else {
            (cell, 0)
        };
        let mut outcome = 0u8;
        for (i, c) in ra.conditions.iter().enumerate() {
            let l = self.operand(c.left, lo, hi);
            let v = match c.right {
                None => l,
                Some((true, r)) => l.wrapping_sub(self.operand(r, lo, hi)),
                Some((false, r)) => l.wrapping_add(self.operand(r, lo, hi)),
            } & m;
            if c.cmp.eval(v, c.constant, ra.word_width) {
                outcome |= 1 << i;
            }
        }
        let (mut new_lo, mut new_hi) = (lo, hi);
        for u in &ra.updates {
            if !u.when.covers(outcome) {
                continue;
            }
            let a = self.operand(u.a, lo, hi) & m;
            let b = self.operand(u.b, lo, hi) & m;
            let v = match u.op {
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
            };
            if u.hi {
                new_hi = v;
            } else {
                new_lo = v;
            }
        }
        self.registers[ra.register][idx] = if ra.pair {
            (new_hi << 32) | new_lo
        } else {
            new_lo
        };
        for (when, value) in &ra.outputs {
            if when.covers(outcome) {
                return match *value {
                    SaluOutputValue::Old(Word::Lo) => lo,
                    SaluOutputValue::Old(Word::Hi) => hi,
                    SaluOutputValue::New(Word::Lo) => new_lo,
                    SaluOutputValue::New(Word::Hi) => new_hi,
                    SaluOutputValue::Const(c) => c,
                };
            }
        }
        0
    }

    fn hash(&self, code: &Code, unit: u16) -> u64 {
        let h = &code.hashes[unit as usize];
        let mut buf = [0u8; MAX_HASH_BYTES];
        let mut n = 0;
        for (f, bytes) in &h.inputs {
            let v = self.phv[*f as usize];
            for i in (0..*bytes as usize).rev() {
                buf[n] = (v >> (8 * i)) as u8;
                n += 1;
            }
        }
        (crc32(&buf[..n]) as u64) & h.mask
    }

    fn set_params(&mut self, code: &Code, action: u16, args: &[u64]) {
        for ((p, m), v) in code.action_params[action as usize].iter().zip(args) {
            self.phv[*p as usize] = v & m;
        }
    }

    fn apply(&mut self, code: &Code, t: u16, ctx: &mut PassCtx) {
        let table = &code.tables[t as usize];
        if table.forwarding && self.routing == Routing::FromInput {
            if let (Some(port), Some(action)) = (self.routed, table.first_action) {
                if let Some((p, m)) = code.action_params[action as usize].first() {
                    self.phv[*p as usize] = port as u64 & m;
                }
                self.run(code, code.action_start[action as usize], ctx);
                return;
            }
            self.set_params(code, table.default_action, &table.default_params);
            self.run(code, code.action_start[table.default_action as usize], ctx);
            return;
        }
        let mut key: u128 = 0;
        for (f, w) in &table.keys {
            key = (key << w) | self.phv[*f as usize] as u128;
        }
        let state = &self.tables[t as usize];
        let hit = if table.all_exact {
            state.exact.get(&key).map(|(a, p)| (a.0, p))
        } else {
            state
                .ternary
                .iter()
                .find(|(v, m, _, _, _)| key & m == *v & m)
                .map(|(_, _, _, a, p)| (a.0, p))
        };
        let action = match hit {
            Some((a, params)) => {
                for ((p, m), v) in code.action_params[a as usize].iter().zip(params) {
                    self.phv[*p as usize] = v & m;
                }
                a
            }
            None => {
                self.set_params(code, table.default_action, &table.default_params);
                table.default_action
            }
        };
        self.run(code, code.action_start[action as usize], ctx);
    }

    fn run(&mut self, code: &Code, start: u32, ctx: &mut PassCtx) {
        let mut pc = start as usize;
        while let Some(ins) = code.ins.get(pc) {
            pc += 1;
            match *ins {
                Ins::Assign {
                    dst,
                    mask,
                    expr,
                    header,
                } => {
                    self.phv[dst as usize] = self.eval(code, expr) & mask;
                    if header != NO_HEADER {
                        self.dirty |= 1 << header;
                    }
                }
                Ins::AssignField {
                    dst,
                    src,
                    mask,
                    header,
                } => {
                    self.phv[dst as usize] = self.phv[src as usize] & mask;
                    if header != NO_HEADER {
                        self.dirty |= 1 << header;
                    }
                }
                Ins::AssignConst { dst, value, header } => {
                    self.phv[dst as usize] = value;
                    if header != NO_HEADER {
                        self.dirty |= 1 << header;
                    }
                }
                Ins::JumpUnless(cond, target) => {
                    if self.eval(code, cond) == 0 {
                        pc = target as usize;
                    }
                }
                Ins::JumpUnlessCmp(f, op, k, w, target) => {
                    if !op.eval(self.phv[f as usize], k, w) {
                        pc = target as usize;
                    }
                }
                Ins::JumpUnlessValid(h, target) => {
                    if self.valid & (1 << h) == 0 {
                        pc = target as usize;
                    }
                }
                Ins::Jump(target) => pc = target as usize,
                Ins::Execute {
                    ra,
                    index,
                    out,
                    out_mask,
                } => {
                    let idx = self.eval(code, index);
                    let v = self.execute(code, ra, idx);
                    if out != NO_FIELD {
                        self.phv[out as usize] = v & out_mask;
                    }
                }
                Ins::Hash { unit, dst } => {
                    self.phv[dst as usize] = self.hash(code, unit) & code.masks[dst as usize];
                }
                Ins::SetValid(h) => {
                    if self.valid & (1 << h) == 0 {
                        self.valid |= 1 << h;
                        self.dirty |= 1 << h;
                        self.stale |= 1 << h;
                        for f in &code.headers[h as usize].fields {
                            self.phv[f.phv as usize] = 0;
                        }
                    }
                }
                Ins::SetInvalid(h) => self.valid &= !(1 << h),
                Ins::Unicast(e) => ctx.forward = Forward::Unicast(self.eval(code, e) as u16),
                Ins::Multicast(g) => ctx.forward = Forward::Multicast(g),
                Ins::Drop => ctx.dropped = true,
                Ins::Clone => {
                    // The copy is taken here; in ingress the rule checker guarantees that no
                    // header was rewritten before this point.
                    ctx.clone = true;
                    self.deparse(code, ctx.packet, ctx.clone_bytes);
                }
                // The values are filled in at the end of the pass (the deparser sends
                // the digest with the fields' final values).
                Ins::Digest(d) => ctx.digests.push(DigestMessage {
                    digest: DigestId(d),
                    values: Vec::new(),
                }),
                Ins::Apply(t) => self.apply(code, t, ctx),
                Ins::Return => return,
            }
        }
    }

    fn carry(&self, fields: &[u16]) -> Carried {
        let mut c = Carried::default();
        for (i, f) in fields.iter().enumerate() {
            c.values[i] = self.phv[*f as usize];
        }
        c
    }

    fn restore(&mut self, code: &Code, fields: &[u16], carried: &Carried) {
        for (i, f) in fields.iter().enumerate() {
            self.phv[*f as usize] = carried.values[i] & code.masks[*f as usize];
        }
    }

    fn set_intrinsic(&mut self, code: &Code, which: Intrinsic, value: u64) {
        let f = code.intrinsic(which);
        self.phv[f] = value & code.masks[f];
    }
}

/// The interpreter: the program compiled once (see the module docs), then run per packet
/// without allocation.
#[derive(Debug)]
pub struct Model {
    program: Arc<Program>,
    code: Arc<Code>,
    st: State,
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

#[inline]
pub(crate) fn read_bits(buf: &[u8], bit_offset: usize, width: u8) -> u64 {
    if bit_offset % 8 == 0 && width % 8 == 0 {
        // Byte-aligned fields (most of them): a plain big-endian read.
        let start = bit_offset / 8;
        let n = width as usize / 8;
        let mut word = [0u8; 8];
        word[8 - n..].copy_from_slice(&buf[start..start + n]);
        return u64::from_be_bytes(word);
    }
    let mut v: u128 = 0;
    let first = bit_offset / 8;
    let last = (bit_offset + width as usize - 1) / 8;
    for b in &buf[first..=last] {
        v = (v << 8) | *b as u128;
    }
    let trailing = (last + 1) * 8 - (bit_offset + width as usize);
    ((v >> trailing) as u64) & mask(width)
}

#[inline]
pub(crate) fn write_bits(buf: &mut [u8], bit_offset: usize, width: u8, value: u64) {
    if bit_offset % 8 == 0 && width % 8 == 0 {
        let start = bit_offset / 8;
        let n = width as usize / 8;
        for (i, b) in buf[start..start + n].iter_mut().enumerate() {
            *b = (value >> (8 * (n - 1 - i))) as u8;
        }
        return;
    }
    let first = bit_offset / 8;
    let last = (bit_offset + width as usize - 1) / 8;
    let trailing = (last + 1) * 8 - (bit_offset + width as usize);
    let m = (mask(width) as u128) << trailing;
    let v = ((value & mask(width)) as u128) << trailing;
    let n = last - first + 1;
    for (i, b) in buf[first..=last].iter_mut().enumerate() {
        let shift = 8 * (n - 1 - i);
        let bm = ((m >> shift) & 0xFF) as u8;
        let bv = ((v >> shift) & 0xFF) as u8;
        *b = (*b & !bm) | bv;
    }
}

impl Model {
    /// A model of `program` with empty registers and tables. The program is compiled into
    /// a flat instruction list here; a program the model cannot run (more than
    /// [`MAX_CARRIED`] bridged fields, 64 headers, deep expressions) is an error.
    pub fn new(program: Arc<Program>, routing: Routing, cpu_port: u16) -> Result<Self, ModelError> {
        let code = Code::compile(&program)?;
        if code.bridged.len() > MAX_CARRIED || code.cloned.len() > MAX_CARRIED {
            return Err(program_error(format!(
                "more than {MAX_CARRIED} bridged or cloned fields"
            )));
        }
        let registers = program
            .registers
            .iter()
            .map(|r| vec![0u64; r.size as usize])
            .collect();
        let st = State {
            phv: vec![0; program.fields.len()],
            valid: 0,
            parsed: 0,
            dirty: 0,
            stale: 0,
            offsets: [0; MAX_HEADERS],
            in_order: true,
            payload_offset: 0,
            registers,
            tables: vec![TableState::default(); program.tables.len()],
            routing,
            routed: None,
        };
        Ok(Model {
            code: Arc::new(code),
            st,
            groups: HashMap::new(),
            cpu_port,
            scratch: [PassOutput::default(), PassOutput::default()],
            program,
        })
    }

    /// The program.
    pub fn program(&self) -> &Program {
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

impl DataPlane for Model {
    fn ingress(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        out: &mut PassOutput,
    ) -> Result<(), ModelError> {
        if packet.len() > MAX_PACKET_BYTES {
            return Err(ModelError::PacketTooLarge {
                len: packet.len(),
                max: MAX_PACKET_BYTES,
            });
        }
        out.reset();
        let code = &*self.code;
        let st = &mut self.st;
        st.reset(code);
        st.set_intrinsic(code, Intrinsic::IngressPort, input.ingress_port as u64);
        st.set_intrinsic(code, Intrinsic::IngressTstamp, input.tstamp_ns);
        st.routed = input.routed_egress_port;
        st.parse(code, packet);
        let mut ctx = PassCtx {
            packet,
            clone_bytes: &mut out.clone_bytes,
            digests: &mut out.digests,
            forward: Forward::None,
            dropped: false,
            clone: false,
        };
        st.run(code, code.ingress, &mut ctx);
        let (dropped, forward, clone) = (ctx.dropped, ctx.forward, ctx.clone);
        st.deparse(code, packet, &mut out.bytes);
        out.dropped = dropped;
        out.forward = forward;
        out.bridged = st.carry(&code.bridged);
        for d in out.digests.iter_mut() {
            d.values = code.digests[d.digest.0 as usize]
                .iter()
                .map(|f| st.phv[*f as usize])
                .collect();
        }
        if clone {
            let mut c = st.carry(&code.cloned);
            c.clone_kind = CLONE_INGRESS as u8;
            out.clone = Some(c);
        }
        Ok(())
    }

    fn egress(
        &mut self,
        packet: &[u8],
        input: &EgressInput,
        carried: &Carried,
        out: &mut PassOutput,
    ) -> Result<(), ModelError> {
        if packet.len() > MAX_PACKET_BYTES {
            return Err(ModelError::PacketTooLarge {
                len: packet.len(),
                max: MAX_PACKET_BYTES,
            });
        }
        out.reset();
        let code = &*self.code;
        let st = &mut self.st;
        st.reset(code);
        st.set_intrinsic(
            code,
            Intrinsic::EgressIngressPort,
            input.ingress_port as u64,
        );
        st.set_intrinsic(code, Intrinsic::EgressPort, input.egress_port as u64);
        st.set_intrinsic(code, Intrinsic::EgressQueue, input.queue as u64);
        st.set_intrinsic(code, Intrinsic::EnqTstamp, input.enq_tstamp_ns);
        st.set_intrinsic(code, Intrinsic::EnqQdepth, input.enq_qdepth as u64);
        st.set_intrinsic(code, Intrinsic::PacketLength, input.packet_length as u64);
        st.set_intrinsic(code, Intrinsic::CloneKind, carried.clone_kind as u64);
        if carried.clone_kind == 0 {
            st.restore(code, &code.bridged, carried);
        } else {
            st.restore(code, &code.cloned, carried);
        }
        st.parse(code, packet);
        let mut unused = Vec::new();
        let mut ctx = PassCtx {
            packet,
            clone_bytes: &mut unused,
            digests: &mut out.digests,
            forward: Forward::None,
            dropped: false,
            clone: false,
        };
        st.run(code, code.egress, &mut ctx);
        let (dropped, clone) = (ctx.dropped, ctx.clone);
        st.deparse(code, packet, &mut out.bytes);
        out.dropped = dropped;
        if clone {
            let mut c = st.carry(&code.cloned);
            c.clone_kind = CLONE_EGRESS as u8;
            out.clone = Some(c);
            out.clone_bytes.clear();
            out.clone_bytes.extend_from_slice(&out.bytes);
        }
        Ok(())
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
        self.st.registers[r]
            .get(index as usize)
            .copied()
            .ok_or(ModelError::RegisterIndex {
                register: register.to_string(),
                index,
                size: self.program.registers[r].size,
            })
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
        let size = def.size;
        let cell =
            self.st.registers[r]
                .get_mut(index as usize)
                .ok_or(ModelError::RegisterIndex {
                    register: register.to_string(),
                    index,
                    size,
                })?;
        *cell = value;
        Ok(())
    }

    fn register_read_all(&self, register: &str) -> Result<&[u64], ModelError> {
        let r = self.register_id(register)?;
        Ok(&self.st.registers[r])
    }

    fn register_sync(&mut self, register: &str) -> Result<(), ModelError> {
        self.register_id(register).map(|_| ())
    }

    fn register_reset(&mut self, register: &str) -> Result<(), ModelError> {
        let r = self.register_id(register)?;
        self.st.registers[r].iter_mut().for_each(|c| *c = 0);
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
        let state = &mut self.st.tables[t.0 as usize];
        let size = def.size;
        if exact {
            if !state.exact.contains_key(&key) && state.entries >= size as usize {
                return Err(ModelError::TableFull {
                    table: table.to_string(),
                    size,
                });
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
        Ok(())
    }

    fn multicast_group_set(&mut self, group: u16, ports: Vec<u16>) {
        self.groups.insert(group, ports);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_round_trip_at_odd_offsets() {
        let mut buf = [0u8; 10];
        write_bits(&mut buf, 3, 13, 0x1ABC);
        write_bits(&mut buf, 16, 48, 0xDEAD_BEEF_CAFE);
        assert_eq!(read_bits(&buf, 3, 13), 0x1ABC);
        assert_eq!(read_bits(&buf, 16, 48), 0xDEAD_BEEF_CAFE);
        assert_eq!(buf[0] >> 5, 0);
    }
}
