//! The model inside netsim: every switch of a K=4 fat-tree runs the hawkmesh program
//! through the netsim adapter.
//!
//! ```text
//!            core0..core3
//!        agg0 agg1 … agg6 agg7        (pod p: agg2p, agg2p+1)
//!        tor0 tor1 … tor6 tor7        (pod p: tor2p, tor2p+1)
//!  h0 h1 ─┘                           incast: h4 h5 h8 h9 h12 → h0
//! ```
//!
//! The incast fills tor0's port toward h0; tor0 pauses its uplinks (IEEE 802.1Qbb) and the
//! pause spreads up the tree. A host agent that sees an incast flow's RTT inflate sends a
//! polling packet with the victim's 5-tuple (HAWKEYE §3.4).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::model::DataPlane;
use hawkmesh_dataplane::packets::{polling_offset, Polling};
use hawkmesh_lab::switch_pipeline::{
    install_on_all_switches, qdepth_cells, InstalledSwitch, NetsimAdapter,
};
use hawkmesh_netsim::hooks::{HostEmit, HostHook, RttSample};
use hawkmesh_netsim::packet::Packet;
use hawkmesh_netsim::time::Time;
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_wire::topology::NodeId;

const K4_INCAST: &str = r#"
version = 1
duration_us = 400
[topology]
kind = "fat_tree"
k = 4
[switch]
buffer_mb = 3
[[workload]]
kind = "incast"
senders = ["h4", "h5", "h8", "h9", "h12"]
receiver = "h0"
size_bytes = 300000
start_us = 10
congestion_control = false
"#;

/// The K=4 incast scenario of `scenarios/k4-incast.toml`, shortened so the test runs in a
/// few seconds: WebSearch background at 30 % and the ten-sender incast burst.
const K4_INCAST_WITH_BACKGROUND: &str = r#"
version = 1
name = "k4-incast-short"
seed = 7
duration_us = 1200
[topology]
kind = "fat_tree"
k = 4
host_gbps = 100
fabric_gbps = 100
delay_ns = 2000
[switch]
buffer_mb = 3
[[workload]]
kind = "poisson"
load = 0.3
cdf = "websearch"
duration_us = 1000
[[workload]]
kind = "incast"
senders = ["h4", "h5", "h6", "h7", "h8", "h9", "h10", "h11", "h12", "h13"]
receiver = "h0"
size_bytes = 100000
start_us = 300
congestion_control = false
"#;

#[derive(Default)]
struct Agent {
    samples: Vec<RttSample>,
    received: Vec<(NodeId, Vec<u8>)>,
}

struct AgentHook(Rc<RefCell<Agent>>);

impl HostHook for AgentHook {
    fn on_rtt_sample(&mut self, sample: &RttSample, _emit: &mut Vec<HostEmit>) {
        self.0.borrow_mut().samples.push(*sample);
    }
    fn on_custom_packet(
        &mut self,
        host: NodeId,
        packet: &Packet,
        _now: Time,
        _emit: &mut Vec<HostEmit>,
    ) {
        self.0
            .borrow_mut()
            .received
            .push((host, packet.custom_bytes().to_vec()));
    }
}

fn params() -> HawkeyeParams {
    HawkeyeParams {
        ports: 8,
        ..HawkeyeParams::default()
    }
}

fn node(sim: &Simulation, name: &str) -> NodeId {
    sim.topology()
        .node_by_name(name)
        .map(|n| n.id)
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn reg(sw: &InstalledSwitch, name: &str, index: u64) -> u64 {
    sw.model
        .lock()
        .register_read(name, index)
        .expect("register")
}

#[test]
fn polling_follows_the_victim_gains_the_pfc_bit_and_reaches_the_congested_switch() {
    let loaded = Scenario::parse(K4_INCAST, "t.toml", ".".into()).expect("scenario");
    let mut sim = Simulation::new(&loaded).expect("sim");
    let agent = Rc::new(RefCell::new(Agent::default()));
    sim.set_host_hook(Box::new(AgentHook(agent.clone())));
    let switches = install_on_all_switches(&mut sim, &params()).expect("install");
    assert_eq!(switches.len(), 20);
    assert_eq!(switches.values().filter(|s| s.tor).count(), 8);
    let h0 = node(&sim, "h0");
    let tor0 = node(&sim, "tor0");
    // Run until an incast flow's RTT is 3× its base (the host agent's trigger).
    let mut victim = None;
    let mut t: Time = 0;
    while victim.is_none() && t < 300_000_000 {
        t += 5_000_000;
        sim.run_until(t);
        victim = agent
            .borrow()
            .samples
            .iter()
            .find(|s| s.now - s.sent_at > 3 * s.base_rtt)
            .copied();
    }
    let victim = victim.expect("the incast inflates RTTs");
    let p = program(&params()).expect("program");
    let header = Polling::new(42, victim.tuple, 16).emit().to_vec();
    assert_eq!(
        header.len(),
        hawkmesh_wire::dataplane::POLLING_HEADER_BYTES as usize
    );
    sim.emit_from_host(HostEmit::now(
        victim.src_nic,
        victim.dst_nic,
        victim.tuple,
        7,
        header,
    ));
    sim.run_until(t + 100_000_000);

    let path = sim.path_ports(victim.src_nic, victim.dst_nic, victim.tuple);
    assert!(path.len() >= 4, "victim path {path:?}");
    assert_eq!(path.last().map(|h| h.node), Some(tor0));
    let cpu = sim.take_cpu_packets();
    let copies: Vec<(NodeId, Polling, u16)> = cpu
        .iter()
        .filter_map(|c| {
            let payload = c.payload.as_ref()?;
            let polling = Polling::parse(payload.get(polling_offset(&p)..)?).ok()?;
            (polling.event_id == 42).then_some((c.switch, polling, c.ingress_port))
        })
        .collect();
    // Every switch on the victim's path reported, with the port the polling packet came in
    // by as its context and the victim bit set on arrival.
    let mut in_port_at: BTreeMap<NodeId, u16> = BTreeMap::new();
    for w in path.windows(2) {
        let link = sim
            .topology()
            .links
            .iter()
            .find(|l| {
                (l.a.node == w[0].node && l.a.port == w[0].port)
                    || (l.b.node == w[0].node && l.b.port == w[0].port)
            })
            .expect("link");
        let far = if l_is_a(link, w[0].node, w[0].port) {
            link.b
        } else {
            link.a
        };
        assert_eq!(far.node, w[1].node);
        in_port_at.insert(far.node, far.port);
    }
    for hop in path.iter().skip(1) {
        let (_, polling, ingress) = copies
            .iter()
            .find(|(s, pol, _)| *s == hop.node && pol.arrival_flags & 1 != 0)
            .unwrap_or_else(|| panic!("no victim-path CPU copy at node {}", hop.node));
        assert_eq!(polling.context_kind, 1, "CPU copy context");
        assert_eq!(polling.victim, victim.tuple);
        assert_eq!(polling.context_ingress_port, *ingress);
        assert_eq!(Some(*ingress), in_port_at.get(&hop.node).copied());
        // The copy records the victim's own forwarding choice at this switch.
        assert_eq!(polling.context_egress_port, hop.port);
    }
    // Somewhere along the path the victim's egress port was paused: the next switch got
    // the polling packet with the PFC bit, and the PFC branch reached the congested ToR.
    let pfc_switches: Vec<NodeId> = copies
        .iter()
        .filter(|(_, pol, _)| pol.arrival_flags & 2 != 0)
        .map(|(s, _, _)| *s)
        .collect();
    assert!(
        pfc_switches.contains(&tor0),
        "PFC branch reaches tor0: {pfc_switches:?}"
    );
    // The victim's receiver got the polling packet, hop limit reduced once per switch.
    let got: Vec<Polling> = agent
        .borrow()
        .received
        .iter()
        .filter(|(host, _)| *host == h0)
        .filter_map(|(_, b)| Polling::parse(b).ok())
        .collect();
    assert_eq!(got.len(), 1, "exactly one polling packet reaches h0");
    assert_eq!(got[0].hop_limit as usize, 16 - (path.len() - 1));
    assert_eq!(got[0].context_kind, 0);

    // The registers of the current epoch (t < 2^20 ns: ring slot 0, epoch id 0) saw the
    // victim's traffic on the path and the pause at the congested ports.
    let ports = params().ports as u64;
    let mut paused_somewhere = false;
    for hop in path.iter().skip(1) {
        let sw = &switches[&hop.node];
        let in_port = in_port_at[&hop.node] as u64;
        let out_port = hop.port as u64;
        assert!(reg(sw, "port_packets", out_port) > 0, "node {}", hop.node);
        assert!(reg(sw, "meter_bytes", in_port * ports + out_port) > 0);
        paused_somewhere |= reg(sw, "port_paused_packets", out_port) > 0;
        let stats = sw.stats.get();
        assert_eq!((stats.errors, stats.busy), (0, 0));
        assert!(stats.cpu_copies >= 1);
        // Flow telemetry: the victim's slot holds packets of this epoch.
        let flows = sw
            .model
            .lock()
            .register_read_all("flow_packets")
            .expect("flow_packets")
            .iter()
            .filter(|v| **v > 0)
            .count();
        assert!(flows > 0);
    }
    assert!(paused_somewhere, "a port on the victim path was paused");
    // tor0's port toward h0 is the congestion point: its queue-depth sum (80-byte cells)
    // is large, and its uplinks saw PFC frames (pause_end registers set).
    let tor0_sw = &switches[&tor0];
    let toward_h0 = path.last().map(|h| h.port as u64).expect("last hop");
    let qsum = reg(tor0_sw, "port_qdepth_sum", toward_h0);
    let pkts = reg(tor0_sw, "port_packets", toward_h0);
    assert!(
        qsum / pkts.max(1) > qdepth_cells(50_000) as u64,
        "mean depth {} cells",
        qsum / pkts.max(1)
    );
    // Where the victim's egress was paused, the PFC frame that paused it set the port's
    // pause_end register (IEEE 802.1Qbb quanta turned into an end time).
    for hop in path.iter().skip(1) {
        let sw = &switches[&hop.node];
        if reg(sw, "port_paused_packets", hop.port as u64) > 0 {
            let ends: Vec<u64> = (0..8)
                .map(|q| reg(sw, &format!("pause_end_p{q}"), hop.port as u64))
                .collect();
            assert!(ends.iter().any(|e| *e > 0), "node {}: {ends:?}", hop.node);
        }
    }
    // Every switch runs the same image; PARALEON's insert-once mark makes the ToR the only
    // sketch that counts a packet: the incast senders' ToRs counted, aggregation and core
    // sketches stayed empty.
    let counted = |sw: &InstalledSwitch| {
        sw.model
            .lock()
            .register_read_all("sketch_total")
            .expect("sketch_total")
            .iter()
            .sum::<u64>()
    };
    for (id, sw) in &switches {
        if sw.tor {
            continue;
        }
        assert_eq!(counted(sw), 0, "node {id}: a fabric switch inserted");
    }
    assert!(switches.values().filter(|s| s.tor).any(|s| counted(s) > 0));
}

fn l_is_a(link: &hawkmesh_wire::topology::LinkDesc, node: NodeId, port: u16) -> bool {
    link.a.node == node && link.a.port == port
}

#[test]
fn the_model_only_observes_fct_and_ecn_are_unchanged() {
    let loaded =
        Scenario::parse(K4_INCAST_WITH_BACKGROUND, "t.toml", ".".into()).expect("scenario");
    let run = |with_model: bool| {
        let mut sim = Simulation::new(&loaded).expect("sim");
        let installed = if with_model {
            install_on_all_switches(&mut sim, &params()).expect("install")
        } else {
            BTreeMap::new()
        };
        sim.run();
        let s = &loaded.scenario;
        let result = sim.result(&s.name, s.seed, &s.output.fct_bins);
        (result, installed)
    };
    let (plain, _) = run(false);
    let (observed, installed) = run(true);
    assert!(plain.flows.len() > 50, "{} flows", plain.flows.len());
    assert!(plain.totals.ecn_marked > 0 || plain.totals.pause_frames > 0);
    let key = |r: &hawkmesh_netsim::SimResult| {
        serde_json::to_string(&(&r.flows, &r.totals, &r.fct_bins)).expect("json")
    };
    assert_eq!(key(&plain), key(&observed));
    // …and the model did see the traffic.
    // ECN is marked once, by netsim's RED (the lab's ground truth, tuned through
    // `Simulation::set_knobs`): the program's `ecn_profile` stays empty, so the program
    // marks nothing — were it filled, CE marks would come from two RED processes and the
    // flows' DCQCN would react to both (ARCHITECTURE.md, "ECN marking in the lab").
    for sw in installed.values() {
        assert_eq!(sw.model.lock().table_len("ecn_profile").expect("table"), 0);
    }
    let passes: u64 = installed.values().map(|s| s.stats.get().egress).sum();
    assert!(passes > 10_000, "{passes} egress passes");
    assert!(installed
        .values()
        .all(|s| s.stats.get().errors == 0 && s.stats.get().busy == 0));
}

#[test]
fn a_shared_model_is_readable_between_slices_and_a_borrowed_one_is_skipped() {
    let loaded = Scenario::parse(K4_INCAST, "t.toml", ".".into()).expect("scenario");
    let mut sim = Simulation::new(&loaded).expect("sim");
    let switches = install_on_all_switches(&mut sim, &params()).expect("install");
    let tor0 = node(&sim, "tor0");
    sim.run_until(50_000_000);
    let before: u64 = switches[&tor0]
        .model
        .lock()
        .register_read_all("port_packets")
        .expect("reg")
        .iter()
        .sum();
    assert!(before > 0, "tor0 counted packets in the first 50 µs");
    // An agent holding a borrow while netsim runs: packets pass unobserved, no panic.
    let held = switches[&tor0].model.lock();
    sim.run_until(60_000_000);
    drop(held);
    assert!(switches[&tor0].stats.get().busy > 0);
    // A second adapter over the same model shares its registers.
    let again = NetsimAdapter::new(switches[&tor0].model.clone()).expect("adapter");
    let (Some(a), Some(b)) = (
        again.model().as_local().cloned(),
        switches[&tor0].model.as_local().cloned(),
    ) else {
        panic!("in-process models");
    };
    assert!(Rc::ptr_eq(&a, &b));
}
