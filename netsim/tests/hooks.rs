//! The extension points the switch data plane and the host agents plug into.

use hawkmesh_netsim::hooks::{
    EgressActions, EgressMeta, HostEmit, HostHook, IngressActions, IngressMeta, RttSample,
    SwitchPipeline,
};
use hawkmesh_netsim::packet::{Packet, PacketKind};
use hawkmesh_netsim::time::{Time, NS, US};
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_wire::topology::{NodeId, PortNo};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

/// Custom packets a host received: (host, custom bytes).
type Inbox = Rc<RefCell<Vec<(NodeId, Vec<u8>)>>>;

/// Sends one "polling" packet carrying the victim's 5-tuple (so ECMP follows the victim's
/// path) the first time a flow's RTT exceeds twice its base RTT.
struct RttTrigger {
    fired: Rc<RefCell<Vec<RttSample>>>,
    received: Inbox,
    done: BTreeSet<u32>,
}

impl HostHook for RttTrigger {
    fn on_rtt_sample(&mut self, sample: &RttSample, emit: &mut Vec<HostEmit>) {
        let rtt = sample.now - sample.sent_at;
        if rtt > 2 * sample.base_rtt && self.done.insert(sample.flow) {
            self.fired.borrow_mut().push(*sample);
            emit.push(HostEmit::now(
                sample.src_nic,
                sample.dst_nic,
                sample.tuple,
                7,
                vec![0x48, 0x4b, sample.flow as u8],
            ));
        }
    }

    fn on_custom_packet(
        &mut self,
        host: NodeId,
        packet: &Packet,
        _now: Time,
        _: &mut Vec<HostEmit>,
    ) {
        self.received
            .borrow_mut()
            .push((host, packet.custom_bytes().to_vec()));
    }
}

/// Mirrors custom packets to the CPU at ingress and records the largest enqueue depth each
/// egress port reported.
struct Observer {
    max_qdepth: Rc<RefCell<BTreeMap<(NodeId, PortNo), u32>>>,
    drop_custom: bool,
    flood_custom: Option<u16>,
}

impl SwitchPipeline for Observer {
    fn ingress(&mut self, meta: &IngressMeta, packet: &mut Packet, actions: &mut IngressActions) {
        if packet.kind == PacketKind::Custom {
            actions.to_cpu = true;
            actions.drop = self.drop_custom;
            if let Some(ports) = self.flood_custom {
                for port in 0..ports {
                    if port != meta.ingress_port {
                        actions.multicast.insert(port);
                    }
                }
            }
        }
    }

    fn egress(&mut self, meta: &EgressMeta, packet: &mut Packet, _actions: &mut EgressActions) {
        if packet.kind == PacketKind::Data {
            let mut map = self.max_qdepth.borrow_mut();
            let slot = map.entry((meta.switch, meta.egress_port)).or_insert(0);
            *slot = (*slot).max(meta.enq_qdepth_bytes);
        }
    }
}

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

#[test]
fn rtt_triggered_packets_follow_the_victim_path_and_reach_cpu_ports() {
    let loaded = Scenario::parse(K4_INCAST, "t.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let fired = Rc::new(RefCell::new(Vec::new()));
    let received = Rc::new(RefCell::new(Vec::new()));
    sim.set_host_hook(Box::new(RttTrigger {
        fired: fired.clone(),
        received: received.clone(),
        done: BTreeSet::new(),
    }));
    let max_qdepth = Rc::new(RefCell::new(BTreeMap::new()));
    let switches: Vec<NodeId> = sim
        .topology()
        .nodes
        .iter()
        .filter(|n| n.kind == hawkmesh_wire::topology::NodeKind::Switch)
        .map(|n| n.id)
        .collect();
    for switch in &switches {
        assert!(sim.set_pipeline(
            *switch,
            Box::new(Observer {
                max_qdepth: max_qdepth.clone(),
                drop_custom: false,
                flood_custom: None,
            })
        ));
    }
    sim.run();
    let fired = fired.borrow();
    assert!(
        !fired.is_empty(),
        "the incast must inflate RTTs beyond 2× base"
    );
    let cpu = sim.take_cpu_packets();
    for sample in fired.iter() {
        // Every switch on the victim's path saw the polling packet and mirrored it with the
        // egress port the victim's own packets take.
        let path = sim.path_ports(sample.src_nic, sample.dst_nic, sample.tuple);
        for hop in path.iter().skip(1) {
            let copy = cpu
                .iter()
                .find(|c| {
                    c.switch == hop.node
                        && c.packet.custom_bytes() == [0x48, 0x4b, sample.flow as u8]
                })
                .unwrap_or_else(|| panic!("no CPU copy at node {}", hop.node));
            assert_eq!(copy.egress_port, Some(hop.port));
            assert_eq!(copy.packet.tuple, sample.tuple);
        }
        assert_eq!(
            cpu.iter()
                .filter(|c| c.packet.custom_bytes()[2] == sample.flow as u8)
                .count(),
            path.len() - 1
        );
    }
    let h0 = sim.topology().node_by_name("h0").unwrap().id;
    assert_eq!(received.borrow().len(), fired.len());
    assert!(received.borrow().iter().all(|(host, _)| *host == h0));
    // The egress metadata reports the incast queue at the ToR port toward h0.
    let tor0 = sim.topology().node_by_name("tor0").unwrap().id;
    let toward_h0 = sim
        .path_ports(fired[0].src_nic, fired[0].dst_nic, fired[0].tuple)
        .last()
        .copied()
        .unwrap();
    assert_eq!(toward_h0.node, tor0);
    assert!(max_qdepth.borrow()[&(tor0, toward_h0.port)] > 100_000);
    assert!(
        sim.take_cpu_packets().is_empty(),
        "taking empties the CPU inbox"
    );
}

const STAR: &str = r#"
version = 1
duration_us = 100
[topology]
kind = "graph"
switches = ["s0"]
hosts = ["h0", "h1", "h2", "h3"]
links = [{ a = "h0", b = "s0" }, { a = "h1", b = "s0" }, { a = "h2", b = "s0" }, { a = "h3", b = "s0" }]
"#;

fn star_with(pipeline: Observer) -> Vec<(NodeId, Vec<u8>)> {
    let loaded = Scenario::parse(STAR, "t.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let received = Rc::new(RefCell::new(Vec::new()));
    struct Sink(Inbox);
    impl HostHook for Sink {
        fn on_rtt_sample(&mut self, _: &RttSample, _: &mut Vec<HostEmit>) {}
        fn on_custom_packet(
            &mut self,
            host: NodeId,
            packet: &Packet,
            _: Time,
            _: &mut Vec<HostEmit>,
        ) {
            self.0
                .borrow_mut()
                .push((host, packet.custom_bytes().to_vec()));
        }
    }
    sim.set_host_hook(Box::new(Sink(received.clone())));
    let s0 = sim.topology().node_by_name("s0").unwrap().id;
    sim.set_pipeline(s0, Box::new(pipeline));
    let mut packet = Packet::new(PacketKind::Custom);
    packet.priority = 7;
    packet.dst_nic = 1;
    packet.custom[..2].copy_from_slice(&[7, 7]);
    packet.custom_len = 2;
    packet.size = 64;
    // The switch CPU sends it out of port 1, toward h1.
    assert!(sim.inject_from_cpu(s0, 1, packet.clone()));
    assert!(!sim.inject_from_cpu(s0, 9, packet.clone()), "no port 9");
    assert!(!sim.inject_from_cpu(0, 0, packet), "h0 is not a switch");
    sim.run_until(50_000_000);
    assert!(
        sim.take_cpu_packets().is_empty(),
        "CPU-injected packets are not mirrored back"
    );
    let got = received.borrow().clone();
    got
}

#[test]
fn cpu_injection_reaches_the_host_behind_the_port() {
    let received = star_with(Observer {
        max_qdepth: Default::default(),
        drop_custom: false,
        flood_custom: None,
    });
    assert_eq!(received, vec![(1, vec![7, 7])]);
}

#[test]
fn pipelines_can_flood_and_drop() {
    let loaded = Scenario::parse(STAR, "t.toml", ".".into()).unwrap();
    for (drop, flood, expect_hosts) in [(false, Some(4), vec![1u32, 2, 3]), (true, None, vec![])] {
        let mut sim = Simulation::new(&loaded).unwrap();
        let received = Rc::new(RefCell::new(Vec::new()));
        sim.set_host_hook(Box::new(RttTrigger {
            fired: Default::default(),
            received: received.clone(),
            done: BTreeSet::new(),
        }));
        let s0 = sim.topology().node_by_name("s0").unwrap().id;
        sim.set_pipeline(
            s0,
            Box::new(Observer {
                max_qdepth: Default::default(),
                drop_custom: drop,
                flood_custom: flood,
            }),
        );
        // h0 sends a custom packet toward h1; the switch floods or drops it.
        sim.emit_from_host(HostEmit::now(
            0,
            1,
            "11.0.0.1:49152->11.0.1.1".parse().unwrap(),
            7,
            vec![9],
        ));
        sim.run_until(50_000_000);
        let mut hosts: Vec<u32> = received.borrow().iter().map(|(h, _)| *h).collect();
        hosts.sort_unstable();
        assert_eq!(hosts, expect_hosts, "drop={drop} flood={flood:?}");
        assert_eq!(
            sim.take_cpu_packets().len(),
            1,
            "the CPU copy is made even when dropped"
        );
    }
}

/// Records stall notifications; asks for them every 20 µs.
struct StallWatch(Rc<RefCell<Vec<RttSample>>>);

impl HostHook for StallWatch {
    fn on_rtt_sample(&mut self, _: &RttSample, _: &mut Vec<HostEmit>) {}
    fn stall_interval(&self) -> Option<Time> {
        Some(20_000_000)
    }
    fn on_stall(&mut self, sample: &RttSample, _: &mut Vec<HostEmit>) {
        self.0.borrow_mut().push(*sample);
    }
}

#[test]
fn a_flow_frozen_by_pfc_is_reported_as_stalled() {
    let text = format!(
        "{STAR}[[workload]]\nkind = \"flows\"\nflows = [{{ src = \"h1\", dst = \"h0\", size_bytes = 2000000, start_us = 10 }}, {{ src = \"h2\", dst = \"h3\", size_bytes = 200000, start_us = 10 }}]\n[[fault]]\nkind = \"pfc_injection\"\nhost = \"h0\"\nstart_us = 0\nduration_us = 100\n"
    );
    let loaded = Scenario::parse(&text, "t.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let stalls = Rc::new(RefCell::new(Vec::new()));
    sim.set_host_hook(Box::new(StallWatch(stalls.clone())));
    sim.run();
    let stalls = stalls.borrow();
    // Only the frozen flow (0) stalls, first once 20 µs have passed without progress, then
    // every 20 µs while it lasts; the healthy flow (1) never does.
    assert!(!stalls.is_empty());
    assert!(stalls.iter().all(|s| s.flow == 0), "{stalls:?}");
    assert!(stalls.iter().all(|s| s.now - s.sent_at >= 20_000_000));
    assert!(
        stalls.len() >= 3,
        "the storm lasts 100 µs: {}",
        stalls.len()
    );
    assert!(
        stalls.iter().all(|s| s.now <= 200_000_000),
        "no stall after the storm ends"
    );
}

#[test]
fn a_cpu_packet_for_an_unknown_destination_is_dropped_and_counted_not_a_panic() {
    let text = r#"
version = 1
duration_us = 50
[topology]
kind = "graph"
switches = ["s0", "s1"]
hosts = ["h0"]
links = [{ a = "s0", b = "s1" }, { a = "s1", b = "h0" }]
"#;
    let loaded = Scenario::parse(text, "t.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let s0 = sim.topology().node_by_name("s0").unwrap().id;
    let mut packet = Packet::new(PacketKind::Custom);
    packet.priority = 7;
    packet.dst_nic = 999;
    packet.size = 64;
    assert!(sim.inject_from_cpu(s0, 0, packet));
    sim.run();
    let result = sim.result("t", 1, &[u64::MAX]);
    assert_eq!(result.totals.drops_no_route, 1);
}

/// A probe and its ACK as a prober and a responder would send them: the prober's periodic
/// timer sends a probe and asks for its send completion; the responder answers after a CPU
/// delay and asks for its ACK's send completion.
/// What happened, at which host, when.
type HookLog = Vec<(&'static str, NodeId, Time)>;

struct PingPong {
    log: Rc<RefCell<HookLog>>,
    sent: bool,
    cpu_delay: Time,
}

const PROBER_NIC: u32 = 0;
const RESPONDER_NIC: u32 = 5;

impl HostHook for PingPong {
    fn on_rtt_sample(&mut self, _: &RttSample, _: &mut Vec<HostEmit>) {}

    fn wakeup_interval(&self) -> Option<Time> {
        Some(50 * US)
    }

    fn on_wakeup(&mut self, now: Time, emit: &mut Vec<HostEmit>) {
        self.log.borrow_mut().push(("wakeup", u32::MAX, now));
        if !self.sent {
            self.sent = true;
            emit.push(HostEmit {
                tx_token: Some(1),
                ..HostEmit::now(
                    PROBER_NIC,
                    RESPONDER_NIC,
                    "11.0.0.1:50000->11.0.5.1:4791".parse().unwrap(),
                    6,
                    b"probe".to_vec(),
                )
            });
        }
    }

    fn on_custom_sent(&mut self, host: NodeId, token: u64, now: Time, _: &mut Vec<HostEmit>) {
        let what = if token == 1 { "probe sent" } else { "ack sent" };
        self.log.borrow_mut().push((what, host, now));
    }

    fn on_custom_packet(
        &mut self,
        host: NodeId,
        packet: &Packet,
        now: Time,
        emit: &mut Vec<HostEmit>,
    ) {
        if packet.custom_bytes() == b"probe" {
            self.log.borrow_mut().push(("probe received", host, now));
            emit.push(HostEmit {
                not_before: now + self.cpu_delay,
                tx_token: Some(2),
                ..HostEmit::now(
                    RESPONDER_NIC,
                    PROBER_NIC,
                    "11.0.5.1:50000->11.0.0.1:4791".parse().unwrap(),
                    6,
                    b"ack".to_vec(),
                )
            });
        } else {
            self.log.borrow_mut().push(("ack received", host, now));
        }
    }
}

const K4_QUIET: &str = r#"
version = 1
duration_us = 200
[topology]
kind = "fat_tree"
k = 4
"#;

fn ping_pong(cpu_delay: Time) -> HookLog {
    let loaded = Scenario::parse(K4_QUIET, "t.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let log = Rc::new(RefCell::new(Vec::new()));
    sim.set_host_hook(Box::new(PingPong {
        log: log.clone(),
        sent: false,
        cpu_delay,
    }));
    sim.run();
    let out = log.borrow().clone();
    out
}

#[test]
fn a_host_hook_gets_timers_send_completions_and_can_answer_later() {
    let log = ping_pong(7 * US);
    let at = |what: &str| {
        log.iter()
            .find(|(w, _, _)| *w == what)
            .map(|(_, host, t)| (*host, *t))
            .unwrap_or_else(|| panic!("no {what} in {log:?}"))
    };
    let wakeups: Vec<Time> = log
        .iter()
        .filter(|(w, _, _)| *w == "wakeup")
        .map(|(_, _, t)| *t)
        .collect();
    assert_eq!(&wakeups[..4], &[0, 50 * US, 100 * US, 150 * US]);
    let (prober, t2) = at("probe sent");
    let (responder, t3) = at("probe received");
    let (ack_host, t4) = at("ack sent");
    let (back, t5) = at("ack received");
    assert_ne!(prober, responder);
    assert_eq!((ack_host, back), (responder, prober));
    // ② is the probe's last bit leaving the NIC: after the wake-up that sent it.
    assert!(t2 > 0);
    // ④ comes after the responder's CPU delay.
    assert!(t4 >= t3 + 7 * US, "{t3} {t4}");
    // An idle, symmetric path: both ways take the same time, so (⑤−②) − (④−③) is twice
    // the one-way time.
    let forward = t3 - t2;
    let backward = t5 - t4;
    assert!(
        forward > US && forward.abs_diff(backward) < 50 * NS,
        "{forward} {backward}"
    );
    // Deterministic.
    assert_eq!(ping_pong(7 * US), log);
    // The CPU delay shows only in ④−③.
    let quick = ping_pong(US);
    let t = |log: &[(&str, NodeId, Time)], what: &str| {
        log.iter().find(|(w, _, _)| *w == what).unwrap().2
    };
    let quick_delay = t(&quick, "ack sent") - t(&quick, "probe received");
    assert!(
        (quick_delay + 6 * US).abs_diff(t4 - t3) < 50 * NS,
        "{quick_delay} vs {}",
        t4 - t3
    );
}
