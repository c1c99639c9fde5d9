//! The compiler: [`Code::compile`] turns a [`Program`] into [`Code`] once (register layout,
//! word actions, jump threading), and the per-program cache of compiled code.

use super::*;

pub(super) fn program_error(message: String) -> ModelError {
    ModelError::TableEntry {
        table: "(program)".into(),
        message,
    }
}

/// A compiled operand: a PHV slot with an upper bound of its value (as a mask), or an
/// immediate.
#[derive(Clone, Copy, Debug)]
pub(super) enum Opnd {
    Slot(u16, u64),
    Imm(u64),
}

impl Opnd {
    pub(super) fn bound(self) -> u64 {
        match self {
            Opnd::Slot(_, b) => b,
            Opnd::Imm(v) => smear(v),
        }
    }
}

pub(super) struct Compiler<'p> {
    pub(super) program: &'p Program,
    pub(super) field_header: Vec<u8>,
    pub(super) masks: Vec<u64>,
    pub(super) ins: Vec<Ins>,
    pub(super) temp_base: usize,
    pub(super) next_temp: usize,
    pub(super) max_temp: usize,
}

impl Compiler<'_> {
    pub(super) fn width(&self, e: &Expr) -> u8 {
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

    pub(super) fn temp(&mut self) -> Result<u16, ModelError> {
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
    pub(super) fn slot(&mut self, o: Opnd) -> Result<u16, ModelError> {
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
    pub(super) fn value(&mut self, e: &Expr) -> Result<(Opnd, Option<usize>), ModelError> {
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
    pub(super) fn bin(&mut self, e: &Expr) -> Result<(Opnd, Option<usize>), ModelError> {
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
    pub(super) fn concat(
        &mut self,
        a: &Expr,
        b: &Expr,
    ) -> Result<Option<(Opnd, Option<usize>)>, ModelError> {
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
    pub(super) fn shr(
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
    pub(super) fn branch(
        &mut self,
        e: &Expr,
        when: bool,
        out: &mut Vec<usize>,
    ) -> Result<(), ModelError> {
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
    pub(super) fn patch(&mut self, list: &[usize]) {
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

    pub(super) fn dirty(&mut self, field: u16) {
        let h = self.field_header[field as usize];
        if h != NO_HEADER {
            self.ins.push(Ins::Dirty(h));
        }
    }

    pub(super) fn assign(&mut self, dst: u16, e: &Expr) -> Result<(), ModelError> {
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
    pub(super) fn cond_set(
        &mut self,
        op: CmpOp,
        a: &Expr,
        b: &Expr,
        then: &Stmt,
    ) -> Result<bool, ModelError> {
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

    pub(super) fn body(&mut self, body: &[Stmt]) -> Result<(), ModelError> {
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
                Stmt::Random(dst) => {
                    self.ins.push(Ins::Random {
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

/// Calls `f` for every statement of `body`, nested ones included ([`Stmt::visit`]).
pub(super) fn visit(body: &[Stmt], f: &mut impl FnMut(&Stmt)) {
    Stmt::visit(body, f)
}

/// Register storage layout: registers whose register actions all use the same index
/// expression (and have the same size) share one interleaved slab of 32-bit words, each
/// cell group padded to a power of two of words up to a 64-byte line; the others get a
/// slab of their native width.
pub(super) fn layout_registers(program: &Program) -> (Vec<RegLoc>, Vec<(SlabKind, usize)>) {
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
pub(super) fn slab_bases(slabs: &[(SlabKind, usize)]) -> (Vec<usize>, [usize; 3]) {
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
pub(super) fn word_action(
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
pub(super) fn jump_target(ins: &mut Ins) -> Option<&mut u32> {
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
pub(super) fn thread_jumps(ins: &mut [Ins]) {
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
pub(super) fn group_word_actions(
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

impl Code {
    pub(super) fn compile(program: &Program) -> Result<Code, ModelError> {
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

    pub(super) fn intrinsic(&self, which: Intrinsic) -> (u16, u64) {
        self.intrinsics[which as usize]
    }
}

/// Compiled programs, shared by every model of the same `Arc<Program>` (a fabric of many
/// switches runs one or two programs; one copy of the code stays in cache).
pub(super) static COMPILED: Mutex<Vec<(Weak<Program>, Arc<Code>)>> = Mutex::new(Vec::new());

pub(super) fn compiled(program: &Arc<Program>) -> Result<Arc<Code>, ModelError> {
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
