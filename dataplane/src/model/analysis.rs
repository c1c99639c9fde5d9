//! Analyses of the program the compiler and the emitter use: the fields a body reads and
//! writes, and `exposed_reads` (the must-write walk that decides which metadata a pass
//! clears).

use super::*;

/// Calls `read` with every field `e` reads.
pub(super) fn expr_fields(e: &Expr, read: &mut impl FnMut(FieldId)) {
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
pub(super) fn salu_phv_operands(ra: &RegisterAction) -> impl Iterator<Item = FieldId> + '_ {
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
pub(super) fn exposed_reads(
    program: &Program,
    body: &[Stmt],
    read_at_end: &[FieldId],
) -> Vec<bool> {
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
                    Stmt::Random(dst) => Self::write(*dst, w),
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
pub(super) fn field_use(program: &Program) -> (Vec<bool>, Vec<bool>) {
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
        Stmt::Hash(_, dst) | Stmt::Random(dst) => written[dst.0 as usize] = true,
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
