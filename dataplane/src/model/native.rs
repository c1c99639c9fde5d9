//! The native back end: the compiled instructions of chosen programs emitted as Rust
//! (`generated.rs`, written by `hawkmesh-codegen --write` and checked by `--check`), so
//! that a pass of those programs runs without the interpreter's dispatch. Every emitted
//! statement is the interpreter's action for that instruction with the operands as
//! constants; parsing, deparsing, tables, register actions and hashes are the
//! interpreter's own functions.
//!
//! Each program's code is identified by a fingerprint of its compiled form. A model whose
//! code has no emitted variant (other parameters, or the compiler changed since the file
//! was written) runs on the interpreter, which stays the reference.
//!
//! The emitted file uses the model's private types and helpers. If a change to them keeps
//! the stale file from compiling, replace it by
//! `use super::native::Native; pub(super) static VARIANTS: &[Native] = &[];`, build, and
//! run `hawkmesh-codegen --write`.

use std::fmt::Write;

use super::*;

/// The carried fields an egress pass restores: a clone's (`Ok`), or a normal packet's
/// bridged fields packed into 128 bits (`Err`).
pub(super) type CarriedIn<'a> = Result<&'a Carried, [u64; 2]>;

/// An emitted egress pass.
pub(super) type EgressPass =
    fn(&mut State, &mut PhvBuf, &Code, &mut PassCtx, &EgressInput, CarriedIn);

/// The emitted passes of one program.
pub(super) struct Native {
    pub(super) fingerprint: u64,
    /// A whole ingress pass after [`State::reset`]: clears the metadata it may read
    /// before writing (with constant ranges), sets the intrinsic metadata, parses and runs
    /// the ingress control (one function: values reach the control in registers).
    pub(super) ingress: fn(&mut State, &mut PhvBuf, &Code, &mut PassCtx, &IngressInput),
    /// A whole egress pass after [`State::reset`]: as `ingress`, and restores the fields
    /// carried from ingress (packed into 128 bits for a normal packet, `Err`) before
    /// parsing.
    pub(super) egress: EgressPass,
    /// [`pack_fields`] of the bridged fields, unrolled.
    pub(super) pack: fn(&[u64; PHV_SLOTS]) -> [u64; 2],
}

impl std::fmt::Debug for Native {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Native({:#018x})", self.fingerprint)
    }
}

/// The `{prefix}_pass_ingress` / `{prefix}_pass_egress` functions of [`Native`]: the
/// metadata a pass may read before writing cleared with constant ranges (unless no pass
/// of the program ran on this PHV yet), the intrinsic metadata stored at their constant
/// slots, the carried fields restored (egress), then the parser and the control.
fn passes(code: &Code, prefix: &str, out: &mut String) {
    let clear = |gress: usize| {
        let mut c = String::from("if st.meta != META_CLEAN {\n");
        for (start, end) in &code.meta_exposed[gress] {
            let _ = writeln!(c, "phv[{start}..{end}].fill(0);");
        }
        c.push_str("}\nst.meta = META_ANY;\n");
        c
    };
    let set = |which: Intrinsic, value: &str| {
        let (slot, mask) = code.intrinsic(which);
        format!("phv[{slot}] = ({value}) & {};\n", hex(mask))
    };
    let _ = writeln!(
        out,
        "fn {prefix}_pass_ingress(st: &mut State, phv: &mut PhvBuf, code: &Code, ctx: &mut PassCtx, input: &IngressInput) {{\n{}{}{}{prefix}_parse(st, phv, code, ctx.packet);\n{prefix}_ingress(st, phv, code, ctx);\n}}\n",
        clear(0),
        set(Intrinsic::IngressPort, "input.ingress_port as u64"),
        set(Intrinsic::IngressTstamp, "input.tstamp_ns"),
    );
    let mut unpack = String::from("let acc = packed[0] as u128 | (packed[1] as u128) << 64;\n");
    for (f, m, shift) in &code.bridge_packing {
        if *shift < 128 {
            let _ = writeln!(unpack, "phv[{f}] = (acc >> {shift}) as u64 & {};", hex(*m));
        } else {
            let _ = writeln!(unpack, "phv[{f}] = 0;");
        }
    }
    let _ = writeln!(
        out,
        "fn {prefix}_pass_egress(st: &mut State, phv: &mut PhvBuf, code: &Code, ctx: &mut PassCtx, input: &EgressInput, carried: CarriedIn) {{\n{}{}{}{}{}{}{}\
         match carried {{\n\
         Ok(c) => st.restore_carried(code, c, phv),\n\
         Err(packed) => {{\n{unpack}}}\n\
         }}\n\
         {prefix}_parse(st, phv, code, ctx.packet);\n{prefix}_egress(st, phv, code, ctx);\n}}\n",
        clear(1),
        set(Intrinsic::EgressIngressPort, "input.ingress_port as u64"),
        set(Intrinsic::EgressPort, "input.egress_port as u64"),
        set(Intrinsic::EnqTstamp, "input.enq_tstamp_ns"),
        set(Intrinsic::EnqQdepth, "input.enq_qdepth as u64"),
        set(Intrinsic::PacketLength, "input.packet_length as u64"),
        set(
            Intrinsic::CloneKind,
            "carried.map_or(0, |c| c.clone_kind) as u64"
        ),
    );
}

/// [`pack_fields`] for `code`'s bridged fields with the slots, masks and shifts as
/// constants ([`unpack_fields`] is part of the egress pass).
fn packing(code: &Code, prefix: &str, out: &mut String) {
    let _ = writeln!(
        out,
        "fn {prefix}_pack(phv: &[u64; PHV_SLOTS]) -> [u64; 2] {{\nlet mut acc: u128 = 0;"
    );
    for (f, m, shift) in &code.bridge_packing {
        if *shift < 128 {
            let _ = writeln!(out, "acc |= ((phv[{f}] & {}) as u128) << {shift};", hex(*m));
        }
    }
    let _ = writeln!(out, "[acc as u64, (acc >> 64) as u64]\n}}\n");
}

/// FNV-1a over the compiled code's debug form: any change of an instruction, table,
/// register action, parser state or layout changes it.
pub(super) fn fingerprint(code: &Code) -> u64 {
    let text = format!("{code:?}");
    text.bytes().fold(0xCBF2_9CE4_8422_2325u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// The emitted variant for `code`, if there is one.
pub(super) fn lookup(code: &Code) -> Option<usize> {
    let f = fingerprint(code);
    generated::VARIANTS.iter().position(|n| n.fingerprint == f)
}

fn hex(v: u64) -> String {
    format!("0x{v:X}")
}

fn cmp_lit(c: Cmp) -> String {
    format!("Cmp::raw({}, {}, {})", c.rel, c.shift, c.signed)
}

/// `a cmp b` with `b` already normalised, as an expression.
fn test(c: Cmp, a: &str, b: &str) -> String {
    if c.shift == 0 && !c.signed {
        match c.rel {
            0b010 => return format!("{a} == {b}"),
            0b101 => return format!("{a} != {b}"),
            _ => {}
        }
    }
    format!("{}.test({a}, {b})", cmp_lit(c))
}

fn masked(v: String, mask: u64) -> String {
    if mask == u64::MAX {
        v
    } else {
        format!("{v} & {}", hex(mask))
    }
}

/// Sets action `a`'s parameters from `values` (expressions) and runs the action.
fn run_action(code: &Code, prefix: &str, a: u16, values: &[String]) -> String {
    let mut v = String::new();
    for ((slot, mask), value) in code.action_params[a as usize].iter().zip(values) {
        let _ = write!(v, "{} = {}; ", phv(*slot), masked(value.clone(), *mask));
    }
    let _ = write!(v, "{prefix}_a{a}(st, phv, code, ctx);");
    v
}

/// A table lookup and its action. The forwarding table (when the model takes its result
/// from the input) and tables of one exact key with direct entries are looked up inline,
/// with each action's parameter slots as constants; anything else (and a key beyond the
/// direct array) goes through [`State::select`].
fn apply(code: &Code, prefix: &str, t: u16) -> String {
    let generic = format!("{prefix}_action(st.select(code, {t}, phv), st, phv, code, ctx);");
    let Some(table) = code.tables.get(t as usize) else {
        return generic;
    };
    let default = run_action(
        code,
        prefix,
        table.default_action,
        &table
            .default_params
            .iter()
            .map(|v| hex(*v))
            .collect::<Vec<_>>(),
    );
    if table.forwarding {
        let Some(first) = table.first_action else {
            return generic;
        };
        let routed = run_action(code, prefix, first, &["port as u64".to_string()]);
        return format!(
            "match st.routed_from_input() {{ Some(Some(port)) => {{ {routed} }} Some(None) => {{ {default} }} None => {{ {generic} }} }}"
        );
    }
    if !table.direct || table.keys.len() != 1 {
        return generic;
    }
    let mut arms = String::new();
    for a in &table.actions {
        let values: Vec<String> = (0..code.action_params[*a as usize].len())
            .map(|i| format!("d.params[{i}]"))
            .collect();
        let _ = write!(
            arms,
            "Some(d) if d.action == {a} => {{ {} }} ",
            run_action(code, prefix, *a, &values)
        );
    }
    format!(
        "match st.direct_entry({t}, {}) {{ {arms}Some(d) if d.action == NO_SLOT => {{ {default} }} _ => {{ {generic} }} }}",
        phv(table.keys[0].0)
    )
}

/// A hash unit with its inputs as a constant (the interpreter looks them up).
fn hash_call(code: &Code, unit: u16) -> String {
    match code.hashes.get(unit as usize) {
        Some(h) => {
            let inputs: Vec<String> = h
                .inputs
                .iter()
                .map(|(slot, bytes)| format!("({slot}, {bytes})"))
                .collect();
            format!(
                "hash_inputs(phv, &[{}], {})",
                inputs.join(", "),
                hex(h.mask)
            )
        }
        None => format!("st.hash(code, {unit}, phv)"),
    }
}

fn phv(slot: u16) -> String {
    format!("phv[{slot}]")
}

fn step_lit(s: &WordStep) -> String {
    format!(
        "WordStep {{ op: WordOp::{:?}, phv: {}, slot: {}, konst: {}, out_old: {}, out_new: {}, out_konst: {} }}",
        s.op,
        s.phv,
        s.slot,
        hex(s.konst as u64),
        hex(s.out_old as u64),
        hex(s.out_new as u64),
        hex(s.out_konst as u64)
    )
}

fn word_action_lit(a: &WordAction) -> String {
    format!(
        "WordAction {{ base: {}, size_mask: {}, stride: {}, offset: {}, word_mask: {}, slab: {}, cond_slot: {}, cond_k: {}, cond: {}, writes: {}, on: [{}, {}] }}",
        a.base,
        hex(a.size_mask as u64),
        a.stride,
        a.offset,
        hex(a.word_mask as u64),
        a.slab,
        a.cond_slot,
        hex(a.cond_k as u64),
        a.cond,
        a.writes,
        step_lit(&a.on[0]),
        step_lit(&a.on[1])
    )
}

fn operand_lit(o: COperand) -> String {
    match o {
        COperand::Lo => "COperand::Lo".into(),
        COperand::Hi => "COperand::Hi".into(),
        COperand::Phv(f) => format!("COperand::Phv({f})"),
        COperand::Const(c) => format!("COperand::Const({})", hex(c)),
    }
}

/// One word action on the cell group at `base` (its own address: `base + offset`).
fn word_member(code: &Code, wa: u16, out: u16, mask: u64, base: &str) -> String {
    let a = &code.word_actions[wa as usize];
    let mut s = format!(
        "{{ const A: WordAction = {}; let v = st.word_at(code, &A, {base} + {}, phv); ",
        word_action_lit(a),
        a.offset
    );
    if out != NO_SLOT {
        let _ = write!(s, "{} = {}; ", phv(out), masked("v".into(), mask));
    } else {
        s.push_str("let _ = v; ");
    }
    s.push('}');
    s
}

/// The base word of the cell group of word action `wa` at index slot `index`.
fn word_base(code: &Code, wa: u16, index: u16) -> String {
    let a = &code.word_actions[wa as usize];
    format!(
        "((({} as usize) & {}) * {})",
        phv(index),
        hex(a.size_mask as u64),
        a.stride
    )
}

/// A general register action (pairs, several conditions): the interpreter's
/// [`State::execute`] with the action's tables unrolled.
fn register_action(code: &Code, ra: u16, index: u16, out: u16, mask: u64) -> String {
    let a = &code.register_actions[ra as usize];
    let kind = format!("SlabKind::{:?}", a.kind);
    let mut s = format!(
        "{{ let w = {} + (({} as usize) & {}) * {} + {}; let lo = st.regs.get({kind}, w); ",
        a.base,
        phv(index),
        hex(a.size_mask as u64),
        a.stride,
        a.offset,
    );
    if a.pair {
        let _ = write!(s, "let hi = st.regs.get({kind}, w + 1); ");
    } else {
        s.push_str("let hi = 0u64; ");
    }
    let m = hex(a.word_mask);
    s.push_str(if a.conditions.is_empty() {
        "let outcome = 0usize; "
    } else {
        "let mut outcome = 0usize; "
    });
    for (i, c) in a.conditions.iter().enumerate() {
        let right = match c.right {
            None => "None".to_string(),
            Some((sub, r)) => format!("Some(({sub}, {}))", operand_lit(r)),
        };
        let _ = write!(
            s,
            "if (CCond {{ left: {}, right: {right}, cmp: {}, constant: {} }}).test(phv, lo, hi, {m}) {{ outcome |= {}; }} ",
            operand_lit(c.left),
            cmp_lit(c.cmp),
            hex(c.constant),
            1 << i
        );
    }
    let update = |u: u8| {
        let u = &a.updates[u as usize];
        format!(
            "(CUpdate {{ op: SaluOp::{:?}, a: {}, b: {} }}).apply(phv, lo, hi, {m})",
            u.op,
            operand_lit(u.a),
            operand_lit(u.b)
        )
    };
    s.push_str("let (new_lo, new_hi, out) = match outcome { ");
    for (outcome, o) in a.outcomes.iter().enumerate().take(1 << a.conditions.len()) {
        let new_lo = if o.lo == NONE {
            "lo".into()
        } else {
            update(o.lo)
        };
        let new_hi = if o.hi == NONE {
            "hi".into()
        } else {
            update(o.hi)
        };
        let value = if o.out == NONE {
            "0u64".to_string()
        } else {
            match a.outputs[o.out as usize] {
                SaluOutputValue::Old(Word::Lo) => "lo".into(),
                SaluOutputValue::Old(Word::Hi) => "hi".into(),
                SaluOutputValue::New(Word::Lo) => "new_lo".into(),
                SaluOutputValue::New(Word::Hi) => "new_hi".into(),
                SaluOutputValue::Const(c) => hex(c),
            }
        };
        let _ = write!(
            s,
            "{outcome} => {{ let new_lo = {new_lo}; let new_hi = {new_hi}; (new_lo, new_hi, {value}) }} "
        );
    }
    s.push_str("_ => (lo, hi, 0), }; ");
    if a.writes {
        let _ = write!(s, "st.regs.set({kind}, w, new_lo); ");
        if a.pair {
            let _ = write!(s, "st.regs.set({kind}, w + 1, new_hi); ");
        }
    }
    if out != NO_SLOT {
        let _ = write!(s, "{} = {}; ", phv(out), masked("out".into(), mask));
    } else {
        s.push_str("let _ = (out, new_lo, new_hi); ");
    }
    s.push('}');
    s
}

/// Where each function emitted for `code` starts and ends (ingress, egress, then one per
/// action): every function is `code.ins[start..end]`, ending with a return.
fn functions(code: &Code) -> Vec<(u32, u32)> {
    let mut starts = vec![code.ingress, code.egress];
    starts.extend(&code.action_start);
    let mut sorted = starts.clone();
    sorted.sort_unstable();
    starts
        .iter()
        .map(|s| {
            let end = sorted
                .iter()
                .find(|e| **e > *s)
                .copied()
                .unwrap_or(code.ins.len() as u32);
            (*s, end)
        })
        .collect()
}

/// One function: `ins[start..end]` as straight-line Rust. Jumps only go forward (the
/// compiler emits conditions and `if`/`else` as forward jumps), so every jump target gets a
/// labelled block opened at the top of the function and closed just before the target; a
/// jump is a `break` out of it. Instructions that nothing reaches are left out.
fn function(
    code: &Code,
    name: &str,
    prefix: &str,
    (start, end): (u32, u32),
    out: &mut String,
) -> Result<(), ModelError> {
    let (start, end) = (start as usize, end as usize);
    let body = &code.ins[start..end];
    let mut target = vec![false; body.len() + 1];
    let mut reachable = vec![false; body.len()];
    let mut live = true;
    let mut skip = 0usize;
    for (i, ins) in body.iter().enumerate() {
        live |= target[i];
        reachable[i] = live && skip == 0;
        if skip > 0 {
            skip -= 1;
            continue;
        }
        if !live {
            continue;
        }
        let mut this = *ins;
        if let Some(t) = jump_target(&mut this) {
            let t = *t as usize;
            if t <= start + i || t >= end {
                return Err(program_error(format!(
                    "instruction {} jumps to {t}, outside its function {start}..{end}",
                    start + i
                )));
            }
            target[t - start] = true;
        }
        match ins {
            Ins::Jump(_) | Ins::Return => live = false,
            Ins::ExecuteGroup { count, .. } => skip = *count as usize - 1,
            _ => {}
        }
    }
    // The controls go inline into their `_pass_` function (one caller each).
    let inline = if name.ends_with("_ingress") || name.ends_with("_egress") {
        "#[inline(always)]\n"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "{inline}fn {name}(st: &mut State, phv: &mut PhvBuf, code: &Code, ctx: &mut PassCtx) {{"
    );
    for t in (0..body.len()).rev().filter(|t| target[*t]) {
        let _ = writeln!(out, "'l{t}: {{");
    }
    for (i, ins) in body.iter().enumerate() {
        if target[i] {
            let _ = writeln!(out, "}}");
        }
        if !reachable[i] {
            continue;
        }
        let line = match *ins {
            Ins::Mov { dst, src, mask } => format!("{} = {};", phv(dst), masked(phv(src), mask)),
            Ins::Imm { dst, value } => format!("{} = {};", phv(dst), hex(value)),
            Ins::Bin {
                op,
                dst,
                a,
                b,
                mask,
            } => format!(
                "{} = bin(BinOp::{op:?}, {}, {}, {});",
                phv(dst),
                phv(a),
                phv(b),
                hex(mask)
            ),
            Ins::BinImm {
                op,
                dst,
                a,
                b,
                mask,
            } => format!(
                "{} = bin(BinOp::{op:?}, {}, {}, {});",
                phv(dst),
                phv(a),
                hex(b),
                hex(mask)
            ),
            Ins::Shl { dst, a, n, mask } => format!(
                "{} = {};",
                phv(dst),
                masked(format!("{}.wrapping_shl({n})", phv(a)), mask)
            ),
            Ins::Shr { dst, a, n, mask } => format!(
                "{} = {};",
                phv(dst),
                masked(format!("{}.wrapping_shr({n})", phv(a)), mask)
            ),
            Ins::ShlOr { dst, a, n, b, mask } => format!(
                "{} = {};",
                phv(dst),
                masked(format!("({}.wrapping_shl({n}) | {})", phv(a), phv(b)), mask)
            ),
            Ins::JumpCmp { cmp, a, b, target } => format!(
                "if {} {{ break 'l{}; }}",
                test(cmp, &phv(a), &format!("{}.norm({})", cmp_lit(cmp), phv(b))),
                target as usize - start
            ),
            Ins::JumpCmpImm { cmp, a, b, target } => format!(
                "if {} {{ break 'l{}; }}",
                test(cmp, &phv(a), &hex(b)),
                target as usize - start
            ),
            Ins::JumpValid(h, target) => format!(
                "if st.valid & {} != 0 {{ break 'l{}; }}",
                hex(1 << h),
                target as usize - start
            ),
            Ins::JumpInvalid(h, target) => format!(
                "if st.valid & {} == 0 {{ break 'l{}; }}",
                hex(1 << h),
                target as usize - start
            ),
            Ins::Jump(target) => format!("break 'l{};", target as usize - start),
            Ins::Dirty(h) => format!("st.dirty |= {};", hex(1 << h)),
            Ins::Execute {
                ra,
                index,
                out: o,
                mask,
            } => register_action(code, ra, index, o, mask),
            Ins::ExecuteWord {
                wa,
                index,
                out: o,
                mask,
            } => format!(
                "{{ let base = {}; {} }}",
                word_base(code, wa, index),
                word_member(code, wa, o, mask, "base")
            ),
            Ins::ExecuteGroup {
                first,
                count,
                index,
            } => {
                let members = &code.group_members[first as usize..][..count as usize];
                let mut s = format!("{{ let base = {}; ", word_base(code, members[0].0, index));
                for &(wa, o, mask) in members {
                    s.push_str(&word_member(code, wa, o, mask, "base"));
                    s.push(' ');
                }
                s.push('}');
                s
            }
            Ins::CondSet {
                cmp,
                a,
                b,
                dst,
                value,
            } => format!(
                "if {} {{ {} = {}; }}",
                test(cmp, &phv(a), &format!("{}.norm({})", cmp_lit(cmp), phv(b))),
                phv(dst),
                hex(value)
            ),
            Ins::CondSetImm {
                cmp,
                a,
                dst,
                b,
                value,
            } => format!(
                "if {} {{ {} = {}; }}",
                test(cmp, &phv(a), &hex(b)),
                phv(dst),
                hex(value)
            ),
            Ins::Hash { unit, dst, mask } => {
                format!("{} = {};", phv(dst), masked(hash_call(code, unit), mask))
            }
            Ins::Random { dst, mask } => {
                format!("{} = {};", phv(dst), masked("st.random()".into(), mask))
            }
            Ins::SetValid(h) => format!("st.set_valid(code, {h}, phv);"),
            Ins::SetInvalid(h) => format!("st.valid &= !{};", hex(1 << h)),
            Ins::Unicast(port) => {
                format!("ctx.forward = Forward::Unicast({} as u16);", phv(port))
            }
            Ins::Multicast(g) => format!("ctx.forward = Forward::Multicast({g});"),
            Ins::Drop => "ctx.dropped = true;".into(),
            Ins::Clone => {
                "ctx.clone = true; st.deparse(code, ctx.packet, ctx.clone_bytes, phv);".into()
            }
            Ins::Digest(d) => format!(
                "ctx.digests.push(DigestMessage {{ digest: DigestId({d}), values: Vec::new() }});"
            ),
            Ins::Apply(t) => apply(code, prefix, t),
            Ins::Return => "return;".into(),
        };
        let _ = writeln!(out, "{line}");
    }
    let _ = writeln!(out, "}}\n");
    Ok(())
}

/// Most parser states on one path from the start state, and most paths, for which the
/// parser is emitted as a tree with constant offsets (a forward-only parser is a DAG; the
/// tree repeats a state reached by several paths).
const PARSE_TREE_DEPTH: usize = 16;
const PARSE_TREE_NODES: usize = 256;

/// The parser: [`State::parse`] with each state's header size, fields and select cases
/// as constants. When the parser unrolls into a small tree (every state at the constant
/// offset of its path) the function is that tree: each header is checked against the
/// packet's length once and its fields are read at constant offsets, and the headers a
/// path extracted are recorded once where it ends; otherwise it is a loop over states.
fn parser(code: &Code, name: &str, out: &mut String) {
    let mut nodes = 0usize;
    if tree_fits(code, 0, 0, &mut nodes) {
        let _ = writeln!(
            out,
            "#[inline(always)]\nfn {name}(st: &mut State, phv: &mut PhvBuf, code: &Code, packet: &[u8]) {{"
        );
        parse_node(code, 0, 0, &mut Vec::new(), out);
        let _ = writeln!(out, "}}\n");
        return;
    }
    parser_loop(code, name, out);
}

/// Whether the parser from `state` unrolls into at most [`PARSE_TREE_NODES`] nodes, no
/// path longer than [`PARSE_TREE_DEPTH`].
fn tree_fits(code: &Code, state: usize, depth: usize, nodes: &mut usize) -> bool {
    *nodes += 1;
    if depth >= PARSE_TREE_DEPTH || *nodes > PARSE_TREE_NODES {
        return false;
    }
    let Some(s) = code.parser.get(state) else {
        return true;
    };
    match s.kind {
        GOTO => tree_fits(code, s.next as usize, depth + 1, nodes),
        SELECT => code.pcases[s.cases as usize..s.cases_end as usize]
            .iter()
            .filter(|(_, t)| *t != NO_SLOT)
            .all(|(_, t)| tree_fits(code, *t as usize, depth + 1, nodes)),
        _ => true,
    }
}

/// Where a path of the parser tree ends: [`State::extracted`] for each header it
/// extracted (`path`: header, offset), then [`State::parse_done`].
fn parse_end(path: &[(u8, usize)], offset: usize, out: &mut String) {
    let mask: u64 = path.iter().fold(0, |m, (h, _)| m | 1 << h);
    if mask != 0 {
        let _ = writeln!(
            out,
            "st.valid |= {}; st.parsed |= {};",
            hex(mask),
            hex(mask)
        );
    }
    let mut last: i32 = -1;
    let mut in_order = true;
    for (h, at) in path {
        let _ = writeln!(out, "st.offsets[{h}] = {at};");
        in_order &= (*h as i32) >= last;
        last = *h as i32;
    }
    if !in_order {
        let _ = writeln!(out, "st.in_order = false;");
    }
    let _ = writeln!(out, "st.parse_done(code, {offset}, phv);");
}

/// The parser tree from `state` at byte `offset` after the headers of `path`.
fn parse_node(
    code: &Code,
    state: usize,
    offset: usize,
    path: &mut Vec<(u8, usize)>,
    out: &mut String,
) {
    let Some(s) = code.parser.get(state) else {
        parse_end(path, offset, out);
        return;
    };
    let mut offset = offset;
    let depth = path.len();
    if s.header != NO_HEADER {
        let end = offset + s.bytes as usize;
        let _ = writeln!(out, "if packet.len() < {end} {{");
        parse_end(path, offset, out);
        let _ = writeln!(out, "return;\n}}");
        for f in &code.pfields[s.fields as usize..s.fields_end as usize] {
            let _ = writeln!(
                out,
                "{} = extract(packet, {offset}, {}, {}, {}, {});",
                phv(f.phv),
                f.byte,
                f.bit,
                f.shift,
                f.width
            );
        }
        path.push((s.header, offset));
        offset = end;
    }
    match s.kind {
        GOTO => parse_node(code, s.next as usize, offset, path, out),
        SELECT => {
            let _ = writeln!(out, "match {} {{", phv(s.select));
            let mut seen = Vec::new();
            for (v, t) in &code.pcases[s.cases as usize..s.cases_end as usize] {
                // The first case of a value wins.
                if seen.contains(v) {
                    continue;
                }
                seen.push(*v);
                let _ = writeln!(out, "{} => {{", hex(*v));
                if *t == NO_SLOT {
                    parse_end(path, offset, out);
                } else {
                    parse_node(code, *t as usize, offset, path, out);
                }
                let _ = writeln!(out, "}}");
            }
            let _ = writeln!(out, "_ => {{");
            parse_end(path, offset, out);
            let _ = writeln!(out, "}}\n}}");
        }
        _ => parse_end(path, offset, out),
    }
    path.truncate(depth);
}

/// The parser as a loop over states (parsers too large for a tree).
fn parser_loop(code: &Code, name: &str, out: &mut String) {
    let _ = writeln!(
        out,
        "#[inline(always)]\nfn {name}(st: &mut State, phv: &mut PhvBuf, code: &Code, packet: &[u8]) {{\n\
         let mut offset = 0usize;\n\
         let mut last: i32 = -1;\n\
         let mut state = 0usize;\n\
         loop {{\n\
         match state {{"
    );
    for (i, s) in code.parser.iter().enumerate() {
        let _ = writeln!(out, "{i} => {{");
        if s.header != NO_HEADER {
            let _ = writeln!(out, "if offset + {} > packet.len() {{ break; }}", s.bytes);
            for f in &code.pfields[s.fields as usize..s.fields_end as usize] {
                let _ = writeln!(
                    out,
                    "{} = extract(packet, offset, {}, {}, {}, {});",
                    phv(f.phv),
                    f.byte,
                    f.bit,
                    f.shift,
                    f.width
                );
            }
            let _ = writeln!(
                out,
                "st.extracted({}, offset, &mut last);\noffset += {};",
                s.header, s.bytes
            );
        }
        match s.kind {
            GOTO => {
                let _ = writeln!(out, "state = {};", s.next);
            }
            SELECT => {
                let _ = writeln!(out, "state = match {} {{", phv(s.select));
                let mut seen = Vec::new();
                for (v, t) in &code.pcases[s.cases as usize..s.cases_end as usize] {
                    // The first case of a value wins.
                    if seen.contains(v) {
                        continue;
                    }
                    seen.push(*v);
                    if *t == NO_SLOT {
                        let _ = writeln!(out, "{} => break,", hex(*v));
                    } else {
                        let _ = writeln!(out, "{} => {t},", hex(*v));
                    }
                }
                let _ = writeln!(out, "_ => break,\n}};");
            }
            _ => {
                let _ = writeln!(out, "break;");
            }
        }
        let _ = writeln!(out, "}}");
    }
    let _ = writeln!(
        out,
        "_ => break,\n}}\n}}\nst.parse_done(code, offset, phv);\n}}\n"
    );
}

/// The Rust source of `generated.rs` for `variants` (a name, used as a prefix, and the
/// program).
pub(super) fn emit(variants: &[(&str, &Program)]) -> Result<String, ModelError> {
    let mut out = String::from(
        "// @generated by `hawkmesh-codegen --write` from the hawkmesh program (see\n\
         // `native.rs`); `hawkmesh-codegen --check` fails when it is stale. Do not edit.\n\
         #![allow(clippy::all, unused_braces, unused_parens, unused_variables)]\n\n\
         use super::native::{CarriedIn, Native};\n\
         use super::*;\n\n",
    );
    let mut table = String::from("pub(super) static VARIANTS: &[Native] = &[\n");
    for (name, program) in variants {
        let code = Code::compile(program)?;
        let prefix = name.to_string();
        let fns = functions(&code);
        let _ = writeln!(out, "// Variant `{name}`.\n");
        for (i, range) in fns.iter().enumerate() {
            let fname = match i {
                0 => format!("{prefix}_ingress"),
                1 => format!("{prefix}_egress"),
                a => format!("{prefix}_a{}", a - 2),
            };
            function(&code, &fname, &prefix, *range, &mut out)?;
        }
        parser(&code, &format!("{prefix}_parse"), &mut out);
        passes(&code, &prefix, &mut out);
        packing(&code, &prefix, &mut out);
        let _ = writeln!(
            out,
            "fn {prefix}_action(a: u16, st: &mut State, phv: &mut PhvBuf, code: &Code, ctx: &mut PassCtx) {{\n\
             match a {{"
        );
        for a in 0..code.action_start.len() {
            let _ = writeln!(out, "{a} => {prefix}_a{a}(st, phv, code, ctx),");
        }
        let _ = writeln!(
            out,
            "_ => st.run(code, code.action_start[a as usize], ctx, phv),\n}}\n}}\n"
        );
        let _ = writeln!(
            table,
            "Native {{ fingerprint: {}, ingress: {prefix}_pass_ingress, egress: {prefix}_pass_egress, pack: {prefix}_pack }},",
            hex(fingerprint(&code))
        );
    }
    table.push_str("];\n");
    out.push_str(&table);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hawkeye::{program, HawkeyeParams};
    use crate::packets::{eth_ipv4_udp, pfc_frame, polling_packet, rocev2_data, Polling};
    use crate::setup::configure_model;
    use hawkmesh_wire::telemetry::FiveTuple;

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn variants() -> Vec<(&'static str, HawkeyeParams)> {
        vec![
            ("tor", HawkeyeParams::default()),
            (
                "fabric",
                HawkeyeParams {
                    sketch: None,
                    ..HawkeyeParams::default()
                },
            ),
        ]
    }

    fn same(what: &str, n: usize, a: &PassOutput, b: &PassOutput) {
        assert_eq!(a.bytes, b.bytes, "{what} bytes, packet {n}");
        assert_eq!(a.dropped, b.dropped, "{what} dropped, packet {n}");
        assert_eq!(a.forward, b.forward, "{what} forward, packet {n}");
        assert_eq!(a.bridged, b.bridged, "{what} bridged, packet {n}");
        assert_eq!(a.clone, b.clone, "{what} clone, packet {n}");
        assert_eq!(
            a.clone_bytes, b.clone_bytes,
            "{what} clone bytes, packet {n}"
        );
        assert_eq!(a.digests, b.digests, "{what} digests, packet {n}");
    }

    fn same_registers(p: &Program, native: &Model, interpreted: &Model, n: usize) {
        for r in &p.registers {
            let a = native.register_read_all(&r.name).expect("register");
            let b = interpreted.register_read_all(&r.name).expect("register");
            assert!(a == b, "register {} differs after packet {n}", r.name);
        }
    }

    /// A random packet: mostly RoCEv2 data of a few hundred flows (flow slots and sketch
    /// buckets collide), with PFC frames, polling packets, plain UDP, truncated and
    /// corrupted packets and garbage.
    fn packet(p: &Program, rng: &mut Rng, flows: &[FiveTuple]) -> Vec<u8> {
        let flow = flows[rng.below(flows.len() as u64) as usize];
        let data = |rng: &mut Rng| {
            rocev2_data(
                p,
                &flow,
                rng.below(64) as u8,
                rng.below(4) as u8,
                1 + rng.below(255) as u8,
                rng.below(1 << 24) as u32,
                64 + rng.below(1100) as usize,
            )
        };
        match rng.below(100) {
            0..=64 => data(rng),
            65..=69 => {
                let mut quanta = [0u16; 8];
                for q in quanta.iter_mut() {
                    *q = if rng.below(3) == 0 {
                        0
                    } else {
                        rng.next() as u16
                    };
                }
                pfc_frame(rng.next() as u8, quanta)
            }
            70..=79 => {
                let mut poll = Polling::new(rng.below(40), flow, rng.below(4) as u8);
                poll.trace_flag = rng.below(4) as u8;
                poll.context_kind = rng.below(3) as u8;
                poll.arrival_flags = rng.below(4) as u8;
                poll.context_ingress_port = rng.below(70) as u16;
                poll.context_egress_port = rng.below(70) as u16;
                poll.context_flags = rng.below(4) as u8;
                poll.context_pfc_ports = rng.next();
                poll.context_tstamp_ns = rng.next() & 0xFFFF_FFFF_FFFF;
                polling_packet(p, &poll)
            }
            80..=84 => eth_ipv4_udp(p, &flow, rng.below(64) as u8, 0, 64, rng.below(64) as usize),
            85..=89 => {
                let mut v = data(rng);
                v.truncate(rng.below(v.len() as u64) as usize);
                v
            }
            90..=95 => {
                let mut v = data(rng);
                let at = rng.below(60) as usize;
                v[at] ^= 1 << rng.below(8);
                v
            }
            _ => (0..rng.below(80)).map(|_| rng.next() as u8).collect(),
        }
    }

    #[test]
    fn the_default_variants_run_natively() {
        for (name, params) in variants() {
            let p = Arc::new(program(&params).expect("program"));
            let m = Model::new(p, Routing::FromInput, params.cpu_port).expect("model");
            assert!(
                m.is_native(),
                "variant `{name}` has no emitted code: run `hawkmesh-codegen --write`"
            );
        }
    }

    #[test]
    fn models_share_equal_tables_until_one_of_them_changes() {
        let params = HawkeyeParams::default();
        let p = Arc::new(program(&params).expect("program"));
        let speeds = vec![100.0; 8];
        let mut a = Model::new(Arc::clone(&p), Routing::FromInput, params.cpu_port).expect("a");
        let mut b = Model::new(Arc::clone(&p), Routing::FromInput, params.cpu_port).expect("b");
        configure_model(&mut a, "a", &speeds).expect("configure a");
        configure_model(&mut b, "b", &speeds).expect("configure b");
        let t = FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 0, 2]);
        let packet = rocev2_data(&p, &t, 0, 2, 64, 1, 1062);
        let input = IngressInput {
            ingress_port: 1,
            tstamp_ns: 1000,
            routed_egress_port: Some(2),
        };
        let mut out = PassOutput::default();
        for m in [&mut a, &mut b] {
            m.ingress(&packet, &input, &mut out).expect("pass");
        }
        assert!(Arc::ptr_eq(&a.st.tables, &b.st.tables));
        // A ninth port on `b` only: `b` gets its own tables, `a` keeps what it had.
        b.table_add(
            "pfc_port_speed",
            TableEntry {
                key: vec![8],
                mask: vec![],
                priority: 0,
                action: "pfc_quanta_100g".into(),
                params: vec![],
            },
        )
        .expect("entry");
        for m in [&mut a, &mut b] {
            m.ingress(&packet, &input, &mut out).expect("pass");
        }
        assert!(!Arc::ptr_eq(&a.st.tables, &b.st.tables));
        assert_eq!(a.table_len("pfc_port_speed").expect("a"), 8);
        assert_eq!(b.table_len("pfc_port_speed").expect("b"), 9);
    }

    #[test]
    fn emitted_passes_match_the_interpreter_on_random_packets() {
        for (name, params) in variants() {
            let p = Arc::new(program(&params).expect("program"));
            let speeds: Vec<f64> = (0..64)
                .map(|i| if i % 5 == 0 { 400.0 } else { 100.0 })
                .collect();
            let mut native =
                Model::new(Arc::clone(&p), Routing::FromInput, params.cpu_port).expect("model");
            let mut interpreted =
                Model::new(Arc::clone(&p), Routing::FromInput, params.cpu_port).expect("model");
            interpreted.native = None;
            // The netsim adapter's passes (bridged fields packed, no copy of unchanged
            // headers) on a third model.
            let mut packed =
                Model::new(Arc::clone(&p), Routing::FromInput, params.cpu_port).expect("model");
            assert!(native.is_native() && !interpreted.is_native(), "{name}");
            configure_model(&mut native, name, &speeds).expect("configure");
            configure_model(&mut interpreted, name, &speeds).expect("configure");
            configure_model(&mut packed, name, &speeds).expect("configure");
            let widths: Vec<u32> = p
                .bridged_fields()
                .iter()
                .map(|f| p.field(*f).width as u32)
                .collect();
            let pack = |c: &Carried| {
                let (mut acc, mut shift) = (0u128, 0u32);
                for (v, w) in c.values.iter().zip(&widths) {
                    acc |= ((v & mask(*w as u8)) as u128) << shift;
                    shift += w;
                }
                [acc as u64, (acc >> 64) as u64]
            };
            let (mut pi, mut pe) = (PassOutput::default(), PassOutput::default());
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
            let flows: Vec<FiveTuple> = (0..300)
                .map(|_| {
                    let a = rng.next();
                    FiveTuple::rocev2(
                        [10, (a >> 8) as u8 & 3, (a >> 16) as u8, a as u8],
                        49152 + (a >> 24) as u16 % 64,
                        [10, 1, (a >> 32) as u8 & 7, (a >> 40) as u8],
                    )
                })
                .collect();
            let mut t = 1u64 << 30;
            let (mut a, mut b) = (PassOutput::default(), PassOutput::default());
            let (mut ea, mut eb) = (PassOutput::default(), PassOutput::default());
            let (mut ca, mut cb) = (PassOutput::default(), PassOutput::default());
            // Ingress clones, multicasts, egress clones, drops: the sequence must reach them.
            let mut seen = [0u32; 4];
            for n in 0..30_000 {
                let step = if rng.below(50) == 0 { 1 << 23 } else { 1 << 14 };
                t += rng.below(step);
                t &= 0xFFFF_FFFF_FFFF;
                let bytes = packet(&p, &mut rng, &flows);
                let ports = if rng.below(30) == 0 { 256 } else { 64 };
                let port = rng.below(ports) as u16;
                let routed = rng.below(64) as u16;
                let input = IngressInput {
                    ingress_port: port,
                    tstamp_ns: t,
                    routed_egress_port: (rng.below(20) != 0).then_some(routed),
                };
                native.ingress(&bytes, &input, &mut a).expect("ingress");
                interpreted
                    .ingress(&bytes, &input, &mut b)
                    .expect("ingress");
                same("ingress", n, &a, &b);
                let mut bridge = [0u64; 2];
                let unchanged = packed
                    .ingress_packed(&bytes, &input, &mut pi, &mut bridge)
                    .expect("ingress");
                let packed_bytes = if unchanged {
                    bytes.clone()
                } else {
                    pi.bytes.clone()
                };
                assert_eq!(packed_bytes, a.bytes, "packed ingress bytes, packet {n}");
                assert_eq!(bridge, pack(&a.bridged), "packed bridge, packet {n}");
                pi.bytes = a.bytes.clone();
                pi.bridged = a.bridged;
                same("packed ingress", n, &pi, &a);
                let queue = rng.below(8) as u8;
                let cpu = EgressInput {
                    ingress_port: port,
                    egress_port: params.cpu_port,
                    queue,
                    enq_tstamp_ns: t,
                    enq_qdepth: 0,
                    packet_length: bytes.len() as u16,
                };
                seen[3] += a.dropped as u32;
                if let Some(c) = a.clone {
                    seen[0] += 1;
                    native
                        .egress(&a.clone_bytes, &cpu, &c, &mut ca)
                        .expect("egress");
                    interpreted
                        .egress(&b.clone_bytes, &cpu, &c, &mut cb)
                        .expect("egress");
                    same("ingress clone", n, &ca, &cb);
                }
                let ports: Vec<u16> = match a.forward {
                    _ if a.dropped => vec![],
                    Forward::None => vec![],
                    Forward::Unicast(p) => vec![p],
                    Forward::Multicast(_) => {
                        seen[1] += 1;
                        vec![rng.below(64) as u16, rng.below(64) as u16]
                    }
                };
                for out in ports {
                    let e = EgressInput {
                        ingress_port: port,
                        egress_port: out,
                        queue,
                        enq_tstamp_ns: t + rng.below(1 << 12),
                        enq_qdepth: rng.below(3000) as u32,
                        packet_length: 64 + rng.below(1100) as u16,
                    };
                    native
                        .egress(&a.bytes, &e, &a.bridged, &mut ea)
                        .expect("egress");
                    interpreted
                        .egress(&b.bytes, &e, &b.bridged, &mut eb)
                        .expect("egress");
                    same("egress", n, &ea, &eb);
                    let unchanged = packed
                        .egress_packed(&packed_bytes, &e, bridge, &mut pe)
                        .expect("egress");
                    if unchanged {
                        pe.bytes = packed_bytes.clone();
                    }
                    same("packed egress", n, &pe, &ea);
                    if let Some(c) = ea.clone {
                        seen[2] += 1;
                        let e = EgressInput {
                            egress_port: params.cpu_port,
                            enq_qdepth: 0,
                            ..e
                        };
                        native
                            .egress(&ea.clone_bytes, &e, &c, &mut ca)
                            .expect("egress");
                        interpreted
                            .egress(&eb.clone_bytes, &e, &c, &mut cb)
                            .expect("egress");
                        same("egress clone", n, &ca, &cb);
                    }
                }
                if n % 1000 == 999 {
                    same_registers(&p, &native, &interpreted, n);
                    same_registers(&p, &native, &packed, n);
                }
            }
            same_registers(&p, &native, &interpreted, 30_000);
            same_registers(&p, &native, &packed, 30_000);
            assert!(
                seen.iter().all(|s| *s > 0),
                "{name}: events reached {seen:?}"
            );
        }
    }
    #[test]
    fn a_register_reset_clears_that_register_only() {
        // Registers share interleaved storage; a reset must leave its neighbours intact.
        let params = HawkeyeParams::default();
        let p = Arc::new(program(&params).expect("program"));
        let mut m = Model::new(Arc::clone(&p), Routing::FromInput, params.cpu_port).expect("model");
        configure_model(&mut m, "s", &[100.0; 64]).expect("configure");
        let mut rng = Rng(7);
        let flows: Vec<FiveTuple> = (0..50)
            .map(|i| FiveTuple::rocev2([10, 0, 0, i], 49152 + i as u16, [10, 1, 0, 1]))
            .collect();
        let (mut ing, mut eg) = (PassOutput::default(), PassOutput::default());
        for n in 0..3000u64 {
            let bytes = packet(&p, &mut rng, &flows);
            let input = IngressInput {
                ingress_port: (n % 64) as u16,
                tstamp_ns: n * 5000,
                routed_egress_port: Some(((n / 3) % 64) as u16),
            };
            m.ingress(&bytes, &input, &mut ing).expect("ingress");
            if let (false, Forward::Unicast(port)) = (ing.dropped, ing.forward) {
                let e = EgressInput {
                    ingress_port: input.ingress_port,
                    egress_port: port,
                    queue: 3,
                    enq_tstamp_ns: input.tstamp_ns,
                    enq_qdepth: (n % 700) as u32,
                    packet_length: 1000,
                };
                m.egress(&ing.bytes, &e, &ing.bridged, &mut eg)
                    .expect("egress");
            }
        }
        let read = |m: &Model, r: &str| m.register_read_all(r).expect("register").to_vec();
        let before: Vec<Vec<u64>> = p.registers.iter().map(|r| read(&m, &r.name)).collect();
        let touched = before.iter().filter(|v| v.iter().any(|x| *x != 0)).count();
        assert!(
            touched > p.registers.len() / 2,
            "{touched} registers written"
        );
        for (i, r) in p.registers.iter().enumerate() {
            m.register_reset(&r.name).expect("reset");
            for (j, other) in p.registers.iter().enumerate() {
                let now = read(&m, &other.name);
                if j <= i {
                    assert!(
                        now.iter().all(|v| *v == 0),
                        "{} after resetting {}",
                        other.name,
                        r.name
                    );
                } else {
                    assert!(
                        now == before[j],
                        "{} changed by resetting {}",
                        other.name,
                        r.name
                    );
                }
            }
        }
    }
}
