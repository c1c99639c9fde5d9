//! PARALEON's sketch readout through the switch backend (issue 26): the data-plane model in
//! every netsim switch inserts each RoCE packet once, at its ToR; the control plane reads
//! the heavy part through `SwitchBackend` and clears it, as it would over BF Runtime.

use hawkmesh_dataplane::hawkeye::HawkeyeParams;
use hawkmesh_dataplane::sketch::fingerprint;
use hawkmesh_lab::switch_pipeline::install_on_all_switches;
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_switch_agent::backend::ModelBackend;
use hawkmesh_switch_agent::sketch::{deployed_geometry, read_and_reset};

const FLOWS: &str = r#"
version = 1
name = "sketch-readout"
seed = 1
duration_us = 400

[topology]
kind = "leaf_spine"
leaves = 2
spines = 2
hosts_per_leaf = 2
host_gbps = 100
fabric_gbps = 100
delay_ns = 1000

[[workload]]
kind = "flows"
flows = [
  { src = "h0", dst = "h2", size_bytes = 2000000 },
  { src = "h1", dst = "h3", size_bytes = 300000 },
  { src = "h3", dst = "h1", size_bytes = 40000, start_us = 10 },
]
"#;

#[test]
fn the_tor_control_plane_reads_each_flow_once_and_clears_the_sketch() {
    let loaded = Scenario::parse(FLOWS, "t.toml", ".".into()).expect("scenario");
    let mut sim = Simulation::new(&loaded).expect("simulation");
    let params = HawkeyeParams {
        ports: 8,
        ..HawkeyeParams::default()
    };
    let installed = install_on_all_switches(&mut sim, &params).expect("install");
    sim.run();
    let geometry = deployed_geometry();
    let mut seen = std::collections::BTreeMap::new();
    for (id, switch) in &installed {
        let model = switch.model.as_local().expect("in process").clone();
        let mut backend = ModelBackend::new(model);
        let readout = read_and_reset(&mut backend, geometry, []).expect("the readout");
        if !switch.tor {
            assert!(readout.flows.is_empty(), "fabric switch {id} inserted");
            assert_eq!(readout.packets, 0);
            continue;
        }
        for (fp, packets) in &readout.flows {
            assert!(seen.insert(*fp, *packets).is_none(), "a flow counted twice");
        }
        // Cleared: the next interval starts empty.
        let again = read_and_reset(&mut backend, geometry, []).expect("again");
        assert!(again.flows.is_empty() && again.packets == 0);
    }
    // The data flows alone: their ACK streams carry no data and are not inserted.
    assert_eq!(seen.len(), 3, "{seen:?}");
    // Each data flow's packets, counted once at its sender's ToR (1000-byte payloads).
    for (flow, size) in [(0u32, 2_000_000u64), (1, 300_000), (2, 40_000)] {
        let posting = sim.flow_posting(flow).expect("the flow");
        let t = posting.tuple;
        let fp = fingerprint(t.src_ip, t.dst_ip, t.src_port, t.dst_port);
        let packets = u64::from(*seen.get(&fp).unwrap_or(&0));
        let expected = size / 1000;
        assert!(
            packets >= expected && packets <= expected + expected / 50 + 2,
            "flow {flow}: {packets} packets read, {expected} sent"
        );
    }
}
