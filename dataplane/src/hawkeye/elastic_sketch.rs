//! Elastic Sketch (ingress, ToR switches): PARALEON §III-B, Elastic Sketch SIGCOMM'18 §3.

use super::dsl::*;
use super::Ctx;
use crate::error::BuildError;
use crate::ir::e::*;
use crate::ir::*;

/// Declares the sketch (when the variant has one) and returns the ingress statements
/// that insert a RoCEv2 packet once per path (the DSCP mark bit); empty without a sketch.
pub(super) fn insert_once(b: &mut ProgramBuilder, cx: &Ctx) -> Result<Vec<Stmt>, BuildError> {
    let params = cx.params;
    let (ip_src, ip_dst, ip_dscp) = (cx.h.ipv4.src_addr, cx.h.ipv4.dst_addr, cx.h.ipv4.dscp);
    let (udp_sport, udp_dport) = (cx.h.udp.src_port, cx.h.udp.dst_port);
    let bth = cx.h.bth;
    let mut sketch_stmts: Vec<Stmt> = Vec::new();
    if let Some(sp) = &params.sketch {
        let hb = log2("sketch.heavy_buckets", sp.heavy_buckets, 2, 1 << 20)?;
        let lb = log2("sketch.light_counters", sp.light_counters, 2, 1 << 24)?;
        if sp.lambda == 0 || sp.lambda > 1 << 16 {
            return Err(BuildError::Parameter {
                name: "sketch.lambda",
                message: format!("{} must be in 1..=65536", sp.lambda),
            });
        }
        b.constant(
            "SKETCH_HEAVY_BUCKETS",
            sp.heavy_buckets as u64,
            32,
            "Elastic Sketch heavy-part buckets",
        );
        b.constant(
            "SKETCH_LIGHT_COUNTERS",
            sp.light_counters as u64,
            32,
            "Elastic Sketch light-part 8-bit counters",
        );
        b.constant(
            "SKETCH_LAMBDA",
            sp.lambda as u64,
            32,
            "Elastic Sketch eviction threshold λ (vote- >= λ vote+)",
        );
        let mark = b.constant("SKETCH_MARK_DSCP_BIT", 1, 6, "DSCP bit marking a packet already inserted into a sketch on its path (PARALEON Keypoint 1)");
        b.constant(
            "SKETCH_FLAG_BIT",
            1 << 31,
            32,
            "Flag bit in sketch_votes: the flow may have earlier packets in the light part",
        );
        let fp = b.meta("sketch_fp", 32);
        let bucket = b.meta("sketch_bucket", hb);
        let total = b.meta("sketch_total", 32);
        let code = b.meta("sketch_code", 32);
        let replace = b.meta("sketch_replace", 1);
        let evicting = b.meta("sketch_evicting", 1);
        let new_votes = b.meta("sketch_new_votes", 32);
        let old_votes = b.meta("sketch_old_votes", 32);
        let light_key = b.meta("sketch_light_key", 32);
        let light_value = b.meta("sketch_light_value", 8);
        let fp_hash = b.hash(
            "sketch_fp_hash",
            vec![ip_src, ip_dst, udp_sport, udp_dport],
            32,
        );
        let total_reg = b.register("sketch_total", 32, sp.heavy_buckets, "elastic sketch", "Packets hashed to the heavy bucket since the last control-plane reset (Elastic Sketch vote+ + vote-, cumulative)");
        let key_reg = b.register("sketch_key", 64, sp.heavy_buckets, "elastic sketch", "Heavy part: lo = flow fingerprint, hi = Q = base + (λ+1)·vote+ where base is sketch_total when the flow took the bucket; vote- ≥ λ·vote+ ⇔ total − Q ≥ 0");
        let votes_reg = b.register(
            "sketch_votes",
            32,
            sp.heavy_buckets,
            "elastic sketch",
            "Heavy part vote+ with the flag in bit 31 (Elastic Sketch §3.1)",
        );
        let light_reg = b.register("sketch_light", 8, sp.light_counters, "elastic sketch", "Light part: 8-bit saturating counters (Elastic Sketch §3.2, one array as in the hardware version)");
        let total_add = ra(
            b,
            "sketch_total_add",
            total_reg,
            "vote_all += 1, returns the new value",
            vec![],
            vec![always(Word::Lo, SaluOp::Add, LO, K(1))],
            vec![out(Pred::ALWAYS, SaluOutputValue::New(Word::Lo))],
        );
        let l = sp.lambda as u64;
        let key_vote = ra(
            b,
            "sketch_key_vote",
            key_reg,
            "Ostracism (Elastic Sketch §3.1): same flow → vote+; else if vote- ≥ λ vote+ (or empty) → the flow takes the bucket; returns the old key, or 0xFFFFFFFF when the flow lost the vote",
            vec![
                cond(LO, Some((true, Phv(fp))), CmpOp::Eq, 0),
                cond(Phv(total), Some((true, HI)), CmpOp::SGe, 0),
            ],
            vec![
                upd(Pred::when(Some(false), Some(true)), Word::Lo, SaluOp::Set, Phv(fp), K(0)),
                upd(Pred::when(Some(true), None), Word::Hi, SaluOp::Add, HI, K(l + 1)),
                upd(Pred::when(Some(false), Some(true)), Word::Hi, SaluOp::Add, Phv(total), K(l)),
            ],
            vec![
                out(Pred(0b1111 & !Pred::when(Some(false), Some(false)).0), SaluOutputValue::Old(Word::Lo)),
                out(Pred::when(Some(false), Some(false)), SaluOutputValue::Const(0xFFFF_FFFF)),
            ],
        );
        let votes_update = ra(
            b,
            "sketch_votes_update",
            votes_reg,
            "vote+ += 1 for the resident flow; a new resident starts at 1 (flagged when it evicted another flow); returns the old value",
            vec![cond(Phv(replace), None, CmpOp::Ne, 0)],
            vec![
                upd(Pred::when(Some(true), None), Word::Lo, SaluOp::Set, Phv(new_votes), K(0)),
                upd(Pred::when(Some(false), None), Word::Lo, SaluOp::Add, LO, K(1)),
            ],
            vec![out(Pred::ALWAYS, SaluOutputValue::Old(Word::Lo))],
        );
        let light_add = ra(
            b,
            "sketch_light_add",
            light_reg,
            "light[i] |+|= v (a losing packet, or an evicted flagged flow)",
            vec![],
            vec![always(Word::Lo, SaluOp::SatAdd, LO, Phv(light_value))],
            vec![],
        );
        let light_max = ra(
            b,
            "sketch_light_max",
            light_reg,
            "light[i] = max(light[i], v) (an evicted unflagged flow)",
            vec![],
            vec![always(Word::Lo, SaluOp::Max, LO, Phv(light_value))],
            vec![],
        );
        sketch_stmts = vec![
            Stmt::Assign(ip_dscp, or(f(ip_dscp), c(mark, 6))),
            Stmt::Hash(fp_hash, fp),
            // Fingerprints 0 (empty bucket) and 0xFFFFFFFF (lost-vote code) are reserved.
            Stmt::If(
                any(eq(f(fp), c(0, 32)), eq(f(fp), c(0xFFFF_FFFF, 32))),
                vec![Stmt::Assign(fp, c(1, 32))],
                vec![],
            ),
            Stmt::Assign(bucket, slice(f(fp), 31, 32 - hb)),
            exec(total_add, f(bucket), Some(total)),
            exec(key_vote, f(bucket), Some(code)),
            Stmt::If(
                eq(f(code), c(0xFFFF_FFFF, 32)),
                vec![
                    // Lost the vote: the packet goes to the light part.
                    Stmt::Assign(light_key, f(fp)),
                    Stmt::Assign(light_value, c(1, 8)),
                    exec(light_add, slice(f(light_key), lb - 1, 0), None),
                ],
                vec![
                    Stmt::Assign(replace, c(0, 1)),
                    Stmt::Assign(evicting, c(0, 1)),
                    Stmt::Assign(new_votes, c(1, 32)),
                    Stmt::If(
                        ne(f(code), f(fp)),
                        vec![Stmt::Assign(replace, c(1, 1))],
                        vec![],
                    ),
                    Stmt::If(
                        all(ne(f(code), f(fp)), ne(f(code), c(0, 32))),
                        vec![
                            Stmt::Assign(evicting, c(1, 1)),
                            Stmt::Assign(new_votes, c(0x8000_0001, 32)),
                        ],
                        vec![],
                    ),
                    exec(votes_update, f(bucket), Some(old_votes)),
                    Stmt::If(
                        eq(f(evicting), c(1, 1)),
                        vec![
                            Stmt::Assign(light_key, f(code)),
                            Stmt::Assign(
                                light_value,
                                cast(min(and(f(old_votes), c(0x7FFF_FFFF, 32)), c(255, 32)), 8),
                            ),
                            Stmt::If(
                                ne(and(f(old_votes), c(0x8000_0000, 32)), c(0, 32)),
                                vec![exec(light_add, slice(f(light_key), lb - 1, 0), None)],
                                vec![exec(light_max, slice(f(light_key), lb - 1, 0), None)],
                            ),
                        ],
                        vec![],
                    ),
                ],
            ),
        ];
        // Only packets that carry a flow's data are a flow's size: RoCE's acknowledgements
        // (RC Acknowledge 0x11 and Atomic Acknowledge 0x12, IBTA vol. 1 §9.2 Table 38) and
        // CNPs (0x81, IBTA Annex A17) would each make a reverse "flow" as long as the data
        // flow at the receiver's ToR, doubling the flows the heavy part must hold.
        let ack = b.constant(
            "BTH_OPCODE_RC_ACK",
            0x11,
            8,
            "BTH opcode of RC Acknowledge (IBTA vol. 1 §9.2, Table 38)",
        );
        let atomic_ack = b.constant(
            "BTH_OPCODE_RC_ATOMIC_ACK",
            0x12,
            8,
            "BTH opcode of RC Atomic Acknowledge (IBTA vol. 1 §9.2, Table 38)",
        );
        let cnp = b.constant(
            "BTH_OPCODE_CNP",
            0x81,
            8,
            "BTH opcode of the RoCEv2 congestion notification packet (IBTA Annex A17)",
        );
        let opcode = cx.h.bth_opcode;
        // The opcode is read only once the BTH is known valid.
        let data_if = Stmt::If(
            all(
                all(ne(f(opcode), c(ack, 8)), ne(f(opcode), c(atomic_ack, 8))),
                ne(f(opcode), c(cnp, 8)),
            ),
            std::mem::take(&mut sketch_stmts),
            vec![],
        );
        let sketch_if = Stmt::If(
            all(valid(bth), eq(and(f(ip_dscp), c(mark, 6)), c(0, 6))),
            vec![data_if],
            vec![],
        );
        sketch_stmts = vec![sketch_if];
    }
    Ok(sketch_stmts)
}
