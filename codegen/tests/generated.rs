//! The committed generated files equal what the description produces (the same check as
//! `cargo run -p hawkmesh-codegen -- --check`), and emission is deterministic.

use hawkmesh_codegen::p4::{emit, Target};
use hawkmesh_codegen::rust_consts;
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The native back end for the ToR and fabric variants (as `hawkmesh-codegen` writes it).
fn native_source() -> String {
    let tor = program(&HawkeyeParams::default()).expect("program");
    let fabric = program(&HawkeyeParams {
        sketch: None,
        ..HawkeyeParams::default()
    })
    .expect("program");
    hawkmesh_dataplane::model::emit_native(&[("tor", &tor), ("fabric", &fabric)]).expect("native")
}

#[test]
fn committed_files_are_up_to_date() {
    let p = program(&HawkeyeParams::default()).expect("program");
    for (path, text) in [
        ("p4/tna/hawkmesh.p4", emit(&p, Target::Tna)),
        ("p4/tna/bfrt.json", hawkmesh_codegen::bfrt::emit(&p)),
        ("p4/v1model/hawkmesh.p4", emit(&p, Target::V1model)),
        ("wire/src/dataplane.rs", rust_consts::emit(&p)),
        ("dataplane/src/model/generated.rs", native_source()),
    ] {
        let current = std::fs::read_to_string(root().join(path)).unwrap_or_default();
        assert!(
            current == text,
            "{path} is stale: run `cargo run -p hawkmesh-codegen -- --write`"
        );
    }
}

#[test]
fn emission_is_deterministic_and_uses_target_idioms() {
    let a = program(&HawkeyeParams::default()).expect("program");
    let b = program(&HawkeyeParams::default()).expect("program");
    let tna = emit(&a, Target::Tna);
    assert_eq!(tna, emit(&b, Target::Tna));
    for needle in [
        "#include <tna.p4>",
        "RegisterAction<pair_t, bit<10>, bit<32>>(polling_dedupe) polling_dedupe_check",
        "Hash<bit<12>>(HashAlgorithm_t.CRC32) flow_hash;",
        "mirror.emit<mirror_h>",
        "Hash<bit<4>>(HashAlgorithm_t.CRC32) ecmp_hash;",
        // tofino.p4's `Random<T>` extern, one per field it fills.
        "Random<bit<8>>() random_ecn_draw;",
        "meta.ecn_draw = random_ecn_draw.get();",
        "Switch(pipe) main;",
    ] {
        assert!(tna.contains(needle), "TNA output lacks `{needle}`");
    }
    let v1 = emit(&a, Target::V1model);
    for needle in [
        "#include <v1model.p4>",
        "register<bit<64>>(1024) polling_dedupe;",
        "clone_preserving_field_list(CloneType.I2E",
        "@field_list(1)",
        "hash(meta.flow_slot, HashAlgorithm.crc32",
        "hash(meta.ecmp_bucket, HashAlgorithm.crc32",
        // v1model.p4: `extern void random<T>(out T result, in T lo, in T hi);`
        "random(meta.ecn_draw, 8w0, 8w255);",
        "V1Switch(",
    ] {
        assert!(v1.contains(needle), "v1model output lacks `{needle}`");
    }
    // ECMP is hash buckets in the forward table's key, not a selector (see forwarding.rs).
    for text in [&tna, &v1] {
        assert!(!text.contains("ActionSelector") && !text.contains("action_selector"));
    }
    // Balanced braces: a cheap structural check of both outputs.
    for text in [&tna, &v1] {
        let open = text.matches('{').count();
        let close = text.matches('}').count();
        assert_eq!(open, close);
    }
}

#[test]
fn variants_change_register_sizes() {
    let small = HawkeyeParams {
        epochs: 2,
        flow_slots: 1024,
        sketch: None,
        ..HawkeyeParams::default()
    };
    let p = program(&small).expect("program");
    let bits = hawkmesh_codegen::resources::sram_bits(&p);
    assert_eq!(
        bits.get("flow telemetry"),
        Some(&(2 * 1024 * (16 + 32 * 8 + 16)))
    );
    assert_eq!(bits.get("elastic sketch"), None);
    assert_eq!(
        bits.get("causality meter"),
        Some(&(2 * 64 * 64 * (16 + 32)))
    );
}
