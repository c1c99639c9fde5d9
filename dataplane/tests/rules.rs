//! Programs that must fail the Tofino rule checks, each with the message it must give.

use hawkmesh_dataplane::error::BuildError;
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::e::*;
use hawkmesh_dataplane::ir::*;

fn base() -> (ProgramBuilder, RegisterId, FieldId, FieldId) {
    let mut b = ProgramBuilder::new("t", "rule test");
    let (eth, f) = b.header(
        "ethernet",
        "",
        &[("dst", 48), ("src", 48), ("ether_type", 16)],
    );
    b.parser_state("start", Some(eth), Transition::Accept);
    let r = b.register("counter", 32, 16, "m", "");
    let x = b.meta("x", 32);
    (b, r, x, f[2])
}

fn add_one(b: &mut ProgramBuilder, name: &str, r: RegisterId) -> RegisterActionId {
    b.register_action(RegisterAction {
        name: name.into(),
        register: r,
        doc: String::new(),
        conditions: vec![],
        updates: vec![SaluUpdate {
            when: Pred::ALWAYS,
            word: Word::Lo,
            op: SaluOp::Add,
            a: SaluOperand::Reg(Word::Lo),
            b: SaluOperand::Const(1),
        }],
        outputs: vec![],
    })
}

fn check(result: Result<Program, BuildError>, expect: &str) {
    match result {
        Ok(_) => panic!("program must fail with `{expect}`"),
        Err(e) => assert!(
            e.to_string().contains(expect),
            "message `{e}` lacks `{expect}`"
        ),
    }
}

#[test]
fn register_touched_twice_on_one_path() {
    let (mut b, r, _, _) = base();
    let a1 = add_one(&mut b, "inc_a", r);
    let a2 = add_one(&mut b, "inc_b", r);
    b.egress(vec![
        Stmt::Execute {
            action: a1,
            index: c(1, 4),
            output: None,
        },
        Stmt::If(
            valid(HeaderId(0)),
            vec![Stmt::Execute {
                action: a2,
                index: c(1, 4),
                output: None,
            }],
            vec![],
        ),
    ]);
    check(
        b.build(),
        "register `counter` may be accessed twice on one path (`inc_a` then `inc_b`)",
    );
}

#[test]
fn exclusive_branches_may_use_one_register() {
    let (mut b, r, _, _) = base();
    let a1 = add_one(&mut b, "inc_a", r);
    let a2 = add_one(&mut b, "inc_b", r);
    b.egress(vec![Stmt::If(
        valid(HeaderId(0)),
        vec![Stmt::Execute {
            action: a1,
            index: c(1, 4),
            output: None,
        }],
        vec![Stmt::Execute {
            action: a2,
            index: c(2, 4),
            output: None,
        }],
    )]);
    assert!(b.build().is_ok());
}

#[test]
fn register_in_both_pipelines() {
    let (mut b, r, _, _) = base();
    let a1 = add_one(&mut b, "inc_a", r);
    b.ingress(vec![Stmt::Execute {
        action: a1,
        index: c(1, 4),
        output: None,
    }]);
    b.egress(vec![Stmt::Execute {
        action: a1,
        index: c(1, 4),
        output: None,
    }]);
    check(b.build(), "used in both ingress and egress");
}

#[test]
fn alu_op_not_allowed_in_stateful_alu() {
    let (mut b, r, x, _) = base();
    b.register_action(RegisterAction {
        name: "shift".into(),
        register: r,
        doc: String::new(),
        conditions: vec![],
        updates: vec![SaluUpdate {
            when: Pred::ALWAYS,
            word: Word::Lo,
            op: SaluOp::Shl,
            a: SaluOperand::Reg(Word::Lo),
            b: SaluOperand::Phv(x),
        }],
        outputs: vec![],
    });
    check(
        b.build(),
        "RegisterAction `shift`: operation Shl is not available in a stateful ALU",
    );
}

#[test]
fn too_many_conditions_and_phv_operands() {
    let (mut b, r, x, _) = base();
    let y = b.meta("y", 32);
    let z = b.meta("z", 32);
    let cond = |f| SaluCondition {
        left: SaluOperand::Phv(f),
        right: None,
        cmp: CmpOp::Eq,
        constant: 0,
    };
    b.register_action(RegisterAction {
        name: "three".into(),
        register: r,
        doc: String::new(),
        conditions: vec![cond(x), cond(y), cond(z)],
        updates: vec![],
        outputs: vec![],
    });
    check(
        b.build(),
        "3 conditions; a stateful ALU evaluates at most 2",
    );
    let (mut b, r, x, _) = base();
    let y = b.meta("y", 32);
    let z = b.meta("z", 32);
    b.register_action(RegisterAction {
        name: "operands".into(),
        register: r,
        doc: String::new(),
        conditions: vec![SaluCondition {
            left: SaluOperand::Phv(x),
            right: Some((true, SaluOperand::Phv(y))),
            cmp: CmpOp::Eq,
            constant: 0,
        }],
        updates: vec![SaluUpdate {
            when: Pred::ALWAYS,
            word: Word::Lo,
            op: SaluOp::Set,
            a: SaluOperand::Phv(z),
            b: SaluOperand::Const(0),
        }],
        outputs: vec![],
    });
    check(
        b.build(),
        "reads 3 PHV fields; a stateful ALU takes at most 2 PHV operands",
    );
}

#[test]
fn three_updates_of_a_word_and_hi_on_single_register() {
    let (mut b, r, _, _) = base();
    let u = |when, op| SaluUpdate {
        when,
        word: Word::Lo,
        op,
        a: SaluOperand::Reg(Word::Lo),
        b: SaluOperand::Const(1),
    };
    b.register_action(RegisterAction {
        name: "busy".into(),
        register: r,
        doc: String::new(),
        conditions: vec![SaluCondition {
            left: SaluOperand::Reg(Word::Lo),
            right: None,
            cmp: CmpOp::Eq,
            constant: 0,
        }],
        updates: vec![
            u(Pred(0b0101), SaluOp::Add),
            u(Pred(0b1010), SaluOp::Sub),
            u(Pred(0b1010), SaluOp::Max),
        ],
        outputs: vec![],
    });
    check(
        b.build(),
        "3 updates of word Lo; each word has 2 update ALUs",
    );
    let (mut b, r, _, _) = base();
    b.register_action(RegisterAction {
        name: "hi".into(),
        register: r,
        doc: String::new(),
        conditions: vec![],
        updates: vec![SaluUpdate {
            when: Pred::ALWAYS,
            word: Word::Hi,
            op: SaluOp::Set,
            a: SaluOperand::Const(1),
            b: SaluOperand::Const(0),
        }],
        outputs: vec![],
    });
    check(
        b.build(),
        "updates `hi` of the single-word register `counter`",
    );
}

#[test]
fn table_key_too_wide() {
    let (mut b, _, _, _) = base();
    let k1 = b.meta("k1", 64);
    let k2 = b.meta("k2", 64);
    let k3 = b.meta("k3", 8);
    let noop = b.action("noop", "", &[], |_| vec![]);
    b.table(Table {
        name: "wide".into(),
        keys: vec![
            (k1, MatchKind::Exact),
            (k2, MatchKind::Exact),
            (k3, MatchKind::Exact),
        ],
        actions: vec![noop],
        default_action: (noop, vec![]),
        size: 16,
        doc: String::new(),
        forwarding: false,
    });
    check(
        b.build(),
        "table `wide`: exact key is 136 bits, more than the 128-bit limit",
    );
}

#[test]
fn truncating_assignment_boolean_assignment_and_wrong_gress() {
    let (mut b, _, x, _) = base();
    let small = b.meta("small", 8);
    b.ingress(vec![Stmt::Assign(small, f(x))]);
    check(b.build(), "a 32-bit value would be truncated to 8 bits");
    let (mut b, _, x, _) = base();
    b.ingress(vec![Stmt::Assign(x, eq(f(x), c(1, 32)))]);
    check(b.build(), "assigns a boolean");
    let (mut b, _, _, _) = base();
    b.egress(vec![Stmt::SetMulticastGroup(1)]);
    check(b.build(), "multicast is only available in ingress");
    let (mut b, _, x, _) = base();
    let q = b.intrinsic(Intrinsic::EnqQdepth);
    b.ingress(vec![Stmt::Assign(x, f(q))]);
    check(
        b.build(),
        "intrinsic `enq_qdepth` is only available in egress",
    );
}

#[test]
fn unicast_and_multicast_on_one_path_and_header_write_before_clone() {
    let (mut b, _, _, _) = base();
    b.ingress(vec![
        Stmt::SetEgressPort(c(1, 16)),
        Stmt::SetMulticastGroup(1),
    ]);
    check(
        b.build(),
        "sets both a unicast egress port and a multicast group",
    );
    let (mut b, _, _, et) = base();
    b.ingress(vec![Stmt::Assign(et, c(0x88B5, 16)), Stmt::CloneToCpu]);
    check(
        b.build(),
        "header field `hdr.ethernet.ether_type` is written before the packet is cloned",
    );
}

#[test]
fn parser_loops_and_bad_parameters() {
    let mut b = ProgramBuilder::new("t", "");
    let (eth, f) = b.header(
        "ethernet",
        "",
        &[("dst", 48), ("src", 48), ("ether_type", 16)],
    );
    b.parser_state(
        "start",
        Some(eth),
        Transition::Select {
            field: f[2],
            cases: vec![(0x800, Some(0))],
        },
    );
    check(b.build(), "must go forward to an existing state");
    let bad = HawkeyeParams {
        ports: 48,
        ..HawkeyeParams::default()
    };
    check(
        program(&bad),
        "parameter `ports`: 48 must be a power of two",
    );
    let bad = HawkeyeParams {
        epoch_log2_ns: 40,
        ..HawkeyeParams::default()
    };
    check(program(&bad), "parameter `epoch_log2_ns`");
}

#[test]
fn default_and_variants_build() {
    assert!(program(&HawkeyeParams::default()).is_ok());
    let spine = HawkeyeParams {
        sketch: None,
        epochs: 2,
        flow_slots: 65536,
        ..HawkeyeParams::default()
    };
    assert!(program(&spine).is_ok());
}

#[test]
fn a_random_number_goes_into_metadata_of_at_most_32_bits() {
    let (mut b, _, _, ether_type) = base();
    b.egress(vec![Stmt::Random(ether_type)]);
    check(b.build(), "a random number goes into user metadata");
    let (mut b, _, _, _) = base();
    let wide = b.meta("wide", 48);
    b.egress(vec![Stmt::Random(wide)]);
    check(b.build(), "48 bits; a Random extern gives at most 32");
    let (mut b, _, x, _) = base();
    b.egress(vec![Stmt::Random(x)]);
    assert!(
        b.build().is_ok(),
        "32 bits of metadata take a random number"
    );
}
