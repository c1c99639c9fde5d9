//! Periodic sampling: non-empty switch queues and delivered bytes, every `sample_interval`.

use super::{QueueSample, Simulation};
use crate::event::EventKind;
use crate::time::NS;

impl Simulation {
    pub(super) fn on_sample(&mut self) {
        let time_ns = self.now / NS;
        for sw in &self.switches {
            for global in sw.first_port..sw.first_port + sw.port_count {
                let port = &self.ports[global as usize];
                if port.queued_total == 0 {
                    continue;
                }
                for (prio, bytes) in port.queue_bytes.iter().enumerate() {
                    if *bytes > 0 {
                        self.queue_samples.push(QueueSample {
                            time_ns,
                            node: sw.node,
                            port: port.local,
                            priority: prio as u8,
                            bytes: *bytes,
                        });
                    }
                }
            }
        }
        self.goodput.push((self.now, self.delivered_bytes));
        if self.p.sample_interval > 0 {
            let next = self.now + self.p.sample_interval;
            if next <= self.p.end {
                self.events.schedule(next, EventKind::Sample);
            }
        }
    }
}
