//! The parsers on fixtures written from the tools' documented output formats: exact values,
//! errors naming the line and field, and no panic on truncated or garbled input.

use hawkmesh_congestion::parse::{self, Format, PerfKind};
use hawkmesh_congestion::{Direction, PortId, Tier, Width};
use hawkmesh_wire::rng::SplitMix64;

const BASIC: &str = include_str!("fixtures/perfquery_basic.txt");
const EXTENDED: &str = include_str!("fixtures/perfquery_extended.txt");
const SATURATED: &str = include_str!("fixtures/perfquery_saturated.txt");
const ETHTOOL: &str = include_str!("fixtures/ethtool_mlx5.txt");
const PFCSTAT: &str = include_str!("fixtures/pfcstat.txt");
const COUNTERS_DB: &str = include_str!("fixtures/counters_db.json");

#[test]
fn perfquery_port_counters_give_exact_values() {
    let blocks = parse::perfquery(BASIC).expect("fixture parses");
    assert_eq!(blocks.len(), 1);
    let b = &blocks[0];
    assert_eq!(b.kind, PerfKind::Basic);
    assert_eq!((b.lid, b.port, b.cap_mask), (12, Some(1), Some(0x5A00)));
    assert_eq!(b.get("PortXmitWait"), Some(2_426_695_474));
    assert_eq!(b.get("PortXmitData"), Some(3_465_862));
    assert_eq!(b.get("PortRcvPkts"), Some(48_903));
    assert_eq!(b.get("CounterSelect"), Some(0x1b01));
    assert_eq!(b.counters.len(), 20);
    let port = PortId::new("12", 1, Tier::Leaf, Direction::Down);
    let s = b.to_sample(port, 1_000, 40).expect("has PortXmitWait");
    assert_eq!(s.xmit_wait, Some(2_426_695_474));
    assert_eq!(s.wait_width, Width::Bits32);
    assert_eq!(s.xmit_data, Some(3_465_862));
    assert_eq!(s.xmit_pkts, Some(48_152));
}

#[test]
fn perfquery_extended_counters_are_64_bit() {
    let blocks = parse::perfquery(EXTENDED).expect("fixture parses");
    let b = &blocks[0];
    assert_eq!(b.kind, PerfKind::Extended);
    assert_eq!(b.width(), Width::Bits64);
    assert_eq!(b.get("PortXmitData"), Some(26_006_570_014_026));
    assert_eq!(b.get("PortUnicastXmitPkts"), Some(122_978_940_001));
    assert_eq!(b.get("PortMulticastRcvPkts"), Some(2_639));
    assert_eq!(b.get("PortXmitWait"), Some(98_765_432_101));
    // Both blocks concatenated (perfquery; perfquery -x).
    let both = parse::perfquery(&format!("{BASIC}\n{EXTENDED}")).expect("both parse");
    assert_eq!(both.len(), 2);
    assert_eq!(both[1].kind, PerfKind::Extended);
}

#[test]
fn perfquery_saturated_fixture_reads_all_ones() {
    let b = &parse::perfquery(SATURATED).expect("parses")[0];
    assert_eq!(b.get("PortXmitWait"), Some(0xFFFF_FFFF));
    assert_eq!((b.lid, b.port), (7, Some(22)));
}

#[test]
fn perfquery_errors_name_line_and_field() {
    let bad = BASIC.replace(
        "PortXmitWait:....................2426695474",
        "PortXmitWait:....................24266x5474",
    );
    let e = parse::perfquery(&bad).expect_err("garbled value");
    assert_eq!(e.format, Format::Perfquery);
    assert_eq!(e.line, Some(21));
    assert_eq!(e.field.as_deref(), Some("PortXmitWait"));
    assert!(e.to_string().contains("line 21"), "{e}");
    assert!(e.to_string().contains("PortXmitWait"), "{e}");

    let truncated = "# Port counters: Lid 12 port 1 (CapMask: 0x5A00)\nPortSelect:......................1\nExcessiveBufferOverrunErrors:..\n";
    let e = parse::perfquery(truncated).expect_err("empty value");
    assert_eq!(
        (e.line, e.field.as_deref()),
        (Some(3), Some("ExcessiveBufferOverrunErrors"))
    );

    let e = parse::perfquery("PortXmitWait:....1\n").expect_err("no header");
    assert_eq!(e.line, Some(1));
    let e = parse::perfquery("# Port counters: Lid x port 1\n").expect_err("bad lid");
    assert_eq!((e.line, e.field.as_deref()), (Some(1), Some("Lid")));
    let e = parse::perfquery("# Port counters: Lid 3 port 1\nPortXmitWait:....4294967296\n")
        .expect_err("33 bits in PortCounters");
    assert_eq!(
        (e.line, e.field.as_deref()),
        (Some(2), Some("PortXmitWait"))
    );
    assert!(parse::perfquery("").is_err());
    let no_wait = parse::perfquery("# Port counters: Lid 3 port ALL\nPortXmitData:...5\n")
        .expect("aggregate parses");
    assert_eq!(no_wait[0].port, None);
    let port = PortId::new("3", 1, Tier::Tor, Direction::Up);
    let e = no_wait[0]
        .to_sample(port, 0, 0)
        .expect_err("no PortXmitWait");
    assert_eq!(e.field.as_deref(), Some("PortXmitWait"));
}

#[test]
fn ethtool_gives_per_priority_pause_counters() {
    let pfc = parse::ethtool_pfc(ETHTOOL).expect("fixture parses");
    let p3 = pfc[3];
    assert_eq!(p3.rx_pause, Some(12));
    assert_eq!(p3.rx_pause_duration_us, Some(345));
    assert_eq!(p3.tx_pause, Some(7));
    assert_eq!(p3.tx_pause_duration_us, Some(210));
    assert_eq!(p3.rx_pause_transition, Some(6));
    assert_eq!(p3.tx_pkts, Some(61));
    assert_eq!(p3.tx_bytes, Some(6_001));
    assert_eq!(pfc[5].rx_pause_duration_us, Some(500));
    assert_eq!(pfc[0].rx_pause, Some(0));

    let bad = ETHTOOL.replace(
        "rx_prio3_pause_duration: 345",
        "rx_prio3_pause_duration: 3-45",
    );
    let e = parse::ethtool_pfc(&bad).expect_err("garbled");
    assert_eq!(e.field.as_deref(), Some("rx_prio3_pause_duration"));
    let line = ETHTOOL
        .lines()
        .position(|l| l.contains("rx_prio3_pause_duration"))
        .map(|i| i + 1);
    assert_eq!(e.line, line);
    let e = parse::ethtool_pfc("NIC statistics:\n     rx_prio9_pause: 1\n").expect_err("prio 9");
    assert_eq!(
        (e.line, e.field.as_deref()),
        (Some(2), Some("rx_prio9_pause"))
    );
    let e = parse::ethtool_pfc("NIC statistics:\n     rx_prio3_pause 1\n").expect_err("no colon");
    assert_eq!(e.line, Some(2));
}

#[test]
fn pfcstat_gives_rx_and_tx_frames() {
    let s = parse::pfcstat(PFCSTAT).expect("fixture parses");
    assert_eq!(
        s.rx["Ethernet0"],
        [
            Some(0),
            Some(0),
            Some(0),
            Some(1_204),
            Some(17),
            Some(0),
            Some(0),
            Some(0)
        ]
    );
    assert_eq!(s.rx["Ethernet4"][7], None);
    assert_eq!(s.tx["Ethernet4"][3], Some(12_345));
    let c = s.counters("Ethernet0").expect("port present");
    assert_eq!((c[3].rx_pause, c[3].tx_pause), (Some(1_204), Some(9)));
    assert!(s.counters("Ethernet99").is_none());

    let bad = PFCSTAT.replace("  12,345", "  12;345");
    let e = parse::pfcstat(&bad).expect_err("garbled");
    assert_eq!(e.line, Some(9));
    assert_eq!(e.field.as_deref(), Some("Ethernet4 PFC3"));
    let short = PFCSTAT.replace(
        "Ethernet4       0       0       0      38",
        "Ethernet4       0",
    );
    let e = parse::pfcstat(&short).expect_err("short row");
    assert_eq!(e.line, Some(4));
    assert!(parse::pfcstat("nothing here\n").is_err());
}

#[test]
fn counters_db_gives_sai_pfc_stats_and_queue_transmissions() {
    let m = parse::counters_db(COUNTERS_DB).expect("fixture parses");
    assert_eq!(m.len(), 2, "Ethernet8 has no counters entry");
    let e0 = m["Ethernet0"];
    assert_eq!(e0[3].rx_pause, Some(1_204));
    assert_eq!(e0[3].tx_pause, Some(9));
    assert_eq!(e0[3].rx_pause_duration_us, Some(48_213));
    assert_eq!(e0[3].tx_pause_duration_us, Some(3_100));
    assert_eq!(e0[3].tx_pkts, Some(5_501));
    assert_eq!(e0[3].tx_bytes, Some(5_633_024));
    assert_eq!(e0[4].rx_pause_duration_us, Some(660));
    assert_eq!(
        e0[4].tx_pkts, None,
        "queue 4's counters are not in the dump"
    );
    assert_eq!(e0[0].rx_pause, None);
    let e4 = m["Ethernet4"];
    assert_eq!(e4[3].tx_pause_duration_us, Some(777_000));

    let bad = COUNTERS_DB.replace("\"48213\"", "\"48x13\"");
    let e = parse::counters_db(&bad).expect_err("garbled value");
    assert_eq!(
        e.field.as_deref(),
        Some("COUNTERS:oid:0x1000000000002/SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US")
    );
    let cut = &COUNTERS_DB[..COUNTERS_DB.len() / 2];
    let e = parse::counters_db(cut).expect_err("truncated JSON");
    assert!(e.line.is_some());
    assert!(parse::counters_db("{}").is_err());
}

/// Every prefix of every fixture, and many randomly garbled copies, parse or fail cleanly.
#[test]
fn truncated_and_garbled_inputs_never_panic() {
    let fixtures = [BASIC, EXTENDED, SATURATED, ETHTOOL, PFCSTAT, COUNTERS_DB];
    let run = |text: &str| {
        let _ = parse::perfquery(text);
        let _ = parse::ethtool_pfc(text);
        let _ = parse::pfcstat(text);
        let _ = parse::counters_db(text);
        let _ = parse::samples_jsonl(text);
    };
    for f in fixtures {
        for cut in 0..=f.len() {
            if let Some(prefix) = f.get(..cut) {
                run(prefix);
            }
        }
    }
    let mut rng = SplitMix64::new(27);
    let garbage = [
        b'.', b':', b'#', b'\n', b' ', b'0', b'x', b'(', b')', b',', b'-', b'"', b'{', 0xff,
    ];
    for f in fixtures {
        for _ in 0..300 {
            let mut bytes = f.as_bytes().to_vec();
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(bytes.len() as u64) as usize;
                match rng.below(3) {
                    0 => bytes[at] = garbage[rng.below(garbage.len() as u64) as usize],
                    1 => {
                        bytes.remove(at);
                    }
                    _ => bytes.insert(at, garbage[rng.below(garbage.len() as u64) as usize]),
                }
            }
            run(&String::from_utf8_lossy(&bytes));
        }
    }
}
