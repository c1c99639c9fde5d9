//! Behaviours netsim takes from the HPCC reference simulator (docs/netsim-reference.md).

use hawkmesh_netsim::routing::ecmp_hash;
use hawkmesh_netsim::{Scenario, SimResult};

fn run_in(dir: &std::path::Path, text: &str) -> SimResult {
    let loaded = Scenario::parse(text, "test.toml", dir.to_path_buf())
        .unwrap_or_else(|e| panic!("scenario does not load: {e}"));
    hawkmesh_netsim::run_loaded(&loaded).unwrap()
}

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("netsim-ref-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// HPCC flow files keep the reference's ECMP inputs: source ports from 10000 per host pair in
/// file order, the file's destination port, and switch seeds equal to the node ids, so each
/// flow takes the path the reference's hash gives it.
#[test]
fn hpcc_files_hash_like_the_reference() {
    let dir = scratch("ecmp");
    // Hosts 0, 1 on leaf 4; hosts 2, 3 on leaf 5; two spines 6 and 7.
    std::fs::write(
        dir.join("topology.txt"),
        "8 4 8\n4 5 6 7\n0 4 100Gbps 1us 0\n1 4 100Gbps 1us 0\n2 5 100Gbps 1us 0\n\
         3 5 100Gbps 1us 0\n4 6 100Gbps 1us 0\n4 7 100Gbps 1us 0\n5 6 100Gbps 1us 0\n\
         5 7 100Gbps 1us 0\n",
    )
    .unwrap();
    let mut flows = String::from("12\n");
    for i in 0..12 {
        let (src, dst) = [(0, 2), (1, 3), (0, 3)][i % 3];
        flows += &format!("{src} {dst} 3 100 10000 {:.6}\n", 0.00001 * (i + 1) as f64);
    }
    std::fs::write(dir.join("flow.txt"), flows).unwrap();
    let text = |seed: u64| {
        format!(
            "version = 1\nseed = {seed}\nduration_us = 1000\n[topology]\nkind = \"hpcc_file\"\n\
             path = \"topology.txt\"\n[[workload]]\nkind = \"hpcc_flow_file\"\npath = \"flow.txt\"\n"
        )
    };
    let result = run_in(&dir, &text(1));
    let tuples: Vec<&str> = result.flows.iter().map(|f| f.tuple.as_str()).collect();
    assert_eq!(tuples[0], "11.0.0.1:10000->11.0.2.1:100");
    assert_eq!(tuples[3], "11.0.0.1:10001->11.0.2.1:100");
    assert_eq!(tuples[2], "11.0.0.1:10000->11.0.3.1:100");
    // Bytes leaving leaf 4 (node 4) toward each spine: the reference's hash, seed 4.
    let mut expected = [0u64; 2];
    for f in &result.flows {
        let ips = |node: u8| [11, 0, node, 1];
        let src = f.src.trim_start_matches('n').parse::<u8>().unwrap();
        let dst = f.dst.trim_start_matches('n').parse::<u8>().unwrap();
        let sport: u16 = f
            .tuple
            .split(['.', ':', '-'])
            .nth(4)
            .unwrap()
            .parse()
            .unwrap();
        let spine = ecmp_hash(ips(src), ips(dst), sport, 100, 4) % 2;
        expected[spine as usize] += 1;
    }
    let data_packets = |spine: &str| {
        let port = result
            .ports
            .iter()
            .find(|p| p.name == "n4" && p.peer == spine)
            .unwrap();
        port.counters.tx_packets
    };
    // 10 data packets per flow leave leaf 4 upward (ACKs come back down to it).
    assert_eq!(
        [data_packets("n6"), data_packets("n7")],
        [expected[0] * 10, expected[1] * 10]
    );
    assert!(
        expected[0] > 0 && expected[1] > 0,
        "both paths used: {expected:?}"
    );
    // The paths do not depend on the scenario's seed.
    let other = run_in(&dir, &text(2));
    assert_eq!(
        result
            .ports
            .iter()
            .map(|p| p.counters.tx_packets)
            .collect::<Vec<_>>(),
        other
            .ports
            .iter()
            .map(|p| p.counters.tx_packets)
            .collect::<Vec<_>>()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `nic.ack_priority = "data"`: ACKs queue with their flow's data in the switches (as in the
/// reference), so a storm pausing that priority toward the sender holds them back; on the
/// control priority (the default) they pass.
#[test]
fn acks_on_the_data_priority_are_paused_with_it() {
    let text = |ack: &str| {
        format!(
            r#"
version = 1
duration_us = 2000
[topology]
kind = "graph"
switches = ["s0"]
hosts = ["h0", "h1"]
links = [{{ a = "h0", b = "s0" }}, {{ a = "s0", b = "h1" }}]
[nic]
ack_priority = "{ack}"
[[workload]]
kind = "flows"
flows = [{{ src = "h1", dst = "h0", size_bytes = 1000000, start_us = 10, priority = 3 }}]
[[fault]]
kind = "pfc_injection"
host = "h1"
priority = 3
start_us = 5
duration_us = 1900
"#
        )
    };
    let dir = std::env::temp_dir();
    let control = run_in(&dir, &text("control"));
    let fct = control.flows[0].fct_ns.expect("ACKs pass the storm");
    assert!(fct < 200_000, "{fct}");
    let data = run_in(&dir, &text("data"));
    assert!(
        data.flows[0].fct_ns.is_none_or(|fct| fct > 1_800_000),
        "ACKs on priority 3 wait for the storm: {:?}",
        data.flows[0].fct_ns
    );
}
