//! PARALEON on a host (§III-A, Fig. 2): every monitor interval λ_MI the host reports its
//! RNICs' runtime metrics to the analyzer's tuning controller — each active uplink's
//! utilisation (the interface's transmitted bytes over its speed, from sysfs) and the
//! normalised RTT of each RNIC pair it probed (Eq. 1's O_RTT) — and a reply whose setting
//! has a new version is written into the RNICs' DCQCN parameters
//! ([`crate::knob_writer::ConnectxSysfs`]: `/sys/class/net/<if>/ecn/roce_rp|roce_np`).
//!
//! Normalised RTT: PARALEON takes base path delay / RTT with the base from hop count ×
//! minimum link delay (after Swift); a host does not know its paths' hops and link delays,
//! so the base of a pair is the smallest network RTT the agent measured to it (the same
//! floor: propagation and serialisation without queueing). Each pair's value for an
//! interval is the mean of base / RTT over its probes in it.
//!
//! Intervals are numbered by the Unix clock (time / λ_MI), as the ToRs number theirs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hawkmesh_knobs::apply::{changes, KnobWriter};
use hawkmesh_knobs::Device;
use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::tuning_controller_client::TuningControllerClient;
use tonic::transport::Channel;

use crate::knob_writer::ConnectxSysfs;

/// RNIC pairs remembered at most (a bound against a pinglist gone wild).
pub const MAX_PAIRS: usize = 65_536;

#[derive(Clone, Copy, Debug)]
struct Pair {
    base_ns: u64,
    sum: f64,
    samples: u32,
}

/// The probes' network RTTs of the current interval, per RNIC pair.
#[derive(Debug, Default)]
pub struct RttWindow {
    pairs: HashMap<(u32, String, u32), Pair>,
}

impl RttWindow {
    /// An answered probe from NIC `nic` to `host`'s NIC `target_nic`.
    pub fn observe(&mut self, nic: u32, host: &str, target_nic: u32, rtt_ns: u64) {
        if rtt_ns == 0 {
            return;
        }
        let key = (nic, host.to_string(), target_nic);
        if !self.pairs.contains_key(&key) && self.pairs.len() >= MAX_PAIRS {
            return;
        }
        let p = self.pairs.entry(key).or_insert(Pair {
            base_ns: rtt_ns,
            sum: 0.0,
            samples: 0,
        });
        p.base_ns = p.base_ns.min(rtt_ns);
        p.sum += p.base_ns as f64 / rtt_ns as f64;
        p.samples += 1;
    }

    /// Each pair's mean normalised RTT in the interval (pairs not probed in it left out);
    /// starts the next interval (the bases are kept).
    pub fn take(&mut self) -> Vec<f64> {
        let mut out = Vec::new();
        for p in self.pairs.values_mut() {
            if p.samples > 0 {
                out.push((p.sum / f64::from(p.samples)).clamp(0.0, 1.0));
            }
            p.sum = 0.0;
            p.samples = 0;
        }
        out
    }
}

/// An interface's transmit counter and speed, read from sysfs under `root`.
#[derive(Debug)]
pub struct Uplink {
    root: PathBuf,
    netdev: String,
    last: Option<u64>,
}

impl Uplink {
    /// `netdev`'s files under `root` (`/` on a host).
    pub fn new(root: &Path, netdev: &str) -> Self {
        Uplink {
            root: root.to_path_buf(),
            netdev: netdev.to_string(),
            last: None,
        }
    }

    fn read(&self, file: &str) -> Result<u64, String> {
        let path = self
            .root
            .join(format!("sys/class/net/{}/{file}", self.netdev));
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        text.trim()
            .parse()
            .map_err(|_| format!("{}: `{}` is not a number", path.display(), text.trim()))
    }

    /// The utilisation since the last call over `span_s` seconds: None on the first call,
    /// or when the interface sent nothing (not an active uplink).
    pub fn utilisation(&mut self, span_s: f64) -> Result<Option<f64>, String> {
        let tx = self.read("statistics/tx_bytes")?;
        let before = self.last.replace(tx);
        let Some(before) = before else {
            return Ok(None);
        };
        let sent = tx.saturating_sub(before);
        if sent == 0 {
            return Ok(None);
        }
        // sysfs `speed` is Mb/s (-1 or absent on a link that is down: not active).
        let mbps = self.read("speed").unwrap_or(0);
        if mbps == 0 || span_s <= 0.0 {
            return Ok(None);
        }
        Ok(Some(
            (sent as f64 * 8.0 / (mbps as f64 * 1e6 * span_s)).clamp(0.0, 1.0),
        ))
    }
}

/// What the host's tuning task needs.
#[derive(Debug)]
pub struct HostTuning {
    /// The host's name.
    pub host: String,
    /// λ_MI.
    pub interval: Duration,
    /// The RNICs' interfaces (their sysfs names).
    pub netdevs: Vec<String>,
    /// The sysfs root (`/`; tests use a tree of their own).
    pub root: PathBuf,
    /// Where the interfaces' results leave their RTTs.
    pub rtts: Arc<Mutex<RttWindow>>,
}

/// Counts of the task, at its end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostTuningStats {
    /// Intervals the controller took.
    pub reported: u64,
    /// Intervals it did not (refused, unreachable).
    pub failed: u64,
    /// Settings written.
    pub applied: u64,
}

/// Reports every interval until `stop`, writing each new setting into the RNICs.
pub async fn run(tuning: HostTuning, channel: Channel, stop: Arc<AtomicBool>) -> HostTuningStats {
    let mut client = TuningControllerClient::new(channel);
    let mut uplinks: Vec<Uplink> = tuning
        .netdevs
        .iter()
        .map(|n| Uplink::new(&tuning.root, n))
        .collect();
    let span_ns = u64::try_from(tuning.interval.as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    let mut writer = ConnectxSysfs::new(&tuning.root, tuning.netdevs.clone(), false);
    // The setting written: the controller's epoch (0: none seen yet) and version.
    let mut applied = (0u64, 1u64);
    let mut stats = HostTuningStats::default();
    let mut failing = false;
    let mut logged_read = false;
    while !stop.load(Ordering::Acquire) {
        // To the next boundary of the Unix-clock numbering.
        let now = hawkmesh_proto::tuning::unix_ns();
        let next = (now / span_ns + 1) * span_ns;
        tokio::time::sleep(Duration::from_nanos(next - now)).await;
        let interval = next / span_ns - 1;
        let mut uplink_utilisation = Vec::new();
        for u in &mut uplinks {
            match u.utilisation(span_ns as f64 / 1e9) {
                Ok(Some(v)) => uplink_utilisation.push(v),
                Ok(None) => {}
                Err(e) if !logged_read => {
                    tracing::warn!("tuning: {e}");
                    logged_read = true;
                }
                Err(_) => {}
            }
        }
        let normalised_rtt = tuning.rtts.lock().map(|mut w| w.take()).unwrap_or_default();
        let report = pb::HostInterval {
            host: tuning.host.clone(),
            interval,
            uplink_utilisation,
            normalised_rtt,
            pause_fraction: Vec::new(),
        };
        let reply =
            tokio::time::timeout(span_ns_duration(span_ns), client.report_host(report)).await;
        let reply = match reply {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(status)) => {
                stats.failed += 1;
                // A closed interval is a late report, not an outage.
                if status.code() != tonic::Code::OutOfRange && !failing {
                    tracing::warn!(
                        "tuning: the controller did not take a report: {}",
                        status.message()
                    );
                    failing = true;
                }
                continue;
            }
            Err(_) => {
                stats.failed += 1;
                if !failing {
                    tracing::warn!("tuning: no reply from the controller in time");
                    failing = true;
                }
                continue;
            }
        };
        failing = false;
        stats.reported += 1;
        if applied.0 == 0 {
            applied.0 = reply.epoch;
        }
        // New: a newer version, or another epoch (a restarted controller counts from 1).
        if reply.epoch == applied.0 && reply.version <= applied.1 {
            continue;
        }
        let values: Vec<(&str, f64)> = reply
            .knobs
            .iter()
            .filter(|k| hawkmesh_knobs::knob(&k.name).is_ok_and(|k| k.device() == Device::Rnic))
            // The RoCE congestion parameters are whole numbers in their units (one integer
            // per sysfs file); the controller's search moves them continuously.
            .map(|k| (k.name.as_str(), k.value.round()))
            .collect();
        match changes(&values)
            .map_err(|e| e.to_string())
            .and_then(|c| writer.apply(&c).map_err(|e| e.to_string()))
        {
            Ok(done) => {
                applied = (reply.epoch, reply.version);
                stats.applied += 1;
                tracing::info!(
                    "tuning: setting {} written ({} RNIC parameters)",
                    reply.version,
                    done.len()
                );
            }
            Err(e) => tracing::warn!("tuning: setting {} not written: {e}", reply.version),
        }
    }
    stats
}

/// A reply is waited for one interval at most (at least 100 ms).
fn span_ns_duration(span_ns: u64) -> Duration {
    Duration::from_nanos(span_ns).max(Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalised_rtts_take_each_pairs_floor_as_its_base() {
        let mut w = RttWindow::default();
        w.observe(0, "h1", 0, 10_000);
        w.observe(0, "h1", 0, 20_000);
        w.observe(1, "h2", 0, 8_000);
        w.observe(1, "h2", 0, 0);
        let mut got = w.take();
        got.sort_by(f64::total_cmp);
        // h1: (10/10 + 10/20) / 2 = 0.75; h2: 1.
        assert_eq!(got, vec![0.75, 1.0]);
        assert!(w.take().is_empty(), "a new interval");
        w.observe(0, "h1", 0, 40_000);
        assert_eq!(w.take(), vec![0.25], "the base is kept");
    }

    #[test]
    fn uplink_utilisation_comes_from_the_transmit_counter_and_speed() {
        let root = std::env::temp_dir().join(format!("hawkmesh-uplink-{}", std::process::id()));
        let dir = root.join("sys/class/net/eth9");
        std::fs::create_dir_all(dir.join("statistics")).unwrap();
        std::fs::write(dir.join("speed"), "100000\n").unwrap();
        std::fs::write(dir.join("statistics/tx_bytes"), "1000\n").unwrap();
        let mut u = Uplink::new(&root, "eth9");
        assert_eq!(
            u.utilisation(0.01),
            Ok(None),
            "the first read is the baseline"
        );
        // 62.5 MB in 10 ms at 100 Gbit/s: half the link.
        std::fs::write(dir.join("statistics/tx_bytes"), "62501000\n").unwrap();
        assert_eq!(u.utilisation(0.01), Ok(Some(0.5)));
        assert_eq!(u.utilisation(0.01), Ok(None), "nothing sent: not active");
        std::fs::write(dir.join("statistics/tx_bytes"), "garbage\n").unwrap();
        let e = u.utilisation(0.01).unwrap_err();
        assert!(e.contains("tx_bytes") && e.contains("garbage"), "{e}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
