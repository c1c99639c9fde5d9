//! The detector on netsim hosts: every ACK's RTT sample feeds the sending host's
//! [`RttDetector`]; a trigger sends a polling packet from that host toward the victim's
//! destination with the victim's 5-tuple in its headers (so ECMP walks the victim's path)
//! and the polling header (`wire::polling`, the switch program's own layout) in its payload.

use hawkmesh_host_agent::{DetectorConfig, PollingTrigger, RttDetector};
use hawkmesh_netsim::hooks::{HostEmit, HostHook, RttSample};
use hawkmesh_netsim::time::{Time, NS};
use hawkmesh_wire::polling::Polling;
use hawkmesh_wire::topology::NodeId;
use std::collections::BTreeMap;

/// Hop limit written into polling packets (enough for any Clos path and PFC branch).
pub const POLLING_HOP_LIMIT: u8 = 16;

/// Host agents of every simulated host.
#[derive(Debug)]
pub struct NetsimHostAgents {
    config: DetectorConfig,
    control_priority: u8,
    detectors: BTreeMap<NodeId, RttDetector>,
    triggers: Vec<PollingTrigger>,
    stopped: bool,
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
        }
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
        let Some(trigger) = trigger else {
            return;
        };
        self.triggers.push(trigger);
        let header = Polling::new(trigger.event_id, trigger.victim, POLLING_HOP_LIMIT)
            .emit()
            .to_vec();
        emit.push(HostEmit {
            src_nic: sample.src_nic,
            dst_nic: sample.dst_nic,
            tuple: sample.tuple,
            priority: self.control_priority,
            custom: header,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_wire::telemetry::FiveTuple;

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
        }
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
}
