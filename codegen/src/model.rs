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

#[derive(Clone, Copy, Debug)]
struct FieldLayout {
    field: FieldId,
    bit_offset: u16,
    width: u8,
}

/// The interpreter.
#[derive(Debug)]
pub struct Model {
    program: Arc<Program>,
    masks: Vec<u64>,
    layouts: Vec<Vec<FieldLayout>>,
    header_bytes: Vec<usize>,
    bridged: Vec<FieldId>,
    cloned: Vec<FieldId>,
    meta_fields: Vec<FieldId>,
    phv: Vec<u64>,
    valid: Vec<bool>,
    registers: Vec<Vec<u64>>,
    tables: Vec<TableState>,
    groups: HashMap<u16, Vec<u16>>,
    routing: Routing,
    routed: Option<u16>,
    payload_offset: usize,
    hash_buf: Vec<u8>,
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
fn read_bits(buf: &[u8], bit_offset: usize, width: u8) -> u64 {
    if bit_offset % 8 == 0 && width % 8 == 0 {
        // Byte-aligned fields (most of them): a plain big-endian read.
        let start = bit_offset / 8;
        let mut v = 0u64;
        for b in &buf[start..start + width as usize / 8] {
            v = (v << 8) | *b as u64;
        }
        return v;
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
fn write_bits(buf: &mut [u8], bit_offset: usize, width: u8, value: u64) {
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
    /// A model of `program` with empty registers and tables.
    pub fn new(program: Arc<Program>, routing: Routing, cpu_port: u16) -> Result<Self, ModelError> {
        let masks = program.fields.iter().map(|f| mask(f.width)).collect();
        let mut layouts = Vec::new();
        let mut header_bytes = Vec::new();
        for h in &program.headers {
            let mut off = 0u16;
            let mut l = Vec::new();
            for f in &h.fields {
                let w = program.field(*f).width;
                l.push(FieldLayout {
                    field: *f,
                    bit_offset: off,
                    width: w,
                });
                off += w as u16;
            }
            header_bytes.push(off as usize / 8);
            layouts.push(l);
        }
        let bridged = program.bridged_fields();
        let cloned = program.cloned_fields();
        if bridged.len() > MAX_CARRIED || cloned.len() > MAX_CARRIED {
            return Err(ModelError::TableEntry {
                table: "(program)".into(),
                message: format!("more than {MAX_CARRIED} bridged or cloned fields"),
            });
        }
        let meta_fields = (0..program.fields.len())
            .map(|i| FieldId(i as u16))
            .filter(|f| !matches!(program.field(*f).owner, FieldOwner::Intrinsic(_)))
            .collect();
        let registers = program
            .registers
            .iter()
            .map(|r| vec![0u64; r.size as usize])
            .collect();
        let tables = vec![TableState::default(); program.tables.len()];
        Ok(Model {
            phv: vec![0; program.fields.len()],
            valid: vec![false; program.headers.len()],
            masks,
            layouts,
            header_bytes,
            bridged,
            cloned,
            meta_fields,
            registers,
            tables,
            groups: HashMap::new(),
            routing,
            routed: None,
            payload_offset: 0,
            hash_buf: Vec::with_capacity(64),
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

    fn register_id(&self, name: &str) -> Result<usize, ModelError> {
        self.program
            .register_by_name(name)
            .map(|r| r.0 as usize)
            .ok_or_else(|| ModelError::UnknownRegister(name.to_string()))
    }

    fn reset_phv(&mut self) {
        for f in &self.meta_fields {
            self.phv[f.0 as usize] = 0;
        }
        for v in self.valid.iter_mut() {
            *v = false;
        }
    }

    fn parse(&mut self, packet: &[u8]) {
        let mut state = 0usize;
        let mut offset = 0usize;
        let program = Arc::clone(&self.program);
        while let Some(s) = program.parser.get(state) {
            if let Some(h) = s.extract {
                let len = self.header_bytes[h.0 as usize];
                if offset + len > packet.len() {
                    break;
                }
                let base = offset * 8;
                for l in &self.layouts[h.0 as usize] {
                    self.phv[l.field.0 as usize] =
                        read_bits(packet, base + l.bit_offset as usize, l.width);
                }
                self.valid[h.0 as usize] = true;
                offset += len;
            }
            match &s.transition {
                Transition::Accept => break,
                Transition::Goto(t) => state = *t,
                Transition::Select { field, cases } => {
                    let v = self.phv[field.0 as usize];
                    match cases.iter().find(|(c, _)| *c == v) {
                        Some((_, Some(t))) => state = *t,
                        _ => break,
                    }
                }
            }
        }
        self.payload_offset = offset;
    }

    fn deparse(&self, packet: &[u8], out: &mut Vec<u8>) {
        out.clear();
        for (h, header) in self.program.headers.iter().enumerate() {
            if !self.valid[h] {
                continue;
            }
            let start = out.len();
            out.resize(start + self.header_bytes[h], 0);
            let _ = header;
            for l in &self.layouts[h] {
                write_bits(
                    &mut out[start..],
                    l.bit_offset as usize,
                    l.width,
                    self.phv[l.field.0 as usize],
                );
            }
        }
        if self.payload_offset < packet.len() {
            out.extend_from_slice(&packet[self.payload_offset..]);
        }
    }

    #[inline]
    fn eval(&self, e: &Expr) -> u64 {
        match e {
            Expr::Field(f) => self.phv[f.0 as usize],
            Expr::Const { value, .. } => *value,
            Expr::Bin(op, a, b) => {
                let w = self.width(e);
                let (x, y) = (self.eval(a), self.eval(b));
                let m = mask(w);
                match op {
                    BinOp::Add => x.wrapping_add(y) & m,
                    BinOp::Sub => x.wrapping_sub(y) & m,
                    BinOp::SatAdd => x.saturating_add(y).min(m),
                    BinOp::And => x & y,
                    BinOp::Or => x | y,
                    BinOp::Xor => x ^ y,
                    BinOp::Min => x.min(y),
                    BinOp::Max => x.max(y),
                }
            }
            Expr::Shl(a, n) => (self.eval(a) << n) & mask(self.width(a)),
            Expr::Shr(a, n) => self.eval(a) >> n,
            Expr::Slice(a, hi, lo) => (self.eval(a) >> lo) & mask(hi - lo + 1),
            Expr::Cast(a, w) => self.eval(a) & mask(*w),
            _ => self.test(e) as u64,
        }
    }

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

    #[inline]
    fn test(&self, e: &Expr) -> bool {
        match e {
            Expr::Cmp(op, a, b) => {
                let w = self.width(a).max(self.width(b));
                op.eval(self.eval(a), self.eval(b), w)
            }
            Expr::And(a, b) => self.test(a) && self.test(b),
            Expr::Or(a, b) => self.test(a) || self.test(b),
            Expr::Not(a) => !self.test(a),
            Expr::IsValid(h) => self.valid[h.0 as usize],
            _ => self.eval(e) != 0,
        }
    }

    fn salu_operand(&self, o: SaluOperand, lo: u64, hi: u64) -> u64 {
        match o {
            SaluOperand::Reg(Word::Lo) => lo,
            SaluOperand::Reg(Word::Hi) => hi,
            SaluOperand::Phv(f) => self.phv[f.0 as usize],
            SaluOperand::Const(c) => c,
        }
    }

    fn execute(&mut self, program: &Program, ra: RegisterActionId, index: u64) -> u64 {
        let ra = &program.register_actions[ra.0 as usize];
        let reg = &program.registers[ra.register.0 as usize];
        // The index is at most the register's index width (checked at build); registers
        // are powers of two, so masking is the hardware's behaviour.
        let idx = (index as usize) & (reg.size as usize - 1);
        let cell = self.registers[ra.register.0 as usize][idx];
        let ww = reg.word_width();
        let m = mask(ww);
        let (lo, hi) = if reg.is_pair() {
            (cell & 0xFFFF_FFFF, cell >> 32)
        } else {
            (cell, 0)
        };
        let mut outcome = 0u8;
        for (i, c) in ra.conditions.iter().enumerate() {
            let l = self.salu_operand(c.left, lo, hi);
            let v = match c.right {
                None => l,
                Some((true, r)) => l.wrapping_sub(self.salu_operand(r, lo, hi)),
                Some((false, r)) => l.wrapping_add(self.salu_operand(r, lo, hi)),
            } & m;
            if c.cmp.eval(v, (c.constant as u64) & m, ww) {
                outcome |= 1 << i;
            }
        }
        let (mut new_lo, mut new_hi) = (lo, hi);
        for u in &ra.updates {
            if !u.when.covers(outcome) {
                continue;
            }
            let a = self.salu_operand(u.a, lo, hi) & m;
            let b = self.salu_operand(u.b, lo, hi) & m;
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
            match u.word {
                Word::Lo => new_lo = v,
                Word::Hi => new_hi = v,
            }
        }
        self.registers[ra.register.0 as usize][idx] = if reg.is_pair() {
            (new_hi << 32) | new_lo
        } else {
            new_lo
        };
        for o in &ra.outputs {
            if o.when.covers(outcome) {
                return match o.value {
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

    fn hash(&mut self, program: &Program, h: HashId) -> u64 {
        let unit = &program.hashes[h.0 as usize];
        self.hash_buf.clear();
        for f in &unit.inputs {
            let w = program.field(*f).width as usize / 8;
            let v = self.phv[f.0 as usize];
            for i in (0..w).rev() {
                self.hash_buf.push((v >> (8 * i)) as u8);
            }
        }
        (crc32(&self.hash_buf) as u64) & mask(unit.width)
    }

    fn apply_table(&mut self, program: &Program, t: TableId, ctx: &mut PassCtx) {
        let table = &program.tables[t.0 as usize];
        if table.forwarding && self.routing == Routing::FromInput {
            if let (Some(port), Some(action)) = (self.routed, table.actions.first()) {
                let a = &program.actions[action.0 as usize];
                if let Some(p) = a.params.first() {
                    self.phv[p.0 as usize] = port as u64 & self.masks[p.0 as usize];
                }
                self.run(program, &a.body, ctx);
                return;
            }
            let (a, args) = &table.default_action;
            self.run_action(program, *a, args, ctx);
            return;
        }
        let mut key: u128 = 0;
        for (f, _) in &table.keys {
            key = (key << program.field(*f).width) | self.phv[f.0 as usize] as u128;
        }
        let state = &self.tables[t.0 as usize];
        let hit = if table.keys.iter().all(|(_, k)| *k == MatchKind::Exact) {
            state.exact.get(&key).cloned()
        } else {
            state
                .ternary
                .iter()
                .find(|(v, m, _, _, _)| key & m == *v & m)
                .map(|(_, _, _, a, p)| (*a, p.clone()))
        };
        match hit {
            Some((a, params)) => self.run_action(program, a, &params, ctx),
            None => {
                let (a, args) = &table.default_action;
                self.run_action(program, *a, args, ctx);
            }
        }
    }

    fn run_action(&mut self, program: &Program, a: ActionId, args: &[u64], ctx: &mut PassCtx) {
        let action = &program.actions[a.0 as usize];
        for (p, v) in action.params.iter().zip(args) {
            self.phv[p.0 as usize] = *v & self.masks[p.0 as usize];
        }
        self.run(program, &action.body, ctx);
    }

    fn run(&mut self, program: &Program, body: &[Stmt], ctx: &mut PassCtx) {
        for s in body {
            match s {
                Stmt::Assign(f, e) => {
                    let v = self.eval(e) & self.masks[f.0 as usize];
                    self.phv[f.0 as usize] = v;
                }
                Stmt::If(c, a, b) => {
                    if self.test(c) {
                        self.run(program, a, ctx);
                    } else {
                        self.run(program, b, ctx);
                    }
                }
                Stmt::Apply(t) => self.apply_table(program, *t, ctx),
                Stmt::Execute {
                    action,
                    index,
                    output,
                } => {
                    let idx = self.eval(index);
                    let v = self.execute(program, *action, idx);
                    if let Some(o) = output {
                        self.phv[o.0 as usize] = v & self.masks[o.0 as usize];
                    }
                }
                Stmt::Hash(h, out) => {
                    let v = self.hash(program, *h);
                    self.phv[out.0 as usize] = v & self.masks[out.0 as usize];
                }
                Stmt::SetValid(h) => {
                    if !self.valid[h.0 as usize] {
                        self.valid[h.0 as usize] = true;
                        for l in &self.layouts[h.0 as usize] {
                            self.phv[l.field.0 as usize] = 0;
                        }
                    }
                }
                Stmt::SetInvalid(h) => self.valid[h.0 as usize] = false,
                Stmt::SetEgressPort(e) => {
                    ctx.forward = Forward::Unicast(self.eval(e) as u16);
                }
                Stmt::SetMulticastGroup(g) => ctx.forward = Forward::Multicast(*g),
                Stmt::Drop => ctx.dropped = true,
                Stmt::CloneToCpu => {
                    // The copy is taken here; in ingress the rule checker guarantees that no
                    // header was rewritten before this point.
                    ctx.clone = true;
                    self.deparse(ctx.packet, ctx.clone_bytes);
                }
                Stmt::Digest(d) => ctx.digests.push(*d),
            }
        }
    }

    fn carry(&self, fields: &[FieldId]) -> Carried {
        let mut c = Carried::default();
        for (i, f) in fields.iter().enumerate() {
            c.values[i] = self.phv[f.0 as usize];
        }
        c
    }

    fn restore(&mut self, fields: &[FieldId], carried: &Carried) {
        for (i, f) in fields.iter().enumerate() {
            self.phv[f.0 as usize] = carried.values[i] & self.masks[f.0 as usize];
        }
    }

    fn set_intrinsic(&mut self, which: Intrinsic, value: u64) {
        let f = self.program.intrinsic(which);
        self.phv[f.0 as usize] = value & self.masks[f.0 as usize];
    }

    /// Number of entries in a table.
    pub fn table_len(&self, table: &str) -> Result<usize, ModelError> {
        let t = self
            .program
            .table_by_name(table)
            .ok_or_else(|| ModelError::UnknownTable(table.to_string()))?;
        Ok(self.tables[t.0 as usize].entries)
    }
}

struct PassCtx<'a> {
    packet: &'a [u8],
    clone_bytes: &'a mut Vec<u8>,
    forward: Forward,
    dropped: bool,
    clone: bool,
    digests: Vec<DigestId>,
}

impl<'a> PassCtx<'a> {
    fn new(packet: &'a [u8], clone_bytes: &'a mut Vec<u8>) -> Self {
        PassCtx {
            packet,
            clone_bytes,
            forward: Forward::None,
            dropped: false,
            clone: false,
            digests: Vec::new(),
        }
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
        self.reset_phv();
        self.set_intrinsic(Intrinsic::IngressPort, input.ingress_port as u64);
        self.set_intrinsic(Intrinsic::IngressTstamp, input.tstamp_ns);
        self.routed = input.routed_egress_port;
        self.parse(packet);
        let program = Arc::clone(&self.program);
        let mut ctx = PassCtx::new(packet, &mut out.clone_bytes);
        self.run(&program, &program.ingress, &mut ctx);
        let (dropped, forward, clone, digests) = (ctx.dropped, ctx.forward, ctx.clone, ctx.digests);
        self.deparse(packet, &mut out.bytes);
        out.dropped = dropped;
        out.forward = forward;
        out.bridged = self.carry(&self.bridged);
        if clone {
            let mut c = self.carry(&self.cloned);
            c.clone_kind = CLONE_INGRESS as u8;
            out.clone = Some(c);
        }
        for d in digests {
            let values = program.digests[d.0 as usize]
                .fields
                .iter()
                .map(|f| self.phv[f.0 as usize])
                .collect();
            out.digests.push(DigestMessage { digest: d, values });
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
        self.reset_phv();
        self.set_intrinsic(Intrinsic::EgressIngressPort, input.ingress_port as u64);
        self.set_intrinsic(Intrinsic::EgressPort, input.egress_port as u64);
        self.set_intrinsic(Intrinsic::EgressQueue, input.queue as u64);
        self.set_intrinsic(Intrinsic::EnqTstamp, input.enq_tstamp_ns);
        self.set_intrinsic(Intrinsic::EnqQdepth, input.enq_qdepth as u64);
        self.set_intrinsic(Intrinsic::PacketLength, input.packet_length as u64);
        self.set_intrinsic(Intrinsic::CloneKind, carried.clone_kind as u64);
        if carried.clone_kind == 0 {
            let fields = std::mem::take(&mut self.bridged);
            self.restore(&fields, carried);
            self.bridged = fields;
        } else {
            let fields = std::mem::take(&mut self.cloned);
            self.restore(&fields, carried);
            self.cloned = fields;
        }
        self.parse(packet);
        let program = Arc::clone(&self.program);
        let mut unused = Vec::new();
        let mut ctx = PassCtx::new(packet, &mut unused);
        self.run(&program, &program.egress, &mut ctx);
        let (dropped, clone) = (ctx.dropped, ctx.clone);
        self.deparse(packet, &mut out.bytes);
        out.dropped = dropped;
        if clone {
            let mut c = self.carry(&self.cloned);
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
        self.registers[r]
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
        let cell = self.registers[r]
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
        Ok(&self.registers[r])
    }

    fn register_sync(&mut self, register: &str) -> Result<(), ModelError> {
        self.register_id(register).map(|_| ())
    }

    fn register_reset(&mut self, register: &str) -> Result<(), ModelError> {
        let r = self.register_id(register)?;
        self.registers[r].iter_mut().for_each(|c| *c = 0);
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
        let state = &mut self.tables[t.0 as usize];
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
