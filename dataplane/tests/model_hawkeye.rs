//! Packet-sequence tests of the hawkmesh program on the executable model, one group per
//! module: PFC status, epoch ring, port / flow telemetry, causality meter, polling, Elastic
//! Sketch.

use std::sync::Arc;

use hawkmesh_dataplane::hawkeye::{self, program, HawkeyeParams, SketchParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{
    Carried, DataPlane, EgressInput, Forward, IngressInput, Model, PassOutput, Routing,
};
use hawkmesh_dataplane::packets::{self, Polling};
use hawkmesh_dataplane::setup::configure_model;
use hawkmesh_dataplane::sketch::{fingerprint, ElasticReference, SketchDump, SketchGeometry};
use hawkmesh_wire::telemetry::FiveTuple;

const PORTS: u64 = 8;
const EPOCH_LOG2: u8 = 10; // 1024 ns epochs: easy to cross in tests

fn params() -> HawkeyeParams {
    HawkeyeParams {
        ports: PORTS as u32,
        epochs: 2,
        epoch_log2_ns: EPOCH_LOG2,
        flow_slots: 16,
        dedupe_slots: 64,
        dedupe_interval_units: 100, // ≈ 102 µs
        cpu_port: 100,
        sketch: Some(SketchParams {
            heavy_buckets: 16,
            light_counters: 64,
            lambda: 8,
        }),
        ..HawkeyeParams::default()
    }
}

struct Switch {
    model: Model,
    program: Arc<Program>,
}

impl Switch {
    fn new() -> Self {
        Self::with_params(&params())
    }

    fn with_params(params: &HawkeyeParams) -> Self {
        let program = Arc::new(program(params).expect("program builds"));
        let mut model =
            Model::new(program.clone(), Routing::FromInput, params.cpu_port).expect("model");
        // The control plane's start-up entries: port speeds, port masks, multicast group.
        configure_model(&mut model, "s", &vec![100.0; params.ports as usize]).expect("configure");
        Switch { model, program }
    }

    fn pfc(&mut self, port: u16, t: u64, vector: u8, quanta: [u16; 8]) {
        let frame = packets::pfc_frame(vector, quanta);
        let mut out = PassOutput::default();
        let input = IngressInput {
            ingress_port: port,
            tstamp_ns: t,
            routed_egress_port: None,
        };
        self.model
            .ingress(&frame, &input, &mut out)
            .expect("ingress");
        assert!(out.dropped, "PFC frames are consumed in ingress");
    }

    /// A data packet enqueued (ingress only: it is still queued, e.g. behind a PAUSE).
    fn enqueue(
        &mut self,
        tuple: &FiveTuple,
        in_port: u16,
        out_port: u16,
        queue: u8,
        t: u64,
        len: u16,
    ) -> PassOutput {
        // DSCP carries the priority (priority = DSCP >> 3); the frame is `len` bytes with
        // its FCS.
        let bytes = packets::rocev2_data(
            &self.program,
            tuple,
            queue << 3 | 2,
            2,
            64,
            1,
            len as usize - 4,
        );
        let mut ing = PassOutput::default();
        self.model
            .ingress(
                &bytes,
                &IngressInput {
                    ingress_port: in_port,
                    tstamp_ns: t,
                    routed_egress_port: Some(out_port),
                },
                &mut ing,
            )
            .expect("ingress");
        assert_eq!(ing.forward, Forward::Unicast(out_port));
        ing
    }

    /// A data packet enqueued at `out_port`/`queue` at time `t`; returns the egress output.
    #[allow(clippy::too_many_arguments)]
    fn data(
        &mut self,
        tuple: &FiveTuple,
        in_port: u16,
        out_port: u16,
        queue: u8,
        t: u64,
        qdepth: u32,
        len: u16,
    ) -> PassOutput {
        let ing = self.enqueue(tuple, in_port, out_port, queue, t, len);
        let mut eg = PassOutput::default();
        let e = EgressInput {
            ingress_port: in_port,
            egress_port: out_port,
            queue,
            enq_tstamp_ns: t,
            enq_qdepth: qdepth,
            packet_length: len,
        };
        self.model
            .egress(&ing.bytes, &e, &ing.bridged, &mut eg)
            .expect("egress");
        eg
    }

    fn reg(&self, name: &str, index: u64) -> u64 {
        self.model.register_read(name, index).expect("register")
    }

    fn epoch_index(t: u64) -> u64 {
        (t >> EPOCH_LOG2) & 1
    }

    fn port_cell(t: u64, port: u64) -> u64 {
        Self::epoch_index(t) * PORTS + port
    }
}

fn tuple(src: u8, sport: u16) -> FiveTuple {
    FiveTuple::rocev2([10, 0, 0, src], sport, [10, 0, 1, 1])
}

#[test]
fn pfc_quanta_expire_and_xon_resumes_per_priority() {
    let mut sw = Switch::new();
    // Priority 3 paused for 100 quanta at 100G = 512 ns (1.28125 approximation: 512 ns).
    sw.pfc(2, 10_000, 1 << 3, [0, 0, 0, 100, 0, 0, 0, 0]);
    assert_eq!(sw.reg("pause_end_p3", 2), 10_512);
    let flow = tuple(1, 49152);
    let t0 = 10_100;
    sw.data(&flow, 0, 2, 3, t0, 5, 1000); // paused (priority 3)
    sw.data(&flow, 0, 2, 2, t0 + 10, 5, 1000); // priority 2 is not paused
    sw.data(&flow, 0, 2, 3, 10_600, 5, 1000); // after expiry (same epoch? 10_600>>10 = 10 vs 9)
    let cell = Switch::port_cell(t0, 2);
    assert_eq!(sw.reg("port_packets", cell), 2);
    assert_eq!(
        sw.reg("port_paused_packets", cell),
        1,
        "only the priority-3 packet before expiry is paused"
    );
    let later = Switch::port_cell(10_600, 2);
    assert_ne!(later, cell);
    assert_eq!(sw.reg("port_packets", later), 1);
    assert_eq!(
        sw.reg("port_paused_packets", later),
        0,
        "the pause expired at 10_512 ns"
    );
    // XON (quanta 0) ends a long pause at once.
    sw.pfc(5, 20_000, 1 << 1, [0, 0xFFFF, 0, 0, 0, 0, 0, 0]);
    sw.data(&flow, 0, 5, 1, 20_100, 0, 1000);
    sw.pfc(5, 20_200, 1 << 1, [0; 8]);
    sw.data(&flow, 0, 5, 1, 20_300, 0, 1000);
    let cell = Switch::port_cell(20_100, 5);
    assert_eq!(sw.reg("port_packets", cell), 2);
    assert_eq!(
        sw.reg("port_paused_packets", cell),
        1,
        "XON resumes: the second packet is not paused"
    );
    // A frame with the class disabled changes nothing.
    sw.pfc(6, 30_000, 0, [500; 8]);
    assert_eq!(sw.reg("pause_end_p0", 6), 0);
    assert_eq!(sw.reg("port_xon", Switch::port_cell(30_000, 6)) >> 32, 0);
}

#[test]
fn xon_frames_are_counted_per_port_and_epoch() {
    let mut sw = Switch::new();
    // A receiver pausing and resuming its port: XOFF, XON, XOFF, XON in one epoch.
    for (i, t) in [20_000u64, 20_100, 20_200, 20_300].into_iter().enumerate() {
        let quanta = if i % 2 == 0 { 0xFFFF } else { 0 };
        sw.pfc(5, t, 1 << 3, [0, 0, 0, quanta, 0, 0, 0, 0]);
    }
    let cell = Switch::port_cell(20_000, 5);
    assert_eq!(sw.reg("port_xon", cell) >> 32, 2, "two XONs at port 5");
    assert_eq!(sw.reg("port_xon", Switch::port_cell(20_000, 4)) >> 32, 0);
    // The next lap of the same ring slot starts the count over.
    let next_lap = 20_000 + 2 * (1 << EPOCH_LOG2);
    assert_eq!(Switch::port_cell(next_lap, 5), cell);
    sw.pfc(5, next_lap, 1 << 3, [0; 8]);
    assert_eq!(
        sw.reg("port_xon", cell) >> 32,
        1,
        "a new epoch counts from 1"
    );
    // An XOFF counts nothing.
    sw.pfc(7, 20_000, 1 << 3, [0xFFFF; 8]);
    assert_eq!(sw.reg("port_xon", Switch::port_cell(20_000, 7)) >> 32, 0);
}

#[test]
fn pauses_are_judged_across_the_32_bit_wrap_of_the_ns_clock() {
    // The pause end is kept in 32 bits. 3 s after boot, a never-written end (0) and an end
    // from 2.2 s earlier both read as "ahead" of now in two's complement: neither is a pause.
    let mut sw = Switch::new();
    let flow = tuple(1, 49152);
    let t = 3_000_000_000u64;
    sw.data(&flow, 0, 2, 3, t, 5, 1000);
    let cell = Switch::port_cell(t, 2);
    assert_eq!(sw.reg("port_packets", cell), 1);
    assert_eq!(
        sw.reg("port_paused_packets", cell),
        0,
        "a never-paused port is not paused after 2^31 ns"
    );
    sw.pfc(4, 800_000_000, 1 << 3, [0, 0, 0, 100, 0, 0, 0, 0]);
    sw.data(&flow, 0, 4, 3, t + 100, 5, 1000);
    assert_eq!(
        sw.reg("port_paused_packets", Switch::port_cell(t + 100, 4)),
        0
    );
    // A real pause right now still counts, with the clock past the wrap (2^32 ns).
    let late = (1u64 << 32) + 5_000;
    sw.pfc(6, late, 1 << 3, [0, 0, 0, 100, 0, 0, 0, 0]);
    sw.data(&flow, 0, 6, 3, late + 100, 5, 1000);
    assert_eq!(
        sw.reg("port_paused_packets", Switch::port_cell(late + 100, 6)),
        1
    );
}

#[test]
fn port_telemetry_sums_and_epoch_wrap_resets_stale_slots() {
    let mut sw = Switch::new();
    let flow = tuple(1, 49152);
    // Epoch 0 (t in 0..1024): two packets with queue depths 10 and 30.
    sw.data(&flow, 1, 3, 0, 100, 10, 500);
    sw.data(&flow, 1, 3, 0, 200, 30, 700);
    let cell = Switch::port_cell(100, 3);
    assert_eq!(sw.reg("port_packets", cell), 2);
    assert_eq!(sw.reg("port_qdepth_sum", cell), 40);
    assert_eq!(sw.reg("port_unpaused_qdepth_sum", cell), 40);
    assert_eq!(
        sw.reg(
            "meter_bytes",
            Switch::epoch_index(100) * PORTS * PORTS + PORTS + 3
        ),
        1200
    );
    // Two epochs later the ring slot is reused: the first touch resets it.
    let t2 = 100 + 2 * 1024;
    assert_eq!(Switch::port_cell(t2, 3), cell);
    sw.data(&flow, 1, 3, 0, t2, 7, 300);
    assert_eq!(
        sw.reg("port_packets", cell),
        1,
        "stale slot reset on first touch"
    );
    assert_eq!(sw.reg("port_qdepth_sum", cell), 7);
    assert_eq!(
        sw.reg("port_epoch", cell),
        (t2 >> (EPOCH_LOG2 + 1)) & 0xFFFF
    );
    assert_eq!(
        sw.reg(
            "meter_bytes",
            Switch::epoch_index(t2) * PORTS * PORTS + PORTS + 3
        ),
        300
    );
    // The other epoch slot was never touched.
    assert_eq!(sw.reg("port_packets", Switch::port_cell(1100, 3)), 0);
}

#[test]
fn causality_meter_counts_bytes_per_port_pair() {
    let mut sw = Switch::new();
    sw.data(&tuple(1, 1), 1, 3, 0, 100, 0, 1000);
    sw.data(&tuple(2, 2), 1, 3, 0, 110, 0, 500);
    sw.data(&tuple(3, 3), 2, 3, 0, 120, 0, 64);
    sw.data(&tuple(4, 4), 1, 4, 0, 130, 0, 100);
    let base = Switch::epoch_index(100) * PORTS * PORTS;
    assert_eq!(sw.reg("meter_bytes", base + PORTS + 3), 1500);
    assert_eq!(sw.reg("meter_bytes", base + 2 * PORTS + 3), 64);
    assert_eq!(sw.reg("meter_bytes", base + PORTS + 4), 100);
    assert_eq!(sw.reg("meter_bytes", base + 3 * PORTS + 1), 0);
}

fn flow_slot(sw: &Switch, t: &FiveTuple) -> u64 {
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&t.src_ip);
    bytes.extend_from_slice(&t.dst_ip);
    bytes.extend_from_slice(&t.src_port.to_be_bytes());
    bytes.extend_from_slice(&t.dst_port.to_be_bytes());
    let _ = sw;
    (hawkmesh_dataplane::hash::crc32(&bytes) & 15) as u64
}

#[test]
fn flow_telemetry_counts_and_collision_evicts_to_cpu() {
    let mut sw = Switch::new();
    let a = tuple(1, 49152);
    let slot = flow_slot(&sw, &a);
    // Find another flow hashing to the same slot.
    let b = (1u16..u16::MAX)
        .map(|p| tuple(2, p))
        .find(|t| flow_slot(&sw, t) == slot)
        .expect("a colliding flow exists among 65535 ports");
    sw.pfc(3, 0, 1, [1000, 0, 0, 0, 0, 0, 0, 0]);
    let e1 = sw.data(&a, 0, 3, 0, 100, 50, 1000); // paused
    assert!(e1.clone.is_none());
    sw.pfc(3, 150, 1, [0; 8]);
    sw.data(&a, 0, 3, 0, 200, 20, 1000);
    sw.data(&a, 0, 3, 0, 300, 30, 1000);
    let idx = Switch::epoch_index(100) * 16 + slot;
    assert_eq!(sw.reg("flow_packets", idx), 3);
    assert_eq!(sw.reg("flow_paused_packets", idx), 1);
    assert_eq!(sw.reg("flow_unpaused_qdepth_sum", idx), 50);
    assert_eq!(sw.reg("flow_first_offset", idx), 100);
    assert_eq!(sw.reg("flow_last_offset", idx), 300);
    assert_eq!(sw.reg("flow_egress_port", idx), 3);
    // The colliding flow takes the slot; the old one leaves as an egress clone.
    let out = sw.data(&b, 0, 3, 0, 400, 0, 1000);
    let carried = out.clone.expect("eviction clones to the CPU");
    let mut cpu = PassOutput::default();
    let e = EgressInput {
        ingress_port: 0,
        egress_port: 100,
        queue: 0,
        enq_tstamp_ns: 400,
        enq_qdepth: 0,
        packet_length: 0,
    };
    sw.model
        .egress(&out.clone_bytes, &e, &carried, &mut cpu)
        .expect("clone egress");
    let p = &sw.program;
    let r = |f: &str| packets::read_field(p, &cpu.bytes, 0, "eviction", f).expect("field");
    assert_eq!(r("packets"), 3);
    assert_eq!(r("paused_packets"), 1);
    assert_eq!(r("unpaused_qdepth_sum"), 50);
    assert_eq!(r("first_offset_ns"), 100);
    assert_eq!(r("last_offset_ns"), 300);
    assert_eq!(r("src_port"), 49152);
    assert_eq!(r("dst_port"), 4791);
    assert_eq!(r("src_addr"), u32::from_be_bytes([10, 0, 0, 1]) as u64);
    assert_eq!(r("egress_port"), 3);
    assert_eq!(sw.reg("flow_packets", idx), 1);
    assert_eq!(
        sw.reg("flow_key_src", idx),
        u32::from_be_bytes([10, 0, 0, 2]) as u64
    );
    // A flow in a stale slot of an older epoch is not reported (it was collectable then).
    let later = sw.data(&a, 0, 3, 0, 400 + 2 * 1024, 0, 1000);
    assert!(later.clone.is_none(), "stale slots are reset, not evicted");
}

fn polling_in(
    sw: &mut Switch,
    p: &Polling,
    in_port: u16,
    t: u64,
    routed: Option<u16>,
) -> hawkmesh_dataplane::model::SwitchOutput {
    let bytes = packets::polling_packet(&sw.program, p);
    sw.model
        .process(
            &bytes,
            &IngressInput {
                ingress_port: in_port,
                tstamp_ns: t,
                routed_egress_port: routed,
            },
            7,
        )
        .expect("process")
}

fn parse_polling(sw: &Switch, bytes: &[u8]) -> Polling {
    Polling::parse(&bytes[packets::polling_offset(&sw.program)..]).expect("polling header")
}

#[test]
fn polling_follows_victim_and_reports_to_cpu() {
    let mut sw = Switch::new();
    let victim = tuple(1, 49152);
    let out = polling_in(&mut sw, &Polling::new(7, victim, 8), 0, 1000, Some(4));
    assert_eq!(out.ports.len(), 1);
    assert_eq!(
        out.ports[0].0, 4,
        "flag 01 follows the victim's forwarding choice"
    );
    let fwd = parse_polling(&sw, &out.ports[0].1);
    assert_eq!(
        fwd.trace_flag, 1,
        "no pause at the victim's egress: flag stays 01"
    );
    assert_eq!(fwd.hop_limit, 7);
    assert_eq!(fwd.context_kind, 0);
    assert_eq!(out.cpu.len(), 1);
    let cpu = parse_polling(&sw, &out.cpu[0]);
    assert_eq!(cpu.context_kind, 1);
    assert_eq!(cpu.context_ingress_port, 0);
    assert_eq!(cpu.arrival_flags, 1);
    assert_eq!(cpu.event_id, 7);
    assert_eq!(cpu.victim, victim);
}

#[test]
fn polling_gains_pfc_bit_when_victim_port_paused() {
    let mut sw = Switch::new();
    let victim = tuple(1, 49152);
    sw.pfc(4, 900, 1, [2000, 0, 0, 0, 0, 0, 0, 0]);
    sw.data(&victim, 0, 4, 0, 950, 100, 1000); // a paused packet at port 4 this epoch
    let out = polling_in(&mut sw, &Polling::new(8, victim, 8), 0, 1000, Some(4));
    assert_eq!(out.ports.len(), 1);
    assert_eq!(
        parse_polling(&sw, &out.ports[0].1).trace_flag,
        3,
        "01 + PFC bit"
    );
    let cpu = parse_polling(&sw, &out.cpu[0]);
    assert_eq!(cpu.context_egress_port, 4);
    assert_eq!(
        cpu.context_flags & 1,
        1,
        "the CPU copy says the victim is paused here"
    );
}

#[test]
fn packets_held_behind_a_pause_are_counted_at_enqueue() {
    // A PFC storm: port 3 stays paused, nothing toward it leaves the queue, yet its paused
    // packets and the causality meter are visible and the PFC branch reaches it.
    let mut sw = Switch::new();
    sw.pfc(3, 100, 1 << 3, [0xFFFF; 8]);
    for i in 0..5u64 {
        sw.enqueue(&tuple(1, 1), 1, 3, 3, 200 + i * 10, 1000);
    }
    let cell = Switch::port_cell(200, 3);
    assert_eq!(sw.reg("port_packets", cell), 5);
    assert_eq!(sw.reg("port_paused_packets", cell), 5);
    let base = Switch::epoch_index(200) * PORTS * PORTS;
    assert_eq!(sw.reg("meter_bytes", base + PORTS + 3), 5000);
    assert_eq!(
        sw.reg("port_qdepth_sum", cell),
        0,
        "queue depths are only known when the packets leave"
    );
    let mut p = Polling::new(21, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, 300, None);
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(ports, vec![3]);
}

#[test]
fn a_pause_keeps_the_pfc_branch_while_in_force_and_while_its_xoff_is_in_the_ring() {
    // A deadlock: traffic from port 1 reached port 2 in epoch 0, then port 2 is paused and
    // nothing arrives any more. One epoch later the branch still follows the pause in
    // force.
    let mut sw = Switch::new();
    sw.enqueue(&tuple(1, 1), 1, 2, 3, 100, 1000);
    sw.pfc(2, 500, 1 << 3, [0xFFFF; 8]);
    let mut p = Polling::new(22, tuple(9, 9), 8);
    p.trace_flag = 2;
    let later = 1024 + 300; // next epoch (2-epoch ring): no arrivals in it
    let out = polling_in(&mut sw, &p, 1, later, None);
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(
        ports,
        vec![2],
        "paused now and fed from port 1 within the ring"
    );
    // XON just before the polling packet comes: nothing was enqueued behind the pause, yet
    // it held port 2's queue within the ring's time. Its XOFF stands for it.
    sw.pfc(2, later + 100, 1 << 3, [0; 8]);
    let mut p = Polling::new(23, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, later + 200, None);
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(ports, vec![2], "resumed, but the XOFF is within the ring");
    // Port 1 keeps feeding port 2, unpaused. Once the ring has turned past the XOFF, port 2
    // is no longer taken for paused.
    sw.enqueue(&tuple(1, 1), 1, 2, 3, 2 * 1024 + 100, 1000);
    let mut p = Polling::new(24, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, 3 * 1024 + 100, None);
    assert!(out.ports.is_empty(), "the XOFF has left the ring");
    // A pause that simply expires (no XON) ends "in force" too (every pause of the switch
    // must have expired: the bitmap keeps the latest end of all of them). The XOFF of
    // epoch 1 has left the ring by epoch 3, so only the in-force check could keep port 2.
    let mut fresh = Switch::new();
    fresh.enqueue(&tuple(1, 1), 1, 2, 3, 1024 + 100, 1000);
    fresh.pfc(2, 1024 + 500, 1 << 3, [0, 0, 0, 10, 0, 0, 0, 0]);
    let mut p = Polling::new(25, tuple(9, 9), 8);
    p.trace_flag = 2;
    let during = polling_in(&mut fresh, &p, 1, 1024 + 520, None);
    assert_eq!(during.ports.len(), 1, "within the 51 ns pause");
    fresh.enqueue(&tuple(1, 1), 1, 2, 3, 2 * 1024 + 100, 1000);
    let mut p = Polling::new(26, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut fresh, &p, 1, 3 * 1024 + 100, None);
    assert!(out.ports.is_empty(), "the 51 ns pause expired");
    // Port 1 moves on to port 3. Beyond the ring, its old traffic to port 2 is forgotten
    // even while a pause of port 2 is in force.
    sw.enqueue(&tuple(1, 2), 1, 3, 3, 5 * 1024 + 100, 1000);
    sw.pfc(2, 10 * 1024, 1 << 3, [0xFFFF; 8]);
    let mut p = Polling::new(27, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, 10 * 1024 + 100, None);
    assert!(
        out.ports.is_empty(),
        "no traffic from port 1 to port 2 within the ring or in its latest epoch"
    );
}

#[test]
fn a_frozen_switch_keeps_the_pfc_branch_to_where_an_ingress_sent_last() {
    // A switch frozen behind a deadlock: port 1's traffic went to port 2 (unpaused), then
    // port 2 was paused and port 1 itself paused upstream, so nothing from it arrives any
    // more. Many epochs later port 2's queue still holds port 1's packets: the polling
    // packet arriving by port 1 follows the pause to port 2, though the ring has turned
    // and no packet from port 1 ever went in behind the pause.
    let mut sw = Switch::new();
    sw.enqueue(&tuple(1, 1), 1, 2, 3, 100, 1000);
    sw.enqueue(&tuple(1, 2), 1, 4, 3, 150, 1000);
    sw.pfc(2, 500, 1 << 3, [0xFFFF; 8]);
    let late = 10 * 1024;
    sw.pfc(2, late, 1 << 3, [0xFFFF; 8]);
    let mut p = Polling::new(61, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, late + 100, None);
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(
        ports,
        vec![2],
        "port 1's latest epoch fed port 2, paused now"
    );
    // By a port whose latest traffic went elsewhere, nothing is followed.
    sw.enqueue(&tuple(2, 2), 3, 4, 3, late + 200, 1000);
    let mut p = Polling::new(62, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 3, late + 300, None);
    assert!(out.ports.is_empty(), "{:?}", out.ports);
}

#[test]
fn a_frozen_pause_keeps_the_pfc_branch_after_the_ring_turns() {
    // A deadlock: port 2 is paused and the last packet from port 1 went in behind the
    // pause; then nothing arrives for many epochs while the pause is refreshed. The ring
    // (2 epochs) has forgotten the pair 1 → 2; the held fanout has not.
    let mut sw = Switch::new();
    sw.pfc(2, 100, 1 << 3, [0xFFFF; 8]);
    sw.enqueue(&tuple(1, 1), 1, 2, 3, 200, 1000);
    let late = 10 * 1024;
    sw.pfc(2, late, 1 << 3, [0xFFFF; 8]);
    let mut p = Polling::new(51, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, late + 100, None);
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(
        ports,
        vec![2],
        "held behind the pause since before the ring turned"
    );
    // A polling packet arriving by a port that fed nothing into the pause does not.
    let mut p = Polling::new(52, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 4, late + 110, None);
    assert!(out.ports.is_empty(), "{:?}", out.ports);
    // XON, then a packet from port 1 goes in unpaused: the bit is cleared. Port 1 then
    // feeds port 3 only. A new pause of port 2 that nothing from port 1 joins is not
    // followed once the ring has turned.
    sw.pfc(2, late + 200, 1 << 3, [0; 8]);
    sw.enqueue(&tuple(1, 1), 1, 2, 3, late + 300, 1000);
    sw.enqueue(&tuple(1, 2), 1, 3, 3, late + 2 * 1024 + 100, 1000);
    sw.pfc(2, late + 2 * 1024 + 400, 1 << 3, [0xFFFF; 8]);
    let later = 20 * 1024;
    sw.pfc(2, later, 1 << 3, [0xFFFF; 8]);
    let mut p = Polling::new(53, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, later + 100, None);
    assert!(out.ports.is_empty(), "{:?}", out.ports);
}

#[test]
fn a_pause_that_expired_long_ago_does_not_come_back_after_the_clock_wraps() {
    // Port 2 was paused for 51 ns at 1 µs and never resumed by XON. 3 s later (past 2^31
    // ns, where a 32-bit end reads as "ahead" in two's complement) traffic from port 1 to
    // port 2 is not paused, and a polling packet on the PFC branch finds nothing paused.
    let mut sw = Switch::new();
    sw.pfc(2, 1_000, 1 << 3, [0, 0, 0, 10, 0, 0, 0, 0]);
    let later = 3_000_000_000u64;
    sw.enqueue(&tuple(1, 1), 1, 2, 3, later - 100, 1000);
    assert_eq!(
        sw.reg("port_paused_packets", Switch::port_cell(later - 100, 2)),
        0
    );
    let mut p = Polling::new(31, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, later, None);
    assert!(out.ports.is_empty(), "{:?}", out.ports);
    // A new pause then is seen again.
    sw.pfc(2, later + 10, 1 << 3, [0xFFFF; 8]);
    let mut p = Polling::new(32, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, later + 20, None);
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(ports, vec![2]);
}

#[test]
fn the_pfc_branch_sees_every_epoch_of_the_ring_not_only_the_latest() {
    // Epoch 1 (the last of a lap of the 2-epoch ring): traffic from port 1 goes to port 2,
    // which is then paused (a deadlock-like freeze). Epoch 2 (a new lap): traffic from port
    // 1 only reaches port 3. A polling packet arriving by port 1 in epoch 2 must still
    // follow the pause to port 2: the pair 1 → 2 is in the ring (HAWKEYE's per-epoch
    // causality meters), though not in the latest epoch.
    let mut sw = Switch::new();
    sw.enqueue(&tuple(1, 1), 1, 2, 3, 1024 + 100, 1000);
    sw.pfc(2, 1024 + 500, 1 << 3, [0xFFFF; 8]);
    sw.enqueue(&tuple(1, 2), 1, 3, 3, 2048 + 100, 1000);
    let mut p = Polling::new(41, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, 2048 + 300, None);
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(ports, vec![2]);
    // Two epochs later the pair has left the ring: only port 3's traffic of epoch 2...
    // and by epoch 4 nothing from port 1 is left either.
    let mut p = Polling::new(42, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, 4 * 1024 + 300, None);
    assert!(out.ports.is_empty(), "{:?}", out.ports);
}

#[test]
fn polling_pfc_branch_keeps_only_causal_ports() {
    let mut sw = Switch::new();
    // Traffic from port 1 to ports 3 (paused) and 5 (paused, but no traffic from 1) and 6
    // (traffic from 1, not paused).
    sw.pfc(3, 100, 1, [3000, 0, 0, 0, 0, 0, 0, 0]);
    sw.pfc(5, 100, 1, [3000, 0, 0, 0, 0, 0, 0, 0]);
    sw.data(&tuple(1, 1), 1, 3, 0, 200, 10, 1000);
    sw.data(&tuple(2, 2), 2, 5, 0, 210, 10, 1000);
    sw.data(&tuple(3, 3), 1, 6, 0, 220, 10, 1000);
    let mut p = Polling::new(9, tuple(9, 9), 8);
    p.trace_flag = 2; // PFC-only branch arriving on port 1 (the port the PFC came from)
    let out = polling_in(&mut sw, &p, 1, 300, Some(6));
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(
        ports,
        vec![3],
        "only the paused port with traffic from port 1"
    );
    assert_eq!(parse_polling(&sw, &out.ports[0].1).trace_flag, 2);
    assert_eq!(out.cpu.len(), 1);
    let cpu = parse_polling(&sw, &out.cpu[0]);
    assert_eq!(
        cpu.context_pfc_ports,
        1 << 3,
        "the CPU copy names the PFC-branch ports the data plane chose"
    );
    // Flag 11: victim port 6 is kept for the victim, port 3 for causality.
    let mut p = Polling::new(10, tuple(9, 9), 8);
    p.trace_flag = 3;
    let out = polling_in(&mut sw, &p, 1, 310, Some(6));
    let kept: Vec<(u16, u8)> = out
        .ports
        .iter()
        .map(|(port, b)| (*port, parse_polling(&sw, b).trace_flag))
        .collect();
    assert_eq!(kept, vec![(3, 2), (6, 1)]);
}

#[test]
fn the_pfc_branch_goes_back_out_the_arrival_port_around_a_two_switch_loop() {
    let mut sw = Switch::new();
    // A routing loop with the neighbour on port 2: its traffic comes in by port 2 and goes
    // back out by port 2, which the neighbour pauses (the loop's own edge). Port 4 is
    // paused too but takes nothing from port 2.
    sw.pfc(2, 100, 1, [3000, 0, 0, 0, 0, 0, 0, 0]);
    sw.pfc(4, 100, 1, [3000, 0, 0, 0, 0, 0, 0, 0]);
    sw.data(&tuple(1, 1), 2, 2, 0, 200, 10, 1000);
    sw.data(&tuple(2, 2), 0, 4, 0, 210, 10, 1000);
    let mut p = Polling::new(12, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 2, 300, None);
    let ports: Vec<u16> = out.ports.iter().map(|(port, _)| *port).collect();
    assert_eq!(
        ports,
        vec![2],
        "the loop edge, back where the polling packet came from"
    );
    assert_eq!(parse_polling(&sw, &out.cpu[0]).context_pfc_ports, 1 << 2);
    // Without the U-turn traffic the arrival port stays off the branch, paused or not.
    let mut sw = Switch::new();
    sw.pfc(2, 100, 1, [3000, 0, 0, 0, 0, 0, 0, 0]);
    sw.data(&tuple(1, 1), 2, 5, 0, 200, 10, 1000);
    let out = polling_in(&mut sw, &p, 2, 300, None);
    assert!(out.ports.is_empty());
}

#[test]
fn polling_pfc_only_branch_without_paused_port_still_reports() {
    let mut sw = Switch::new();
    let mut p = Polling::new(11, tuple(9, 9), 8);
    p.trace_flag = 2;
    let out = polling_in(&mut sw, &p, 1, 300, None);
    assert!(out.ports.is_empty(), "end of the PFC spreading path");
    assert_eq!(
        out.cpu.len(),
        1,
        "the switch still reports (the artifact dropped it silently)"
    );
    assert_eq!(parse_polling(&sw, &out.cpu[0]).arrival_flags, 2);
}

#[test]
fn polling_duplicates_suppressed_within_interval_and_hop_limit() {
    let mut sw = Switch::new();
    let p = Polling::new(12, tuple(1, 1), 8);
    assert_eq!(polling_in(&mut sw, &p, 0, 10_000, Some(2)).cpu.len(), 1);
    let dup = polling_in(&mut sw, &p, 0, 20_000, Some(2));
    assert!(
        dup.cpu.is_empty() && dup.ports.is_empty(),
        "same event by the same port within the interval"
    );
    // The same event coming back by another port (around a routing loop) carries a PFC
    // branch this switch has not followed: it is taken, once.
    let back = polling_in(&mut sw, &p, 1, 20_500, Some(2));
    assert_eq!(back.cpu.len(), 1, "same event, another arrival port");
    let back_again = polling_in(&mut sw, &p, 1, 21_000, Some(2));
    assert!(back_again.cpu.is_empty() && back_again.ports.is_empty());
    // 100 units × 1024 ns later it is accepted again.
    let again = polling_in(&mut sw, &p, 0, 10_000 + 101 * 1024, Some(2));
    assert_eq!(again.cpu.len(), 1);
    // Another event is independent.
    assert_eq!(
        polling_in(
            &mut sw,
            &Polling::new(13, tuple(1, 1), 8),
            0,
            20_000,
            Some(2)
        )
        .cpu
        .len(),
        1
    );
    // Hop limit 0 is dropped without a report; 1 is reported and forwarded with 0.
    let zero = polling_in(
        &mut sw,
        &Polling::new(14, tuple(1, 1), 0),
        0,
        30_000,
        Some(2),
    );
    assert!(zero.cpu.is_empty() && zero.ports.is_empty());
    let one = polling_in(
        &mut sw,
        &Polling::new(15, tuple(1, 1), 1),
        0,
        30_000,
        Some(2),
    );
    assert_eq!(one.cpu.len(), 1);
    assert_eq!(parse_polling(&sw, &one.ports[0].1).hop_limit, 0);
}

#[test]
fn the_same_sequence_number_from_many_hosts_is_never_taken_for_a_duplicate() {
    // Event ids are host << 40 | sequence: in a fabric-wide anomaly hundreds of hosts send
    // their n-th event through the same port within the interval. With 64 slots many of
    // them share a slot; each must still be reported (a dropped one leaves its incident
    // without this switch and everything behind it), and each repeat still suppressed.
    let mut sw = Switch::new();
    for host in 1..=300u64 {
        let p = Polling::new(host << 40 | 3, tuple(1, 1), 8);
        let t = 10_000 + host * 10;
        assert_eq!(
            polling_in(&mut sw, &p, 4, t, Some(2)).cpu.len(),
            1,
            "host {host}'s event 3 was dropped as a duplicate of another host's"
        );
        assert!(
            polling_in(&mut sw, &p, 4, t + 5, Some(2)).cpu.is_empty(),
            "host {host}'s event 3 repeated"
        );
    }
}

#[test]
fn an_event_whose_low_bits_are_zero_is_not_a_duplicate_of_an_empty_cell() {
    // Right after start, an empty dedupe cell holds event 0 at time 0; an event id with
    // zero low 32 bits (here 1 << 40) must still be accepted, and only repeats suppressed.
    let mut sw = Switch::new();
    let p = Polling::new(1 << 40, tuple(1, 1), 8);
    assert_eq!(polling_in(&mut sw, &p, 0, 5_000, Some(2)).cpu.len(), 1);
    assert!(polling_in(&mut sw, &p, 0, 6_000, Some(2)).cpu.is_empty());
}

#[test]
fn elastic_sketch_matches_reference_and_marks_once() {
    let mut sw = Switch::new();
    let geometry = SketchGeometry {
        heavy_bits: 4,
        light_bits: 6,
        lambda: 8,
    };
    let mut reference = ElasticReference::new(geometry);
    // A skewed stream: a few elephants and many mice over 16 buckets.
    let mut flows = Vec::new();
    for i in 0..60u16 {
        flows.push(tuple((i % 7) as u8 + 1, 1000 + i));
    }
    let mut state = 0x1234_5678u32;
    for n in 0..3000u32 {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let pick = if state >> 28 < 10 {
            (state >> 8) as usize % 4
        } else {
            (state >> 8) as usize % flows.len()
        };
        let t = flows[pick];
        let bytes = packets::rocev2_data(&sw.program, &t, 0, 2, 64, n, 100);
        let mut out = PassOutput::default();
        sw.model
            .ingress(
                &bytes,
                &IngressInput {
                    ingress_port: 0,
                    tstamp_ns: n as u64 * 10,
                    routed_egress_port: Some(1),
                },
                &mut out,
            )
            .expect("ingress");
        let dscp = packets::read_field(&sw.program, &out.bytes, 14, "ipv4", "dscp").expect("dscp");
        assert_eq!(dscp & 1, 1, "inserted packets carry the mark");
        // A marked packet at the next switch is not inserted again.
        let mut again = PassOutput::default();
        let before = sw
            .model
            .register_read_all("sketch_total")
            .expect("reg")
            .to_vec();
        sw.model
            .ingress(
                &out.bytes,
                &IngressInput {
                    ingress_port: 0,
                    tstamp_ns: n as u64 * 10 + 1,
                    routed_egress_port: Some(1),
                },
                &mut again,
            )
            .expect("ingress");
        assert_eq!(
            sw.model.register_read_all("sketch_total").expect("reg"),
            &before[..]
        );
        reference.insert(fingerprint(t.src_ip, t.dst_ip, t.src_port, t.dst_port));
    }
    let dump = SketchDump {
        geometry,
        key: sw.model.register_read_all("sketch_key").expect("reg"),
        votes: sw.model.register_read_all("sketch_votes").expect("reg"),
        light: sw.model.register_read_all("sketch_light").expect("reg"),
    };
    assert_eq!(dump.heavy_flows(), reference.heavy_flows());
    for t in &flows {
        let fp = fingerprint(t.src_ip, t.dst_ip, t.src_port, t.dst_port);
        assert_eq!(dump.query(fp), reference.query(fp), "flow {t:?}");
    }
    assert!(
        reference.heavy_flows().values().any(|v| *v > 100),
        "the stream has elephants"
    );
    // Control-plane reset every monitor interval.
    for r in ["sketch_total", "sketch_key", "sketch_votes", "sketch_light"] {
        sw.model.register_reset(r).expect("reset");
    }
    assert!(sw
        .model
        .register_read_all("sketch_key")
        .expect("reg")
        .iter()
        .all(|v| *v == 0));
}

#[test]
fn control_plane_errors_are_reported_not_panics() {
    let mut sw = Switch::new();
    assert!(sw.model.register_read("nope", 0).is_err());
    assert!(sw.model.register_read("port_packets", 1 << 20).is_err());
    assert!(sw.model.register_write("port_epoch", 0, 1 << 20).is_err());
    assert!(sw.model.register_write("port_epoch", 1, 5).is_ok());
    assert_eq!(sw.reg("port_epoch", 1), 5);
    let entry = |action: &str, params: Vec<u64>| hawkmesh_dataplane::model::TableEntry {
        key: vec![3, 0],
        mask: vec![],
        priority: 0,
        action: action.into(),
        params,
    };
    assert!(sw
        .model
        .table_add("forward", entry("explode", vec![]))
        .is_err());
    assert!(sw
        .model
        .table_add("forward", entry("set_route", vec![]))
        .is_err());
    assert!(sw
        .model
        .table_add("forward", entry("set_route", vec![1 << 20]))
        .is_err());
    assert!(sw
        .model
        .table_add("forward", entry("set_route", vec![2]))
        .is_ok());
    assert!(sw
        .model
        .table_add("nope", entry("set_route", vec![2]))
        .is_err());
    // The destination alone is not a key: the ECMP bucket is part of it.
    let mut short = entry("set_route", vec![2]);
    short.key = vec![3];
    assert!(sw.model.table_add("forward", short).is_err());
    // Garbage packets are processed without panicking.
    for len in [0usize, 1, 13, 14, 20, 40, 60, 100] {
        let junk: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
        let mut out = PassOutput::default();
        sw.model
            .ingress(&junk, &IngressInput::default(), &mut out)
            .expect("junk ingress");
        let mut eg = PassOutput::default();
        sw.model
            .egress(&junk, &EgressInput::default(), &Carried::default(), &mut eg)
            .expect("junk egress");
    }
}

/// Installs the `forward` entries of `dst` with ECMP next hops `hops`.
fn install_routes(model: &mut Model, dst: std::net::Ipv4Addr, hops: &[u16]) {
    for (key, action, params) in hawkeye::forward_entries(dst, hops) {
        model
            .table_add(
                "forward",
                hawkmesh_dataplane::model::TableEntry {
                    key,
                    mask: vec![],
                    priority: 0,
                    action: action.into(),
                    params,
                },
            )
            .expect("add");
    }
}

#[test]
fn table_routing_mode_uses_installed_entries() {
    let program = Arc::new(program(&params()).expect("program"));
    let mut model = Model::new(program.clone(), Routing::FromTable, 100).expect("model");
    let t = tuple(1, 1);
    let bytes = packets::rocev2_data(&program, &t, 0, 2, 64, 1, 100);
    let mut out = PassOutput::default();
    model
        .ingress(
            &bytes,
            &IngressInput {
                ingress_port: 0,
                tstamp_ns: 5,
                routed_egress_port: Some(3),
            },
            &mut out,
        )
        .expect("ingress");
    assert!(out.dropped, "no route installed");
    install_routes(&mut model, std::net::Ipv4Addr::from(t.dst_ip), &[5]);
    model
        .ingress(
            &bytes,
            &IngressInput {
                ingress_port: 0,
                tstamp_ns: 5,
                routed_egress_port: Some(3),
            },
            &mut out,
        )
        .expect("ingress");
    assert_eq!(out.forward, Forward::Unicast(5));
    assert!(!out.dropped);
}

#[test]
fn exact_entries_match_with_small_and_large_keys() {
    // Small keys (ports, here addresses below 1024) and large ones are stored differently;
    // both must match exactly, and a missing key of either kind takes the default action.
    let program = Arc::new(program(&params()).expect("program"));
    let mut model = Model::new(program.clone(), Routing::FromTable, 100).expect("model");
    let route = |model: &mut Model, dst: [u8; 4]| {
        let t = FiveTuple::rocev2([10, 0, 0, 1], 49152, dst);
        let bytes = packets::rocev2_data(&program, &t, 0, 2, 64, 1, 100);
        let mut out = PassOutput::default();
        model
            .ingress(
                &bytes,
                &IngressInput {
                    ingress_port: 0,
                    tstamp_ns: 5,
                    routed_egress_port: Some(3),
                },
                &mut out,
            )
            .expect("ingress");
        (!out.dropped).then_some(out.forward)
    };
    for (dst, port) in [([0, 0, 2, 1], 7), ([0, 0, 0, 0], 9), ([10, 0, 1, 1], 5)] {
        install_routes(&mut model, dst.into(), &[port]);
    }
    assert_eq!(route(&mut model, [0, 0, 2, 1]), Some(Forward::Unicast(7)));
    assert_eq!(route(&mut model, [0, 0, 0, 0]), Some(Forward::Unicast(9)));
    assert_eq!(route(&mut model, [10, 0, 1, 1]), Some(Forward::Unicast(5)));
    assert_eq!(
        route(&mut model, [0, 0, 2, 2]),
        None,
        "small key not installed"
    );
    assert_eq!(
        route(&mut model, [10, 0, 1, 2]),
        None,
        "large key not installed"
    );
    let buckets = hawkeye::ECMP_BUCKETS as usize;
    assert_eq!(model.table_len("forward").expect("table"), 3 * buckets);
}

#[test]
fn ecmp_spreads_flows_over_next_hops_by_the_5_tuple_hash_as_the_control_plane_computes_it() {
    let program = Arc::new(program(&params()).expect("program"));
    let mut model = Model::new(program.clone(), Routing::FromTable, 100).expect("model");
    let dst = std::net::Ipv4Addr::new(10, 0, 1, 1);
    let hops = [4u16, 6, 7];
    install_routes(&mut model, dst, &hops);
    let mut used = std::collections::BTreeSet::new();
    for sport in 49152..49152 + 64u16 {
        let t = FiveTuple::rocev2([10, 0, 0, 1], sport, dst.octets());
        let bytes = packets::rocev2_data(&program, &t, 0, 2, 64, 1, 100);
        let mut out = PassOutput::default();
        model
            .ingress(&bytes, &IngressInput::default(), &mut out)
            .expect("ingress");
        let bucket = hawkeye::ecmp_bucket([10, 0, 0, 1].into(), dst, sport, 4791);
        let expected = hops[bucket as usize % hops.len()];
        assert_eq!(out.forward, Forward::Unicast(expected), "sport {sport}");
        used.insert(expected);
    }
    assert_eq!(used.len(), hops.len(), "64 flows use every next hop");
}

// ---------------------------------------------------------------------------------------
// ECN marking (DCQCN's RED profile on the egress queue depth, `hawkeye/ecn.rs`)
// ---------------------------------------------------------------------------------------

use hawkmesh_wire::control::{ecn_profile_entries, EcnProfile, QdepthUnit};

/// Kmin 100 cells, Kmax 200 cells, Pmax 0.5 (8 KB, 16 KB at 80 bytes per cell).
const RED: EcnProfile = EcnProfile {
    kmin_bytes: 8_000,
    kmax_bytes: 16_000,
    pmax: 0.5,
};

impl Switch {
    fn install_ecn(&mut self, port: u16, profile: &EcnProfile) {
        for entry in ecn_profile_entries(port, profile, QdepthUnit::TofinoCells).expect("profile") {
            self.model
                .table_add("ecn_profile", entry)
                .expect("ecn_profile entry");
        }
    }

    /// The ECN codepoint a packet sent with `ecn` leaves `out_port` with, at queue depth
    /// `qdepth` cells.
    fn ecn_out(&mut self, out_port: u16, ecn: u8, qdepth: u32) -> u8 {
        let bytes = packets::rocev2_data(&self.program, &tuple(1, 1000), 3 << 3, ecn, 64, 1, 1000);
        let mut ing = PassOutput::default();
        let input = IngressInput {
            ingress_port: 0,
            tstamp_ns: 5_000,
            routed_egress_port: Some(out_port),
        };
        self.model
            .ingress(&bytes, &input, &mut ing)
            .expect("ingress");
        let mut eg = PassOutput::default();
        let e = EgressInput {
            ingress_port: 0,
            egress_port: out_port,
            queue: 3,
            enq_tstamp_ns: 5_000,
            enq_qdepth: qdepth,
            packet_length: 1000,
        };
        self.model
            .egress(&ing.bytes, &e, &ing.bridged, &mut eg)
            .expect("egress");
        assert!(!eg.dropped);
        // Ethernet (14 bytes), then IPv4: DSCP and ECN in byte 1 (RFC 2474, RFC 3168 §5).
        eg.bytes[15] & 0b11
    }

    /// How many of `n` ECT(0) packets at depth `qdepth` leave `port` marked CE.
    fn marked(&mut self, port: u16, qdepth: u32, n: u32) -> u32 {
        (0..n)
            .filter(|_| self.ecn_out(port, 0b10, qdepth) == 0b11)
            .count() as u32
    }
}

#[test]
fn without_an_ecn_profile_nothing_is_marked() {
    let mut sw = Switch::new();
    assert_eq!(sw.marked(2, 1_000_000, 500), 0);
    // A profile on another port changes nothing here.
    sw.install_ecn(3, &RED);
    assert_eq!(sw.marked(2, 1_000_000, 500), 0);
    assert_eq!(sw.marked(3, 1_000_000, 500), 500);
}

#[test]
fn red_never_marks_below_kmin_and_always_marks_at_and_above_kmax() {
    let mut sw = Switch::new();
    sw.install_ecn(2, &RED);
    for q in [0, 1, 50, 99, 100] {
        assert_eq!(sw.marked(2, q, 2000), 0, "q = {q} cells is not above Kmin");
    }
    for q in [200, 201, 5000, u32::MAX] {
        assert_eq!(
            sw.marked(2, q, 2000),
            2000,
            "q = {q} cells is at or above Kmax"
        );
    }
}

#[test]
fn between_kmin_and_kmax_the_marked_share_follows_the_red_ramp() {
    let mut sw = Switch::new();
    sw.install_ecn(2, &RED);
    sw.model.seed_random(0x5EED);
    let n = 20_000;
    for q in [110u32, 150, 190] {
        // DCQCN §3.1: Pmax·(q − Kmin)/(Kmax − Kmin).
        let expected = 0.5 * f64::from(q - 100) / 100.0;
        let share = f64::from(sw.marked(2, q, n)) / f64::from(n);
        // 1/512 of quantisation plus 4 standard deviations of a binomial share.
        let tolerance = 1.0 / 512.0 + 4.0 * (expected * (1.0 - expected) / f64::from(n)).sqrt();
        assert!(
            (share - expected).abs() <= tolerance,
            "q = {q}: marked {share}, expected {expected} ± {tolerance}"
        );
    }
}

#[test]
fn only_ecn_capable_packets_are_marked_and_ce_stays_ce() {
    let mut sw = Switch::new();
    sw.install_ecn(2, &RED);
    for _ in 0..500 {
        // RFC 3168 §5: Not-ECT is never marked; ECT(0) and ECT(1) become CE; CE stays.
        assert_eq!(sw.ecn_out(2, 0b00, 5000), 0b00);
        assert_eq!(sw.ecn_out(2, 0b01, 5000), 0b11);
        assert_eq!(sw.ecn_out(2, 0b10, 5000), 0b11);
        assert_eq!(sw.ecn_out(2, 0b11, 0), 0b11);
        assert_eq!(sw.ecn_out(2, 0b01, 10), 0b01);
    }
}

#[test]
fn the_same_seed_gives_the_same_marks() {
    let marks = |seed: u64| {
        let mut sw = Switch::new();
        sw.install_ecn(2, &RED);
        sw.model.seed_random(seed);
        (0..400)
            .map(|_| sw.ecn_out(2, 0b10, 150))
            .collect::<Vec<u8>>()
    };
    assert_eq!(marks(7), marks(7));
    assert_ne!(marks(7), marks(8));
}

#[test]
fn the_emitted_model_marks_as_the_interpreter_does() {
    // The test variant runs on the interpreter, the default (ToR) variant as emitted Rust
    // (`model/generated.rs`); one draw per ECN-capable packet from the same seed gives the
    // same marks on both.
    let marks = |sw: &mut Switch| {
        sw.install_ecn(2, &RED);
        sw.model.seed_random(99);
        (0..300u32)
            .map(|i| sw.ecn_out(2, 0b10, 90 + i % 120))
            .collect::<Vec<u8>>()
    };
    let mut interpreted = Switch::new();
    let mut emitted = Switch::with_params(&HawkeyeParams::default());
    assert!(!interpreted.model.is_native());
    assert!(emitted.model.is_native());
    let (a, b) = (marks(&mut interpreted), marks(&mut emitted));
    assert!(a.contains(&0b11) && a.contains(&0b10));
    assert_eq!(a, b);
}
