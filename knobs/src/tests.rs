use super::*;
use std::collections::HashMap;

#[test]
fn every_default_is_inside_its_range() {
    for k in KNOBS {
        match k.default {
            KnobDefault::Value(value) => {
                k.validate(value)
                    .unwrap_or_else(|e| panic!("default of {}: {e}", k.name));
            }
            KnobDefault::PerGbps(per_gbps) => {
                k.validate_per_gbps(per_gbps)
                    .unwrap_or_else(|e| panic!("default of {}: {e}", k.name));
                // The per-Gbit/s check is sound only for [0, ∞) ranges.
                assert_eq!(k.range, Range::at_least(0.0), "{}", k.name);
                for gbps in [10.0, 100.0, 400.0, 800.0] {
                    k.validate(per_gbps * gbps).unwrap();
                }
            }
            KnobDefault::SameAs(path) => assert!(path.contains('.'), "{}: {path}", k.name),
        }
        if let Some(value) = k.connectx_default {
            assert_eq!(k.device(), Device::Rnic, "{}", k.name);
            k.validate(value)
                .unwrap_or_else(|e| panic!("ConnectX default of {}: {e}", k.name));
        }
    }
}

#[test]
fn ranges_are_well_formed_and_whole_where_the_knob_is() {
    for k in KNOBS {
        let r = k.range;
        assert!(r.min.is_finite(), "{}", k.name);
        if let Some(max) = r.max {
            assert!(max.is_finite() && max > r.min, "{}", k.name);
            if k.integer {
                assert_eq!(max.fract(), 0.0, "{}", k.name);
            }
        }
        if k.integer {
            assert_eq!(r.min.fract(), 0.0, "{}", k.name);
            assert!(!r.min_exclusive, "{}", k.name);
        }
        if matches!(k.unit, Unit::Flag) {
            assert!(k.integer && r == Range::closed(0.0, 1.0), "{}", k.name);
        }
        assert!(!k.meaning.is_empty(), "{}", k.name);
    }
}

#[test]
fn names_are_unique_across_every_namespace() {
    let mut seen: HashMap<&str, &str> = HashMap::new();
    for k in KNOBS {
        let mut names = vec![k.name];
        names.extend(k.connectx.filter(|n| *n != k.name));
        names.extend(k.sonic);
        for name in names {
            if let Some(other) = seen.insert(name, k.name) {
                panic!("`{name}` names both {other} and {}", k.name);
            }
        }
    }
    let mut paths: HashMap<&str, &str> = HashMap::new();
    for k in KNOBS {
        for path in k.scenario {
            assert!(paths.insert(path, k.name).is_none(), "{path} twice");
        }
    }
}

#[test]
fn device_names_match_the_device() {
    for k in KNOBS {
        match k.device() {
            Device::Rnic => {
                assert!(k.connectx.is_some() && k.sonic.is_none(), "{}", k.name);
                assert!(k.group.connectx_dir().is_some());
                // netsim calls every RNIC knob it models by its ConnectX name.
                if !k.scenario.is_empty() {
                    assert_eq!(Some(k.name), k.connectx);
                    assert_eq!(k.scenario, [format!("nic.dcqcn.{}", k.name)].as_slice());
                }
            }
            Device::Switch => {
                assert!(k.connectx.is_none() && k.sonic.is_some(), "{}", k.name);
                assert!(k.sysfs_path("eth0").is_none());
            }
        }
    }
}

#[test]
fn the_connectx_knobs_are_all_there() {
    let rp = [
        "rpg_time_reset",
        "rpg_byte_reset",
        "rpg_threshold",
        "rpg_max_rate",
        "rpg_ai_rate",
        "rpg_hai_rate",
        "rpg_gd",
        "rpg_min_dec_fac",
        "rpg_min_rate",
        "rate_to_set_on_first_cnp",
        "dce_tcp_g",
        "dce_tcp_rtt",
        "rate_reduce_monitor_period",
        "initial_alpha_value",
        "clamp_tgt_rate",
        "clamp_tgt_rate_after_time_inc",
    ];
    let np = ["min_time_between_cnps", "cnp_dscp", "cnp_802p_prio"];
    for (names, dir) in [(&rp[..], "roce_rp"), (&np[..], "roce_np")] {
        for name in names {
            let k = knob(name).unwrap();
            assert_eq!(k.group.connectx_dir(), Some(dir), "{name}");
            assert_eq!(
                k.sysfs_path("ens1f0").unwrap(),
                format!("/sys/class/net/ens1f0/ecn/{dir}/{name}")
            );
        }
    }
    let rnic = KNOBS.iter().filter(|k| k.device() == Device::Rnic).count();
    assert_eq!(rnic, rp.len() + np.len());
    let switch: Vec<&str> = in_group(Group::EcnMarking).map(|k| k.name).collect();
    assert_eq!(switch, ["kmin_kb", "kmax_kb", "pmax"]);
}

#[test]
fn lookup_by_any_name() {
    assert_eq!(find("rpg_hai_rate"), Some(&RPG_HAI_RATE));
    assert_eq!(find("green_max_threshold"), Some(&KMAX));
    assert_eq!(find("kmax_kb"), Some(&KMAX));
    assert_eq!(knob("pmax").unwrap().sonic, Some("green_drop_probability"));
    assert_eq!(find("hai_rate"), None);
    let error = knob("rpg_hia_rate").unwrap_err();
    assert_eq!(error.to_string(), "unknown knob `rpg_hia_rate`");
    assert_eq!(validate("nope", 1.0), Err(error_unknown("nope")));
    assert!(validate("rpg_hai_rate", 150.0).is_ok());
}

fn error_unknown(name: &str) -> KnobError {
    KnobError::Unknown {
        name: name.to_string(),
    }
}

#[test]
fn validation_names_the_knob_the_value_and_the_range() {
    let error = RPG_GD.validate(12.0).unwrap_err();
    assert_eq!(error.to_string(), "rpg_gd: must be within [10, 11], got 12");
    assert_eq!(error.reason(), "must be within [10, 11], got 12");
    let error = validate("rpg_time_reset", -3.0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "rpg_time_reset: must be within (0, ∞) µs, got -3"
    );
    // The bound of an open interval, NaN and infinities are out.
    assert!(RPG_TIME_RESET.validate(0.0).is_err());
    assert!(RPG_MIN_DEC_FAC.validate(f64::NAN).is_err());
    assert!(MIN_TIME_BETWEEN_CNPS.validate(f64::INFINITY).is_err());
    assert!(RPG_MAX_RATE.validate(-1.0).is_err());
    // Closed bounds are in.
    assert!(RPG_MIN_DEC_FAC.validate(100.0).is_ok());
    assert!(MIN_TIME_BETWEEN_CNPS.validate(0.0).is_ok());
    let error = PMAX.validate(1.5).unwrap_err();
    assert_eq!(error.to_string(), "pmax: must be within [0, 1], got 1.5");
    let error = DCE_TCP_G.validate(1024.0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "dce_tcp_g: must be within [0, 1023] /1024, got 1024"
    );
    // Whole-number knobs.
    let error = RPG_THRESHOLD.validate(1.5).unwrap_err();
    assert_eq!(
        error.to_string(),
        "rpg_threshold: must be a whole number, got 1.5"
    );
    assert!(
        RPG_TIME_RESET.validate(2.5).is_ok(),
        "netsim takes fractional µs"
    );
    // Per-Gbit/s coefficients.
    let error = KMIN.validate_per_gbps(-1.0).unwrap_err();
    assert_eq!(
        error.to_string(),
        "kmin_kb: must be within [0, ∞) KB per Gbit/s, got -1"
    );
}

#[test]
fn const_defaults() {
    const TIME_RESET: f64 = RPG_TIME_RESET.fixed_default();
    const BYTE_RESET: u64 = RPG_BYTE_RESET.default_u64();
    const G: u32 = DCE_TCP_G.default_u32();
    const CLAMP_AFTER_TIME_INC: bool = CLAMP_TGT_RATE_AFTER_TIME_INC.default_flag();
    const KMIN_PER_GBPS: f64 = KMIN.default_per_gbps();
    assert_eq!(TIME_RESET, 300.0);
    assert_eq!(BYTE_RESET, 32767);
    assert_eq!(G, 1019);
    assert!(CLAMP_AFTER_TIME_INC && !CLAMP_TGT_RATE.default_flag());
    assert_eq!(KMIN_PER_GBPS, 4.0);
    assert_eq!(KMAX.default_per_gbps(), 16.0);
    assert_eq!(PMAX.fixed_default(), 0.2);
}

/// The defaults a device starts from at its port speed: the ECN thresholds scale, Pmax and
/// the RNIC knobs do not, and a default taken from another scenario setting has none here.
#[test]
fn defaults_at_a_port_speed() {
    assert_eq!(KMIN.default_at(100.0), Some(400.0));
    assert_eq!(KMAX.default_at(25.0), Some(400.0));
    assert_eq!(PMAX.default_at(100.0), Some(0.2));
    assert_eq!(RPG_TIME_RESET.default_at(400.0), Some(300.0));
    assert_eq!(CNP_802P_PRIO.default_at(100.0), None);
}

#[test]
#[should_panic(expected = "not a fixed value")]
fn a_derived_default_is_not_a_fixed_one() {
    let _ = CNP_802P_PRIO.fixed_default();
}

#[test]
fn netsim_and_connectx_defaults_agree_where_both_exist() {
    // Every RNIC knob netsim models has ConnectX's default, except those netsim derives or
    // for which firmware releases disagree.
    for k in KNOBS.iter().filter(|k| k.device() == Device::Rnic) {
        match (k.default, k.connectx_default) {
            (KnobDefault::Value(netsim), Some(connectx)) => {
                assert_eq!(netsim, connectx, "{}", k.name)
            }
            _ => assert!(
                ["min_time_between_cnps", "cnp_802p_prio"].contains(&k.name),
                "{}",
                k.name
            ),
        }
    }
}

#[test]
fn directions() {
    let t = RPG_HAI_RATE.tuning.unwrap();
    assert_eq!(
        (t.throughput, t.delay()),
        (Direction::Increase, Direction::Decrease)
    );
    assert_eq!(t.basis, Basis::Paraleon);
    let t = RPG_TIME_RESET.tuning.unwrap();
    assert_eq!(
        (t.throughput, t.basis),
        (Direction::Decrease, Basis::Paraleon)
    );
    assert_eq!(KMAX.tuning.unwrap().throughput, Direction::Increase);
    // The four knobs PARALEON's Fig. 5 studies all have a direction.
    for name in [
        "rpg_hai_rate",
        "rate_reduce_monitor_period",
        "rpg_time_reset",
        "kmax_kb",
    ] {
        assert!(knob(name).unwrap().tuning.is_some(), "{name}");
    }
    // So do the knobs of PARALEON Table I, whose experts tuned them.
    for (name, _) in PARALEON_EXPERT {
        assert!(knob(name).unwrap().tuning.is_some(), "{name}");
    }
    // Classification knobs are not tuned.
    assert!(CNP_DSCP.tuning.is_none() && CNP_802P_PRIO.tuning.is_none());
}

#[test]
fn the_paraleon_expert_setting_is_valid() {
    for (name, value) in PARALEON_EXPERT {
        validate(name, *value).unwrap_or_else(|e| panic!("{e}"));
    }
    // At 400 Gbit/s netsim's default thresholds are the experts'.
    let at_400g = |k: &Knob| k.default_per_gbps() * 400.0;
    assert_eq!(at_400g(&KMIN), 1600.0);
    assert_eq!(at_400g(&KMAX), 6400.0);
}

#[test]
fn unit_conversions() {
    assert_eq!(RPG_AI_RATE.to_si(5.0), 5e6);
    assert_eq!(RPG_TIME_RESET.to_si(300.0), 300.0 * 1e-6);
    assert_eq!(RPG_MIN_DEC_FAC.to_si(50.0), 0.5);
    assert_eq!(DCE_TCP_G.to_si(1024.0), 1.0);
    assert_eq!(KMIN.to_si(400.0), 400_000.0);
    assert_eq!(Unit::MegabitsPerSecond.si(), (1e6, "bit/s"));
    // The devices take whole numbers in their own units.
    assert_eq!(RPG_TIME_RESET.to_device(300.0), Ok(300));
    assert_eq!(CLAMP_TGT_RATE_AFTER_TIME_INC.to_device(1.0), Ok(1));
    assert_eq!(KMIN.to_device(400.0), Ok(400_000));
    assert_eq!(PMAX.to_device(0.2), Ok(20));
    assert_eq!(PMAX.from_device(20), 0.2);
    assert_eq!(KMAX.from_device(1_600_000), 1600.0);
    assert_eq!(RPG_HAI_RATE.from_device(150), 150.0);
    assert_eq!(
        RPG_TIME_RESET.to_device(2.5),
        Err(KnobError::NotWhole {
            knob: "rpg_time_reset",
            value: 2.5
        })
    );
    assert!(PMAX.to_device(0.125).is_err(), "SONiC takes whole percent");
    assert!(RPG_GD.to_device(9.0).is_err());
    for k in KNOBS {
        if let KnobDefault::Value(value) = k.default {
            let raw = k.to_device(value).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(k.from_device(raw), value, "{}", k.name);
        }
    }
}
