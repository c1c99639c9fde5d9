//! The detector on netsim hosts: every ACK's RTT sample feeds the sending host's
//! [`RttDetector`]; a trigger sends a polling packet from that host toward the victim's
//! destination with the victim's 5-tuple in its headers (so ECMP walks the victim's path)
//! and the polling header (`wire::polling`, the switch program's own layout) in its payload.
//!
//! netsim tells a host hook about ACKs and about unacknowledged data, not about work
//! posted: a flow that starts while its own NIC is paused sends nothing and would never be
//! seen. [`NetsimHostAgents::check_posted`], called between simulation slices, therefore
//! posts each started flow ([`Simulation::flow_posting`]) to its host's detector until the
//! flow delivers its first bytes ([`RttDetector::post`]: stalled from its post time once
//! `stall_ns` has passed).
//!
//! A host also reads its NIC's PFC pause-duration counter (`rx_prio{N}_pause_duration` on
//! ConnectX; netsim's [`RttSample::src_pause`]) with every sample of any of its flows. When
//! it grew while the sampled packet was in flight ([`PauseHistory`]; since the flow's
//! previous sample when no reading is that old, or since its work was posted), the sender
//! itself was held by its ToR — the
//! ToR's buffer for this host waits at a paused egress — and the polling packet carries
//! the PFC-causality bit from the start (HAWKEYE Table 1 `10`), so the ToR's data plane
//! follows that pause from the host's port as it does at every later hop.

use hawkmesh_host_agent::{DetectorConfig, PauseHistory, PollingTrigger, RttDetector};
use hawkmesh_netsim::hooks::{HostEmit, HostHook, RttSample};
use hawkmesh_netsim::time::{Time, NS};
use hawkmesh_netsim::Simulation;
use hawkmesh_wire::polling::{Polling, TRACE_PFC_CAUSALITY};
use hawkmesh_wire::telemetry::FiveTuple;
use hawkmesh_wire::topology::NodeId;
use std::collections::BTreeMap;

pub use hawkmesh_host_agent::detector::POLLING_HOP_LIMIT;

/// The polling packet of `trigger` from NIC `src_nic` toward `dst_nic` with the victim's
/// 5-tuple in its headers (ECMP walks the victim's path) in `priority`; with the
/// PFC-causality bit when the sender's NIC was held by PFC.
pub fn polling_emit(
    trigger: &PollingTrigger,
    src_nic: u32,
    dst_nic: u32,
    priority: u8,
    sender_held: bool,
) -> HostEmit {
    let mut polling = Polling::new(trigger.event_id, trigger.victim, POLLING_HOP_LIMIT);
    if sender_held {
        polling.trace_flag |= TRACE_PFC_CAUSALITY;
    }
    HostEmit::now(
        src_nic,
        dst_nic,
        trigger.victim,
        priority,
        polling.emit().to_vec(),
    )
}

/// Host agents of every simulated host.
#[derive(Debug)]
pub struct NetsimHostAgents {
    config: DetectorConfig,
    control_priority: u8,
    detectors: BTreeMap<NodeId, RttDetector>,
    triggers: Vec<PollingTrigger>,
    stopped: bool,
    /// Watch posted work ([`NetsimHostAgents::watch_posted`]).
    watch_posted: bool,
    /// Per netsim flow: it has delivered bytes (no longer watched as posted work).
    delivering: Vec<bool>,
    /// Per flow: its NIC's pause-duration counter at its previous sample (or when its
    /// posted work was first seen), ns.
    pause_seen: BTreeMap<FiveTuple, u64>,
    /// Per sending (host, NIC): its pause-counter readings, one per sample of any flow.
    pause_history: BTreeMap<(NodeId, u32), PauseHistory>,
}

impl NetsimHostAgents {
    /// Agents sending polling packets in `control_priority`.
    pub fn new(config: DetectorConfig, control_priority: u8) -> Self {
        NetsimHostAgents {
            config,
            control_priority,
            detectors: BTreeMap::new(),
            triggers: Vec::new(),
            stopped: false,
            watch_posted: false,
            delivering: Vec::new(),
            pause_seen: BTreeMap::new(),
            pause_history: BTreeMap::new(),
        }
    }

    /// Records the sending NIC's pause counter read with `sample`; whether it grew while the
    /// sampled packet was in flight (the sender was held by PFC), or, without a reading that
    /// old, since the flow's previous sample.
    fn sender_held(&mut self, sample: &RttSample) -> bool {
        let pause_ns = sample.src_pause / NS;
        let previous = self.pause_seen.insert(sample.tuple, pause_ns);
        let nic = self
            .pause_history
            .entry((sample.host, sample.src_nic))
            .or_default();
        let held = nic
            .grew_since(sample.sent_at / NS, pause_ns)
            .unwrap_or_else(|| previous.is_some_and(|p| pause_ns > p));
        nic.record(sample.now / NS, pause_ns);
        held
    }

    /// Watches the flows of `sim` for work posted and never sent (see the module doc).
    pub fn watch_posted(&mut self, sim: &Simulation) {
        self.watch_posted = self.config.stall_ns > 0;
        self.delivering = vec![false; sim.flow_count()];
    }

    /// Between simulation slices: every flow whose work has been posted is posted to its
    /// host's detector until it delivers its first bytes, and the detectors' stalls of work
    /// posted and never sent become polling packets, returned for the caller to send
    /// (`Simulation::emit_from_host`).
    pub fn check_posted(&mut self, sim: &Simulation) -> Vec<HostEmit> {
        let now_ns = sim.now() / NS;
        let mut emit = Vec::new();
        if !self.watch_posted || self.stopped {
            return emit;
        }
        let config = self.config;
        let mut hosts: Vec<NodeId> = Vec::new();
        let mut nics: BTreeMap<FiveTuple, (u32, u32, bool)> = BTreeMap::new();
        for (flow, delivering) in self.delivering.iter_mut().enumerate() {
            if *delivering {
                continue;
            }
            let Some(posted) = sim.flow_posting(flow as u32) else {
                continue;
            };
            if posted.start_ns.is_none_or(|start| start > now_ns) {
                continue;
            }
            // Counted from the first time the posted work is seen.
            let held = {
                let previous = *self
                    .pause_seen
                    .entry(posted.tuple)
                    .or_insert(posted.src_pause_ns);
                posted.src_pause_ns > previous
            };
            let detector = self
                .detectors
                .entry(posted.host)
                .or_insert_with(|| RttDetector::new(posted.host, config));
            if sim.flow_delivered(flow as u32).unwrap_or(0) > 0 {
                detector.progress(posted.tuple);
                *delivering = true;
                continue;
            }
            detector.post(
                posted.tuple,
                posted.start_ns.unwrap_or(now_ns),
                Some(posted.base_rtt_ns),
            );
            nics.insert(posted.tuple, (posted.src_nic, posted.dst_nic, held));
            if !hosts.contains(&posted.host) {
                hosts.push(posted.host);
            }
        }
        for host in hosts {
            let Some(detector) = self.detectors.get_mut(&host) else {
                continue;
            };
            for trigger in detector.check_posted(now_ns) {
                let Some((src_nic, dst_nic, held)) = nics.get(&trigger.victim).copied() else {
                    continue;
                };
                emit.push(self.polling_packet(&trigger, src_nic, dst_nic, held));
                self.triggers.push(trigger);
            }
        }
        emit
    }

    /// The polling packet of `trigger`; with the PFC-causality bit when the sender's NIC
    /// was held by PFC (`sender_held`).
    fn polling_packet(
        &self,
        trigger: &PollingTrigger,
        src_nic: u32,
        dst_nic: u32,
        sender_held: bool,
    ) -> HostEmit {
        polling_emit(
            trigger,
            src_nic,
            dst_nic,
            self.control_priority,
            sender_held,
        )
    }

    /// Stops triggering: later RTT samples send no polling packets (a run's drain time,
    /// when the polling packets already sent finish their walk).
    pub fn stop_triggering(&mut self) {
        self.stopped = true;
    }

    /// Every polling trigger so far, in order.
    pub fn triggers(&self) -> &[PollingTrigger] {
        &self.triggers
    }
}

impl HostHook for NetsimHostAgents {
    fn on_rtt_sample(&mut self, sample: &RttSample, emit: &mut Vec<HostEmit>) {
        self.observe(sample, emit, false);
    }

    fn stall_interval(&self) -> Option<Time> {
        (self.config.stall_ns > 0).then_some(self.config.stall_ns * NS)
    }

    fn on_stall(&mut self, sample: &RttSample, emit: &mut Vec<HostEmit>) {
        // Stuck since `sent_at` (its last progress): at least that long is the RTT of the
        // oldest unacknowledged byte, compared with the base RTT like any sample; when it
        // began tells the detector whether the stall is new since the flow's last poll.
        self.observe(sample, emit, true);
    }
}

impl NetsimHostAgents {
    fn observe(&mut self, sample: &RttSample, emit: &mut Vec<HostEmit>, stall: bool) {
        if self.stopped {
            return;
        }
        let detector = self
            .detectors
            .entry(sample.host)
            .or_insert_with(|| RttDetector::new(sample.host, self.config));
        let base = Some(sample.base_rtt / NS);
        let trigger = if stall {
            detector.observe_stall(sample.tuple, sample.sent_at / NS, base, sample.now / NS)
        } else {
            let rtt_ns = sample.now.saturating_sub(sample.sent_at) / NS;
            detector.observe(sample.tuple, rtt_ns, base, sample.now / NS)
        };
        let held = self.sender_held(sample);
        let Some(trigger) = trigger else {
            return;
        };
        emit.push(self.polling_packet(&trigger, sample.src_nic, sample.dst_nic, held));
        self.triggers.push(trigger);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_netsim::Scenario;
    use std::cell::RefCell;
    use std::rc::Rc;

    fn sample(src_port: u16) -> RttSample {
        RttSample {
            host: 3,
            src_nic: 3,
            dst_nic: 5,
            flow: src_port as u32,
            tuple: FiveTuple {
                src_ip: [11, 0, 3, 1],
                dst_ip: [11, 0, 5, 1],
                src_port,
                dst_port: 4791,
                protocol: 17,
            },
            acked: 1000,
            sent_at: 0,
            // 10× the 20 µs base RTT.
            now: 200_000 * NS,
            base_rtt: 20_000 * NS,
            src_pause: 0,
        }
    }

    fn trace_flag(emit: &HostEmit) -> u8 {
        Polling::parse(&emit.custom)
            .expect("polling header")
            .trace_flag
    }

    #[test]
    fn a_sender_held_by_pfc_polls_along_pfc_causality_from_its_first_hop() {
        let mut agents = NetsimHostAgents::new(DetectorConfig::default(), 7);
        let mut emit = Vec::new();
        // The first sample of a flow has nothing to compare its NIC's counter with.
        let mut first = sample(49152);
        first.src_pause = 5_000 * NS;
        agents.on_rtt_sample(&first, &mut emit);
        assert_eq!(trace_flag(&emit[0]), 1, "victim path only");
        // Another flow whose NIC counter grew between its samples: the sender was paused.
        let mut quiet = sample(49153);
        quiet.now = 21_000 * NS; // no trigger, only a reading
        quiet.src_pause = 5_000 * NS;
        emit.clear();
        agents.on_rtt_sample(&quiet, &mut emit);
        assert!(emit.is_empty());
        let mut held = sample(49153);
        held.src_pause = 80_000 * NS;
        agents.on_rtt_sample(&held, &mut emit);
        assert_eq!(
            trace_flag(&emit[0]),
            1 | TRACE_PFC_CAUSALITY,
            "victim path and PFC causality"
        );
    }

    #[test]
    fn a_packet_held_at_its_nic_counts_though_the_flows_previous_ack_came_after_the_pause() {
        let mut agents = NetsimHostAgents::new(DetectorConfig::default(), 7);
        let mut emit = Vec::new();
        // Another flow of the NIC reads the counter at 10 µs: never paused yet.
        let mut other = sample(49160);
        other.sent_at = 9_000 * NS;
        other.now = 10_000 * NS;
        agents.on_rtt_sample(&other, &mut emit);
        // The NIC is paused for 40 µs; this flow's packet sent at 20 µs waits through it. A
        // quick ACK of the flow at 150 µs already reads the whole pause …
        let mut early = sample(49152);
        early.sent_at = 140_000 * NS;
        early.now = 150_000 * NS;
        early.src_pause = 40_000 * NS;
        agents.on_rtt_sample(&early, &mut emit);
        // … so the held packet's slow ACK at 200 µs sees no growth since the flow's previous
        // sample; it was held all the same (the counter grew since it was sent).
        emit.clear();
        let mut held = sample(49152);
        held.sent_at = 20_000 * NS;
        held.now = 200_000 * NS;
        held.src_pause = 40_000 * NS;
        agents.on_rtt_sample(&held, &mut emit);
        assert_eq!(
            emit.iter().map(trace_flag).collect::<Vec<_>>(),
            vec![1 | TRACE_PFC_CAUSALITY]
        );
        // A packet sent after the pause ended was not held, however slow its ACK.
        let mut agents_later = NetsimHostAgents::new(DetectorConfig::default(), 7);
        agents_later.on_rtt_sample(&other, &mut emit);
        agents_later.on_rtt_sample(&early, &mut emit);
        emit.clear();
        let mut later = sample(49153);
        later.sent_at = 160_000 * NS;
        later.now = 1_600_000 * NS;
        later.src_pause = 40_000 * NS;
        agents_later.on_rtt_sample(&later, &mut emit);
        assert_eq!(emit.iter().map(trace_flag).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn a_stopped_agent_sends_no_more_polling_packets() {
        let mut agents = NetsimHostAgents::new(DetectorConfig::default(), 7);
        let mut emit = Vec::new();
        agents.on_rtt_sample(&sample(49152), &mut emit);
        assert_eq!(emit.len(), 1, "a slow RTT sample triggers polling");
        assert_eq!(emit[0].priority, 7);
        agents.stop_triggering();
        emit.clear();
        agents.on_rtt_sample(&sample(49153), &mut emit);
        agents.on_stall(&sample(49154), &mut emit);
        assert!(emit.is_empty(), "no polling once stopped");
        assert_eq!(agents.triggers().len(), 1);
    }

    /// h0's NIC injects PAUSE from 20 µs; h1 → h0 fills tor0's buffer, so tor0 pauses h1's
    /// NIC. The flow h1 → h2 starts at 300 µs while h1's NIC is paused: it sends nothing.
    const POSTED_WHILE_PAUSED: &str = r#"
version = 1
duration_us = 500
[topology]
kind = "fat_tree"
k = 4
[switch]
buffer_mb = 3
[[workload]]
kind = "flows"
flows = [
  { src = "h1", dst = "h0", size_bytes = 3000000, start_us = 10 },
  { src = "h1", dst = "h2", size_bytes = 100000, start_us = 300 },
]
[[fault]]
kind = "pfc_injection"
host = "h0"
start_us = 20
duration_us = 480
"#;

    struct Shared(Rc<RefCell<NetsimHostAgents>>);

    impl HostHook for Shared {
        fn on_rtt_sample(&mut self, sample: &RttSample, emit: &mut Vec<HostEmit>) {
            self.0.borrow_mut().on_rtt_sample(sample, emit);
        }
        fn stall_interval(&self) -> Option<Time> {
            self.0.borrow().stall_interval()
        }
        fn on_stall(&mut self, sample: &RttSample, emit: &mut Vec<HostEmit>) {
            self.0.borrow_mut().on_stall(sample, emit);
        }
    }

    #[test]
    fn a_flow_posted_while_its_own_nic_is_paused_is_polled() {
        let loaded = Scenario::parse(POSTED_WHILE_PAUSED, "t.toml", ".".into()).expect("scenario");
        let mut sim = Simulation::new(&loaded).expect("simulation");
        let agents = Rc::new(RefCell::new(NetsimHostAgents::new(
            DetectorConfig::default(),
            7,
        )));
        sim.set_host_hook(Box::new(Shared(agents.clone())));
        agents.borrow_mut().watch_posted(&sim);
        let late = sim.flow_posting(1).expect("the late flow");
        assert_eq!(late.start_ns, Some(300_000));
        let mut late_flags = Vec::new();
        let mut now = 0;
        while now < 500 * hawkmesh_netsim::time::US {
            now += 20 * hawkmesh_netsim::time::US;
            sim.run_until(now);
            let emits = agents.borrow_mut().check_posted(&sim);
            for emit in emits {
                if emit.tuple == late.tuple {
                    late_flags.push(trace_flag(&emit));
                }
                sim.emit_from_host(emit);
            }
        }
        // h1's NIC was paused while the work waited: the polling packets say so.
        assert!(!late_flags.is_empty());
        assert!(
            late_flags.iter().all(|f| f & TRACE_PFC_CAUSALITY != 0),
            "{late_flags:?}"
        );
        assert_eq!(
            sim.flow_delivered(1),
            Some(0),
            "the scenario must keep h1's NIC paused"
        );
        let agents = agents.borrow();
        let polled: Vec<&PollingTrigger> = agents
            .triggers()
            .iter()
            .filter(|t| t.victim == late.tuple)
            .collect();
        assert_eq!(polled.len(), 1, "{:?}", agents.triggers());
        // Stuck from its post at 300 µs, noticed at the first slice after 350 µs.
        assert_eq!(polled[0].at_ns, 360_000);
        assert_eq!(polled[0].rtt_ns, 60_000);
    }
}
