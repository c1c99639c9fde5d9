//! The real-fabric sources against test doubles of the tools: shell scripts that check the
//! arguments they are given (exiting 2 on anything else, as the real tools reject bad usage)
//! and print output in the recorded formats of `perfquery`, `ibportstate`, mlx5 `ethtool -S`
//! and `sonic-db-cli`, with counters that grow from one call to the next.
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hawkmesh_congestion::sources::hgetall_dict;
use hawkmesh_congestion::watchdog::Verdict;
use hawkmesh_congestion::{
    CounterSource, Direction, EthPort, EthtoolSource, IbPort, ManualClock, PerfquerySource,
    Sampler, SamplingPlan, SonicPort, SonicSource, Tier, Tool, Watchdog, WatchdogConfig, Width,
};

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hawkmesh-sources-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

/// A tool double: `/bin/sh <script>` (the script is not exec'd itself, so a concurrent
/// test's fork cannot make it busy), with `$D` the test's directory.
fn tool(d: &Path, name: &str, body: &str) -> Tool {
    let path = d.join(name);
    let text = format!(
        "#!/bin/sh\nD='{}'\necho \"$*\" >> \"$D/{name}.calls\"\n{body}\n",
        d.display()
    );
    std::fs::write(&path, text).expect("script");
    Tool::new("/bin/sh").with_prefix([path.display().to_string()])
}

fn calls(d: &Path, name: &str) -> Vec<String> {
    std::fs::read_to_string(d.join(format!("{name}.calls")))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

const IBPORTSTATE: &str = r##"case "$*" in
  "12 1") printf 'CA/RT PortInfo:\n# Port info: Lid 12 port 1\nLinkState:.......................Active\nPhysLinkState:...................LinkUp\n' ;;
  "12 2") printf '# Port info: Lid 12 port 2\nLinkState:.......................Down\nPhysLinkState:...................Polling\n' ;;
  *) echo "ibportstate: unexpected arguments: $*" >&2; exit 2 ;;
esac"##;

/// perfquery -x: PortXmitWait grows by 1000 ticks a call; -x -R clears it.
const PERFQUERY_X: &str = r##"case "$*" in
  "-x -R 12 1") echo 0 > "$D/wait" ;;
  "-x 12 1")
    n=$(cat "$D/wait" 2>/dev/null || echo 5000000000); n=$((n + 1000)); echo $n > "$D/wait"
    echo "# Port extended counters: Lid 12 port 1 (CapMask: 0x5A00 CapMask2: 0x0000002)"
    echo "PortSelect:......................1"
    echo "CounterSelect:...................0x0000"
    echo "PortXmitData:....................$((n * 4))"
    echo "PortXmitPkts:....................$((n / 10))"
    echo "PortXmitWait:....................$n" ;;
  *) echo "perfquery: unexpected arguments: $*" >&2; exit 2 ;;
esac"##;

fn ib(lid: u32, port: u32, node: &str) -> IbPort {
    IbPort {
        lid,
        port,
        node: node.into(),
        tier: Tier::Tor,
        dir: Direction::Up,
    }
}

/// The study's round on an InfiniBand port: the down port is skipped, the up one is reset
/// with `perfquery -x -R` and read with `perfquery -x` (64-bit PortXmitWait), each read
/// stamped with its own turnaround.
#[test]
fn perfquery_round_resets_and_reads_extended_counters() {
    let d = dir("pq-round");
    let mut source = PerfquerySource::new(
        tool(&d, "perfquery", PERFQUERY_X),
        tool(&d, "ibportstate", IBPORTSTATE),
        vec![ib(12, 1, "tor0"), ib(12, 2, "tor0")],
    );
    assert!(source
        .is_up(&ib(12, 1, "tor0").id())
        .expect("state of port 1"));
    assert!(!source
        .is_up(&ib(12, 2, "tor0").id())
        .expect("state of port 2"));
    let mut sampler = Sampler::new(SamplingPlan {
        reads_per_round: 4,
        spacing_ns: 1_000,
        ..SamplingPlan::default()
    });
    let round = sampler
        .round(&mut source, &mut ManualClock::at(0))
        .expect("a round");
    assert_eq!(round.port, ib(12, 1, "tor0").id());
    let waits: Vec<_> = round.samples.iter().map(|s| s.xmit_wait).collect();
    assert_eq!(waits, [Some(1000), Some(2000), Some(3000), Some(4000)]);
    assert!(round.samples.iter().all(|s| s.wait_width == Width::Bits64));
    assert_eq!(round.samples[0].xmit_data, Some(4000));
    for w in round.samples.windows(2) {
        assert!(w[1].t_query_ns >= w[0].t_query_ns + w[0].turnaround_ns);
    }
    assert!(round.samples.iter().all(|s| s.turnaround_ns > 0));
    let pq = calls(&d, "perfquery");
    assert_eq!(pq[0], "-x -R 12 1");
    assert!(pq[1..].iter().all(|c| c == "-x 12 1"), "{pq:?}");
}

/// A PMA that refuses PortCountersExtended: the port falls back to PortCounters (32-bit,
/// saturating) for good, and its reset is plain `perfquery -R`.
#[test]
fn perfquery_falls_back_to_basic_counters_when_extended_is_refused() {
    let d = dir("pq-basic");
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/perfquery_saturated.txt");
    let body = format!(
        r##"case "$*" in
  "-x 7 22") echo "ibwarn: [4242] pma_query_via: PerfMgt Attribute 0x1d query failed" >&2; exit 1 ;;
  "-R 7 22") ;;
  "7 22") cat '{}' ;;
  *) echo "perfquery: unexpected arguments: $*" >&2; exit 2 ;;
esac"##,
        fixture.display()
    );
    let port = ib(7, 22, "spine3");
    let mut source = PerfquerySource::new(
        tool(&d, "perfquery", &body),
        tool(&d, "ibportstate", IBPORTSTATE),
        vec![port.clone()],
    );
    let s = source.read(&port.id()).expect("the basic counters");
    assert_eq!(s.xmit_wait, Some(u64::from(u32::MAX)));
    assert_eq!(s.wait_width, Width::Bits32);
    assert!(source.is_basic_only(&port.id()));
    source.reset(&port.id()).expect("reset");
    source.read(&port.id()).expect("again");
    assert_eq!(
        calls(&d, "perfquery"),
        ["-x 7 22", "7 22", "-R 7 22", "7 22"]
    );
}

/// Output that is not perfquery's: the error names the port, the command and the line.
#[test]
fn perfquery_errors_name_the_port_the_command_and_the_line() {
    let d = dir("pq-bad");
    let body = r##"echo "# Port extended counters: Lid 3 port 2 (CapMask: 0x5A00)"
echo "PortXmitData:....................12"
echo "PortXmitWait:....................12abc""##;
    let port = ib(3, 2, "leaf1");
    let mut source = PerfquerySource::new(
        tool(&d, "perfquery", body),
        tool(&d, "ibportstate", IBPORTSTATE),
        vec![port.clone()],
    );
    let e = source.read(&port.id()).expect_err("bad output").to_string();
    assert!(e.contains("leaf1:2"), "{e}");
    assert!(e.contains("perfquery -x 3 2"), "{e}");
    assert!(e.contains("PortXmitWait:....................12abc"), "{e}");
    // Unknown ports and a missing program are errors too, not panics.
    let stranger = ib(3, 9, "leaf1").id();
    assert!(source.read(&stranger).is_err());
    let mut missing = PerfquerySource::new(
        Tool::new(d.join("no-such-perfquery")),
        Tool::new(d.join("no-such-ibportstate")),
        vec![port.clone()],
    );
    let e = missing
        .read(&port.id())
        .expect_err("no program")
        .to_string();
    assert!(e.contains("could not start"), "{e}");
}

/// A tool that hangs is killed after the timeout (here while a child of it still holds its
/// output open).
#[test]
fn a_hanging_tool_is_killed_after_the_timeout() {
    let d = dir("pq-hang");
    let port = ib(12, 1, "tor0");
    let mut source = PerfquerySource::new(
        tool(&d, "perfquery", "sleep 3").with_timeout(Duration::from_millis(300)),
        tool(&d, "ibportstate", IBPORTSTATE),
        vec![port.clone()],
    );
    let t = Instant::now();
    let e = source.read(&port.id()).expect_err("hangs").to_string();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(e.contains("killed after 300ms"), "{e}");
    assert!(e.contains("tor0:1"), "{e}");
}

/// mlx5 `ethtool -S`: PFC counters since the reset (a baseline: NIC counters are not
/// cleared), the state from sysfs.
#[test]
fn ethtool_source_reads_pfc_counters_since_its_baseline() {
    let d = dir("ethtool");
    let body = r##"case "$*" in
  "-S enp65s0f0np0")
    n=$(cat "$D/n" 2>/dev/null || echo 100); n=$((n + 10)); echo $n > "$D/n"
    echo "NIC statistics:"
    echo "     rx_packets: 123"
    echo "     rx_prio3_pause: $n"
    echo "     rx_prio3_pause_duration: $((n * 7))"
    echo "     tx_prio3_pause: 4"
    echo "     tx_prio3_packets: 900"
    echo "     rx_prio3_pause_transition: $((n / 10))" ;;
  "-S eth9") echo "NIC statistics:"; echo "     rx_packets: 1"; echo "     tx_packets: 2" ;;
  *) echo "ethtool: bad command line argument(s)" >&2; exit 1 ;;
esac"##;
    let sys = d.join("sys");
    for (ifname, state) in [("enp65s0f0np0", "up\n"), ("eth9", "down\n")] {
        let p = sys.join("class/net").join(ifname);
        std::fs::create_dir_all(&p).expect("sysfs dir");
        std::fs::write(p.join("operstate"), state).expect("operstate");
    }
    let port = |ifname: &str, n: u32| EthPort {
        ifname: ifname.into(),
        node: "h3".into(),
        port: n,
        tier: Tier::Host,
        dir: Direction::Up,
    };
    let mut source = EthtoolSource::new(
        tool(&d, "ethtool", body),
        &sys,
        vec![port("enp65s0f0np0", 1), port("eth9", 2)],
    );
    let (a, b) = (port("enp65s0f0np0", 1).id(), port("eth9", 2).id());
    assert!(source.is_up(&a).expect("state"));
    assert!(!source.is_up(&b).expect("state"));
    let raw = source.read(&a).expect("first read");
    assert_eq!(raw.pfc[3].rx_pause, Some(110));
    source.reset(&a).expect("baseline"); // n = 120
    let s = source.read(&a).expect("read"); // n = 130
    assert_eq!(s.pfc[3].rx_pause, Some(10));
    assert_eq!(s.pfc[3].rx_pause_duration_us, Some(70));
    assert_eq!(s.pfc[3].tx_pkts, Some(0));
    assert_eq!(s.pfc[3].rx_pause_transition, Some(1));
    assert_eq!(s.xmit_wait, None);
    let e = source.read(&b).expect_err("no PFC counters").to_string();
    assert!(e.contains("h3:2") && e.contains("ethtool -S eth9"), "{e}");
}

const SONIC: &str = r##"case "$*" in
  "COUNTERS_DB HGET COUNTERS_PORT_NAME_MAP Ethernet8") echo "oid:0x1000000000004" ;;
  "COUNTERS_DB HGET COUNTERS_PORT_NAME_MAP Ethernet12") echo "" ;;
  "COUNTERS_DB HGETALL COUNTERS:oid:0x1000000000004")
    n=$(cat "$D/n" 2>/dev/null || echo 1000); n=$((n + 50)); echo $n > "$D/n"
    echo "{'SAI_PORT_STAT_IF_IN_OCTETS': '918273645', 'SAI_PORT_STAT_PFC_3_RX_PKTS': '$n', 'SAI_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US': '$((n * 20))', 'SAI_PORT_STAT_PFC_3_TX_PKTS': '0', 'SAI_PORT_STAT_PFC_4_RX_PKTS': '3'}" ;;
  "COUNTERS_DB HGET COUNTERS_QUEUE_NAME_MAP Ethernet8:3") echo "oid:0x15000000000a3" ;;
  "COUNTERS_DB HGET COUNTERS_QUEUE_NAME_MAP Ethernet8:4") echo "oid:0x15000000000a4" ;;
  "COUNTERS_DB HGETALL COUNTERS:oid:0x15000000000a3") echo "{'SAI_QUEUE_STAT_PACKETS': '5000', 'SAI_QUEUE_STAT_BYTES': '5120000'}" ;;
  "COUNTERS_DB HGETALL COUNTERS:oid:0x15000000000a4") echo "{'SAI_QUEUE_STAT_PACKETS': '7', 'SAI_QUEUE_STAT_BYTES': '700'}" ;;
  "APPL_DB HGET PORT_TABLE:Ethernet8 oper_status") echo "up" ;;
  "APPL_DB HGET PORT_TABLE:Ethernet12 oper_status") echo "down" ;;
  *) echo "unexpected: $*" >&2; exit 1 ;;
esac"##;

/// SONiC COUNTERS_DB through `sonic-db-cli`: the port's OID looked up once, its PFC stats and
/// its lossless queues' transmissions read each time, counted from a baseline (the switch's
/// counters are never cleared by us) — and a queue paused without transmitting is a storm
/// for the watchdog.
#[test]
fn sonic_source_reads_counters_db_and_feeds_the_watchdog() {
    let d = dir("sonic");
    let ports = vec![
        SonicPort {
            name: "Ethernet8".into(),
            port: 2,
            dir: Direction::Down,
        },
        SonicPort {
            name: "Ethernet12".into(),
            port: 3,
            dir: Direction::Down,
        },
    ];
    let mut source = SonicSource::new(
        tool(&d, "sonic-db-cli", SONIC),
        "leaf4",
        Tier::Leaf,
        ports,
        vec![3, 4],
    );
    let ids = source.ports();
    assert_eq!(ids[0].to_string(), "leaf4:2");
    assert!(source.is_up(&ids[0]).expect("state"));
    assert!(!source.is_up(&ids[1]).expect("state"));
    source.reset(&ids[0]).expect("baseline"); // n = 1050
    let mut watchdog = Watchdog::new(WatchdogConfig {
        detection_ns: 1,
        restoration_ns: 1,
        priorities: vec![3],
    });
    let mut verdicts = Vec::new();
    let mut last = None;
    for _ in 0..3 {
        let s = source.read(&ids[0]).expect("read");
        verdicts.extend(watchdog.observe(&s));
        last = Some(s);
    }
    let s = last.expect("three reads"); // n = 1200
    assert_eq!(s.pfc[3].rx_pause, Some(150));
    assert_eq!(s.pfc[3].rx_pause_duration_us, Some(3000));
    assert_eq!(s.pfc[3].tx_pkts, Some(0));
    assert_eq!(s.pfc[4].rx_pause, Some(0));
    assert!(
        verdicts
            .iter()
            .any(|v| matches!(v, Verdict::Storm { port, priority: 3, .. } if port.to_string() == "leaf4:2")),
        "{verdicts:?}"
    );
    let log = calls(&d, "sonic-db-cli");
    assert_eq!(
        log.iter()
            .filter(|c| c.contains("COUNTERS_PORT_NAME_MAP"))
            .count(),
        1,
        "{log:?}"
    );
    let e = source.read(&ids[1]).expect_err("no OID").to_string();
    assert!(
        e.contains("leaf4:3") && e.contains("COUNTERS_PORT_NAME_MAP Ethernet12"),
        "{e}"
    );
}

/// The HGETALL dictionary sonic-db-cli prints; anything else is an error, never a panic.
#[test]
fn hgetall_dictionaries_parse_and_garbage_does_not() {
    let m = hgetall_dict("{'A': '1', 'B_C': 'oid:0x2'}\n").expect("a dict");
    assert_eq!(m.get("A").map(String::as_str), Some("1"));
    assert_eq!(m.get("B_C").map(String::as_str), Some("oid:0x2"));
    assert!(hgetall_dict("{}").expect("empty").is_empty());
    for bad in [
        "",
        "{",
        "{'A' '1'}",
        "{'A': 1}",
        "{'A': '1' 'B': '2'}",
        "(nil)",
        "{'é",
        "{'A': '1',",
    ] {
        assert!(hgetall_dict(bad).is_err(), "{bad:?}");
    }
}
