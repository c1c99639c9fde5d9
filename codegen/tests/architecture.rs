//! Every field of the target's intrinsic metadata the generated programs use is one the
//! target's architecture file declares (found without the compiler: p4c once rejected the
//! v1model program for `standard_metadata.qid`, which v1model does not have).
//!
//! The field lists are facts of the architecture files, not copies of them:
//! - v1model: `struct standard_metadata_t` of `p4include/v1model.p4` (p4c v1.2.5.16);
//! - TNA: the intrinsic metadata headers of `backends/tofino/bf-p4c/p4include/tofino1_base.p4`
//!   (p4c v1.2.5.16), padding fields left out.

use std::collections::BTreeSet;
use std::path::PathBuf;

fn program(target: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("p4")
        .join(target)
        .join("hawkmesh.p4");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `prefix.field` uses in `text` (a field name after the prefix and a dot).
fn uses(text: &str, prefix: &str) -> BTreeSet<String> {
    let needle = format!("{prefix}.");
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices(&needle) {
        // Only the whole identifier `prefix`, not the end of a longer one.
        let before = text[..at].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[at + needle.len()..];
        let field: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if !field.is_empty() {
            out.insert(field);
        }
    }
    out
}

fn assert_declared(target: &str, prefix: &str, declared: &[&str]) {
    let text = program(target);
    let declared: BTreeSet<&str> = declared.iter().copied().collect();
    for field in uses(&text, prefix) {
        assert!(
            declared.contains(field.as_str()),
            "p4/{target}/hawkmesh.p4 uses {prefix}.{field}, which the architecture does not declare"
        );
    }
}

#[test]
fn the_v1model_program_uses_only_fields_of_standard_metadata() {
    assert_declared(
        "v1model",
        "standard_metadata",
        &[
            "ingress_port",
            "egress_spec",
            "egress_port",
            "instance_type",
            "packet_length",
            "enq_timestamp",
            "enq_qdepth",
            "deq_timedelta",
            "deq_qdepth",
            "ingress_global_timestamp",
            "egress_global_timestamp",
            "mcast_grp",
            "egress_rid",
            "checksum_error",
            "parser_error",
            "priority",
        ],
    );
    // The scan finds what it should (a program that stopped naming standard_metadata would
    // make the check above vacuous).
    assert!(uses(&program("v1model"), "standard_metadata").contains("ingress_port"));
}

#[test]
fn the_tna_program_uses_only_fields_of_the_intrinsic_metadata() {
    for (prefix, declared) in [
        (
            "ig_intr_md",
            &[
                "resubmit_flag",
                "packet_version",
                "ingress_port",
                "ingress_mac_tstamp",
            ][..],
        ),
        (
            "eg_intr_md",
            &[
                "egress_port",
                "enq_qdepth",
                "enq_congest_stat",
                "enq_tstamp",
                "deq_qdepth",
                "deq_congest_stat",
                "app_pool_congest_stat",
                "deq_timedelta",
                "egress_rid",
                "egress_rid_first",
                "egress_qid",
                "egress_cos",
                "deflection_flag",
                "pkt_length",
            ][..],
        ),
        (
            "eg_prsr_md",
            &["global_tstamp", "global_ver", "parser_err"][..],
        ),
        (
            "ig_dprsr_md",
            &["drop_ctl", "digest_type", "resubmit_type", "mirror_type"][..],
        ),
        (
            "ig_tm_md",
            &[
                "ucast_egress_port",
                "bypass_egress",
                "deflect_on_drop",
                "ingress_cos",
                "qid",
                "icos_for_copy_to_cpu",
                "copy_to_cpu",
                "packet_color",
                "disable_ucast_cutthru",
                "enable_mcast_cutthru",
                "mcast_grp_a",
                "mcast_grp_b",
                "level1_mcast_hash",
                "level2_mcast_hash",
                "level1_exclusion_id",
                "level2_exclusion_id",
                "rid",
            ][..],
        ),
        (
            "eg_dprsr_md",
            &[
                "drop_ctl",
                "mirror_type",
                "coalesce_flush",
                "coalesce_length",
            ][..],
        ),
    ] {
        assert_declared("tna", prefix, declared);
    }
    assert!(uses(&program("tna"), "eg_intr_md").contains("egress_port"));
}
