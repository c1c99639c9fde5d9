//! PARALEON on a ToR (§III-A, Fig. 2), as the daemon runs it: every monitor interval λ_MI
//! the switch's Elastic Sketch is read and cleared through the backend
//! ([`crate::sketch::read_and_reset`]), its flows go through the ToR's ternary-state monitor
//! (`hawkmesh_tuner::TorMonitor`), and the local FSD and each port's PFC pause share go to
//! the analyzer's tuning controller; a reply whose setting has a new version is written
//! into the program's ECN table ([`crate::ecn_table::ProgramEcn`]: Kmin, Kmax, Pmax).
//!
//! Intervals are numbered by the Unix clock (time / λ_MI), the same numbering on every
//! device of the fabric (their clocks kept by PTP or NTP). An interval whose readout
//! failed is not reported (the controller closes it without this ToR).

use std::collections::HashMap;

use hawkmesh_knobs::apply::{changes, KnobWriter};
use hawkmesh_knobs::{KMAX, KMIN, PMAX};
use hawkmesh_proto::v1 as pb;
use hawkmesh_tuner::fsd::{MonitorConfig, TorMonitor};
use hawkmesh_wire::control::{EcnProfile, QdepthUnit};

use crate::backend::{BackendError, SwitchBackend};
use crate::ecn_table::ProgramEcn;
use crate::sketch::{deployed_geometry, read_and_reset};

/// How the ToR takes part.
#[derive(Clone, Debug, PartialEq)]
pub struct TorTuningConfig {
    /// λ_MI, ns.
    pub interval_ns: u64,
    /// Bytes a sketch packet stands for (the sketch counts packets): RoCEv2 at a 1,024-byte
    /// MTU is 1,082 bytes on the wire (Ethernet 14, IPv4 20, UDP 8, BTH 12, payload 1,024,
    /// ICRC 4).
    pub packet_bytes: u64,
    /// Ports whose PFC pause share is reported.
    pub pause_ports: Vec<u16>,
    /// Ports whose ECN profile the controller sets.
    pub ecn_ports: Vec<u16>,
    /// The ECN profile in force when the daemon starts (the knob table's defaults at the
    /// ports' speed unless told).
    pub profile: EcnProfile,
}

/// The ToR's monitor between intervals.
#[derive(Debug)]
pub struct TorTuning {
    config: TorTuningConfig,
    monitor: TorMonitor,
    /// The last interval measured.
    last: Option<u64>,
    /// Per port, its cumulative paused µs per priority at the last read.
    paused: HashMap<u16, [u64; 8]>,
    /// The setting written: the controller's epoch and version.
    applied: (u64, u64),
    profile: EcnProfile,
    /// Port counter reads that failed, and the last failure.
    unread_ports: u64,
    last_port_error: Option<String>,
}

impl TorTuning {
    /// A monitor with PARALEON's Table III settings (τ = 1 MB, δ = 3).
    pub fn new(config: TorTuningConfig) -> Self {
        TorTuning {
            profile: config.profile,
            config,
            monitor: TorMonitor::new(MonitorConfig::default()),
            last: None,
            paused: HashMap::new(),
            applied: (0, 1),
            unread_ports: 0,
            last_port_error: None,
        }
    }

    /// The interval that ended by `unix_ns`, when it is one not measured yet.
    pub fn due(&self, unix_ns: u64) -> Option<u64> {
        let ended = (unix_ns / self.config.interval_ns.max(1)).checked_sub(1)?;
        match self.last {
            Some(last) if ended <= last => None,
            _ => Some(ended),
        }
    }

    /// The setting version last written.
    pub fn applied(&self) -> u64 {
        self.applied.1
    }

    /// Port counter reads that failed so far, and the last failure.
    pub fn unread_ports(&self) -> (u64, Option<&str>) {
        (self.unread_ports, self.last_port_error.as_deref())
    }

    /// The ECN profile last written.
    pub fn profile(&self) -> EcnProfile {
        self.profile
    }

    /// Reads and clears the sketch, updates the flow states, reads the ports' pause
    /// counters: `interval`'s report as `tor`.
    pub fn measure(
        &mut self,
        backend: &mut dyn SwitchBackend,
        tor: &str,
        interval: u64,
    ) -> Result<pb::TorInterval, BackendError> {
        self.last = Some(interval);
        let readout = read_and_reset(backend, deployed_geometry(), self.monitor.remembered())?;
        let bytes = self.config.packet_bytes;
        let fsd = self.monitor.update_sketch(
            readout.named_bytes(bytes),
            readout.reached(),
            readout.packets.saturating_mul(bytes),
        );
        let mut pause_fraction = Vec::with_capacity(self.config.pause_ports.len());
        let span_us = self.config.interval_ns as f64 / 1_000.0;
        for &port in &self.config.pause_ports {
            // A port whose counters cannot be read (not added on the switch) is left out
            // of this interval's pause shares, not the whole report.
            let now = match backend.port_counters(port) {
                Ok(c) => c.paused_rx_us,
                Err(e) => {
                    self.unread_ports += 1;
                    self.last_port_error = Some(e.to_string());
                    continue;
                }
            };
            if let Some(before) = self.paused.insert(port, now) {
                // The longest-paused priority's share of the interval (IEEE 802.1Qbb
                // pauses each priority on its own; PARALEON's λ_xoff per device).
                let paused = now
                    .iter()
                    .zip(before.iter())
                    .map(|(n, b)| n.saturating_sub(*b))
                    .max()
                    .unwrap_or(0);
                pause_fraction.push((paused as f64 / span_us).clamp(0.0, 1.0));
            }
        }
        Ok(pb::TorInterval {
            tor: tor.to_string(),
            interval,
            bins: fsd.bins.to_vec(),
            elephants: fsd.elephants,
            mice: fsd.mice,
            elephant_flows: fsd.elephant_flows,
            potential_elephants: fsd.potential_elephants,
            pause_fraction,
        })
    }

    /// Writes a reply's ECN knobs when its setting is new: a newer version, or another
    /// epoch (a restarted controller counts from 1 again; the first reply's epoch is taken
    /// as the one in force at start). Returns the version written, or `None` when there was
    /// nothing new. A setting the switch
    /// cannot hold is an error naming the knob or table; the version stays unwritten (the
    /// next reply tries again).
    pub fn apply(
        &mut self,
        backend: &mut dyn SwitchBackend,
        reply: &pb::TuningReply,
    ) -> Result<Option<u64>, String> {
        let (epoch, version) = self.applied;
        if epoch == 0 {
            // The first reply: its setting is the one in force if it is version 1.
            self.applied.0 = reply.epoch;
        }
        if reply.epoch == self.applied.0 && reply.version <= version {
            return Ok(None);
        }
        let ecn: Vec<(&str, f64)> = reply
            .knobs
            .iter()
            .filter(|k| [KMIN.name, KMAX.name, PMAX.name].contains(&k.name.as_str()))
            .map(|k| (k.name.as_str(), k.value))
            .collect();
        let changes = changes(&ecn).map_err(|e| e.to_string())?;
        if !changes.is_empty() {
            let mut writer = ProgramEcn::new(
                backend,
                self.config.ecn_ports.clone(),
                QdepthUnit::TofinoCells,
                self.profile,
                false,
            );
            writer.apply(&changes).map_err(|e| e.to_string())?;
            self.profile = writer.profile();
        }
        self.applied = (reply.epoch, reply.version);
        Ok(Some(reply.version))
    }
}

/// The knob table's ECN defaults at `gbps` (Kmin and Kmax scale with the link speed).
pub fn default_profile(gbps: f64) -> EcnProfile {
    // The three have their own defaults (tested in hawkmesh-knobs), never another setting's.
    let value = |k: &hawkmesh_knobs::Knob| k.to_si(k.default_at(gbps).unwrap_or(0.0));
    EcnProfile {
        kmin_bytes: value(&KMIN).round() as u64,
        kmax_bytes: value(&KMAX).round() as u64,
        pmax: value(&PMAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelBackend;
    use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
    use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
    use hawkmesh_dataplane::packets;
    use hawkmesh_wire::dataplane::CPU_PORT;
    use hawkmesh_wire::telemetry::FiveTuple;
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    fn config() -> TorTuningConfig {
        TorTuningConfig {
            interval_ns: 10_000_000,
            packet_bytes: 1_082,
            pause_ports: vec![2],
            ecn_ports: vec![0, 1],
            profile: default_profile(100.0),
        }
    }

    /// Intervals by the Unix clock: the one that ended, once.
    #[test]
    fn an_interval_is_due_once_after_it_ended() {
        let mut t = TorTuning::new(config());
        assert_eq!(t.due(5_000_000), None, "interval 0 has not ended");
        assert_eq!(t.due(10_000_001), Some(0));
        t.last = Some(0);
        assert_eq!(t.due(19_000_000), None);
        assert_eq!(
            t.due(35_000_000),
            Some(2),
            "a late look takes the last ended"
        );
    }

    /// The readout through a backend: the flows sent show in the FSD (bytes = packets ×
    /// packet_bytes) and the sketch is cleared; a newer version's ECN knobs are written to
    /// every ECN port, an old one is ignored. (The model has no MAC counters: pause shares
    /// are tested over BF Runtime, bfrt-model/tests/daemon.rs.)
    #[test]
    fn the_tor_measures_its_sketch_and_writes_new_ecn_settings() {
        let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
        let model = Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model");
        let model = Rc::new(RefCell::new(model));
        let mut backend = ModelBackend::new(model.clone());
        for i in 0..30u32 {
            let flow = FiveTuple::rocev2([10, 0, 0, 1], 49152 + (i % 3) as u16, [10, 0, 1, 1]);
            let p = packets::rocev2_data(&program, &flow, 0, 2, 64, i, 1024);
            let input = IngressInput {
                ingress_port: 0,
                tstamp_ns: 1_000 * u64::from(i),
                routed_egress_port: Some(2),
            };
            model
                .borrow_mut()
                .process(&p, &input, 0)
                .expect("processed");
        }
        let mut t = TorTuning::new(TorTuningConfig {
            pause_ports: vec![],
            ..config()
        });
        let report = t.measure(&mut backend, "l0", 7).expect("measured");
        assert_eq!((report.tor.as_str(), report.interval), ("l0", 7));
        assert_eq!(report.bins.len(), 16);
        assert!((report.mice - 3.0).abs() < 1e-9, "{report:?}");
        // 10 packets × 1,082 bytes: bin of 10.8 KB (8–16 KB).
        assert!((report.bins[4] - 3.0).abs() < 1e-9, "{:?}", report.bins);
        let again = t.measure(&mut backend, "l0", 8).expect("measured");
        assert_eq!(again.mice + again.elephants, 0.0, "the sketch was cleared");

        let reply = |version: u64, kmax: f64| pb::TuningReply {
            version,
            knobs: vec![
                pb::KnobValue {
                    name: "kmin_kb".into(),
                    value: 200.0,
                },
                pb::KnobValue {
                    name: "kmax_kb".into(),
                    value: kmax,
                },
                pb::KnobValue {
                    name: "pmax".into(),
                    value: 0.3,
                },
                pb::KnobValue {
                    name: "rpg_hai_rate".into(),
                    value: 80.0,
                },
            ],
            closed: 8,
            tuning: true,
            epoch: 77,
        };
        assert_eq!(t.apply(&mut backend, &reply(1, 900.0)), Ok(None));
        assert_eq!(t.apply(&mut backend, &reply(2, 900.0)), Ok(Some(2)));
        assert_eq!(
            t.profile(),
            EcnProfile {
                kmin_bytes: 200_000,
                kmax_bytes: 900_000,
                pmax: 0.3
            }
        );
        assert_eq!(t.applied(), 2);
        // A restarted controller (another epoch) counts from 1 again: its setting is taken.
        let restarted = pb::TuningReply {
            epoch: 78,
            ..reply(1, 1_000.0)
        };
        assert_eq!(t.apply(&mut backend, &restarted), Ok(Some(1)));
        assert_eq!(t.profile().kmax_bytes, 1_000_000);
        assert_eq!(t.apply(&mut backend, &restarted), Ok(None));
        assert_eq!(
            t.apply(
                &mut backend,
                &pb::TuningReply {
                    epoch: 78,
                    ..reply(2, 900.0)
                }
            ),
            Ok(Some(2))
        );
        assert_eq!(t.applied(), 2);
        // A setting the program cannot hold is refused by name, the version not taken.
        let e = t.apply(&mut backend, &reply(3, 1e12)).unwrap_err();
        assert!(e.contains("ecn_profile") && e.contains("32 bits"), "{e}");
        assert_eq!(t.applied(), 2);
    }
}
