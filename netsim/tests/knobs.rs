//! The scenario's DCQCN and ECN fields take their ranges from hawkmesh-knobs.

use hawkmesh_knobs::{Knob, KnobDefault, Unit, KNOBS};
use hawkmesh_netsim::{LoadedScenario, Scenario, ScenarioError};
use std::path::PathBuf;

/// Six lines; a table header added after it is line 7, its first key line 8.
const BASE: &str = "version = 1\nduration_us = 10\n[topology]\nkind = \"ring\"\nswitches = 3\nhosts_per_switch = 1\n";

fn parse(extra: &str) -> Result<LoadedScenario, ScenarioError> {
    Scenario::parse(&format!("{BASE}{extra}"), "k.toml", PathBuf::new())
}

#[test]
fn an_out_of_range_dcqcn_knob_fails_with_its_range() {
    let error = parse("[nic.dcqcn]\nrpg_time_reset = 300\nrpg_gd = 12\n").unwrap_err();
    assert_eq!(
        error.to_string(),
        "k.toml:9: nic.dcqcn.rpg_gd: must be within [10, 11], got 12"
    );
    let error = parse("[nic.dcqcn]\nrpg_min_dec_fac = 120\n").unwrap_err();
    assert_eq!(
        error.to_string(),
        "k.toml:8: nic.dcqcn.rpg_min_dec_fac: must be within [0, 100] %, got 120"
    );
    let error = parse("[nic.dcqcn]\nrpg_time_reset = -5\n").unwrap_err();
    assert_eq!(
        error.to_string(),
        "k.toml:8: nic.dcqcn.rpg_time_reset: must be within (0, ∞) µs, got -5"
    );
}

#[test]
fn rates_and_thresholds_below_zero_are_now_rejected() {
    // Accepted before hawkmesh-knobs, with no physical meaning (a negative cap or first-CNP
    // rate acted as "none", a negative threshold as 0).
    for (text, field) in [
        (
            "[nic.dcqcn]\nrpg_max_rate = -1.0\n",
            "nic.dcqcn.rpg_max_rate",
        ),
        (
            "[nic.dcqcn]\nrate_to_set_on_first_cnp = -1.0\n",
            "nic.dcqcn.rate_to_set_on_first_cnp",
        ),
        (
            "[switch.ecn]\nkmin_kb_per_gbps = -1.0\n",
            "switch.ecn.kmin_kb_per_gbps",
        ),
        (
            "[[switch.ecn.per_speed]]\nkmin_kb = -1.0\ngbps = 100\nkmax_kb = 100\npmax = 0.1\n",
            "switch.ecn.per_speed[0].kmin_kb",
        ),
    ] {
        let error = parse(text).unwrap_err();
        assert_eq!((error.field.as_str(), error.line), (field, 8), "{error}");
        assert!(error.reason.contains("[0, ∞)"), "{error}");
    }
}

/// How to write `value` into the field at `path` (with `[]` for the first array element):
/// the text after BASE and the field path the error must name.
fn write(path: &str, value: &str) -> (String, String) {
    if let Some((array, key)) = path.split_once("[].") {
        let mut text = format!("[[{array}]]\n{key} = {value}\n");
        for (other, default) in [
            ("gbps", "100"),
            ("kmin_kb", "400.0"),
            ("kmax_kb", "1600.0"),
            ("pmax", "0.2"),
        ] {
            if other != key {
                text.push_str(&format!("{other} = {default}\n"));
            }
        }
        (text, format!("{array}[0].{key}"))
    } else {
        let (table, key) = path.rsplit_once('.').unwrap();
        (format!("[{table}]\n{key} = {value}\n"), path.to_string())
    }
}

fn literal(knob: &Knob, value: f64) -> String {
    if knob.integer {
        format!("{}", value as i64)
    } else if value.is_nan() {
        "nan".into()
    } else if value.is_infinite() {
        if value > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{value:?}")
    }
}

#[test]
fn every_modelled_knob_is_checked_against_its_table_range() {
    let mut rejected = 0;
    for knob in KNOBS {
        if knob.unit == Unit::Flag {
            continue; // a `bool` field: its type is its range
        }
        let r = knob.range;
        let inside = match knob.default {
            KnobDefault::Value(value) | KnobDefault::PerGbps(value) => value,
            KnobDefault::SameAs(_) => r.min,
        };
        let mut outside = Vec::new();
        if knob.integer {
            // Fields are unsigned: only representable values can be tried.
            if r.min >= 1.0 {
                outside.push(r.min - 1.0);
            }
        } else {
            outside.extend([f64::NAN, f64::INFINITY, f64::NEG_INFINITY]);
            outside.push(if r.min_exclusive { r.min } else { r.min - 1.0 });
        }
        if let Some(max) = r.max {
            outside.push(max + 1.0);
        }
        for path in knob.scenario {
            // An explicit per-speed threshold at the 100G written beside it.
            let inside = match knob.default {
                KnobDefault::PerGbps(per_gbps) if path.contains("[]") => per_gbps * 100.0,
                _ => inside,
            };
            let (text, _) = write(path, &literal(knob, inside));
            parse(&text).unwrap_or_else(|e| panic!("{path} = {inside}: {e}"));
            for value in &outside {
                let (text, field) = write(path, &literal(knob, *value));
                let error = parse(&text).expect_err(&format!("{path} = {value} accepted"));
                assert_eq!(error.field, field, "{error}");
                assert_eq!(error.line, 8, "{error}");
                assert!(
                    error.reason.contains(&r.to_string()),
                    "{path} = {value}: {error}"
                );
                rejected += 1;
            }
        }
    }
    assert!(rejected >= 50, "only {rejected} out-of-range values tried");
}

/// An 8-to-1 incast through one switch with DCQCN on, its ECN profile and hai rate as
/// `ecn` and `hai` say.
fn dcqcn_incast(ecn: &str, hai: f64) -> String {
    format!(
        r#"
version = 1
duration_us = 1500
[topology]
kind = "graph"
switches = ["s0"]
hosts = ["h0", "h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"]
links = [{{ a = "h0", b = "s0" }}, {{ a = "h1", b = "s0" }}, {{ a = "h2", b = "s0" }}, {{ a = "h3", b = "s0" }},
         {{ a = "h4", b = "s0" }}, {{ a = "h5", b = "s0" }}, {{ a = "h6", b = "s0" }}, {{ a = "h7", b = "s0" }},
         {{ a = "h8", b = "s0" }}]
[switch.ecn]
{ecn}
[nic.dcqcn]
rpg_hai_rate = {hai}
[[workload]]
kind = "incast"
senders = ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"]
receiver = "h0"
size_bytes = 1000000
start_us = 10
"#
    )
}

fn fcts(sim: &hawkmesh_netsim::Simulation) -> Vec<Option<u64>> {
    sim.result("k", 1, &[])
        .flows
        .iter()
        .map(|f| f.fct_ns)
        .collect()
}

/// Knobs set on a running simulation act exactly like the same knobs in its scenario; a
/// change in the middle of a run changes what follows; a bad change is refused whole,
/// naming the knob, and leaves the knobs as they were.
#[test]
fn knobs_set_while_running_act_like_the_scenarios_and_bad_changes_are_refused() {
    use hawkmesh_netsim::Simulation;
    let parsed = |text: &str| Scenario::parse(text, "k.toml", PathBuf::new()).expect("a scenario");
    let defaults = parsed(&dcqcn_incast("", 50.0));
    let tuned = parsed(&dcqcn_incast(
        "kmin_kb_per_gbps = 0.05\nkmax_kb_per_gbps = 0.5\npmax = 1.0",
        400.0,
    ));
    let mut from_file = Simulation::new(&tuned).expect("builds");
    from_file.run();
    let mut set = Simulation::new(&defaults).expect("builds");
    set.set_knobs(&[
        ("kmin_kb", 5.0),
        ("kmax_kb", 50.0),
        ("pmax", 1.0),
        ("rpg_hai_rate", 400.0),
    ])
    .expect("valid knobs");
    assert_eq!(set.knob_value("kmax_kb"), Some(50.0));
    assert_eq!(set.knob_value("rpg_hai_rate"), Some(400.0));
    set.run();
    assert_eq!(fcts(&set), fcts(&from_file));
    let mut untouched = Simulation::new(&defaults).expect("builds");
    untouched.run();
    assert_ne!(
        fcts(&untouched),
        fcts(&from_file),
        "the knobs change the incast"
    );

    // Changed on the way: the reaction points cap their rate at 5 Gbit/s from 200 µs, so
    // the 8 senders no longer fill the receiver's 100G link and finish later.
    let mut midway = Simulation::new(&defaults).expect("builds");
    midway.run_until(200_000);
    midway
        .set_knobs(&[
            ("rpg_max_rate", 5_000.0),
            ("kmin_kb", 5.0),
            ("kmax_kb", 50.0),
        ])
        .expect("valid knobs");
    midway.run();
    assert_eq!(midway.knob_changes(), 1);
    let slowest = |s: &Simulation| fcts(s).into_iter().flatten().max().unwrap_or(u64::MAX);
    assert!(
        slowest(&midway) > slowest(&untouched) + 500_000,
        "{} vs {}",
        slowest(&midway),
        slowest(&untouched)
    );

    // Refused whole, naming the knob; nothing changed.
    let before: Vec<Option<f64>> = ["rpg_ai_rate", "kmin_kb", "kmax_kb"]
        .iter()
        .map(|k| midway.knob_value(k))
        .collect();
    for (change, expected) in [
        (
            vec![("rpg_ai_rate", 10.0), ("rpg_gd", 12.0)],
            "rpg_gd: must be within [10, 11], got 12",
        ),
        (vec![("rpg_colour", 1.0)], "rpg_colour"),
        (
            vec![("cnp_dscp", 26.0)],
            "cnp_dscp: netsim classifies packets by 802.1p priority",
        ),
        (vec![("kmin_kb", 500.0)], "kmin_kb 500 above kmax_kb 50"),
    ] {
        let e = midway.set_knobs(&change).unwrap_err();
        assert!(e.contains(expected), "{e}");
    }
    let after: Vec<Option<f64>> = ["rpg_ai_rate", "kmin_kb", "kmax_kb"]
        .iter()
        .map(|k| midway.knob_value(k))
        .collect();
    assert_eq!(before, after);
    assert_eq!(midway.knob_changes(), 1);
}
