//! The controller's side of a deployed fabric (PARALEON §III-A, Fig. 2): every monitor
//! interval each ToR's control plane sends its local FSD and the pause share of its ports,
//! each host its RNICs' uplink utilisation, normalised RTTs and pause share; once every ToR
//! has reported an interval, the network-wide FSD is their sum (insert-once), the metrics
//! are pooled, the [`Controller`] takes the interval, and a new setting gets the next
//! version, which the devices pick up from the replies to their reports.
//!
//! Reports come over the network and are not trusted: a ToR or host the controller was not
//! configured with, a report for an interval already closed, or one with numbers out of
//! range is refused with the reason and changes nothing. A ToR that stops reporting does
//! not stall tuning: an interval still open when a ToR reports one [`Rounds::HORIZON`]
//! intervals later is closed with the ToRs that did report (counted in
//! [`RoundStats::incomplete`]). The ToRs' reports move the intervals on; hosts' reports
//! join them: a host may not open an interval more than `HORIZON` ahead of the newest ToR
//! report, nor one more when 2 × `HORIZON` are open (a ToR's report closes the intervals it
//! leaves behind, so the open ones stay bounded).
//!
//! Interval numbers are the devices' clocks divided by λ_MI (the devices keep time with
//! PTP or NTP, as a fabric's switches and hosts do): the same number is the same interval
//! everywhere.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use thiserror::Error;

use crate::controller::{Controller, ControllerError, Outcome};
use crate::fsd::{Fsd, BINS};
use crate::sa::Setting;
use crate::utility::IntervalMetrics;

/// A ToR's monitor interval.
#[derive(Clone, Debug, PartialEq)]
pub struct TorReport {
    /// The ToR's name (as configured).
    pub tor: String,
    /// The interval's number (the ToRs' monitor intervals are aligned: the same number is
    /// the same λ_MI everywhere).
    pub interval: u64,
    /// Its local FSD.
    pub fsd: Fsd,
    /// The PFC pause share (0–1) of each of its ports in the interval.
    pub pause_fraction: Vec<f64>,
}

/// A host's monitor interval.
#[derive(Clone, Debug, PartialEq)]
pub struct HostReport {
    /// The host's name.
    pub host: String,
    /// The interval's number.
    pub interval: u64,
    /// Uplink utilisation (0–1) of each active RNIC.
    pub uplink_utilisation: Vec<f64>,
    /// Normalised RTT (0–1) of each RNIC pair it measured.
    pub normalised_rtt: Vec<f64>,
    /// The PFC pause share (0–1) of each RNIC.
    pub pause_fraction: Vec<f64>,
}

/// Why a report was refused.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum RoundError {
    /// Not a device the controller tunes.
    #[error("{kind} `{name}` is not in the tuned fabric")]
    Unknown {
        /// "ToR" or "host".
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// The interval was closed already (the report came too late, or twice).
    #[error("{who}: interval {interval} is closed (the controller is at {closed})")]
    Closed {
        /// The reporter.
        who: String,
        /// The report's interval.
        interval: u64,
        /// The last interval closed.
        closed: u64,
    },
    /// A ToR reported the same interval twice.
    #[error("ToR `{tor}` reported interval {interval} twice")]
    Duplicate {
        /// The ToR.
        tor: String,
        /// The interval.
        interval: u64,
    },
    /// A number out of its range.
    #[error("{who}, interval {interval}: {what}")]
    Invalid {
        /// The reporter.
        who: String,
        /// The interval.
        interval: u64,
        /// What is wrong.
        what: String,
    },
    /// The controller refused the interval's metrics.
    #[error(transparent)]
    Controller(#[from] ControllerError),
}

/// One closed interval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Closed {
    /// Its number.
    pub interval: u64,
    /// ToRs whose FSD is in it.
    pub tors: usize,
    /// What the controller did.
    pub outcome: Outcome,
    /// The setting's version after it.
    pub version: u64,
}

/// Counts since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct RoundStats {
    /// Intervals closed.
    pub closed: u64,
    /// Of them, closed without every ToR's report.
    pub incomplete: u64,
    /// Reports refused.
    pub refused: u64,
    /// Settings dispatched (versions after the first).
    pub dispatched: u64,
}

#[derive(Debug, Default)]
struct Open {
    tors: BTreeMap<String, Fsd>,
    metrics: IntervalMetrics,
}

/// The controller with its report bookkeeping.
#[derive(Debug)]
pub struct Rounds {
    controller: Controller,
    tors: BTreeSet<String>,
    hosts: BTreeSet<String>,
    open: BTreeMap<u64, Open>,
    /// The newest interval a ToR reported.
    newest: Option<u64>,
    /// The last interval closed (None: none yet).
    closed: Option<u64>,
    version: u64,
    stats: RoundStats,
}

impl Rounds {
    /// Intervals held open at most (a ToR this many intervals behind the others is left
    /// out of the interval it missed).
    pub const HORIZON: u64 = 4;

    /// A controller for the ToRs and hosts named (version 1 is the setting in force now).
    pub fn new(
        controller: Controller,
        tors: impl IntoIterator<Item = String>,
        hosts: impl IntoIterator<Item = String>,
    ) -> Rounds {
        Rounds {
            controller,
            tors: tors.into_iter().collect(),
            hosts: hosts.into_iter().collect(),
            open: BTreeMap::new(),
            newest: None,
            closed: None,
            version: 1,
            stats: RoundStats::default(),
        }
    }

    /// The setting in force and its version.
    pub fn setting(&self) -> (u64, &Setting) {
        (self.version, self.controller.in_force())
    }

    /// The controller.
    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// Counts since start.
    pub fn stats(&self) -> RoundStats {
        self.stats
    }

    /// The last interval closed.
    pub fn closed(&self) -> Option<u64> {
        self.closed
    }

    /// Whether a report for `interval` may be taken. A ToR's always moves the intervals on
    /// (the ones it leaves `HORIZON` behind close); a host's may not open an interval beyond
    /// `HORIZON` after the newest ToR report, nor one more when 2 × `HORIZON` are open.
    fn admit(&mut self, who: &str, interval: u64, tor: bool) -> Result<(), RoundError> {
        if let Some(closed) = self.closed {
            if interval <= closed {
                return Err(RoundError::Closed {
                    who: who.to_string(),
                    interval,
                    closed,
                });
            }
        }
        if tor || self.open.contains_key(&interval) {
            return Ok(());
        }
        let ahead = self
            .newest
            .is_some_and(|n| interval > n.saturating_add(Self::HORIZON));
        if ahead || self.open.len() as u64 >= 2 * Self::HORIZON {
            return Err(RoundError::Invalid {
                who: who.to_string(),
                interval,
                what: format!(
                    "ahead of the ToRs (at {}) or {} intervals open already",
                    self.newest.map_or("none".to_string(), |n| n.to_string()),
                    self.open.len()
                ),
            });
        }
        Ok(())
    }

    fn refuse<T>(&mut self, e: RoundError) -> Result<T, RoundError> {
        self.stats.refused += 1;
        Err(e)
    }

    /// A ToR's interval; returns the intervals it closed, oldest first.
    pub fn report_tor(&mut self, report: TorReport) -> Result<Vec<Closed>, RoundError> {
        if !self.tors.contains(&report.tor) {
            return self.refuse(RoundError::Unknown {
                kind: "ToR",
                name: report.tor,
            });
        }
        let invalid = |what: String| RoundError::Invalid {
            who: format!("ToR `{}`", report.tor),
            interval: report.interval,
            what,
        };
        if let Err(e) = check_fsd(&report.fsd)
            .and_then(|()| fractions("pause_fraction", &report.pause_fraction))
        {
            return self.refuse(invalid(e));
        }
        if let Err(e) = self.admit(&format!("ToR `{}`", report.tor), report.interval, true) {
            return self.refuse(e);
        }
        let open = self.open.entry(report.interval).or_default();
        if open.tors.contains_key(&report.tor) {
            return self.refuse(RoundError::Duplicate {
                tor: report.tor,
                interval: report.interval,
            });
        }
        open.metrics
            .pause_fraction
            .extend_from_slice(&report.pause_fraction);
        open.tors.insert(report.tor, report.fsd);
        let newest = self.newest.unwrap_or(0).max(report.interval);
        self.newest = Some(newest);
        self.close_ready(newest)
    }

    /// A host's interval (it joins the ToRs' when they close it).
    pub fn report_host(&mut self, report: HostReport) -> Result<(), RoundError> {
        if !self.hosts.contains(&report.host) {
            return self.refuse(RoundError::Unknown {
                kind: "host",
                name: report.host,
            });
        }
        let checked = fractions("uplink_utilisation", &report.uplink_utilisation)
            .and_then(|()| fractions("normalised_rtt", &report.normalised_rtt))
            .and_then(|()| fractions("pause_fraction", &report.pause_fraction));
        if let Err(what) = checked {
            return self.refuse(RoundError::Invalid {
                who: format!("host `{}`", report.host),
                interval: report.interval,
                what,
            });
        }
        if let Err(e) = self.admit(&format!("host `{}`", report.host), report.interval, false) {
            return self.refuse(e);
        }
        let m = &mut self.open.entry(report.interval).or_default().metrics;
        m.uplink_utilisation
            .extend_from_slice(&report.uplink_utilisation);
        m.normalised_rtt.extend_from_slice(&report.normalised_rtt);
        m.pause_fraction.extend_from_slice(&report.pause_fraction);
        Ok(())
    }

    /// Closes, oldest first, every open interval that is complete (every ToR reported) or
    /// has fallen [`Rounds::HORIZON`] intervals behind `newest`.
    fn close_ready(&mut self, newest: u64) -> Result<Vec<Closed>, RoundError> {
        let mut out = Vec::new();
        while let Some((&interval, open)) = self.open.first_key_value() {
            let complete = open.tors.len() == self.tors.len();
            let stale = newest.saturating_sub(interval) >= Self::HORIZON;
            if !(complete || stale) {
                break;
            }
            let Some((_, open)) = self.open.pop_first() else {
                break;
            };
            let fsd = Fsd::sum(open.tors.values());
            let outcome = self.controller.interval(&fsd, &open.metrics)?;
            if outcome.dispatch.is_some() {
                self.version += 1;
                self.stats.dispatched += 1;
            }
            self.closed = Some(interval);
            self.stats.closed += 1;
            if !complete {
                self.stats.incomplete += 1;
            }
            out.push(Closed {
                interval,
                tors: open.tors.len(),
                outcome,
                version: self.version,
            });
        }
        Ok(out)
    }
}

fn fractions(what: &str, values: &[f64]) -> Result<(), String> {
    match values
        .iter()
        .position(|v| !(v.is_finite() && (0.0..=1.0).contains(v)))
    {
        Some(i) => Err(format!("{what}[{i}] = {} is not in [0, 1]", values[i])),
        None => Ok(()),
    }
}

fn check_fsd(fsd: &Fsd) -> Result<(), String> {
    let counts = fsd
        .bins
        .iter()
        .enumerate()
        .map(|(i, v)| (format!("bins[{i}]"), *v))
        .chain([
            ("elephants".to_string(), fsd.elephants),
            ("mice".to_string(), fsd.mice),
        ]);
    for (name, v) in counts {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("fsd.{name} = {v} is not a flow count"));
        }
    }
    let binned: f64 = fsd.bins.iter().sum();
    if (binned - fsd.flows()).abs() > 1e-6 * binned.max(1.0) {
        return Err(format!(
            "fsd: {binned} flows in {BINS} bins, {} elephants and mice",
            fsd.flows()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ControllerConfig;
    use crate::fsd::truth_fsd;
    use crate::sa::{defaults, Space};

    fn rounds() -> Rounds {
        let space = Space::paraleon().unwrap();
        let start = defaults(&space, 100.0, &[]).unwrap();
        let c = Controller::new(ControllerConfig::default(), space, start, 1).unwrap();
        Rounds::new(
            c,
            ["tor0".to_string(), "tor1".to_string()],
            ["h0".to_string()],
        )
    }

    fn tor(name: &str, interval: u64, fsd: &Fsd) -> TorReport {
        TorReport {
            tor: name.into(),
            interval,
            fsd: fsd.clone(),
            pause_fraction: vec![0.0, 0.1],
        }
    }

    fn host(interval: u64) -> HostReport {
        HostReport {
            host: "h0".into(),
            interval,
            uplink_utilisation: vec![0.6],
            normalised_rtt: vec![0.5],
            pause_fraction: vec![0.0],
        }
    }

    /// An interval closes when both ToRs reported it, with their FSDs summed; traffic that
    /// holds (nothing was tuned for it yet) starts a search, whose trial settings come out
    /// as new versions.
    #[test]
    fn an_interval_closes_with_every_tor_and_lasting_traffic_dispatches_a_new_version() {
        let mut r = rounds();
        let elephants = truth_fsd((0..50).map(|i| 5_000_000 + i * 1_000), 1_000_000);
        let hold = u64::from(ControllerConfig::default().hold);
        assert_eq!(r.setting().0, 1);
        for t in 0..hold {
            r.report_host(host(t)).unwrap();
            assert!(r.report_tor(tor("tor0", t, &elephants)).unwrap().is_empty());
            let closed = r.report_tor(tor("tor1", t, &elephants)).unwrap();
            assert_eq!(closed.len(), 1);
            assert_eq!((closed[0].interval, closed[0].tors), (t, 2));
            if t + 1 < hold {
                assert!(!closed[0].outcome.triggered);
                assert_eq!(closed[0].version, 1);
            } else {
                // The traffic held: a search starts and the trial goes out.
                assert!(closed[0].outcome.triggered);
                assert_eq!(closed[0].version, 2);
            }
        }
        assert_eq!(r.setting().0, 2);
        assert_ne!(
            r.setting().1,
            &defaults(&Space::paraleon().unwrap(), 100.0, &[]).unwrap()
        );
        assert_eq!(r.stats().dispatched, 1);
    }

    /// A ToR gone silent does not stall tuning: its intervals close without it once the
    /// other is `horizon` intervals ahead; open intervals stay bounded; its late report is
    /// refused.
    #[test]
    fn a_silent_tor_is_left_behind_and_its_late_report_refused() {
        let mut r = rounds();
        let mice = truth_fsd((0..50).map(|i| 10_000 + i * 100), 1_000_000);
        let mut closed = Vec::new();
        for t in 0..10 {
            closed.extend(r.report_tor(tor("tor0", t, &mice)).unwrap());
            assert!(r.open.len() as u64 <= Rounds::HORIZON);
        }
        assert_eq!(
            closed.iter().map(|c| c.interval).collect::<Vec<_>>(),
            (0..=9 - Rounds::HORIZON).collect::<Vec<_>>()
        );
        assert!(closed.iter().all(|c| c.tors == 1));
        assert_eq!(r.stats().incomplete, closed.len() as u64);
        let e = r.report_tor(tor("tor1", 2, &mice)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ToR `tor1`: interval 2 is closed (the controller is at 5)"
        );
        // Hosts cannot open intervals far ahead of the ToRs (at 9), nor many of them.
        assert!(r.report_host(host(100)).is_err());
        let accepted = (10..30).filter(|t| r.report_host(host(*t)).is_ok()).count();
        assert_eq!(accepted as u64, Rounds::HORIZON);
        assert!(r.open.len() as u64 <= 2 * Rounds::HORIZON);
        // The ToR's next report is taken whatever the hosts opened, and closes what it
        // leaves behind.
        let closed = r.report_tor(tor("tor0", 20, &mice)).unwrap();
        assert!(!closed.is_empty());
        assert!(
            r.open.keys().all(|t| *t > 20 - Rounds::HORIZON),
            "{:?}",
            r.open.keys()
        );
    }

    #[test]
    fn bad_reports_are_refused_by_name_and_change_nothing() {
        let mut r = rounds();
        let mice = truth_fsd((0..50).map(|i| 10_000 + i * 100), 1_000_000);
        let mut lying = mice.clone();
        lying.mice += 7.0;
        let mut negative = mice.clone();
        negative.bins[3] = -1.0;
        let cases: Vec<(Result<(), RoundError>, &str)> = vec![
            (
                r.report_tor(tor("tor9", 0, &mice)).map(drop),
                "ToR `tor9` is not in the tuned fabric",
            ),
            (
                r.report_tor(tor("tor0", 0, &lying)).map(drop),
                "ToR `tor0`, interval 0: fsd: 50 flows in 16 bins, 57 elephants and mice",
            ),
            (
                r.report_tor(tor("tor0", 0, &negative)).map(drop),
                "fsd.bins[3] = -1 is not a flow count",
            ),
            (
                r.report_tor(TorReport {
                    pause_fraction: vec![f64::NAN],
                    ..tor("tor0", 0, &mice)
                })
                .map(drop),
                "pause_fraction[0] = NaN is not in [0, 1]",
            ),
            (
                r.report_host(HostReport {
                    normalised_rtt: vec![0.2, 1.5],
                    ..host(0)
                }),
                "host `h0`, interval 0: normalised_rtt[1] = 1.5 is not in [0, 1]",
            ),
            (
                r.report_host(HostReport {
                    host: "h7".into(),
                    ..host(0)
                }),
                "host `h7` is not in the tuned fabric",
            ),
        ];
        for (result, says) in cases {
            let e = result.expect_err(says).to_string();
            assert!(e.contains(says), "{says}: {e}");
        }
        assert_eq!(r.stats().refused, 6);
        assert!(r.open.is_empty(), "nothing of a refused report was kept");
        r.report_tor(tor("tor0", 0, &mice)).unwrap();
        let e = r.report_tor(tor("tor0", 0, &mice)).unwrap_err();
        assert!(matches!(e, RoundError::Duplicate { .. }), "{e}");
    }
}
