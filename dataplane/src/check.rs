//! Build-time rule checks: a program that would not fit Tofino (or would behave
//! differently on Tofino and BMv2) fails here with a message naming the object.
//!
//! Rules (each has a test in `tests/rules.rs`):
//! - widths: fields 1..=64 bits, headers a whole number of bytes, expressions type-check
//!   (booleans only as conditions, no silent truncation on assignment, constants fit);
//! - a register is used in one pipeline, and at most one of its register actions may run on
//!   any path through a pipeline (may-analysis: two executes in sequence conflict unless they
//!   sit on the two branches of one `if`), likewise tables and hash units;
//! - register actions: ≤ 2 conditions, ≤ 2 distinct PHV operands of ≤ 32 bits, only
//!   stateful-ALU operations (+, -, |+|, |-|, min, max, &, |, ^, set), ≤ 2 updates per word
//!   with disjoint predicates, one output value, `hi` only on pair registers;
//! - tables: exact / ternary keys ≤ 128 bits, straight-line actions, a valid default;
//! - unicast, multicast and digests only in ingress; a path does not both unicast and
//!   multicast; no header rewrite in ingress before a clone to the CPU on the same path;
//! - digests ≤ 47 bytes; hash inputs byte-aligned, outputs ≤ 32 bits;
//! - parser: transitions go forward (no loops), select fields belong to extracted headers.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::BuildError;
use crate::ir::*;

/// Widest exact or ternary key of one table (conservative single-unit budget).
pub const MAX_KEY_BITS: u32 = 128;
/// Largest digest (bytes).
pub const MAX_DIGEST_BYTES: u32 = 47;

/// Runs every rule.
pub fn check(p: &Program) -> Result<(), BuildError> {
    check_names(p)?;
    for (i, f) in p.fields.iter().enumerate() {
        if f.width == 0 || f.width > 64 {
            return Err(BuildError::Type {
                place: p.field_path(FieldId(i as u16)),
                message: format!("width {} is outside 1..=64", f.width),
            });
        }
    }
    for h in &p.headers {
        if h.bits(p) % 8 != 0 {
            return Err(BuildError::Type {
                place: format!("header `{}`", h.name),
                message: format!("{} bits is not a whole number of bytes", h.bits(p)),
            });
        }
    }
    check_parser(p)?;
    for r in &p.registers {
        if ![8, 16, 32, 64].contains(&r.width) || !r.size.is_power_of_two() {
            return Err(BuildError::Type {
                place: format!("register `{}`", r.name),
                message: format!(
                    "cells must be 8, 16, 32 or 64 (2×32) bits and the size a power of two (got {} bits × {})",
                    r.width, r.size
                ),
            });
        }
    }
    for ra in &p.register_actions {
        check_register_action(p, ra)?;
    }
    for h in &p.hashes {
        let bits: u32 = h.inputs.iter().map(|f| p.field(*f).width as u32).sum();
        if h.inputs.iter().any(|f| p.field(*f).width % 8 != 0) || h.width > 32 || h.width == 0 {
            return Err(BuildError::Type {
                place: format!("hash unit `{}`", h.name),
                message: format!(
                    "inputs must be whole bytes ({bits} bits given) and the output 1..=32 bits (got {})",
                    h.width
                ),
            });
        }
    }
    for d in &p.digests {
        let bits: u32 = d.fields.iter().map(|f| p.field(*f).width as u32).sum();
        let bytes = bits.div_ceil(8);
        if bytes > MAX_DIGEST_BYTES {
            return Err(BuildError::DigestTooLarge {
                digest: d.name.clone(),
                bytes,
                limit: MAX_DIGEST_BYTES,
            });
        }
    }
    for t in &p.tables {
        check_table(p, t)?;
    }
    let mut usage = Usage::default();
    let ingress = walk(p, Gress::Ingress, &p.ingress, "ingress", &mut usage)?;
    let egress = walk(p, Gress::Egress, &p.egress, "egress", &mut usage)?;
    let _ = (ingress, egress);
    for (reg, gresses) in &usage.register_gress {
        if gresses.len() > 1 {
            return Err(BuildError::RegisterInBothGresses {
                register: p.registers[reg.0 as usize].name.clone(),
            });
        }
    }
    for (kind, map) in [
        ("table", &usage.table_gress),
        ("hash unit", &usage.hash_gress),
    ] {
        for (name, gresses) in map {
            if gresses.len() > 1 {
                return Err(BuildError::UsedTwice {
                    gress: "ingress and egress".into(),
                    kind,
                    name: name.clone(),
                });
            }
        }
    }
    Ok(())
}

fn check_names(p: &Program) -> Result<(), BuildError> {
    fn unique<'a>(
        kind: &'static str,
        names: impl Iterator<Item = &'a str>,
    ) -> Result<(), BuildError> {
        let mut seen = BTreeSet::new();
        for n in names {
            if !seen.insert(n) {
                return Err(BuildError::Duplicate {
                    kind,
                    name: n.to_string(),
                });
            }
        }
        Ok(())
    }
    unique("header", p.headers.iter().map(|h| h.name.as_str()))?;
    unique("register", p.registers.iter().map(|r| r.name.as_str()))?;
    unique(
        "register action",
        p.register_actions.iter().map(|r| r.name.as_str()),
    )?;
    unique("table", p.tables.iter().map(|t| t.name.as_str()))?;
    unique("action", p.actions.iter().map(|a| a.name.as_str()))?;
    unique("hash unit", p.hashes.iter().map(|h| h.name.as_str()))?;
    unique("constant", p.constants.iter().map(|c| c.name.as_str()))?;
    let meta: Vec<&str> = p
        .fields
        .iter()
        .filter(|f| matches!(f.owner, FieldOwner::Metadata { .. }))
        .map(|f| f.name.as_str())
        .collect();
    unique("metadata field", meta.into_iter())
}

fn check_parser(p: &Program) -> Result<(), BuildError> {
    let mut extracted = BTreeSet::new();
    for (i, s) in p.parser.iter().enumerate() {
        let err = |message: String| BuildError::Parser {
            state: s.name.clone(),
            message,
        };
        if let Some(h) = s.extract {
            if p.headers.get(h.0 as usize).is_none_or(|h| h.synthesized) {
                return Err(err("extracts a header that is not on the wire".into()));
            }
            extracted.insert(h);
        }
        let targets: Vec<usize> = match &s.transition {
            Transition::Accept => vec![],
            Transition::Goto(t) => vec![*t],
            Transition::Select { field, cases } => {
                match p.fields.get(field.0 as usize).map(|f| f.owner) {
                    Some(FieldOwner::Header(h)) if extracted.contains(&h) => {}
                    _ => {
                        return Err(err(format!(
                            "selects on `{}`, which is not a field of a header extracted so far",
                            p.field_path(*field)
                        )))
                    }
                }
                let w = p.field(*field).width;
                for (v, _) in cases {
                    if w < 64 && *v >> w != 0 {
                        return Err(err(format!("case value {v:#x} does not fit {w} bits")));
                    }
                }
                cases.iter().filter_map(|(_, t)| *t).collect()
            }
        };
        for t in targets {
            if t <= i || t >= p.parser.len() {
                return Err(err(format!(
                    "transition to state #{t} must go forward to an existing state (no parser loops)"
                )));
            }
        }
    }
    Ok(())
}

fn check_register_action(p: &Program, ra: &RegisterAction) -> Result<(), BuildError> {
    let err = |message: String| BuildError::StatefulAlu {
        action: ra.name.clone(),
        message,
    };
    let reg = p
        .registers
        .get(ra.register.0 as usize)
        .ok_or_else(|| err("names a register that does not exist".into()))?;
    if ra.conditions.len() > 2 {
        return Err(err(format!(
            "{} conditions; a stateful ALU evaluates at most 2",
            ra.conditions.len()
        )));
    }
    let mut phv = BTreeSet::new();
    let mut operand = |o: SaluOperand| -> Result<(), BuildError> {
        match o {
            SaluOperand::Reg(Word::Hi) if !reg.is_pair() => Err(err(format!(
                "uses the `hi` word of `{}`, which is a single {}-bit register",
                reg.name, reg.width
            ))),
            SaluOperand::Phv(f) => {
                if p.field(f).width > 32 {
                    return Err(err(format!(
                        "PHV operand `{}` is {} bits; stateful ALU operands are at most 32 bits",
                        p.field_path(f),
                        p.field(f).width
                    )));
                }
                phv.insert(f);
                Ok(())
            }
            SaluOperand::Const(v) if reg.word_width() < 64 && v >> reg.word_width() != 0 => {
                Err(err(format!(
                    "constant {v:#x} does not fit the {}-bit word",
                    reg.word_width()
                )))
            }
            _ => Ok(()),
        }
    };
    for c in &ra.conditions {
        operand(c.left)?;
        if let Some((_, r)) = c.right {
            operand(r)?;
        }
    }
    for u in &ra.updates {
        if matches!(u.op, SaluOp::Shl | SaluOp::Mul) {
            return Err(err(format!(
                "operation {:?} is not available in a stateful ALU (allowed: set, +, -, |+|, |-|, min, max, &, |, ^)",
                u.op
            )));
        }
        if u.word == Word::Hi && !reg.is_pair() {
            return Err(err(format!(
                "updates `hi` of the single-word register `{}`",
                reg.name
            )));
        }
        operand(u.a)?;
        if u.op != SaluOp::Set {
            operand(u.b)?;
        }
    }
    if phv.len() > 2 {
        return Err(err(format!(
            "reads {} PHV fields; a stateful ALU takes at most 2 PHV operands",
            phv.len()
        )));
    }
    // Predicates must only distinguish outcomes of conditions that exist.
    let valid_pred = |pr: Pred| -> bool {
        match ra.conditions.len() {
            0 => pr.0 == 0b1111 || pr.0 == 0,
            1 => (pr.0 & 0b11) == (pr.0 >> 2),
            _ => pr.0 <= 0b1111,
        }
    };
    for word in [Word::Lo, Word::Hi] {
        let ups: Vec<&SaluUpdate> = ra.updates.iter().filter(|u| u.word == word).collect();
        if ups.len() > 2 {
            return Err(err(format!(
                "{} updates of word {word:?}; each word has 2 update ALUs",
                ups.len()
            )));
        }
        if ups.len() == 2 && ups[0].when.0 & ups[1].when.0 != 0 {
            return Err(err(format!(
                "two updates of word {word:?} under overlapping conditions"
            )));
        }
    }
    for u in &ra.updates {
        if !valid_pred(u.when) {
            return Err(err(
                "an update's predicate names a condition that does not exist".into(),
            ));
        }
    }
    let mut seen = 0u8;
    for o in &ra.outputs {
        if !valid_pred(o.when) {
            return Err(err(
                "an output's predicate names a condition that does not exist".into(),
            ));
        }
        if seen & o.when.0 != 0 {
            return Err(err(
                "two output values under overlapping conditions; a stateful ALU returns one value"
                    .into(),
            ));
        }
        seen |= o.when.0;
        if matches!(
            o.value,
            SaluOutputValue::Old(Word::Hi) | SaluOutputValue::New(Word::Hi)
        ) && !reg.is_pair()
        {
            return Err(err("outputs `hi` of a single-word register".into()));
        }
    }
    Ok(())
}

fn check_table(p: &Program, t: &Table) -> Result<(), BuildError> {
    let place = format!("table `{}`", t.name);
    for kind in [MatchKind::Exact, MatchKind::Ternary] {
        let bits: u32 = t
            .keys
            .iter()
            .filter(|(_, k)| *k == kind)
            .map(|(f, _)| p.field(*f).width as u32)
            .sum();
        if bits > MAX_KEY_BITS {
            return Err(BuildError::TableKeyTooWide {
                table: t.name.clone(),
                kind: if kind == MatchKind::Exact {
                    "exact"
                } else {
                    "ternary"
                },
                bits,
                limit: MAX_KEY_BITS,
            });
        }
    }
    if t.size == 0 {
        return Err(BuildError::Type {
            place,
            message: "size 0".into(),
        });
    }
    for (f, _) in &t.keys {
        if matches!(p.field(*f).owner, FieldOwner::ActionParam(_)) {
            return Err(BuildError::Type {
                place,
                message: format!("key `{}` is an action parameter", p.field_path(*f)),
            });
        }
    }
    let (default, args) = &t.default_action;
    if !t.actions.contains(default) {
        return Err(BuildError::Type {
            place,
            message: "the default action is not one of the table's actions".into(),
        });
    }
    let a = &p.actions[default.0 as usize];
    if a.params.len() != args.len() {
        return Err(BuildError::Type {
            place,
            message: format!(
                "default action `{}` takes {} parameters, {} given",
                a.name,
                a.params.len(),
                args.len()
            ),
        });
    }
    for id in &t.actions {
        let a = &p.actions[id.0 as usize];
        for s in &a.body {
            if matches!(
                s,
                Stmt::If(..)
                    | Stmt::Apply(_)
                    | Stmt::Execute { .. }
                    | Stmt::Hash(..)
                    | Stmt::Random(_)
                    | Stmt::CloneToCpu
                    | Stmt::Digest(_)
            ) {
                return Err(BuildError::Type {
                    place: format!("action `{}`", a.name),
                    message:
                        "actions are straight-line: assignments, validity, forwarding and drop only"
                            .into(),
                });
            }
        }
    }
    Ok(())
}

#[derive(Debug)]
enum Ty {
    Bool,
    Bits(u8),
}

fn type_of(p: &Program, gress: Gress, place: &str, e: &Expr) -> Result<Ty, BuildError> {
    let terr = |message: String| BuildError::Type {
        place: place.to_string(),
        message,
    };
    let bits = |e: &Expr| -> Result<u8, BuildError> {
        match type_of(p, gress, place, e)? {
            Ty::Bits(w) => Ok(w),
            Ty::Bool => Err(terr("a boolean is used where bits are expected".into())),
        }
    };
    let boolean = |e: &Expr| -> Result<(), BuildError> {
        match type_of(p, gress, place, e)? {
            Ty::Bool => Ok(()),
            Ty::Bits(_) => Err(terr(
                "bits are used where a boolean is expected (compare with a constant)".into(),
            )),
        }
    };
    Ok(match e {
        Expr::Field(f) => {
            let field = p
                .fields
                .get(f.0 as usize)
                .ok_or_else(|| terr(format!("unknown field #{}", f.0)))?;
            if let FieldOwner::Intrinsic(i) = field.owner {
                if i.gress() != gress {
                    return Err(BuildError::WrongGress {
                        place: place.to_string(),
                        what: format!("intrinsic `{}`", field.name),
                        allowed: i.gress().to_string(),
                    });
                }
            }
            Ty::Bits(field.width)
        }
        Expr::Const { value, width } => {
            if *width == 0 || *width > 64 || (*width < 64 && value >> width != 0) {
                return Err(terr(format!(
                    "constant {value:#x} does not fit {width} bits"
                )));
            }
            Ty::Bits(*width)
        }
        Expr::Bin(_, a, b) => Ty::Bits(bits(a)?.max(bits(b)?)),
        Expr::Shl(a, n) | Expr::Shr(a, n) => {
            let w = bits(a)?;
            if *n >= w {
                return Err(terr(format!("shift by {n} of a {w}-bit value")));
            }
            Ty::Bits(w)
        }
        Expr::Slice(a, hi, lo) => {
            let w = bits(a)?;
            if hi < lo || *hi >= w {
                return Err(terr(format!("slice [{hi}:{lo}] of a {w}-bit value")));
            }
            Ty::Bits(hi - lo + 1)
        }
        Expr::Cast(a, w) => {
            bits(a)?;
            if *w == 0 || *w > 64 {
                return Err(terr(format!("cast to {w} bits")));
            }
            Ty::Bits(*w)
        }
        Expr::Cmp(_, a, b) => {
            bits(a)?;
            bits(b)?;
            Ty::Bool
        }
        Expr::And(a, b) | Expr::Or(a, b) => {
            boolean(a)?;
            boolean(b)?;
            Ty::Bool
        }
        Expr::Not(a) => {
            boolean(a)?;
            Ty::Bool
        }
        Expr::IsValid(h) => {
            if p.headers.get(h.0 as usize).is_none() {
                return Err(terr(format!("unknown header #{}", h.0)));
            }
            Ty::Bool
        }
    })
}

#[derive(Default)]
struct Usage {
    register_gress: BTreeMap<RegisterId, BTreeSet<Gress>>,
    table_gress: BTreeMap<String, BTreeSet<Gress>>,
    hash_gress: BTreeMap<String, BTreeSet<Gress>>,
}

/// What a statement list may do on some path (may-analysis).
#[derive(Clone)]
struct Effects {
    registers: BTreeMap<RegisterId, String>,
    tables: BTreeSet<TableId>,
    hashes: BTreeSet<HashId>,
    /// Possible forwarding states over the paths: bit 0 none, bit 1 unicast, bit 2
    /// multicast (path-sensitive, so exclusive branches do not conflict).
    forwarding: u8,
    header_written: Option<String>,
}

const FWD_NONE: u8 = 1;
const FWD_UNICAST: u8 = 2;
const FWD_MULTICAST: u8 = 4;

impl Default for Effects {
    fn default() -> Self {
        Effects {
            registers: BTreeMap::new(),
            tables: BTreeSet::new(),
            hashes: BTreeSet::new(),
            forwarding: FWD_NONE,
            header_written: None,
        }
    }
}

impl Effects {
    fn seq(
        &mut self,
        p: &Program,
        gress: Gress,
        next: Effects,
        place: &str,
    ) -> Result<(), BuildError> {
        for (r, name) in &next.registers {
            if let Some(first) = self.registers.get(r) {
                return Err(BuildError::RegisterTouchedTwice {
                    gress: gress.to_string(),
                    register: p.registers[r.0 as usize].name.clone(),
                    first: first.clone(),
                    second: name.clone(),
                });
            }
        }
        for t in &next.tables {
            if self.tables.contains(t) {
                return Err(BuildError::UsedTwice {
                    gress: gress.to_string(),
                    kind: "table",
                    name: p.tables[t.0 as usize].name.clone(),
                });
            }
        }
        for h in &next.hashes {
            if self.hashes.contains(h) {
                return Err(BuildError::UsedTwice {
                    gress: gress.to_string(),
                    kind: "hash unit",
                    name: p.hashes[h.0 as usize].name.clone(),
                });
            }
        }
        self.registers.extend(next.registers);
        self.tables.extend(next.tables);
        self.hashes.extend(next.hashes);
        let mut combined = 0u8;
        for a in [FWD_NONE, FWD_UNICAST, FWD_MULTICAST] {
            for b in [FWD_NONE, FWD_UNICAST, FWD_MULTICAST] {
                if self.forwarding & a == 0 || next.forwarding & b == 0 {
                    continue;
                }
                combined |= match (a, b) {
                    (FWD_NONE, x) | (x, FWD_NONE) => x,
                    (x, y) if x == y => x,
                    _ => {
                        return Err(BuildError::UnicastAndMulticast {
                            place: place.to_string(),
                        })
                    }
                };
            }
        }
        self.forwarding = combined;
        if self.header_written.is_none() {
            self.header_written = next.header_written;
        }
        Ok(())
    }
    fn join(mut self, other: Effects) -> Effects {
        for (r, n) in other.registers {
            self.registers.entry(r).or_insert(n);
        }
        self.tables.extend(other.tables);
        self.hashes.extend(other.hashes);
        self.forwarding |= other.forwarding;
        if self.header_written.is_none() {
            self.header_written = other.header_written;
        }
        self
    }
}

fn walk(
    p: &Program,
    gress: Gress,
    body: &[Stmt],
    place: &str,
    usage: &mut Usage,
) -> Result<Effects, BuildError> {
    let mut acc = Effects::default();
    for s in body {
        let mut here = Effects::default();
        match s {
            Stmt::Assign(dst, value) => {
                let place = format!("{place}: assignment to `{}`", p.field_path(*dst));
                let field = p.field(*dst);
                if matches!(
                    field.owner,
                    FieldOwner::Intrinsic(_) | FieldOwner::ActionParam(_)
                ) {
                    return Err(BuildError::Type {
                        place,
                        message: "intrinsic metadata and action parameters are read-only".into(),
                    });
                }
                match type_of(p, gress, &place, value)? {
                    Ty::Bool => {
                        return Err(BuildError::Type {
                            place,
                            message: "assigns a boolean; use if/else to set a flag".into(),
                        })
                    }
                    Ty::Bits(w) if w > field.width => {
                        return Err(BuildError::Type {
                            place,
                            message: format!(
                                "a {w}-bit value would be truncated to {} bits; slice or cast it explicitly",
                                field.width
                            ),
                        })
                    }
                    _ => {}
                }
                if let FieldOwner::Header(_) = field.owner {
                    here.header_written = Some(p.field_path(*dst));
                }
            }
            Stmt::If(cond, then, otherwise) => {
                let cplace = format!("{place}: if condition");
                if !matches!(type_of(p, gress, &cplace, cond)?, Ty::Bool) {
                    return Err(BuildError::Type {
                        place: cplace,
                        message: "an if condition must be a boolean".into(),
                    });
                }
                let a = walk(p, gress, then, place, usage)?;
                let b = walk(p, gress, otherwise, place, usage)?;
                here = a.join(b);
            }
            Stmt::Apply(t) => {
                let table = &p.tables[t.0 as usize];
                here.tables.insert(*t);
                usage
                    .table_gress
                    .entry(table.name.clone())
                    .or_default()
                    .insert(gress);
                // Any action of the table may run: join their effects.
                let mut joined: Option<Effects> = None;
                for a in &table.actions {
                    let action = &p.actions[a.0 as usize];
                    let eff = walk(
                        p,
                        gress,
                        &action.body,
                        &format!("{place}: action `{}`", action.name),
                        usage,
                    )?;
                    joined = Some(match joined {
                        None => eff,
                        Some(j) => j.join(eff),
                    });
                }
                if let Some(j) = joined {
                    here.forwarding = j.forwarding;
                    here.header_written = j.header_written;
                }
            }
            Stmt::Execute {
                action,
                index,
                output,
            } => {
                let ra = &p.register_actions[action.0 as usize];
                let reg = &p.registers[ra.register.0 as usize];
                let eplace = format!("{place}: execute `{}`", ra.name);
                match type_of(p, gress, &eplace, index)? {
                    Ty::Bits(w) if w <= reg.index_bits() => {}
                    other => {
                        return Err(BuildError::Type {
                            place: eplace,
                            message: format!(
                                "index is {other:?}; register `{}` takes a {}-bit index",
                                reg.name,
                                reg.index_bits()
                            ),
                        })
                    }
                }
                if let Some(out) = output {
                    if p.field(*out).width < reg.word_width() {
                        return Err(BuildError::Type {
                            place: eplace,
                            message: format!(
                                "output `{}` is narrower than the {}-bit register word",
                                p.field_path(*out),
                                reg.word_width()
                            ),
                        });
                    }
                }
                for c in &ra.conditions {
                    for o in [Some(c.left), c.right.map(|r| r.1)].into_iter().flatten() {
                        if let SaluOperand::Phv(f) = o {
                            type_of(p, gress, &eplace, &Expr::Field(f))?;
                        }
                    }
                }
                for u in &ra.updates {
                    for o in [u.a, u.b] {
                        if let SaluOperand::Phv(f) = o {
                            type_of(p, gress, &eplace, &Expr::Field(f))?;
                        }
                    }
                }
                here.registers.insert(ra.register, ra.name.clone());
                usage
                    .register_gress
                    .entry(ra.register)
                    .or_default()
                    .insert(gress);
            }
            Stmt::Hash(h, out) => {
                let unit = &p.hashes[h.0 as usize];
                let hplace = format!("{place}: hash `{}`", unit.name);
                for f in &unit.inputs {
                    type_of(p, gress, &hplace, &Expr::Field(*f))?;
                }
                if p.field(*out).width < unit.width {
                    return Err(BuildError::Type {
                        place: hplace,
                        message: format!(
                            "output field is narrower than the {}-bit hash",
                            unit.width
                        ),
                    });
                }
                here.hashes.insert(*h);
                usage
                    .hash_gress
                    .entry(unit.name.clone())
                    .or_default()
                    .insert(gress);
            }
            Stmt::Random(out) => {
                let rplace = format!("{place}: random into `{}`", p.field_path(*out));
                let field = p.field(*out);
                if !matches!(field.owner, FieldOwner::Metadata { .. }) {
                    return Err(BuildError::Type {
                        place: rplace,
                        message: "a random number goes into user metadata".into(),
                    });
                }
                // tofino.p4's `Random<T>` draws at most 32 bits per call.
                if field.width > 32 {
                    return Err(BuildError::Type {
                        place: rplace,
                        message: format!("{} bits; a Random extern gives at most 32", field.width),
                    });
                }
            }
            Stmt::SetValid(h) | Stmt::SetInvalid(h) => {
                if p.headers.get(h.0 as usize).is_none() {
                    return Err(BuildError::Type {
                        place: place.to_string(),
                        message: format!("unknown header #{}", h.0),
                    });
                }
            }
            Stmt::SetEgressPort(e) => {
                if gress != Gress::Ingress {
                    return Err(wrong(place, "setting the unicast egress port"));
                }
                type_of(p, gress, place, e)?;
                here.forwarding = FWD_UNICAST;
            }
            Stmt::SetMulticastGroup(_) => {
                if gress != Gress::Ingress {
                    return Err(wrong(place, "multicast"));
                }
                here.forwarding = FWD_MULTICAST;
            }
            Stmt::Digest(d) => {
                if gress != Gress::Ingress {
                    return Err(wrong(
                        place,
                        "a digest (TNA Digest is an ingress deparser extern)",
                    ));
                }
                if p.digests.get(d.0 as usize).is_none() {
                    return Err(BuildError::Type {
                        place: place.to_string(),
                        message: "unknown digest".into(),
                    });
                }
            }
            Stmt::CloneToCpu => {
                if gress == Gress::Ingress {
                    if let Some(field) = &acc.header_written {
                        return Err(BuildError::HeaderWriteBeforeClone {
                            place: place.to_string(),
                            field: field.clone(),
                        });
                    }
                }
            }
            Stmt::Drop => {}
        }
        acc.seq(p, gress, here, place)?;
    }
    Ok(acc)
}

fn wrong(place: &str, what: &str) -> BuildError {
    BuildError::WrongGress {
        place: place.to_string(),
        what: what.to_string(),
        allowed: "ingress".into(),
    }
}
