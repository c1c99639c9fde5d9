//! The agent on the executable model: packets go through the model, the agent reads its
//! registers when a polling copy reaches the CPU port.

use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
use hawkmesh_dataplane::packets::{self, Polling};
use hawkmesh_switch_agent::{
    AgentConfig, CpuFrame, CpuFrameKind, Geometry, ModelBackend, SwitchAgent,
};
use hawkmesh_wire::polling::TRACE_PFC_CAUSALITY;
use hawkmesh_wire::telemetry::{decode_reports, FiveTuple, TraceFlags};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

const PORTS: u32 = 8;
const EPOCH_LOG2: u8 = 12; // 4096 ns epochs
const CPU_PORT: u16 = 100;

fn params(flow_slots: u32) -> HawkeyeParams {
    HawkeyeParams {
        ports: PORTS,
        epochs: 4,
        epoch_log2_ns: EPOCH_LOG2,
        flow_slots,
        dedupe_slots: 64,
        dedupe_interval_units: 100,
        cpu_port: CPU_PORT,
        sketch: None,
        ..HawkeyeParams::default()
    }
}

struct Bench {
    program: Arc<Program>,
    model: Rc<RefCell<Model>>,
    agent: SwitchAgent<ModelBackend<Model>>,
}

impl Bench {
    fn new(flow_slots: u32) -> Self {
        // Read at once unless a test gathers later arrivals of an event.
        Self::gathering(flow_slots, 0)
    }

    fn gathering(flow_slots: u32, gather_ns: u64) -> Self {
        let params = params(flow_slots);
        let program = Arc::new(program(&params).unwrap());
        let mut model = Model::new(program.clone(), Routing::FromInput, CPU_PORT).unwrap();
        // The control plane's start-up entries: port speeds, port masks, multicast group.
        hawkmesh_dataplane::setup::configure_model(&mut model, "s", &[100.0; PORTS as usize])
            .unwrap();
        let model = Rc::new(RefCell::new(model));
        let mut config = AgentConfig::new(7);
        config.geometry = Geometry {
            ports: params.ports,
            epochs: params.epochs,
            epoch_log2_ns: params.epoch_log2_ns,
            flow_slots: params.flow_slots,
            qdepth_unit_bytes: 80,
        };
        config.chunk_bytes = 256;
        config.gather_ns = gather_ns;
        let agent = SwitchAgent::new(config, ModelBackend::new(model.clone()));
        Bench {
            program,
            model,
            agent,
        }
    }

    /// Runs a packet through the whole switch; CPU copies go to the agent.
    fn send(&mut self, bytes: &[u8], port: u16, to: Option<u16>, queue: u8, t: u64) -> usize {
        let out = self
            .model
            .borrow_mut()
            .process(
                bytes,
                &IngressInput {
                    ingress_port: port,
                    tstamp_ns: t,
                    routed_egress_port: to,
                },
                queue,
            )
            .unwrap();
        for copy in &out.cpu {
            let kind = CpuFrameKind::of(copy);
            self.agent.backend_mut().deliver_cpu(CpuFrame {
                time_ns: t,
                kind,
                bytes: copy.clone(),
            });
        }
        out.cpu.len()
    }

    fn data(&mut self, flow: &FiveTuple, from: u16, to: u16, t: u64) {
        // DSCP 26: priority 3 (DSCP >> 3).
        let bytes = packets::rocev2_data(&self.program, flow, 26, 3, 64, 1, 1062);
        self.send(&bytes, from, Some(to), 3, t);
    }

    fn pause(&mut self, port: u16, t: u64) {
        let frame = packets::pfc_frame(1 << 3, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]);
        self.send(&frame, port, None, 7, t);
    }

    fn resume(&mut self, port: u16, t: u64) {
        let frame = packets::pfc_frame(1 << 3, [0; 8]);
        self.send(&frame, port, None, 7, t);
    }

    fn poll(&mut self, event: u64, victim: FiveTuple, from: u16, to: u16, t: u64) {
        let polling = Polling::new(event, victim, 8);
        let bytes = packets::polling_packet(&self.program, &polling);
        self.send(&bytes, from, Some(to), 7, t);
    }

    /// A polling packet on a PFC branch (only the PFC-causality flag) arriving by `from`;
    /// returns the CPU copies the data plane made.
    fn poll_pfc(&mut self, event: u64, victim: FiveTuple, from: u16, t: u64) -> usize {
        let mut polling = Polling::new(event, victim, 8);
        polling.trace_flag = TRACE_PFC_CAUSALITY;
        let bytes = packets::polling_packet(&self.program, &polling);
        self.send(&bytes, from, None, 7, t)
    }
}

fn flow(n: u8, port: u16) -> FiveTuple {
    FiveTuple::rocev2([10, 0, 0, n], port, [10, 0, 1, 1])
}

#[test]
fn a_polling_copy_yields_the_epochs_ports_meters_and_flows_of_the_switch() {
    let mut bench = Bench::new(64);
    let victim = flow(1, 49152);
    let other = flow(2, 49153);
    // Port 5 is paused on priority 3 from t = 100 ns; both flows enter on ports 1 and 2.
    bench.pause(5, 100);
    for i in 0..10 {
        bench.data(&victim, 1, 5, 200 + i * 100);
        bench.data(&other, 2, 5, 250 + i * 100);
    }
    bench.poll(0xABCDEF, victim, 1, 5, 3_000);
    let collections = bench.agent.poll(3_000).unwrap();
    assert_eq!(collections.len(), 1);
    let c = &collections[0];
    assert!(c.read_registers && c.cost.registers >= 17);
    assert!(c.chunks.len() > 1, "chunks are cut at 256 bytes");
    // The chunks decode to the same report.
    let joined: Vec<u8> = c.chunks.concat();
    let decoded = decode_reports(&joined).unwrap();
    assert_eq!(decoded, vec![c.report.clone()]);
    let report = &c.report;
    assert_eq!(
        (report.switch, report.event_id, report.epoch_ns),
        (7, 0xABCDEF, 4096)
    );
    assert_eq!(report.epochs.len(), 1, "only the epoch with traffic");
    let epoch = &report.epochs[0];
    assert_eq!(epoch.start_ns, 0);
    let port5 = epoch.ports.iter().find(|p| p.port == 5).unwrap();
    assert_eq!((port5.packet_count, port5.paused_packet_count), (20, 20));
    let meter = |i| {
        epoch
            .meters
            .iter()
            .find(|m| m.ingress_port == i && m.egress_port == 5)
            .map(|m| m.bytes)
    };
    // The meter counts frames with their FCS (IP total length + 18).
    assert_eq!((meter(1), meter(2)), (Some(10 * 1066), Some(10 * 1066)));
    let v = epoch.flows.iter().find(|f| f.flow == victim).unwrap();
    assert_eq!(
        (v.egress_port, v.packet_count, v.paused_packet_count),
        (5, 10, 10)
    );
    assert!(v.last_enqueue_offset_ns > v.first_enqueue_offset_ns);
    assert!(epoch.flows.iter().any(|f| f.flow == other));
    // Polling context: arrived on port 1 along the victim path, which leaves by the paused
    // port 5, so the PFC bit is added there.
    assert_eq!(report.polling.ingress_port, 1);
    assert_eq!(report.polling.victim, victim);
    assert_eq!(report.polling.egress.len(), 1);
    assert_eq!(report.polling.egress[0].port, 5);
    assert_eq!(report.polling.egress[0].reason, TraceFlags::BOTH);
}

#[test]
fn xons_a_port_received_reach_its_record_even_without_packets() {
    let mut bench = Bench::new(64);
    let victim = flow(1, 49152);
    // Port 5 (the victim's egress) is paused and resumed twice by its receiver; port 6 is
    // paused and resumed once while nothing is enqueued there.
    for k in 0..2 {
        bench.pause(5, 100 + k * 400);
        bench.data(&victim, 1, 5, 200 + k * 400);
        bench.resume(5, 300 + k * 400);
    }
    bench.pause(6, 1_000);
    bench.resume(6, 1_200);
    bench.poll(77, victim, 1, 5, 3_000);
    let collections = bench.agent.poll(3_000).unwrap();
    let report = &collections[0].report;
    let epoch = &report.epochs[0];
    let port = |p: u16| epoch.ports.iter().find(|r| r.port == p).copied().unwrap();
    assert_eq!((port(5).packet_count, port(5).xon_count), (2, 2));
    assert_eq!((port(6).packet_count, port(6).xon_count), (0, 1));
    assert!(epoch.ports.iter().all(|r| r.port == 5 || r.port == 6));
    // The binary chunks carry the counts.
    let decoded = decode_reports(&collections[0].chunks.concat()).unwrap();
    assert_eq!(decoded, vec![report.clone()]);
}

#[test]
fn one_register_read_per_guard_interval_never_older_than_the_event_and_each_event_once() {
    let mut bench = Bench::new(64);
    let victim = flow(1, 49152);
    let late = flow(3, 49160);
    bench.data(&victim, 1, 5, 100);
    bench.poll(1, victim, 1, 5, 1_000);
    let first = bench.agent.poll(1_000).unwrap();
    assert_eq!(first.len(), 1);
    assert!(first[0].read_registers);
    // Within the guard: events 2 and 3 wait for the next read; the repeat of
    // event 1 is not reported again (the data plane's dedupe or the agent's).
    bench.poll(2, flow(9, 7), 2, 5, 2_000);
    bench.poll(1, victim, 1, 5, 3_000);
    bench.poll(3, victim, 1, 5, 4_000);
    assert!(
        bench.agent.poll(4_000).unwrap().is_empty(),
        "the guard holds"
    );
    assert_eq!(bench.agent.waiting(), 2);
    // Traffic after the events arrived is in the read that serves them: a read reused
    // from before (the artifact's way) would miss it.
    bench.data(&late, 2, 6, 8_000);
    assert!(bench.agent.poll(10_000).unwrap().is_empty());
    // 4096 ns epochs × 4: epoch 0 (the events') leaves the ring at 16384 ns, so the read
    // happens in the last epoch that still holds it, long before the guard ends.
    let served = bench.agent.poll(12_288).unwrap();
    assert_eq!(served.len(), 2);
    assert_eq!(
        served.iter().map(|c| c.event_id).collect::<Vec<_>>(),
        vec![2, 3]
    );
    assert!(served[0].read_registers && !served[1].read_registers);
    assert_eq!((served[0].time_ns, served[0].read_ns), (2_000, 12_288));
    for collection in &served {
        let flows: Vec<FiveTuple> = collection
            .report
            .epochs
            .iter()
            .flat_map(|e| e.flows.iter().map(|f| f.flow))
            .collect();
        assert!(
            flows.contains(&late) && flows.contains(&victim),
            "{flows:?}"
        );
    }
    // After the guard, a new event is read at once; one within the guard waits until the
    // agent stops, and is then served, not dropped.
    bench.poll(4, victim, 1, 5, 600_000);
    assert_eq!(bench.agent.poll(600_000).unwrap().len(), 1);
    bench.poll(5, victim, 1, 5, 600_100);
    assert!(bench.agent.poll(600_100).unwrap().is_empty());
    let flushed = bench.agent.flush(600_200).unwrap();
    assert_eq!(flushed.len(), 1);
    assert_eq!(flushed[0].event_id, 5);
    let stats = bench.agent.stats();
    assert_eq!(
        (stats.register_reads, stats.reports),
        (4, 5),
        "event 1 once"
    );
}

#[test]
fn an_event_coming_back_by_another_port_joins_its_report_with_that_ports_pfc_branch() {
    // Around a routing loop the polling packet comes back into a switch by another port;
    // the PFC branch the data plane takes from there (to the paused port that ingress
    // feeds) is what closes a frozen loop, so it must reach the analyzer even though the
    // event already has a report on its way.
    let mut bench = Bench::gathering(64, 30_000);
    let victim = flow(1, 49152);
    let looping = flow(2, 49153);
    bench.data(&victim, 1, 4, 100);
    bench.data(&looping, 2, 5, 200);
    bench.pause(5, 300);
    bench.poll(1, victim, 1, 4, 1_000);
    assert!(
        bench.agent.poll(1_000).unwrap().is_empty(),
        "the first copy waits for the event's other arrivals"
    );
    assert_eq!(bench.poll_pfc(1, victim, 2, 9_000), 1);
    assert_eq!(
        bench.poll_pfc(1, victim, 2, 9_500),
        0,
        "the data plane drops a repeat by the same port"
    );
    let served = bench.agent.poll(31_000).unwrap();
    assert_eq!(served.len(), 1);
    let report = &served[0].report;
    assert_eq!(report.polling.ingress_port, 1);
    assert_eq!(report.more_polling.len(), 1, "{report:?}");
    let later = &report.more_polling[0];
    assert_eq!(later.ingress_port, 2);
    assert!(
        later
            .egress
            .iter()
            .any(|e| e.port == 5 && e.reason.pfc_causality()),
        "{later:?}"
    );
    // The chunks carry both contexts.
    let decoded = decode_reports(&served[0].chunks.concat()).unwrap();
    assert_eq!(decoded[0].more_polling, report.more_polling);
    // A copy after the read (by a third port) is counted, not reported again.
    assert_eq!(bench.poll_pfc(1, victim, 3, 40_000), 1);
    assert!(bench.agent.poll(200_000).unwrap().is_empty());
    let stats = bench.agent.stats();
    assert_eq!(
        (stats.reports, stats.later_arrivals, stats.duplicate_events),
        (1, 1, 1)
    );
}

#[test]
fn stale_slots_from_an_earlier_lap_of_the_ring_are_not_reported() {
    let mut bench = Bench::new(64);
    let old = flow(1, 1000);
    let new = flow(2, 2000);
    bench.data(&old, 1, 5, 100); // epoch 0, slot 0
                                 // Four epochs later (one lap): epoch 4 uses slot 0 again, untouched by traffic so far.
    bench.data(&new, 2, 6, 4 * 4096 + 1_000); // epoch 4, slot 0 for port 6 only
    bench.poll(9, new, 2, 6, 4 * 4096 + 2_000);
    let report = bench.agent.poll(4 * 4096 + 2_000).unwrap().remove(0).report;
    let flows: Vec<FiveTuple> = report
        .epochs
        .iter()
        .flat_map(|e| e.flows.iter().map(|f| f.flow))
        .collect();
    assert!(flows.contains(&new));
    assert!(!flows.contains(&old), "epoch 0 is older than the ring");
    assert!(report.epochs.iter().all(|e| e.epoch_id >= 1));
}

#[test]
fn evicted_flows_reach_the_report_flagged() {
    // Two flow slots per epoch: three flows must collide.
    let mut bench = Bench::new(2);
    let flows: Vec<FiveTuple> = (0..6).map(|i| flow(10 + i, 3000 + u16::from(i))).collect();
    for (i, f) in flows.iter().enumerate() {
        bench.data(f, 1, 5, 100 + i as u64 * 10);
        bench.data(f, 1, 5, 105 + i as u64 * 10);
    }
    bench.poll(5, flows[0], 1, 5, 2_000);
    let report = bench.agent.poll(2_000).unwrap().remove(0).report;
    let records: Vec<_> = report.epochs.iter().flat_map(|e| e.flows.iter()).collect();
    let total: u32 = records.iter().map(|r| r.packet_count).sum();
    assert_eq!(
        total, 12,
        "every packet is in a live or evicted record: {records:?}"
    );
    assert!(records.iter().any(|r| r.evicted));
    assert!(bench.agent.stats().evictions > 0);
}
