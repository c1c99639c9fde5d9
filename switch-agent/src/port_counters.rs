//! A switch's port counters as a congestion-view [`CounterSource`]: FITF's pause-time analogue
//! and the counter PFC watchdog on a Tofino, read through the switch backend (BF Runtime
//! `$PORT_STAT` for the counters, `$PORT`'s `$PORT_UP` for the link state).
//!
//! Per priority (IEEE 802.1Qbb): `$Pri{N}FramesReceived` is `rx_pause`,
//! `$ReceivePri{N}Pause1USCount` `rx_pause_duration_us`, `$Pri{N}FramesTransmitted` `tx_pause`
//! and `$TransmitPri{N}Pause1USCount` `tx_pause_duration_us`. `$FramesTransmittedOK` counts the
//! whole port's transmissions, so it is the sample's `xmit_pkts`, not a priority's: the
//! watchdog's storm verdict on a Tofino rests on the pause counters alone (the traffic
//! manager's per-queue counters would tell one priority's transmissions apart).
//!
//! The MAC counters are shared with everything else on the switch (its CLI, SNMP): a reset
//! is a baseline kept here, never a clear. Every read is stamped with the wall clock around
//! the call (Yellowstone Eq. 2–3: tᵠ and the turnaround tᵖ).

use std::collections::BTreeMap;

use hawkmesh_congestion::plan::{Clock, CounterSource, SourceError, SystemClock};
use hawkmesh_congestion::sources::pfc_since;
use hawkmesh_congestion::{Direction, PfcCounters, PortId, Sample, Tier, PRIORITIES};
use serde::{Deserialize, Serialize};

use crate::backend::{BackendError, PortCounters, SwitchBackend};

/// A switch port to sample: its device port (`$DEV_PORT`) and how reports name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchPort {
    /// The device port (`$DEV_PORT`).
    pub dev_port: u16,
    /// The port number reported (the front-panel number, or the device port again).
    pub port: u32,
    /// The link's direction (towards the hosts or the upper tier).
    pub dir: Direction,
}

/// The ports of one switch, read through its backend.
#[derive(Debug)]
pub struct SwitchCounterSource<B, C = SystemClock> {
    backend: B,
    node: String,
    tier: Tier,
    ports: Vec<SwitchPort>,
    baseline: BTreeMap<u16, [PfcCounters; PRIORITIES]>,
    frames_baseline: BTreeMap<u16, u64>,
    clock: C,
}

impl<B: SwitchBackend> SwitchCounterSource<B> {
    /// `ports` of the switch `node` (a `tier` switch) behind `backend`, stamped with the
    /// wall clock.
    pub fn new(backend: B, node: impl Into<String>, tier: Tier, ports: Vec<SwitchPort>) -> Self {
        Self::with_clock(backend, node, tier, ports, SystemClock)
    }
}

impl<B: SwitchBackend, C: Clock> SwitchCounterSource<B, C> {
    /// As [`new`](SwitchCounterSource::new), stamped with `clock`.
    pub fn with_clock(
        backend: B,
        node: impl Into<String>,
        tier: Tier,
        ports: Vec<SwitchPort>,
        clock: C,
    ) -> Self {
        SwitchCounterSource {
            backend,
            node: node.into(),
            tier,
            ports,
            baseline: BTreeMap::new(),
            frames_baseline: BTreeMap::new(),
            clock,
        }
    }

    /// The backend (a daemon reuses its connection).
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    fn find(&self, port: &PortId) -> Result<&SwitchPort, SourceError> {
        if port.node != self.node {
            return Err(SourceError::UnknownPort(port.to_string()));
        }
        self.ports
            .iter()
            .find(|p| p.port == port.port)
            .ok_or_else(|| SourceError::UnknownPort(port.to_string()))
    }

    fn id(&self, p: &SwitchPort) -> PortId {
        PortId::new(self.node.clone(), p.port, self.tier.clone(), p.dir)
    }

    fn raw(&mut self, port: &PortId, dev_port: u16) -> Result<PortCounters, SourceError> {
        self.backend
            .port_counters(dev_port)
            .map_err(|e| failed(port, dev_port, e))
    }
}

fn failed(port: &PortId, dev_port: u16, e: BackendError) -> SourceError {
    SourceError::Other(format!("port {port} (dev port {dev_port}): {e}"))
}

/// The per-priority PFC counters of a `$PORT_STAT` reading.
pub fn pfc_of(c: &PortCounters) -> [PfcCounters; PRIORITIES] {
    std::array::from_fn(|q| PfcCounters {
        rx_pause: Some(c.pfc_rx[q]),
        tx_pause: Some(c.pfc_tx[q]),
        rx_pause_duration_us: Some(c.paused_rx_us[q]),
        tx_pause_duration_us: Some(c.paused_tx_us[q]),
        ..PfcCounters::default()
    })
}

impl<B: SwitchBackend, C: Clock> CounterSource for SwitchCounterSource<B, C> {
    fn ports(&self) -> Vec<PortId> {
        self.ports.iter().map(|p| self.id(p)).collect()
    }

    fn is_up(&mut self, port: &PortId) -> Result<bool, SourceError> {
        let dev_port = self.find(port)?.dev_port;
        self.backend
            .port_is_up(dev_port)
            .map_err(|e| failed(port, dev_port, e))
    }

    /// The switch's counters are not ours to clear: the current values become the baseline.
    fn reset(&mut self, port: &PortId) -> Result<(), SourceError> {
        let dev_port = self.find(port)?.dev_port;
        let now = self.raw(port, dev_port)?;
        self.baseline.insert(dev_port, pfc_of(&now));
        self.frames_baseline.insert(dev_port, now.frames_tx);
        Ok(())
    }

    fn read(&mut self, port: &PortId) -> Result<Sample, SourceError> {
        let sp = self.find(port)?.clone();
        let t0 = self.clock.now_ns();
        let now = self.raw(port, sp.dev_port)?;
        let t1 = self.clock.now_ns();
        let mut s = Sample::new(self.id(&sp), t0, t1.saturating_sub(t0));
        s.pfc = pfc_since(&pfc_of(&now), self.baseline.get(&sp.dev_port));
        let base = self.frames_baseline.get(&sp.dev_port).copied().unwrap_or(0);
        // Below the baseline: cleared by someone else, the current value is the rise since.
        s.xmit_pkts = Some(now.frames_tx.checked_sub(base).unwrap_or(now.frames_tx));
        Ok(s)
    }

    fn stamps_time(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuFrame;
    use hawkmesh_congestion::plan::ManualClock;
    use hawkmesh_wire::control::TableEntry;
    use hawkmesh_wire::dataplane::{Register, Table};

    /// A switch whose MAC counters the test sets, as `$PORT_STAT` would report them.
    #[derive(Default)]
    struct Mac {
        counters: BTreeMap<u16, PortCounters>,
        up: BTreeMap<u16, bool>,
    }

    impl SwitchBackend for Mac {
        fn read_register(&mut self, _: Register) -> Result<Vec<u64>, BackendError> {
            Ok(Vec::new())
        }
        fn reset_register(&mut self, _: Register) -> Result<(), BackendError> {
            Ok(())
        }
        fn add_table_entry(&mut self, _: Table, _: TableEntry) -> Result<(), BackendError> {
            Ok(())
        }
        fn set_multicast_group(&mut self, _: u16, _: Vec<u16>) -> Result<(), BackendError> {
            Ok(())
        }
        fn poll_cpu(&mut self) -> Result<Vec<CpuFrame>, BackendError> {
            Ok(Vec::new())
        }
        fn port_counters(&mut self, port: u16) -> Result<PortCounters, BackendError> {
            self.counters
                .get(&port)
                .copied()
                .ok_or_else(|| BackendError::Unreachable(format!("no port {port}")))
        }
        fn port_is_up(&mut self, port: u16) -> Result<bool, BackendError> {
            Ok(self.up.get(&port).copied().unwrap_or(false))
        }
    }

    fn source(mac: Mac) -> SwitchCounterSource<Mac, ManualClock> {
        SwitchCounterSource::with_clock(
            mac,
            "tor1",
            Tier::Tor,
            vec![
                SwitchPort {
                    dev_port: 132,
                    port: 1,
                    dir: Direction::Down,
                },
                SwitchPort {
                    dev_port: 140,
                    port: 2,
                    dir: Direction::Up,
                },
            ],
            ManualClock::default(),
        )
    }

    #[test]
    fn readings_are_the_rise_since_the_reset_per_priority_and_name_the_port() {
        let mut c = PortCounters {
            frames_tx: 1_000,
            ..PortCounters::default()
        };
        c.pfc_rx[3] = 10;
        c.paused_rx_us[3] = 400;
        let mut mac = Mac::default();
        mac.counters.insert(132, c);
        mac.up.insert(132, true);
        let mut src = source(mac);
        let ports = src.ports();
        assert_eq!(ports.len(), 2);
        assert_eq!(ports[0], PortId::new("tor1", 1, Tier::Tor, Direction::Down));
        assert!(src.is_up(&ports[0]).expect("state"));
        assert!(!src.is_up(&ports[1]).expect("state"));
        src.reset(&ports[0]).expect("reset");
        c.frames_tx = 1_500;
        c.pfc_rx[3] = 14;
        c.paused_rx_us[3] = 650;
        c.pfc_tx[4] = 2;
        src.backend_mut().counters.insert(132, c);
        let s = src.read(&ports[0]).expect("read");
        assert_eq!(s.port, ports[0]);
        assert_eq!(s.xmit_pkts, Some(500));
        assert_eq!(s.pfc[3].rx_pause, Some(4));
        assert_eq!(s.pfc[3].rx_pause_duration_us, Some(250));
        assert_eq!(s.pfc[4].tx_pause, Some(2));
        assert_eq!(s.pfc[3].tx_pkts, None, "$PORT_STAT has no per-priority tx");
        assert!(src.stamps_time());

        // Someone cleared the switch's counters: the values since are the rise.
        let mut cleared = PortCounters {
            frames_tx: 30,
            ..PortCounters::default()
        };
        cleared.pfc_rx[3] = 1;
        src.backend_mut().counters.insert(132, cleared);
        let s = src.read(&ports[0]).expect("read");
        assert_eq!(s.xmit_pkts, Some(30));
        assert_eq!(s.pfc[3].rx_pause, Some(1));
    }

    #[test]
    fn unknown_ports_and_backend_failures_are_errors_naming_the_port() {
        let mut src = source(Mac::default());
        let other = PortId::new("tor2", 1, Tier::Tor, Direction::Down);
        assert!(matches!(
            src.read(&other),
            Err(SourceError::UnknownPort(p)) if p == "tor2:1"
        ));
        let ports = src.ports();
        let e = src.read(&ports[1]).expect_err("no counters").to_string();
        assert!(e.contains("tor1:2") && e.contains("dev port 140"), "{e}");
    }
}
