//! P4-16 emission for Tofino (TNA, `tna.p4`) and BMv2 (`v1model.p4`) from one [`Program`].
//!
//! Output is deterministic (declaration order of the IR), indented by four spaces, and
//! names come from the IR. Target idioms:
//!
//! | IR | TNA | v1model |
//! |---|---|---|
//! | register + register action | `Register` + `RegisterAction` | `register<bit<W>>` read-modify-write block |
//! | hash unit | `Hash<bit<W>>(HashAlgorithm_t.CRC32)` | `hash(.., HashAlgorithm.crc32, ..)` |
//! | bridged metadata | `bridge_h` header emitted by the ingress deparser | user metadata (kept) |
//! | clone to CPU | `Mirror` + `mirror_h` (I2E / E2E) | `clone_preserving_field_list` + `@field_list(1)` |
//! | forwarding table | exact table on (destination, ECMP bucket) | the same |
//! | digest | `Digest` in the ingress deparser | `digest` |
//! | intrinsic inputs | `meta.intr_*` copied from `ig_intr_md` / `eg_intr_md` | from `standard_metadata` (µs × 1000) |

use std::fmt::Write as _;

use hawkmesh_dataplane::ir::*;

/// Which P4 architecture to emit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Intel Tofino Native Architecture.
    Tna,
    /// BMv2 simple_switch v1model.
    V1model,
}

const PKT_TYPE_NORMAL: u64 = 0;

struct Emitter<'a> {
    p: &'a Program,
    t: Target,
    out: String,
    indent: usize,
    gress: Gress,
}

fn bits(w: u8) -> String {
    format!("bit<{w}>")
}

impl<'a> Emitter<'a> {
    fn line(&mut self, s: &str) {
        if s.is_empty() {
            self.out.push('\n');
            return;
        }
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn open(&mut self, s: &str) {
        self.line(&format!("{s} {{"));
        self.indent += 1;
    }

    fn close(&mut self) {
        self.indent -= 1;
        self.line("}");
    }

    fn comment(&mut self, s: &str) {
        if !s.is_empty() {
            self.line(&format!("// {s}"));
        }
    }

    fn field(&self, id: FieldId) -> String {
        let f = self.p.field(id);
        match f.owner {
            FieldOwner::Header(h) => {
                format!("hdr.{}.{}", self.p.headers[h.0 as usize].name, f.name)
            }
            FieldOwner::Metadata { .. } => format!("meta.{}", f.name),
            FieldOwner::ActionParam(_) => f.name.clone(),
            FieldOwner::Intrinsic(_) => format!("meta.intr_{}", f.name),
        }
    }

    fn width(&self, e: &Expr) -> u8 {
        match e {
            Expr::Field(f) => self.p.field(*f).width,
            Expr::Const { width, .. } => *width,
            Expr::Bin(_, a, b) => self.width(a).max(self.width(b)),
            Expr::Shl(a, _) | Expr::Shr(a, _) => self.width(a),
            Expr::Slice(_, hi, lo) => hi - lo + 1,
            Expr::Cast(_, w) => *w,
            _ => 1,
        }
    }

    fn at_width(&self, e: &Expr, w: u8) -> String {
        let s = self.expr(e);
        if self.width(e) == w {
            s
        } else if let Expr::Const { value, .. } = e {
            format!("{w}w{value}")
        } else {
            format!("(({})({s}))", bits(w))
        }
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Field(f) => self.field(*f),
            Expr::Const { value, width } => {
                if *value > 9 {
                    format!("{width}w{value:#x}")
                } else {
                    format!("{width}w{value}")
                }
            }
            Expr::Bin(op, a, b) => {
                let w = self.width(e);
                let (x, y) = (self.at_width(a, w), self.at_width(b, w));
                match (op, self.t) {
                    (BinOp::Min, Target::Tna) => format!("min({x}, {y})"),
                    (BinOp::Max, Target::Tna) => format!("max({x}, {y})"),
                    (BinOp::Min, Target::V1model) => format!("(({x} < {y}) ? {x} : {y})"),
                    (BinOp::Max, Target::V1model) => format!("(({x} > {y}) ? {x} : {y})"),
                    _ => {
                        let o = match op {
                            BinOp::Add => "+",
                            BinOp::Sub => "-",
                            BinOp::SatAdd => "|+|",
                            BinOp::And => "&",
                            BinOp::Or => "|",
                            BinOp::Xor => "^",
                            BinOp::Min | BinOp::Max => "",
                        };
                        format!("({x} {o} {y})")
                    }
                }
            }
            Expr::Shl(a, n) => format!("({} << {n})", self.expr(a)),
            Expr::Shr(a, n) => format!("({} >> {n})", self.expr(a)),
            Expr::Slice(a, hi, lo) => match **a {
                Expr::Field(_) => format!("{}[{hi}:{lo}]", self.expr(a)),
                _ => format!("({})[{hi}:{lo}]", self.expr(a)),
            },
            Expr::Cast(a, w) => format!("(({})({}))", bits(*w), self.expr(a)),
            Expr::Cmp(op, a, b) => {
                let w = self.width(a).max(self.width(b));
                let (x, y) = (self.at_width(a, w), self.at_width(b, w));
                if op.signed() {
                    format!("((int<{w}>){x} {} (int<{w}>){y})", op.p4())
                } else {
                    format!("({x} {} {y})", op.p4())
                }
            }
            Expr::And(a, b) => format!("({} && {})", self.expr(a), self.expr(b)),
            Expr::Or(a, b) => format!("({} || {})", self.expr(a), self.expr(b)),
            Expr::Not(a) => format!("!{}", self.expr(a)),
            Expr::IsValid(h) => format!("hdr.{}.isValid()", self.p.headers[h.0 as usize].name),
        }
    }

    fn assign(&self, dst: FieldId, e: &Expr) -> String {
        let w = self.p.field(dst).width;
        format!("{} = {};", self.field(dst), self.at_width(e, w))
    }

    // ---------------------------------------------------------------------------------
    // Register actions
    // ---------------------------------------------------------------------------------

    fn salu_operand(&self, reg: &Register, o: SaluOperand, value: &str) -> String {
        let ww = reg.word_width();
        match o {
            SaluOperand::Reg(w) => self.word_ref(reg, value, w),
            SaluOperand::Phv(f) => {
                let fw = self.p.field(f).width;
                if fw == ww {
                    self.field(f)
                } else {
                    format!("(({}){})", bits(ww), self.field(f))
                }
            }
            SaluOperand::Const(c) => format!("{ww}w{c:#x}"),
        }
    }

    fn word_name(&self, value: &str, w: Word) -> String {
        match (self.t, w) {
            (Target::Tna, Word::Lo) => format!("{value}.lo"),
            (Target::Tna, Word::Hi) => format!("{value}.hi"),
            (Target::V1model, Word::Lo) => format!("{value}_lo"),
            (Target::V1model, Word::Hi) => format!("{value}_hi"),
        }
    }

    fn word_ref(&self, reg: &Register, value: &str, w: Word) -> String {
        if reg.is_pair() {
            self.word_name(value, w)
        } else {
            value.to_string()
        }
    }

    fn salu_condition(&self, reg: &Register, c: &SaluCondition, value: &str) -> String {
        let ww = reg.word_width();
        let l = self.salu_operand(reg, c.left, value);
        let k = (c.constant as u64) & if ww >= 64 { u64::MAX } else { (1u64 << ww) - 1 };
        if let (Some((true, r)), CmpOp::Eq | CmpOp::Ne, 0) = (c.right, c.cmp, c.constant) {
            return format!("{l} {} {}", c.cmp.p4(), self.salu_operand(reg, r, value));
        }
        let lhs = match c.right {
            None => l,
            Some((sub, r)) => format!(
                "({l} {} {})",
                if sub { "-" } else { "+" },
                self.salu_operand(reg, r, value)
            ),
        };
        if c.cmp.signed() {
            format!("(int<{ww}>){lhs} {} {}", c.cmp.p4(), c.constant)
        } else {
            format!("{lhs} {} {ww}w{k:#x}", c.cmp.p4())
        }
    }

    /// `action(args)` of a table's default action.
    fn default_call(&self, table: &hawkmesh_dataplane::ir::Table) -> String {
        let (da, args) = &table.default_action;
        let args: Vec<String> = args.iter().map(|v| v.to_string()).collect();
        format!(
            "{}({})",
            self.p.actions[da.0 as usize].name,
            args.join(", ")
        )
    }

    /// The body of a register action over `value` (TNA: the `apply` parameter; v1model:
    /// local words), writing the output to `rv` unless `output` is false (v1model: nothing
    /// reads it, so no `rv` is declared).
    fn salu_body(&mut self, ra: &RegisterAction, value: &str, output: bool) {
        let reg = &self.p.registers[ra.register.0 as usize];
        let n = ra.conditions.len();
        let outcomes: Vec<u8> = (0..(1u8 << n)).collect();
        let conds: Vec<String> = ra
            .conditions
            .iter()
            .map(|c| self.salu_condition(reg, c, value))
            .collect();
        let mut first = true;
        for o in outcomes {
            // The outcome index `o` has bits only for existing conditions; predicates are
            // symmetric in missing conditions (checked), so bit patterns above n are equal.
            let mut lines = Vec::new();
            for out in ra.outputs.iter().filter(|_| output) {
                if out.when.covers(o) {
                    if let SaluOutputValue::Old(w) = out.value {
                        lines.push(format!("rv = {};", self.word_ref(reg, value, w)));
                    }
                }
            }
            for u in &ra.updates {
                if !u.when.covers(o) {
                    continue;
                }
                let dst = self.word_ref(reg, value, u.word);
                let a = self.salu_operand(reg, u.a, value);
                let b = self.salu_operand(reg, u.b, value);
                let rhs = match u.op {
                    SaluOp::Set => a,
                    SaluOp::Add => format!("{a} + {b}"),
                    SaluOp::Sub => format!("{a} - {b}"),
                    SaluOp::SatAdd => format!("{a} |+| {b}"),
                    SaluOp::SatSub => format!("{a} |-| {b}"),
                    SaluOp::And => format!("{a} & {b}"),
                    SaluOp::Or => format!("{a} | {b}"),
                    SaluOp::Xor => format!("{a} ^ {b}"),
                    SaluOp::Min if self.t == Target::Tna => format!("min({a}, {b})"),
                    SaluOp::Max if self.t == Target::Tna => format!("max({a}, {b})"),
                    SaluOp::Min => format!("(({a} < {b}) ? {a} : {b})"),
                    SaluOp::Max => format!("(({a} > {b}) ? {a} : {b})"),
                    // Rejected by the rule checker before emission.
                    SaluOp::Shl | SaluOp::Mul => a,
                };
                lines.push(format!("{dst} = {rhs};"));
            }
            for out in ra.outputs.iter().filter(|_| output) {
                if out.when.covers(o) {
                    match out.value {
                        SaluOutputValue::New(w) => {
                            lines.push(format!("rv = {};", self.word_ref(reg, value, w)))
                        }
                        SaluOutputValue::Const(c) => {
                            lines.push(format!("rv = {}w{c:#x};", reg.word_width()))
                        }
                        SaluOutputValue::Old(_) => {}
                    }
                }
            }
            if n == 0 {
                for l in lines {
                    self.line(&l);
                }
                break;
            }
            let guard: Vec<String> = (0..n)
                .map(|i| {
                    if o & (1 << i) != 0 {
                        format!("({})", conds[i])
                    } else {
                        format!("!({})", conds[i])
                    }
                })
                .collect();
            let guard = guard.join(" && ");
            if lines.is_empty() {
                continue;
            }
            if !first && self.out.ends_with("}\n") {
                // `} else if (...) {` on one line.
                self.out.truncate(self.out.len() - 2);
                self.out.push_str(&format!("}} else if ({guard}) {{\n"));
                self.indent += 1;
            } else {
                self.open(&format!("if ({guard})"));
            }
            for l in lines {
                self.line(&l);
            }
            self.close();
            first = false;
        }
    }

    fn index_type(reg: &Register) -> String {
        bits(reg.index_bits())
    }

    fn cell_type(&self, reg: &Register) -> String {
        if reg.is_pair() {
            "pair_t".to_string()
        } else {
            bits(reg.width)
        }
    }

    fn declare_registers(&mut self, gress: Gress) {
        let used = self.registers_in(gress);
        for (i, reg) in self.p.registers.iter().enumerate() {
            if !used.contains(&(i as u16)) {
                continue;
            }
            self.comment(&format!("{} [{}]", reg.doc, reg.module));
            match self.t {
                Target::Tna => {
                    let init = if reg.is_pair() { "{0, 0}" } else { "0" };
                    self.line(&format!(
                        "Register<{}, {}>({}, {init}) {};",
                        self.cell_type(reg),
                        Self::index_type(reg),
                        reg.size,
                        reg.name
                    ));
                }
                Target::V1model => {
                    self.line(&format!(
                        "register<{}>({}) {};",
                        bits(reg.width),
                        reg.size,
                        reg.name
                    ));
                }
            }
        }
        if self.t == Target::Tna {
            for ra in &self.p.register_actions {
                if !used.contains(&ra.register.0) {
                    continue;
                }
                let reg = &self.p.registers[ra.register.0 as usize];
                self.line("");
                self.comment(&ra.doc);
                self.open(&format!(
                    "RegisterAction<{}, {}, {}>({}) {} =",
                    self.cell_type(reg),
                    Self::index_type(reg),
                    bits(reg.word_width()),
                    reg.name,
                    ra.name
                ));
                self.open(&format!(
                    "void apply(inout {} value, out {} rv)",
                    self.cell_type(reg),
                    bits(reg.word_width())
                ));
                self.line(&format!("rv = {}w0;", reg.word_width()));
                self.salu_body(ra, "value", true);
                self.close();
                self.indent -= 1;
                self.line("};");
            }
        }
    }

    /// The control of `gress`.
    fn control(&self, gress: Gress) -> &[Stmt] {
        if gress == Gress::Ingress {
            &self.p.ingress
        } else {
            &self.p.egress
        }
    }

    /// Registers the control of `gress` executes an action of, in first-use order.
    fn registers_in(&self, gress: Gress) -> Vec<u16> {
        let mut v = Vec::new();
        Stmt::visit(self.control(gress), &mut |s| {
            if let Stmt::Execute { action, .. } = s {
                let r = self.p.register_actions[action.0 as usize].register.0;
                if !v.contains(&r) {
                    v.push(r);
                }
            }
        });
        v
    }

    /// Tables the control of `gress` applies, in first-use order.
    fn tables_in(&self, gress: Gress) -> Vec<TableId> {
        let mut v = Vec::new();
        Stmt::visit(self.control(gress), &mut |s| {
            if let Stmt::Apply(t) = s {
                if !v.contains(t) {
                    v.push(*t);
                }
            }
        });
        v
    }

    /// Hash units the control of `gress` uses, in first-use order.
    fn hashes_in(&self, gress: Gress) -> Vec<HashId> {
        let mut v = Vec::new();
        Stmt::visit(self.control(gress), &mut |s| {
            if let Stmt::Hash(h, _) = s {
                if !v.contains(h) {
                    v.push(*h);
                }
            }
        });
        v
    }

    // ---------------------------------------------------------------------------------
    // Statements
    // ---------------------------------------------------------------------------------

    fn stmts(&mut self, body: &[Stmt]) {
        for s in body {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        let ing = self.gress == Gress::Ingress;
        match s {
            Stmt::Assign(dst, e) => {
                let l = self.assign(*dst, e);
                self.line(&l);
            }
            Stmt::If(c, a, b) => {
                let cond = self.expr(c);
                let cond = cond
                    .strip_prefix('(')
                    .and_then(|c| c.strip_suffix(')'))
                    .filter(|_| cond.starts_with('(') && balanced(&cond[1..cond.len() - 1]))
                    .map(str::to_string)
                    .unwrap_or(cond);
                self.open(&format!("if ({cond})"));
                self.stmts(a);
                if b.is_empty() {
                    self.close();
                } else {
                    self.indent -= 1;
                    self.open("} else");
                    self.stmts(b);
                    self.close();
                }
            }
            Stmt::Apply(t) => {
                let table = &self.p.tables[t.0 as usize];
                let l = format!("{}.apply();", table.name);
                self.line(&l);
            }
            Stmt::Execute {
                action,
                index,
                output,
            } => {
                let ra = &self.p.register_actions[action.0 as usize];
                let reg = &self.p.registers[ra.register.0 as usize];
                let idx = self.at_width(index, reg.index_bits());
                match self.t {
                    Target::Tna => {
                        let call = format!("{}.execute({idx})", ra.name);
                        let l = match output {
                            Some(o) => {
                                let w = self.p.field(*o).width;
                                if w == reg.word_width() {
                                    format!("{} = {call};", self.field(*o))
                                } else {
                                    format!("{} = ({}){call};", self.field(*o), bits(w))
                                }
                            }
                            None => format!("{call};"),
                        };
                        self.line(&l);
                    }
                    Target::V1model => {
                        let ww = reg.word_width();
                        self.comment(&format!("RegisterAction {}: {}", ra.name, ra.doc));
                        self.line("{");
                        self.indent += 1;
                        self.line(&format!("bit<32> {}_index = (bit<32>){idx};", reg.name));
                        self.line(&format!("{} {}_cell;", bits(reg.width), reg.name));
                        self.line(&format!(
                            "{}.read({}_cell, {}_index);",
                            reg.name, reg.name, reg.name
                        ));
                        let value = "value".to_string();
                        if reg.is_pair() {
                            self.line(&format!("bit<32> value_lo = {}_cell[31:0];", reg.name));
                            self.line(&format!("bit<32> value_hi = {}_cell[63:32];", reg.name));
                        } else {
                            self.line(&format!("{} value = {}_cell;", bits(ww), reg.name));
                        }
                        if output.is_some() {
                            self.line(&format!("{} rv = {ww}w0;", bits(ww)));
                        }
                        let ra = ra.clone();
                        self.salu_body(&ra, &value, output.is_some());
                        if reg.is_pair() {
                            self.line(&format!(
                                "{}.write({}_index, value_hi ++ value_lo);",
                                reg.name, reg.name
                            ));
                        } else {
                            self.line(&format!("{}.write({}_index, value);", reg.name, reg.name));
                        }
                        if let Some(o) = output {
                            let w = self.p.field(*o).width;
                            let l = if w == ww {
                                format!("{} = rv;", self.field(*o))
                            } else {
                                format!("{} = ({})rv;", self.field(*o), bits(w))
                            };
                            self.line(&l);
                        }
                        self.close();
                    }
                }
            }
            Stmt::Hash(h, out) => {
                let unit = &self.p.hashes[h.0 as usize];
                let inputs: Vec<String> = unit.inputs.iter().map(|f| self.field(*f)).collect();
                let w = self.p.field(*out).width;
                let l = match self.t {
                    Target::Tna => {
                        let call = format!("{}.get({{{}}})", unit.name, inputs.join(", "));
                        if w == unit.width {
                            format!("{} = {call};", self.field(*out))
                        } else {
                            format!("{} = ({}){call};", self.field(*out), bits(w))
                        }
                    }
                    Target::V1model => format!(
                        "hash({}, HashAlgorithm.crc32, {}w0, {{{}}}, 64w{});",
                        self.field(*out),
                        w,
                        inputs.join(", "),
                        1u64 << unit.width
                    ),
                };
                self.line(&l);
            }
            Stmt::Random(out) => {
                let field = self.p.field(*out);
                let l = match self.t {
                    Target::Tna => format!(
                        "{} = {}.get();",
                        self.field(*out),
                        random_extern_name(&field.name)
                    ),
                    // v1model.p4: `extern void random<T>(out T result, in T lo, in T hi)`.
                    Target::V1model => format!(
                        "random({}, {}w0, {}w{});",
                        self.field(*out),
                        field.width,
                        field.width,
                        all_ones(field.width)
                    ),
                };
                self.line(&l);
            }
            Stmt::SetValid(h) => {
                let l = format!("hdr.{}.setValid();", self.p.headers[h.0 as usize].name);
                self.line(&l);
            }
            Stmt::SetInvalid(h) => {
                let l = format!("hdr.{}.setInvalid();", self.p.headers[h.0 as usize].name);
                self.line(&l);
            }
            Stmt::SetEgressPort(e) => {
                let v = self.expr(e);
                let l = match self.t {
                    Target::Tna => format!("ig_tm_md.ucast_egress_port = (PortId_t){v};"),
                    Target::V1model => format!("standard_metadata.egress_spec = (bit<9>){v};"),
                };
                self.line(&l);
            }
            Stmt::SetMulticastGroup(g) => {
                let l = match self.t {
                    Target::Tna => format!("ig_tm_md.mcast_grp_a = {g};"),
                    Target::V1model => format!("standard_metadata.mcast_grp = {g};"),
                };
                self.line(&l);
            }
            Stmt::Drop => {
                let l = match (self.t, ing) {
                    (Target::Tna, true) => "ig_dprsr_md.drop_ctl = 1;",
                    (Target::Tna, false) => "eg_dprsr_md.drop_ctl = 1;",
                    (Target::V1model, _) => "mark_to_drop(standard_metadata);",
                };
                self.line(l);
            }
            Stmt::CloneToCpu => match (self.t, ing) {
                (Target::Tna, true) => {
                    self.line("ig_dprsr_md.mirror_type = MIRROR_TYPE_I2E;");
                    self.line("meta.mirror_session = (MirrorId_t)CPU_MIRROR_SESSION;");
                }
                (Target::Tna, false) => {
                    self.line("eg_dprsr_md.mirror_type = MIRROR_TYPE_E2E;");
                    self.line("meta.mirror_session = (MirrorId_t)CPU_MIRROR_SESSION;");
                }
                (Target::V1model, true) => self.line(
                    "clone_preserving_field_list(CloneType.I2E, (bit<32>)CPU_MIRROR_SESSION, 1);",
                ),
                (Target::V1model, false) => self.line(
                    "clone_preserving_field_list(CloneType.E2E, (bit<32>)CPU_MIRROR_SESSION, 1);",
                ),
            },
            Stmt::Digest(d) => {
                let digest = &self.p.digests[d.0 as usize];
                let l = match self.t {
                    Target::Tna => format!("ig_dprsr_md.digest_type = {};", d.0 + 1),
                    Target::V1model => {
                        let fields: Vec<String> =
                            digest.fields.iter().map(|f| self.field(*f)).collect();
                        format!("digest<{}_t>(1, {{{}}});", digest.name, fields.join(", "))
                    }
                };
                self.line(&l);
            }
        }
    }

    // ---------------------------------------------------------------------------------
    // Program pieces
    // ---------------------------------------------------------------------------------

    fn preamble(&mut self) {
        let name = match self.t {
            Target::Tna => "Tofino (TNA)",
            Target::V1model => "BMv2 simple_switch (v1model)",
        };
        self.line(&format!("// {} — {name}", self.p.name));
        self.line("// GENERATED by hawkmesh-codegen from dataplane/src/hawkeye.rs; do not edit.");
        self.line("// Regenerate: cargo run -p hawkmesh-codegen -- --write");
        self.line("//");
        for chunk in wrap(&self.p.doc, 90) {
            self.line(&format!("// {chunk}"));
        }
        self.line("");
        self.line("#include <core.p4>");
        self.line(match self.t {
            Target::Tna => "#include <tna.p4>",
            Target::V1model => "#include <v1model.p4>",
        });
        self.line("");
        for c in &self.p.constants {
            self.comment(&c.doc);
            self.line(&format!(
                "const {} {} = {};",
                bits(c.width),
                c.name,
                c.value
            ));
        }
        if self.t == Target::Tna {
            self.line("const bit<3> MIRROR_TYPE_I2E = 1;");
            self.line("const bit<3> MIRROR_TYPE_E2E = 2;");
            self.line(&format!(
                "const bit<8> PKT_TYPE_NORMAL = {PKT_TYPE_NORMAL};"
            ));
            self.line(&format!(
                "const bit<8> PKT_TYPE_MIRROR_I2E = {CLONE_INGRESS};"
            ));
            self.line(&format!(
                "const bit<8> PKT_TYPE_MIRROR_E2E = {CLONE_EGRESS};"
            ));
        }
        self.line("");
        self.line("struct pair_t {");
        self.line("    bit<32> lo;");
        self.line("    bit<32> hi;");
        self.line("}");
        self.line("");
    }

    fn headers(&mut self) {
        for h in &self.p.headers {
            self.comment(&h.doc);
            self.open(&format!("header {}_h", h.name));
            for f in &h.fields {
                let fd = self.p.field(*f);
                let l = format!("{} {};", bits(fd.width), fd.name);
                self.line(&l);
            }
            self.close();
            self.line("");
        }
        if self.t == Target::Tna {
            for (name, fields, doc) in [
                (
                    "bridge",
                    self.p.bridged_fields(),
                    "Ingress → egress bridged metadata (TNA bridging)",
                ),
                (
                    "mirror",
                    self.p.cloned_fields(),
                    "Mirror header of clones to the CPU (TNA Mirror)",
                ),
            ] {
                self.comment(doc);
                self.open(&format!("header {name}_h"));
                self.line("bit<8> pkt_type;");
                self.line("bit<16> ingress_port;");
                let mut total = 24u32;
                for f in fields {
                    let fd = self.p.field(f);
                    total += fd.width as u32;
                    let l = format!("{} {};", bits(fd.width), fd.name);
                    self.line(&l);
                }
                let pad = (8 - total % 8) % 8;
                if pad > 0 {
                    self.line(&format!("bit<{pad}> pad;"));
                }
                self.close();
                self.line("");
            }
        }
        self.open("struct headers_t");
        if self.t == Target::Tna {
            self.line("bridge_h bridge;");
            self.line("mirror_h mirror;");
        }
        for h in &self.p.headers {
            let l = format!("{}_h {};", h.name, h.name);
            self.line(&l);
        }
        self.close();
        self.line("");
        self.open("struct metadata_t");
        for i in Intrinsic::ALL {
            let l = format!("{} intr_{};", bits(i.width()), i.name());
            self.line(&l);
        }
        for f in &self.p.fields {
            if let FieldOwner::Metadata { cloned, .. } = f.owner {
                let ann = if cloned && self.t == Target::V1model {
                    "@field_list(1) "
                } else {
                    ""
                };
                let l = format!("{ann}{} {};", bits(f.width), f.name);
                self.line(&l);
            }
        }
        if self.t == Target::Tna {
            self.line("MirrorId_t mirror_session;");
        }
        self.close();
        self.line("");
        for d in &self.p.digests {
            self.open(&format!("struct {}_t", d.name));
            for f in &d.fields {
                let fd = self.p.field(*f);
                let l = format!("{} {};", bits(fd.width), fd.name);
                self.line(&l);
            }
            self.close();
            self.line("");
        }
    }

    fn parser_states(&mut self) {
        for (i, s) in self.p.parser.iter().enumerate() {
            let name = state_name(&s.name, i, self.t);
            self.open(&format!("state {name}"));
            if let Some(h) = s.extract {
                let l = format!("pkt.extract(hdr.{});", self.p.headers[h.0 as usize].name);
                self.line(&l);
            }
            match &s.transition {
                Transition::Accept => self.line("transition accept;"),
                Transition::Goto(t) => {
                    let l = format!(
                        "transition {};",
                        state_name(&self.p.parser[*t].name, *t, self.t)
                    );
                    self.line(&l);
                }
                Transition::Select { field, cases } => {
                    let f = self.field(*field);
                    self.open(&format!("transition select({f})"));
                    for (v, t) in cases {
                        let target = t.map_or("accept".to_string(), |t| {
                            state_name(&self.p.parser[t].name, t, self.t)
                        });
                        self.line(&format!("{v:#x}: {target};"));
                    }
                    self.line("default: accept;");
                    self.close();
                }
            }
            self.close();
            self.line("");
        }
    }

    fn actions_and_tables(&mut self, gress: Gress) {
        let tables = self.tables_in(gress);
        let mut actions: Vec<ActionId> = Vec::new();
        for t in &tables {
            for a in &self.p.tables[t.0 as usize].actions {
                if !actions.contains(a) {
                    actions.push(*a);
                }
            }
        }
        for a in actions {
            let action = &self.p.actions[a.0 as usize];
            self.comment(&action.doc);
            let params: Vec<String> = action
                .params
                .iter()
                .map(|f| format!("{} {}", bits(self.p.field(*f).width), self.p.field(*f).name))
                .collect();
            self.open(&format!("action {}({})", action.name, params.join(", ")));
            let body = action.body.clone();
            self.stmts(&body);
            self.close();
            self.line("");
        }
        for t in tables {
            let table = &self.p.tables[t.0 as usize];
            for chunk in wrap(&table.doc, 88) {
                self.line(&format!("// {chunk}"));
            }
            self.open(&format!("table {}", table.name));
            self.open("key =");
            for (f, k) in &table.keys {
                let l = format!(
                    "{}: {};",
                    self.field(*f),
                    if *k == MatchKind::Exact {
                        "exact"
                    } else {
                        "ternary"
                    }
                );
                self.line(&l);
            }
            self.close();
            self.open("actions =");
            for a in &table.actions {
                let l = format!("{};", self.p.actions[a.0 as usize].name);
                self.line(&l);
            }
            self.close();
            let l = format!("default_action = {};", self.default_call(table));
            self.line(&l);
            self.line(&format!("size = {};", table.size));
            self.close();
            self.line("");
        }
    }

    fn hash_units(&mut self, gress: Gress) {
        if self.t != Target::Tna {
            return;
        }
        for h in self.hashes_in(gress) {
            let unit = &self.p.hashes[h.0 as usize];
            self.line(&format!(
                "Hash<bit<{}>>(HashAlgorithm_t.CRC32) {};",
                unit.width, unit.name
            ));
        }
        // TNA `Random<T>` (tofino.p4): one extern per field it fills.
        let mut randoms: Vec<FieldId> = Vec::new();
        Stmt::visit(self.control(gress), &mut |s| {
            if let Stmt::Random(out) = s {
                if !randoms.contains(out) {
                    randoms.push(*out);
                }
            }
        });
        for out in randoms {
            let field = self.p.field(out);
            self.line(&format!(
                "Random<bit<{}>>() {};",
                field.width,
                random_extern_name(&field.name)
            ));
        }
    }

    /// Opens a control of `gress`: its registers, hash units (TNA externs), actions and
    /// tables, then `apply {`.
    fn control_head(&mut self, gress: Gress, signature: &str, hash_externs: bool) {
        self.gress = gress;
        self.open(signature);
        self.declare_registers(gress);
        self.line("");
        if hash_externs {
            self.hash_units(gress);
            self.line("");
        }
        self.actions_and_tables(gress);
        self.open("apply");
    }

    /// Every user metadata field set to zero: Tofino does not zero metadata its parser
    /// leaves alone, and every pass of the program starts from zero (the model's semantics;
    /// p4test: "out parameter 'meta' may be uninitialized"). Bridged and mirrored fields are
    /// set again by the states that read them.
    fn zero_metadata(&mut self) {
        self.line("// Metadata starts at zero in every pass (Tofino does not zero it by itself).");
        // Every member of metadata_t, in its order.
        let mut names: Vec<String> = Intrinsic::ALL
            .iter()
            .map(|i| format!("intr_{}", i.name()))
            .collect();
        names.extend(
            self.p
                .fields
                .iter()
                .filter(|f| matches!(f.owner, FieldOwner::Metadata { .. }))
                .map(|f| f.name.clone()),
        );
        for name in names {
            self.line(&format!("meta.{name} = 0;"));
        }
        self.line("meta.mirror_session = 0;");
    }

    fn tna(&mut self) {
        // Ingress parser.
        self.open("parser IngressParser(packet_in pkt, out headers_t hdr, out metadata_t meta, out ingress_intrinsic_metadata_t ig_intr_md)");
        self.open("state start");
        self.line("pkt.extract(ig_intr_md);");
        self.line("pkt.advance(PORT_METADATA_SIZE);");
        self.zero_metadata();
        self.line("transition parse_start;");
        self.close();
        self.line("");
        self.parser_states();
        self.close();
        self.line("");
        // Ingress.
        self.control_head(Gress::Ingress, "control Ingress(inout headers_t hdr, inout metadata_t meta, in ingress_intrinsic_metadata_t ig_intr_md, in ingress_intrinsic_metadata_from_parser_t ig_prsr_md, inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md, inout ingress_intrinsic_metadata_for_tm_t ig_tm_md)", true);
        self.line("meta.intr_ingress_port = (bit<16>)ig_intr_md.ingress_port;");
        self.line("meta.intr_ingress_tstamp = ig_intr_md.ingress_mac_tstamp;");
        let body = self.p.ingress.clone();
        self.stmts(&body);
        self.line("// Bridge metadata to egress.");
        self.line("hdr.bridge.setValid();");
        self.line("hdr.bridge.pkt_type = PKT_TYPE_NORMAL;");
        self.line("hdr.bridge.ingress_port = meta.intr_ingress_port;");
        for f in self.p.bridged_fields() {
            let n = &self.p.field(f).name;
            self.line(&format!("hdr.bridge.{n} = meta.{n};"));
        }
        self.close();
        self.close();
        self.line("");
        self.deparser_tna(Gress::Ingress);
        // Egress parser.
        self.open("parser EgressParser(packet_in pkt, out headers_t hdr, out metadata_t meta, out egress_intrinsic_metadata_t eg_intr_md)");
        self.open("state start");
        self.line("pkt.extract(eg_intr_md);");
        self.zero_metadata();
        self.open("transition select(pkt.lookahead<bit<8>>())");
        self.line("PKT_TYPE_MIRROR_I2E: parse_mirror;");
        self.line("PKT_TYPE_MIRROR_E2E: parse_mirror;");
        self.line("default: parse_bridge;");
        self.close();
        self.close();
        self.line("");
        self.open("state parse_bridge");
        self.line("pkt.extract(hdr.bridge);");
        self.line("meta.intr_clone_kind = 0;");
        self.line("meta.intr_eg_ingress_port = hdr.bridge.ingress_port;");
        for f in self.p.bridged_fields() {
            let n = &self.p.field(f).name;
            self.line(&format!("meta.{n} = hdr.bridge.{n};"));
        }
        self.line("transition parse_start;");
        self.close();
        self.line("");
        self.open("state parse_mirror");
        self.line("pkt.extract(hdr.mirror);");
        self.line("meta.intr_clone_kind = hdr.mirror.pkt_type;");
        self.line("meta.intr_eg_ingress_port = hdr.mirror.ingress_port;");
        for f in self.p.cloned_fields() {
            let n = &self.p.field(f).name;
            self.line(&format!("meta.{n} = hdr.mirror.{n};"));
        }
        self.line("transition parse_start;");
        self.close();
        self.line("");
        self.parser_states();
        self.close();
        self.line("");
        // Egress.
        self.control_head(Gress::Egress, "control Egress(inout headers_t hdr, inout metadata_t meta, in egress_intrinsic_metadata_t eg_intr_md, in egress_intrinsic_metadata_from_parser_t eg_prsr_md, inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md, inout egress_intrinsic_metadata_for_output_port_t eg_oport_md)", true);
        self.line("hdr.bridge.setInvalid();");
        self.line("hdr.mirror.setInvalid();");
        self.line("meta.intr_egress_port = (bit<16>)eg_intr_md.egress_port;");
        self.line("// Enqueue time: the 48-bit global timestamp minus the time spent queued.");
        self.line(
            "meta.intr_enq_tstamp = eg_prsr_md.global_tstamp - (bit<48>)eg_intr_md.deq_timedelta;",
        );
        self.line("// Tofino counts queue depth in 80-byte cells (QDEPTH_UNIT_BYTES_TOFINO).");
        self.line("meta.intr_enq_qdepth = (bit<32>)eg_intr_md.enq_qdepth;");
        self.line("meta.intr_packet_length = eg_intr_md.pkt_length;");
        let body = self.p.egress.clone();
        self.stmts(&body);
        self.close();
        self.close();
        self.line("");
        self.deparser_tna(Gress::Egress);
        self.line("Pipeline(IngressParser(), Ingress(), IngressDeparser(), EgressParser(), Egress(), EgressDeparser()) pipe;");
        self.line("Switch(pipe) main;");
    }

    fn deparser_tna(&mut self, gress: Gress) {
        let (name, md, ty, kind) = match gress {
            Gress::Ingress => (
                "IngressDeparser",
                "ig_dprsr_md",
                "ingress_intrinsic_metadata_for_deparser_t",
                "MIRROR_TYPE_I2E",
            ),
            Gress::Egress => (
                "EgressDeparser",
                "eg_dprsr_md",
                "egress_intrinsic_metadata_for_deparser_t",
                "MIRROR_TYPE_E2E",
            ),
        };
        self.open(&format!(
            "control {name}(packet_out pkt, inout headers_t hdr, in metadata_t meta, in {ty} {md})"
        ));
        self.line("Mirror() mirror;");
        self.line("Checksum() ipv4_checksum;");
        for d in &self.p.digests {
            if gress == Gress::Ingress {
                self.line(&format!("Digest<{}_t>() {};", d.name, d.name));
            }
        }
        self.open("apply");
        let pkt_type = if gress == Gress::Ingress {
            "PKT_TYPE_MIRROR_I2E"
        } else {
            "PKT_TYPE_MIRROR_E2E"
        };
        let port = if gress == Gress::Ingress {
            "meta.intr_ingress_port"
        } else {
            "meta.intr_eg_ingress_port"
        };
        let mut fields = vec![pkt_type.to_string(), port.to_string()];
        for f in self.p.cloned_fields() {
            fields.push(format!("meta.{}", self.p.field(f).name));
        }
        let total: u32 = 24
            + self
                .p
                .cloned_fields()
                .iter()
                .map(|f| self.p.field(*f).width as u32)
                .sum::<u32>();
        if total % 8 != 0 {
            fields.push("0".into());
        }
        self.open(&format!("if ({md}.mirror_type == {kind})"));
        self.line(&format!(
            "mirror.emit<mirror_h>(meta.mirror_session, {{{}}});",
            fields.join(", ")
        ));
        self.close();
        if gress == Gress::Ingress {
            for (i, d) in self.p.digests.iter().enumerate() {
                let fs: Vec<String> = d.fields.iter().map(|f| self.field(*f)).collect();
                self.open(&format!("if ({md}.digest_type == {})", i + 1));
                self.line(&format!("{}.pack({{{}}});", d.name, fs.join(", ")));
                self.close();
            }
        }
        self.checksum_update();
        self.line("pkt.emit(hdr);");
        self.close();
        self.close();
        self.line("");
    }

    fn checksum_update(&mut self) {
        if self.p.header_by_name("ipv4").is_none() {
            return;
        }
        let fields = "hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.dscp, hdr.ipv4.ecn, hdr.ipv4.total_len, hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset, hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr";
        match self.t {
            Target::Tna => {
                self.line("// RFC 791 header checksum (the sketch mark rewrites DSCP, ECN marking the ECN bits).");
                self.open("if (hdr.ipv4.isValid())");
                self.line(&format!(
                    "hdr.ipv4.hdr_checksum = ipv4_checksum.update({{{fields}}});"
                ));
                self.close();
            }
            Target::V1model => {
                self.line(&format!("update_checksum(hdr.ipv4.isValid(), {{{fields}}}, hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);"));
            }
        }
    }

    fn v1model(&mut self) {
        self.open("parser MainParser(packet_in pkt, out headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata)");
        self.parser_states();
        self.close();
        self.line("");
        self.open("control MainVerifyChecksum(inout headers_t hdr, inout metadata_t meta)");
        self.line("apply { }");
        self.close();
        self.line("");
        self.control_head(Gress::Ingress, "control MainIngress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata)", false);
        self.line("meta.intr_ingress_port = (bit<16>)standard_metadata.ingress_port;");
        self.line("// BMv2 timestamps are µs; the program works in ns.");
        self.line("meta.intr_ingress_tstamp = standard_metadata.ingress_global_timestamp * 1000;");
        let body = self.p.ingress.clone();
        self.stmts(&body);
        self.close();
        self.close();
        self.line("");
        self.control_head(Gress::Egress, "control MainEgress(inout headers_t hdr, inout metadata_t meta, inout standard_metadata_t standard_metadata)", false);
        self.line("meta.intr_clone_kind = 0;");
        self.open("if (standard_metadata.instance_type == 1)");
        self.line(&format!("meta.intr_clone_kind = {CLONE_INGRESS};"));
        self.indent -= 1;
        self.open("} else if (standard_metadata.instance_type == 2)");
        self.line(&format!("meta.intr_clone_kind = {CLONE_EGRESS};"));
        self.close();
        self.line("// Non-bridged metadata starts at 0 in egress, as on Tofino.");
        let bridged = self.p.bridged_fields();
        let cloned = self.p.cloned_fields();
        for (i, f) in self.p.fields.iter().enumerate() {
            if let FieldOwner::Metadata { .. } = f.owner {
                let id = FieldId(i as u16);
                if !bridged.contains(&id) && !cloned.contains(&id) {
                    self.line(&format!("meta.{} = 0;", f.name));
                }
            }
        }
        self.line("meta.intr_eg_ingress_port = (bit<16>)standard_metadata.ingress_port;");
        self.line("meta.intr_egress_port = (bit<16>)standard_metadata.egress_port;");
        self.line("meta.intr_enq_tstamp = ((bit<48>)standard_metadata.enq_timestamp) * 1000;");
        self.line("// BMv2 counts queue depth in packets.");
        self.line("meta.intr_enq_qdepth = (bit<32>)standard_metadata.enq_qdepth;");
        self.line("meta.intr_packet_length = (bit<16>)standard_metadata.packet_length;");
        let body = self.p.egress.clone();
        self.stmts(&body);
        self.close();
        self.close();
        self.line("");
        self.open("control MainComputeChecksum(inout headers_t hdr, inout metadata_t meta)");
        self.open("apply");
        self.checksum_update();
        self.close();
        self.close();
        self.line("");
        self.open("control MainDeparser(packet_out pkt, in headers_t hdr)");
        self.line("apply { pkt.emit(hdr); }");
        self.close();
        self.line("");
        self.line("V1Switch(MainParser(), MainVerifyChecksum(), MainIngress(), MainEgress(), MainComputeChecksum(), MainDeparser()) main;");
    }
}

/// The TNA `Random` extern that fills metadata field `field`.
fn random_extern_name(field: &str) -> String {
    format!("random_{field}")
}

/// The largest value of `width` bits.
fn all_ones(width: u8) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

fn balanced(s: &str) -> bool {
    let mut depth = 0i32;
    for ch in s.chars() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => {}
        }
    }
    depth == 0
}

fn state_name(name: &str, index: usize, t: Target) -> String {
    if index == 0 && t == Target::Tna {
        "parse_start".to_string()
    } else if index == 0 {
        "start".to_string()
    } else {
        name.to_string()
    }
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for word in text.split_whitespace() {
        if !cur.is_empty() && cur.len() + word.len() + 1 > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(word);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

/// Emits the program for a target.
/// Turns every top-level `const` the program never names into a comment that keeps its
/// value: the description's constants serve the control plane (generated into Rust as
/// well), and an unused `const` is a compiler warning.
fn unused_constants_as_comments(text: &str) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let names_elsewhere = |name: &str, line_no: usize| {
        text.lines().enumerate().any(|(i, line)| {
            i != line_no
                && !line.trim_start().starts_with("//")
                && line.match_indices(name).any(|(at, _)| {
                    let before = line[..at].chars().last();
                    let after = line[at + name.len()..].chars().next();
                    !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
                })
        })
    };
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.lines().enumerate() {
        let declared = line
            .strip_prefix("const ")
            .and_then(|rest| rest.split_whitespace().nth(1))
            .filter(|name| !names_elsewhere(name, i));
        match declared {
            Some(name) => {
                let value = line
                    .split_once('=')
                    .map_or("", |(_, v)| v.trim().trim_end_matches(';'));
                let _ = writeln!(out, "// {name} = {value} (not referenced by the program)");
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

pub fn emit(p: &Program, t: Target) -> String {
    let mut e = Emitter {
        p,
        t,
        out: String::new(),
        indent: 0,
        gress: Gress::Ingress,
    };
    e.preamble();
    e.headers();
    match t {
        Target::Tna => e.tna(),
        Target::V1model => e.v1model(),
    }
    let mut out = unused_constants_as_comments(&e.out);
    // Collapse runs of blank lines (deterministic formatting).
    while out.contains("\n\n\n") {
        out = out.replace("\n\n\n", "\n\n");
    }
    let _ = write!(out, "");
    out
}

/// The registers (indices into `p.registers`) the TNA control of `gress` declares, in
/// declaration order.
pub fn registers_in(p: &Program, gress: Gress) -> Vec<u16> {
    emitter(p, gress).registers_in(gress)
}

/// The tables the TNA control of `gress` applies, in declaration order.
pub fn tables_in(p: &Program, gress: Gress) -> Vec<TableId> {
    emitter(p, gress).tables_in(gress)
}

/// How the P4 program names field `f` (`hdr.ipv4.dst_addr`, `meta.lookup_dst_addr`, an
/// action parameter's own name).
pub fn field_ref(p: &Program, f: FieldId) -> String {
    emitter(p, Gress::Ingress).field(f)
}

/// The TNA control that holds `gress`'s tables and registers.
pub fn tna_control(gress: Gress) -> &'static str {
    match gress {
        Gress::Ingress => "Ingress",
        Gress::Egress => "Egress",
    }
}

fn emitter(p: &Program, gress: Gress) -> Emitter<'_> {
    Emitter {
        p,
        t: Target::Tna,
        out: String::new(),
        indent: 0,
        gress,
    }
}
