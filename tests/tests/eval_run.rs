//! A tiny `hawkmesh eval` (one trace per class, one parameter point): the whole loop with
//! the three collection methods, judged; results.json, report.md and the SVG figures parse
//! and name every class; the same seed gives the same results.json.

use hawkmesh_lab::eval::report::write_outputs;
use hawkmesh_lab::eval::run::Grid;
use hawkmesh_lab::eval::{run_eval, AnomalyClass, EvalConfig};
use hawkmesh_lab::PollingMode;
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-eval-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Checks that `text` is well-formed XML as far as tags go: every element closed in order,
/// attribute quotes balanced, no stray `<` in text. Returns the root element's name.
fn check_xml(text: &str) -> Result<String, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut root = None;
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after
            .find('>')
            .ok_or_else(|| format!("unclosed tag near {:?}", &after[..after.len().min(40)]))?;
        let tag = &after[..close];
        if tag.matches('"').count() % 2 != 0 {
            return Err(format!("unbalanced quotes in <{tag}>"));
        }
        if let Some(name) = tag.strip_prefix('/') {
            let top = stack
                .pop()
                .ok_or_else(|| format!("</{name}> without an open tag"))?;
            if top != name.trim() {
                return Err(format!("</{name}> closes <{top}>"));
            }
        } else if !tag.starts_with('?') && !tag.starts_with('!') {
            let name: String = tag
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            if root.is_none() {
                root = Some(name.clone());
            } else if stack.is_empty() {
                return Err(format!("second root element <{name}>"));
            }
            if !tag.ends_with('/') {
                stack.push(name);
            }
        }
        rest = &after[close + 1..];
        if let Some(next) = rest.find('<') {
            if rest[..next].contains('>') {
                return Err("stray '>' in text".into());
            }
        }
    }
    if let Some(open) = stack.pop() {
        return Err(format!("<{open}> never closed"));
    }
    root.ok_or_else(|| "no element".into())
}

#[test]
fn the_xml_checker_catches_broken_documents() {
    assert_eq!(
        check_xml("<svg a=\"1\"><g><rect/></g></svg>").unwrap(),
        "svg"
    );
    assert!(check_xml("<svg><g></svg>").is_err());
    assert!(check_xml("<svg a=\"1><g/></svg>").is_err());
    assert!(check_xml("<svg></svg><svg></svg>").is_err());
    assert!(check_xml("<svg><text>1 < 2</text></svg>").is_err());
}

#[test]
fn a_tiny_evaluation_writes_results_report_and_figures_for_every_class() {
    let out = scratch("tiny");
    let config = EvalConfig {
        master_seed: 1,
        traces_per_class: 1,
        families: vec![hawkmesh_lab::eval::Family::K4],
        classes: AnomalyClass::ALL.to_vec(),
        grid: Grid::Fixed,
        work_dir: out.join(".work"),
        keep_incidents: Some(out.join("incidents")),
    };
    let mut lines = Vec::new();
    let (results, timing) = run_eval(&config, &mut |line| lines.push(line.to_string())).unwrap();
    assert!(lines.len() >= 2 * AnomalyClass::ALL.len(), "{lines:?}");
    let written = write_outputs(
        &out,
        &results,
        &timing,
        "hawkmesh eval --traces 1 --grid fixed",
    )
    .unwrap();
    assert!(written.len() >= 3 + 6 + AnomalyClass::ALL.len());

    // results.json: every class has a judged run with all three methods.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(json["schema_version"], 2);
    assert_eq!(
        json["traces"].as_array().unwrap().len(),
        AnomalyClass::ALL.len()
    );
    for class in AnomalyClass::ALL {
        let runs: Vec<&serde_json::Value> = json["runs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["class"] == class.name())
            .collect();
        assert_eq!(runs.len(), 1, "{class}");
        let modes: Vec<&str> = runs[0]["modes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["mode"].as_str().unwrap())
            .collect();
        assert_eq!(modes, PollingMode::ALL.map(PollingMode::as_str));
        assert!(
            json["summary"]["scores"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["class"] == class.name()),
            "{class} missing from the summary"
        );
    }
    // Full polling collects every switch for every attributed incident; HAWKEYE polled
    // something and every run's telemetry reached the analyzer.
    for run in results.runs.iter().filter(|r| r.realized) {
        let full = run
            .modes
            .iter()
            .find(|m| m.mode == PollingMode::FullPolling)
            .unwrap();
        assert!(
            full.attributed.iter().all(|i| i.switches_collected == 20),
            "{}",
            run.trace
        );
        let hawkeye = run
            .modes
            .iter()
            .find(|m| m.mode == PollingMode::Hawkeye)
            .unwrap();
        assert!(hawkeye.overhead.polling_packets > 0, "{}", run.trace);
        assert!(hawkeye.overhead.telemetry_bytes > 0, "{}", run.trace);
        assert!(hawkeye.overhead.telemetry_bytes <= full.overhead.telemetry_bytes);
        assert_eq!(run.ablations.len(), 3, "{}", run.trace);
        assert!(
            !run.expected.anomaly_type.is_empty() && !run.expected.root_ports.is_empty(),
            "{}: {:?}",
            run.trace,
            run.expected
        );
    }
    // The incast classes are diagnosed end to end today; the harness must see that.
    let backpressure = results
        .summary
        .scores
        .iter()
        .find(|s| s.class == Some(AnomalyClass::PfcBackpressure) && s.mode == PollingMode::Hawkeye)
        .unwrap();
    assert_eq!(backpressure.score.detected, 1, "{:?}", backpressure.score);

    // report.md names every class and has every section.
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for class in AnomalyClass::ALL {
        assert!(
            report.contains(class.name()),
            "{class} missing from report.md"
        );
    }
    for section in [
        "## Configuration",
        "## Traces",
        "Fig. 7",
        "Fig. 8",
        "Fig. 10",
        "Figs. 9 and 11",
        "## Wall time",
    ] {
        assert!(report.contains(section), "report.md lacks {section}");
    }
    // Markdown tables: every row of a table has the header's column count.
    let mut columns = None;
    for line in report.lines() {
        if line.starts_with('|') {
            let count = line.matches('|').count() - line.matches("\\|").count();
            match columns {
                None => columns = Some(count),
                Some(c) => assert_eq!(c, count, "ragged table row: {line}"),
            }
        } else {
            columns = None;
        }
    }

    // Every figure is a well-formed SVG document; the baselines figure names every class.
    for name in [
        "fig7-epoch.svg",
        "fig7-threshold.svg",
        "fig8-baselines.svg",
        "fig9-overhead.svg",
        "fig10-ablation.svg",
        "fig11-coverage.svg",
    ] {
        let svg = std::fs::read_to_string(out.join(name)).unwrap();
        assert_eq!(
            check_xml(&svg).map_err(|e| format!("{name}: {e}")).unwrap(),
            "svg"
        );
        if name == "fig8-baselines.svg" {
            for class in AnomalyClass::ALL {
                assert!(svg.contains(class.name()), "{name} lacks {class}");
            }
        }
    }
    // The kept evidence of every judged incident gives the same claims when
    // `hawkmesh diagnose` reads it back from the files.
    let mut rediagnosed = 0;
    for run in results.runs.iter().filter(|r| r.realized) {
        let dir = out.join("incidents").join(&run.trace);
        for mode in &run.modes {
            for incident in &mode.attributed {
                let reports = dir
                    .join(mode.mode.as_str())
                    .join(format!("{}.json", incident.event_id));
                let output = hawkmesh_analyzer::diagnose_files(
                    &reports,
                    &dir.join("topology.json"),
                    &incident.victim,
                    None,
                )
                .unwrap_or_else(|e| panic!("{}: {e}", reports.display()));
                let json: serde_json::Value = serde_json::from_str(
                    &hawkmesh_analyzer::render::to_json(&output.diagnosis).unwrap(),
                )
                .unwrap();
                let claims: Vec<String> = json["anomalies"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|a| a["affects_victim"] == true)
                    .map(|a| a["type"].as_str().unwrap().to_string())
                    .collect();
                let kept: Vec<String> = incident
                    .claims
                    .iter()
                    .map(|c| c.split('@').next().unwrap().to_string())
                    .collect();
                assert_eq!(claims, kept, "{}", reports.display());
                rediagnosed += 1;
            }
        }
    }
    assert!(rediagnosed > 0, "no kept incident was read back");
    // The written traces are scenarios `hawkmesh sim run` accepts.
    for trace in &results.traces {
        let path = out.join("traces").join(format!("{}.toml", trace.spec.id));
        hawkmesh_netsim::Scenario::load(&path).unwrap();
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_same_seed_gives_the_same_results() {
    let run = |name: &str| {
        let out = scratch(name);
        let config = EvalConfig {
            master_seed: 9,
            traces_per_class: 1,
            families: vec![hawkmesh_lab::eval::Family::K4],
            classes: vec![
                AnomalyClass::PfcBackpressure,
                AnomalyClass::DeadlockOutOfLoop,
            ],
            grid: Grid::Fixed,
            work_dir: out.join(".work"),
            keep_incidents: None,
        };
        let (results, _) = run_eval(&config, &mut |_| {}).unwrap();
        let _ = std::fs::remove_dir_all(&out);
        serde_json::to_string_pretty(&results).unwrap()
    };
    let first = run("det-a");
    let second = run("det-b");
    assert!(
        first == second,
        "results.json differs between two runs with seed 9"
    );
}

#[test]
fn a_drawn_fabric_family_is_reported_per_family() {
    let out = scratch("family");
    let config = EvalConfig {
        master_seed: 2,
        traces_per_class: 1,
        families: vec![hawkmesh_lab::eval::Family::Rail],
        classes: vec![AnomalyClass::PfcStorm],
        grid: Grid::Fixed,
        work_dir: out.join(".work"),
        keep_incidents: None,
    };
    let (results, timing) = run_eval(&config, &mut |_| {}).unwrap();
    write_outputs(&out, &results, &timing, "hawkmesh eval --fabrics rail").unwrap();
    assert_eq!(results.runs.len(), 1, "{:?}", results.traces[0].attempts);
    let run = &results.runs[0];
    assert_eq!(run.family, hawkmesh_lab::eval::Family::Rail);
    assert!(run.trace.starts_with("rail-pfc-storm-"));
    let rows: Vec<_> = results
        .summary
        .families
        .iter()
        .filter(|r| r.family == hawkmesh_lab::eval::Family::Rail && r.mode == PollingMode::Hawkeye)
        .collect();
    assert_eq!(rows.len(), 2, "the class and all classes");
    assert_eq!(rows[0].score.traces, 1);
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Per fabric family"), "{report}");
    assert!(report.contains(&results.traces[0].spec.fabric.describe()));
    // The trace file is the scenario that ran, with its rail fabric.
    let trace =
        std::fs::read_to_string(out.join("traces").join(format!("{}.toml", run.trace))).unwrap();
    assert!(trace.contains("kind = \"rail\""), "{trace}");
}
