//! Files on disk, malformed and inconsistent reports, renderers and determinism.

mod common;

use std::path::PathBuf;

use common::*;
use hawkmesh_analyzer::model::AnomalyType;
use hawkmesh_analyzer::testkit::{Hop, IncidentBuilder};
use hawkmesh_analyzer::{
    diagnose_files, diagnose_reports, loaded, render, AnalyzerError, DiagnoseOptions,
};
use hawkmesh_wire::telemetry::{ReportFile, TelemetryReport};

fn incast_reports() -> (IncidentBuilder, Vec<TelemetryReport>) {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    incast(&mut builder);
    let reports = builder.build_reports().expect("reports");
    (builder, reports)
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-analyzer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn diagnose(
    reports: Vec<TelemetryReport>,
) -> Result<hawkmesh_analyzer::DiagnosisOutput, AnalyzerError> {
    diagnose_reports(
        loaded(reports),
        leaf_spine(),
        victim(),
        &DiagnoseOptions::default(),
    )
}

#[test]
fn directory_of_json_and_binary_reports_gives_the_same_answer() {
    let (builder, reports) = incast_reports();
    let dir = scratch_dir("dir");
    let reports_dir = dir.join("reports");
    std::fs::create_dir_all(&reports_dir).expect("dir");
    // Half the switches as JSON files, one as an array file, one as a binary chunk stream.
    let (first, rest) = reports.split_at(2);
    for report in first {
        let path = reports_dir.join(format!("switch-{}.json", report.switch));
        std::fs::write(&path, serde_json::to_vec_pretty(report).expect("json")).expect("write");
    }
    let (binary, array) = rest.split_at(1);
    std::fs::write(
        reports_dir.join("more.json"),
        serde_json::to_vec(&ReportFile::Many(array.to_vec())).expect("json"),
    )
    .expect("write");
    std::fs::write(
        reports_dir.join("stream.hkt"),
        binary[0].to_stream(1500).expect("chunks"),
    )
    .expect("write");
    std::fs::write(reports_dir.join("notes.txt"), "ignored").expect("write");
    let topology = dir.join("topology.json");
    std::fs::write(
        &topology,
        serde_json::to_vec(builder.topology()).expect("json"),
    )
    .expect("write");

    let from_files = diagnose_files(
        &reports_dir,
        &topology,
        "10.0.0.1:49152->10.0.0.2:4791",
        Some(EPOCH_NS),
    )
    .expect("diagnosis from files");
    let in_memory = diagnose(reports).expect("diagnosis");
    assert_eq!(
        from_files.diagnosis.anomalies,
        in_memory.diagnosis.anomalies
    );
    assert_eq!(
        from_files.diagnosis.anomalies[0].anomaly_type,
        AnomalyType::PfcBackpressure
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn output_is_deterministic_and_renders_everywhere() {
    let (_, reports) = incast_reports();
    let a = diagnose(reports.clone()).expect("a");
    let mut shuffled = reports;
    shuffled.reverse();
    let b = diagnose(shuffled).expect("b");
    let json_a = render::to_json(&a.diagnosis).expect("json");
    let json_b = render::to_json(&b.diagnosis).expect("json");
    assert_eq!(json_a, json_b, "report order must not change the answer");
    assert_eq!(
        render::to_dot(&a.diagnosis, &a.view),
        render::to_dot(&b.diagnosis, &b.view)
    );
    let back: hawkmesh_analyzer::Diagnosis =
        serde_json::from_str(&json_a).expect("schema round trip");
    assert_eq!(back, a.diagnosis);

    let text = render::to_text(&a.diagnosis);
    assert!(text
        .lines()
        .nth(1)
        .is_some_and(|l| l.starts_with("VERDICT: PFC backpressure")));
    assert!(text.contains("PFC path: tor0.p0 → agg0.p2 → tor2.p6"));
    let dot = render::to_dot(&a.diagnosis, &a.view);
    assert!(dot.starts_with("digraph hawkmesh {"));
    assert!(
        dot.contains("color=\"#c62828\""),
        "spreading path highlighted"
    );
    let html = render::to_html(&a.diagnosis, &a.view).expect("html");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("<svg") && html.contains("tor2.p6"));
    assert!(!html.contains("<script src"), "self-contained");
    assert!(html.contains("id=\"diagnosis\""));
}

#[test]
fn unknown_port_is_a_precise_error() {
    let (_, mut reports) = incast_reports();
    reports[0].epochs[0].ports[0].port = 40;
    let error = diagnose(reports).expect_err("must fail");
    let text = error.to_string();
    assert!(
        matches!(error, AnalyzerError::UnknownPort { port: 40, .. }),
        "{text}"
    );
    assert!(text.contains("port 40 of switch tor0"), "{text}");
}

#[test]
fn epochs_out_of_order_are_refused() {
    let mut builder = IncidentBuilder::new(leaf_spine(), EPOCH_NS, 2, victim());
    incast(&mut builder);
    for epoch in 0..2 {
        builder.flow(
            epoch,
            flow(44, 53100, 19),
            &["a2", "tor2", "h9"],
            &[Hop::new(20)],
        );
    }
    let mut reports = builder.build_reports().expect("reports");
    let two = reports
        .iter()
        .position(|r| r.epochs.len() >= 2)
        .expect("a report with two epochs");
    reports[two].epochs.swap(0, 1);
    let error = diagnose(reports).expect_err("must fail");
    assert!(
        matches!(error, AnalyzerError::EpochOutOfOrder { .. }),
        "{error}"
    );
}

#[test]
fn misaligned_epochs_and_sizes_are_refused() {
    let (_, mut reports) = incast_reports();
    reports[0].epochs[0].start_ns += 5;
    assert!(matches!(
        diagnose(reports).expect_err("must fail"),
        AnalyzerError::EpochMisaligned { .. }
    ));
    let (_, mut reports) = incast_reports();
    reports[2].epoch_ns = EPOCH_NS * 2;
    for epoch in &mut reports[2].epochs {
        epoch.epoch_id = epoch.start_ns / (EPOCH_NS * 2);
    }
    assert!(matches!(
        diagnose(reports).expect_err("must fail"),
        AnalyzerError::EpochSize { .. }
    ));
    let (_, reports) = incast_reports();
    let error = diagnose_reports(
        loaded(reports),
        leaf_spine(),
        victim(),
        &DiagnoseOptions {
            epoch_ns: Some(1 << 20),
            ..DiagnoseOptions::default()
        },
    )
    .expect_err("--epoch mismatch");
    assert!(matches!(error, AnalyzerError::EpochSize { .. }));
}

#[test]
fn contradictory_counts_and_duplicates_are_refused() {
    let (_, mut reports) = incast_reports();
    let flow = &mut reports[0].epochs[0].flows[0];
    flow.paused_packet_count = flow.packet_count + 1;
    assert!(matches!(
        diagnose(reports).expect_err("must fail"),
        AnalyzerError::InconsistentRecord { .. }
    ));
    let (_, mut reports) = incast_reports();
    let duplicate = reports[0].epochs[0].flows[0];
    reports[0].epochs[0].flows.push(duplicate);
    assert!(matches!(
        diagnose(reports).expect_err("must fail"),
        AnalyzerError::DuplicateRecord { .. }
    ));
    let (_, mut reports) = incast_reports();
    reports[0].switch = 7; // a host in the topology
    assert!(matches!(
        diagnose(reports).expect_err("must fail"),
        AnalyzerError::UnknownSwitch { switch: 7, .. }
    ));
}

#[test]
fn truncated_and_malformed_files_are_precise_errors() {
    let (builder, reports) = incast_reports();
    let dir = scratch_dir("bad");
    let topology = dir.join("topology.json");
    std::fs::write(
        &topology,
        serde_json::to_vec(builder.topology()).expect("json"),
    )
    .expect("write");
    let stream = reports[0].to_stream(1500).expect("stream");
    let bad = dir.join("cut.hkt");
    std::fs::write(&bad, &stream[..stream.len() - 7]).expect("write");
    let error =
        diagnose_files(&bad, &topology, "10.0.0.1:49152->10.0.0.2", None).expect_err("truncated");
    assert!(matches!(error, AnalyzerError::Wire { .. }), "{error}");
    assert!(error.to_string().contains("byte"), "{error}");

    let json = dir.join("broken.json");
    std::fs::write(&json, "{\"version\": 1, \"switch\": ").expect("write");
    let error = diagnose_files(&json, &topology, "10.0.0.1:49152->10.0.0.2", None)
        .expect_err("broken json");
    assert!(
        matches!(error, AnalyzerError::Json { line: 1, .. }),
        "{error}"
    );

    let error =
        diagnose_files(&json, &topology, "10.0.0.1->10.0.0.2", None).expect_err("bad victim");
    assert!(matches!(error, AnalyzerError::Victim(_)), "{error}");

    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("dir");
    assert!(matches!(
        diagnose_files(&empty, &topology, "10.0.0.1:1->10.0.0.2", None),
        Err(AnalyzerError::NoReports { .. })
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn victim_without_records_is_reported_as_incomplete() {
    let (_, reports) = incast_reports();
    // Between hosts of the fabric, on a port no record names.
    let other = flow(3, 1, 4);
    let output = diagnose_reports(
        loaded(reports),
        leaf_spine(),
        other,
        &DiagnoseOptions::default(),
    )
    .expect("diagnosis");
    let codes: Vec<&str> = output
        .diagnosis
        .findings
        .iter()
        .map(|f| f.code.as_str())
        .collect();
    assert!(codes.contains(&"victim_not_seen"), "{codes:?}");
    // The incast is still found, as an anomaly that does not touch this victim.
    assert!(output
        .diagnosis
        .anomalies
        .iter()
        .any(|a| a.anomaly_type == AnomalyType::PfcBackpressure && !a.affects_victim));
}

#[test]
fn a_victim_that_is_no_flow_of_the_fabric_is_refused_not_called_unaffected() {
    let (_, reports) = incast_reports();
    let error = diagnose_reports(
        loaded(reports),
        leaf_spine(),
        flow(99, 1, 2),
        &DiagnoseOptions::default(),
    )
    .expect_err("a victim from nowhere");
    assert!(
        matches!(error, AnalyzerError::UnknownVictim { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("10.0.0.99"), "{error}");
}

#[test]
fn reports_of_several_events_or_conflicting_copies_are_refused() {
    let (_, reports) = incast_reports();
    // Another event's report mixed in.
    let mut mixed = reports.clone();
    let mut other = mixed[0].clone();
    other.event_id += 1;
    mixed.push(other);
    let error = diagnose(mixed).expect_err("mixed events");
    assert!(
        matches!(error, AnalyzerError::MixedEvents { .. }),
        "{error}"
    );
    // The same report twice (a resend) is read once.
    let mut resent = reports.clone();
    resent.push(reports[0].clone());
    let output = diagnose(resent).expect("a resend is harmless");
    assert!(output
        .diagnosis
        .findings
        .iter()
        .any(|f| f.code == "duplicate_report"));
    // A second copy with other contents: which one is true cannot be told.
    let mut conflicting = reports.clone();
    let mut changed = reports[0].clone();
    changed.epochs[0].ports[0].packet_count += 1;
    conflicting.push(changed);
    let error = diagnose(conflicting).expect_err("conflicting copies");
    assert!(
        matches!(error, AnalyzerError::ConflictingReports { .. }),
        "{error}"
    );
}

#[test]
fn counts_no_link_could_carry_are_damage() {
    let (_, reports) = incast_reports();
    let mut damaged = reports.clone();
    let port = &mut damaged[0].epochs[0].ports[0];
    port.packet_count = u32::MAX;
    let error = diagnose(damaged).expect_err("4 billion packets in an epoch");
    assert!(
        error.to_string().contains("the record is damaged"),
        "{error}"
    );
    let mut damaged = reports.clone();
    let epoch = damaged
        .iter_mut()
        .flat_map(|r| r.epochs.iter_mut())
        .find(|e| !e.meters.is_empty())
        .expect("a meter row");
    epoch.meters[0].bytes = u64::MAX / 2;
    let error = diagnose(damaged).expect_err("a meter row beyond the link");
    assert!(error.to_string().contains("meter row"), "{error}");
}
