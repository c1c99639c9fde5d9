//! ECN marking at egress on the queue depth, with DCQCN's RED profile (DCQCN, SIGCOMM'15
//! §3.1 and Fig. 4: no mark below Kmin, probability rising linearly from 0 at Kmin to Pmax
//! at Kmax, every packet marked at Kmax and above), per egress port, for ECN-capable IPv4
//! (ECT(0) `10` or ECT(1) `01`; a mark sets CE `11` — RFC 3168 §5; Not-ECT `00` is never
//! marked, RFC 3168 §6.1.1.1).
//!
//! # How a probability is drawn without a multiplier
//!
//! Tofino's PHV and stateful ALUs neither multiply nor divide, so the pipeline cannot
//! compute `Pmax·(q−Kmin)/(Kmax−Kmin)`. It inverts the test instead: mark when
//! `q − Kmin > U`, where `U` is uniform on `[0, R)` with `R = (Kmax−Kmin)/Pmax`; then
//! `P(mark) = P(U < q−Kmin) = (q−Kmin)/R = Pmax·(q−Kmin)/(Kmax−Kmin)`. `U` comes from a
//! table: the program draws `ECN_RANDOM_BITS` random bits `r` per packet and looks up
//! `(egress port, r)` in `ecn_profile`, whose entry holds `Kmax` and `mark_above =
//! Kmin + U_r`, where the control plane sets `U_r` to the `r`-th of `2^ECN_RANDOM_BITS`
//! equally likely quantiles of `U` (`hawkmesh_wire::control::ecn_profile_entries`). The
//! test is then `q ≥ Kmax || q > mark_above`, two comparisons. With 8 random bits the
//! probability is exact to ±1/512.
//!
//! A port without entries (the default action) marks nothing. Thresholds are in the
//! target's queue-depth unit ([`Intrinsic::EnqQdepth`]); the control plane converts from
//! bytes in one place (`hawkmesh_wire::control::QdepthUnit`).

use super::Ctx;
use crate::ir::e::*;
use crate::ir::*;

/// Random bits drawn per packet: the quantiles per egress port in `ecn_profile`.
pub(super) const ECN_RANDOM_BITS: u8 = 8;

/// RFC 3168 §5: the ECN codepoint Congestion Experienced.
const ECN_CE: u64 = 0b11;
/// RFC 3168 §5: Not-ECT.
const ECN_NOT_ECT: u64 = 0b00;

/// The marking statements of the egress control (for every non-clone, non-polling packet).
pub(super) fn ecn_marking(b: &mut ProgramBuilder, cx: &Ctx) -> Vec<Stmt> {
    b.constant(
        "ECN_RANDOM_BITS",
        u64::from(ECN_RANDOM_BITS),
        8,
        "Random bits drawn per packet for ECN marking: ecn_profile holds 2^ECN_RANDOM_BITS entries per egress port",
    );
    let draw = b.meta("ecn_draw", ECN_RANDOM_BITS);
    let profiled = b.meta("ecn_profiled", 1);
    let kmax = b.meta("ecn_kmax", 32);
    let mark_above = b.meta("ecn_mark_above", 32);
    let red = b.action(
        "ecn_red",
        "DCQCN RED profile for this port and draw: mark at and above kmax; below it, mark above mark_above = Kmin + the draw's quantile of U(0, (Kmax-Kmin)/Pmax)",
        &[("kmax", 32), ("mark_above", 32)],
        |p| {
            vec![
                Stmt::Assign(profiled, c(1, 1)),
                Stmt::Assign(kmax, f(p[0])),
                Stmt::Assign(mark_above, f(p[1])),
            ]
        },
    );
    let none = b.action(
        "ecn_unprofiled",
        "No ECN profile on this port: no marking (the default)",
        &[],
        |_| vec![Stmt::Assign(profiled, c(0, 1))],
    );
    let ports = cx.params.ports;
    let table = b.table(Table {
        name: "ecn_profile".into(),
        keys: vec![(cx.intr.eg_port, MatchKind::Exact), (draw, MatchKind::Exact)],
        actions: vec![red, none],
        default_action: (none, vec![]),
        size: ports << ECN_RANDOM_BITS,
        doc: "(egress port, random draw) -> DCQCN RED profile (Kmax and the draw's marking threshold, in the queue-depth unit); no entry: no marking".into(),
        forwarding: false,
    });
    let (ipv4, ecn) = (cx.h.ipv4.header, cx.h.ipv4.ecn);
    let q = cx.intr.enq_qdepth;
    vec![Stmt::If(
        all(
            valid(ipv4),
            all(ne(f(ecn), c(ECN_NOT_ECT, 2)), ne(f(ecn), c(ECN_CE, 2))),
        ),
        vec![
            Stmt::Random(draw),
            Stmt::Apply(table),
            Stmt::If(
                all(
                    eq(f(profiled), c(1, 1)),
                    any(
                        Expr::Cmp(CmpOp::Ge, Box::new(f(q)), Box::new(f(kmax))),
                        gt(f(q), f(mark_above)),
                    ),
                ),
                vec![Stmt::Assign(ecn, c(ECN_CE, 2))],
                vec![],
            ),
        ],
        vec![],
    )]
}
