//! Forged polling packets: the data plane refuses polling from ports the control plane did
//! not open to it and rate-limits each host-facing port; the agent bounds its own work per
//! arrival port. A flood from one host neither starves real collections nor grows memory.

use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
use hawkmesh_dataplane::packets::{self, Polling};
use hawkmesh_dataplane::setup::{configure_model, configure_polling_ports};
use hawkmesh_switch_agent::{
    AgentConfig, CpuFrame, CpuFrameKind, Geometry, ModelBackend, SwitchAgent,
};
use hawkmesh_wire::telemetry::FiveTuple;
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::rc::Rc;
use std::sync::Arc;

const PORTS: usize = 8;
const CPU_PORT: u16 = 100;
/// Hosts on ports 0 and 1; ports 2..8 lead to switches.
const HOSTS: [u16; 2] = [0, 1];
const WINDOW_NS: u64 = 1 << 20;

struct Switch {
    program: Arc<Program>,
    model: Rc<RefCell<Model>>,
}

impl Switch {
    fn new(per_window: u32) -> Switch {
        let params = HawkeyeParams {
            ports: PORTS as u32,
            epochs: 4,
            epoch_log2_ns: 16,
            flow_slots: 64,
            cpu_port: CPU_PORT,
            sketch: None,
            polling_window_log2_ns: 20,
            polling_per_window: per_window,
            ..HawkeyeParams::default()
        };
        let program = Arc::new(program(&params).expect("program"));
        let mut model = Model::new(program.clone(), Routing::FromInput, CPU_PORT).expect("model");
        configure_model(&mut model, "tor", &[100.0; PORTS]).expect("configure");
        configure_polling_ports(&mut model, &HOSTS).expect("host ports");
        Switch {
            program,
            model: Rc::new(RefCell::new(model)),
        }
    }

    /// A polling packet of `event` in by `port` at `t`: its CPU copies.
    fn poll(&self, event: u64, port: u16, t: u64) -> Vec<Vec<u8>> {
        let victim = FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 1, 1]);
        let bytes = packets::polling_packet(&self.program, &Polling::new(event, victim, 8));
        self.model
            .borrow_mut()
            .process(
                &bytes,
                &IngressInput {
                    ingress_port: port,
                    tstamp_ns: t,
                    routed_egress_port: Some(3),
                },
                7,
            )
            .expect("process")
            .cpu
    }

    fn refused(&self, port: usize) -> u64 {
        self.model
            .borrow()
            .register_read_all("polling_refused")
            .expect("polling_refused")[port]
    }
}

#[test]
fn polling_is_refused_from_closed_ports_and_rate_limited_per_host_port() {
    let switch = Switch::new(16);
    let t0 = 10 * WINDOW_NS;
    // A host floods 1000 distinct events within one window: 16 pass, the rest are counted.
    let mut copies = 0;
    for i in 0..1000u64 {
        copies += switch.poll(1_000_000 + i, 1, t0 + i * 50).len();
        if i == 500 {
            // Meanwhile the other host's real event is not held back by the flood.
            assert_eq!(
                switch.poll(7, 0, t0 + i * 50 + 10).len(),
                1,
                "port 0's own share"
            );
        }
    }
    assert_eq!(copies, 16, "the flooding port's window");
    assert_eq!(switch.refused(1), 984);
    assert_eq!(switch.refused(0), 0);
    // Polling from the fabric (another switch) is not limited.
    let fabric: usize = (0..100u64)
        .map(|i| switch.poll(2_000_000 + i, 5, t0 + i * 50).len())
        .sum();
    assert_eq!(fabric, 100);
    // A port the control plane has not opened to polling refuses it.
    switch
        .model
        .borrow_mut()
        .table_delete("polling_port", &[6], &[], 0)
        .expect("delete");
    assert!(switch.poll(3_000_000, 6, t0).is_empty());
    assert_eq!(switch.refused(6), 1);
    // The next window gives the flooding port its share again.
    assert_eq!(switch.poll(4_000_000, 1, t0 + WINDOW_NS).len(), 1);
}

#[test]
fn a_flood_from_one_host_neither_starves_real_collections_nor_grows_the_agents_memory() {
    let switch = Switch::new(64);
    let mut config = AgentConfig::new(3);
    config.geometry = Geometry {
        ports: PORTS as u32,
        epochs: 4,
        epoch_log2_ns: 16,
        flow_slots: 64,
        qdepth_unit_bytes: 80,
    };
    config.gather_ns = 0;
    // A switch CPU that takes 2,000 new events per second per arrival port (burst 256),
    // below what the data plane lets through from one host (64 per 2^20 ns): the agent's
    // own bound is met. (The defaults are generous enough for a real fabric-wide
    // incident's events to arrive by one fabric port.)
    config.events_per_port_per_sec = 2_000;
    config.event_burst = 256;
    let mut agent = SwitchAgent::new(config, ModelBackend::new(switch.model.clone()));

    // 20 ms: a forger on port 1 sends a new event every µs (20,000); the real host on port
    // 0 polls once a millisecond (20 events).
    let t0 = 10 * WINDOW_NS;
    let mut real = BTreeSet::new();
    let mut reported_real = BTreeSet::new();
    let mut forged_reported = 0u64;
    let mut most_waiting = 0;
    for us in 0..20_000u64 {
        let t = t0 + us * 1_000;
        let mut copies = switch.poll(10_000_000 + us, 1, t);
        if us % 1_000 == 500 {
            real.insert(us);
            copies.extend(switch.poll(us, 0, t + 100));
        }
        for copy in copies {
            agent.backend_mut().deliver_cpu(CpuFrame {
                time_ns: t,
                kind: CpuFrameKind::of(&copy),
                bytes: copy,
            });
        }
        most_waiting = most_waiting.max(agent.waiting());
        if us % 10 == 0 {
            for c in agent.poll(t + 1_000).expect("poll") {
                if real.contains(&c.event_id) {
                    reported_real.insert(c.event_id);
                } else {
                    forged_reported += 1;
                }
            }
        }
    }
    for c in agent.flush(t0 + 21 * WINDOW_NS).expect("flush") {
        if real.contains(&c.event_id) {
            reported_real.insert(c.event_id);
        } else {
            forged_reported += 1;
        }
    }
    assert_eq!(reported_real, real, "every real event is collected");
    let stats = agent.stats();
    // The data plane let through at most 64 per window of the forger's 20,000 …
    let windows = 20_000 * 1_000 / WINDOW_NS + 1;
    assert!(
        stats.polling_copies <= 20 + 64 * windows,
        "{} polling copies",
        stats.polling_copies
    );
    // … and the agent took at most its per-port burst plus 20 ms of its per-port rate.
    let budget = 256 + 2_000 / 50;
    assert!(
        forged_reported <= budget,
        "{forged_reported} forged reports"
    );
    assert!(stats.refused_events > 0, "the flood met the agent's budget");
    assert_eq!(
        stats.polling_copies,
        stats.reports + stats.refused_events,
        "every copy is reported or counted as refused"
    );
    assert!(
        most_waiting <= 64,
        "waiting events stay few: {most_waiting}"
    );
    assert_eq!(
        switch.refused(1) + (stats.polling_copies - 20),
        20_000,
        "the data plane counted every forged packet it refused"
    );
}
