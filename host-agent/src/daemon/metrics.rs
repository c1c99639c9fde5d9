//! The daemon's counters and their Prometheus text exposition (`GET /metrics`, format
//! 0.0.4: <https://prometheus.io/docs/instrumenting/exposition_formats/>).
//!
//! Counters are atomics written by the interface threads and the upload tasks and read by
//! the HTTP handler; nothing is locked on the probing path.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Upper bounds of the RTT histograms' buckets, ns (5 µs to 500 ms: a software-timestamped
/// RTT over a few switches is some µs, a congested one ms; above the last a probe times
/// out).
pub const RTT_BUCKETS_NS: [u64; 14] = [
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
    500_000_000,
];

/// A cumulative histogram of durations.
#[derive(Debug, Default)]
pub struct Histogram {
    buckets: [AtomicU64; RTT_BUCKETS_NS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Adds a sample.
    pub fn observe(&self, ns: u64) {
        if let Some(i) = RTT_BUCKETS_NS.iter().position(|le| ns <= *le) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Samples taken.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0;
        for (le, bucket) in RTT_BUCKETS_NS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels},le=\"{}\"}} {cumulative}",
                seconds(*le)
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {}",
            seconds(self.sum_ns.load(Ordering::Relaxed))
        );
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

fn seconds(ns: u64) -> String {
    format!("{}", ns as f64 * 1e-9)
}

/// One interface's counters.
#[derive(Debug, Default)]
pub struct InterfaceMetrics {
    /// Its NIC index.
    pub nic: u32,
    /// Probes handed to the transport.
    pub probes_sent: AtomicU64,
    /// Probes answered with both ACKs.
    pub probes_answered: AtomicU64,
    /// Probes without both ACKs within the timeout.
    pub probes_timeout: AtomicU64,
    /// Probes the transport refused (no route…): never on the network, not uploaded.
    pub probes_not_sent: AtomicU64,
    /// Probes whose timestamps contradicted each other (not uploaded).
    pub probes_inconsistent: AtomicU64,
    /// Answered probes measured on the host clock (no kernel or NIC timestamp) on either
    /// side.
    pub host_clock_results: AtomicU64,
    /// First ACKs and delay ACKs sent (answering other agents' probes).
    pub acks_sent: AtomicU64,
    /// Datagrams dropped (malformed, misaddressed, stale).
    pub datagrams_dropped: AtomicU64,
    /// Probe targets in the current pinglist.
    pub targets: AtomicU64,
    /// Path traces started.
    pub traces_started: AtomicU64,
    /// Path traces that gave a path.
    pub traces_completed: AtomicU64,
    /// Path traces that failed (see the log for why).
    pub traces_failed: AtomicU64,
    /// ICMP destination-unreachable answers to probes or ACKs (with path tracing on: the
    /// sockets then read ICMP errors).
    pub icmp_unreachable: AtomicU64,
    /// Service connections traced (targets of the service-tracing loop).
    pub service_targets: AtomicU64,
    /// Service-tracing probes answered.
    pub service_probes_answered: AtomicU64,
    /// HAWKEYE polling packets sent.
    pub polls_sent: AtomicU64,
    /// Polls the rate limits held back.
    pub polls_limited: AtomicU64,
    /// Polls that failed to send (see the log).
    pub polls_failed: AtomicU64,
    /// Network RTT of answered probes.
    pub network_rtt: Histogram,
    /// Responder delay of answered probes.
    pub responder_delay: Histogram,
}

/// Every counter of the daemon.
#[derive(Debug, Default)]
pub struct Metrics {
    /// The agent's incarnation.
    pub incarnation: AtomicU64,
    /// Per interface.
    pub interfaces: Vec<InterfaceMetrics>,
    /// Registrations the controller accepted (the first and re-registrations).
    pub registrations: AtomicU64,
    /// Pinglists fetched.
    pub pinglist_fetches: AtomicU64,
    /// Pinglist fetches that failed.
    pub pinglist_failures: AtomicU64,
    /// Results produced for upload.
    pub results: AtomicU64,
    /// Results dropped before they were batched (too many waiting).
    pub results_dropped_pending: AtomicU64,
    /// Batches made.
    pub batches: AtomicU64,
    /// Uploads the analyzer acknowledged.
    pub uploads_ok: AtomicU64,
    /// Uploads that failed (each batch is kept and sent again, unless refused for good).
    pub uploads_failed: AtomicU64,
    /// Batches the analyzer acknowledged as duplicates (resent after a lost answer).
    pub uploads_duplicate: AtomicU64,
    /// Results the analyzer acknowledged.
    pub results_delivered: AtomicU64,
    /// Results the analyzer counted late (their period was analysed already).
    pub results_late: AtomicU64,
    /// Batches dropped because the buffer was full (the analyzer away too long).
    pub batches_dropped_full: AtomicU64,
    /// Batches the analyzer refused as malformed (INVALID_ARGUMENT): dropped.
    pub batches_dropped_invalid: AtomicU64,
    /// Batches the analyzer refused as too old (OUT_OF_RANGE): dropped.
    pub batches_dropped_too_old: AtomicU64,
    /// Results in dropped batches.
    pub results_dropped: AtomicU64,
    /// Bytes of batches waiting for the analyzer's acknowledgement.
    pub buffered_bytes: AtomicU64,
    /// Batches waiting for it.
    pub buffered_batches: AtomicU64,
}

impl Metrics {
    /// Counters for interfaces with NIC indices `nics`.
    pub fn new(nics: &[u32]) -> Self {
        Metrics {
            interfaces: nics
                .iter()
                .map(|nic| InterfaceMetrics {
                    nic: *nic,
                    ..InterfaceMetrics::default()
                })
                .collect(),
            ..Metrics::default()
        }
    }

    /// The counters in Prometheus text format.
    pub fn render(&self, host: &str) -> String {
        let mut out = String::new();
        let host = escape(host);
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP hawkmesh_host_agent_incarnation The agent's incarnation.\n\
             # TYPE hawkmesh_host_agent_incarnation gauge"
        );
        let _ = writeln!(
            out,
            "hawkmesh_host_agent_incarnation{{host=\"{host}\"}} {}",
            get(&self.incarnation)
        );
        type Field = fn(&InterfaceMetrics) -> &AtomicU64;
        let per_interface: [(&str, &str, &str, Field); 18] = [
            (
                "hawkmesh_host_probes_sent_total",
                "counter",
                "Probes sent.",
                |m| &m.probes_sent,
            ),
            (
                "hawkmesh_host_probes_answered_total",
                "counter",
                "Probes answered with both ACKs.",
                |m| &m.probes_answered,
            ),
            (
                "hawkmesh_host_probes_timeout_total",
                "counter",
                "Probes without both ACKs within the timeout.",
                |m| &m.probes_timeout,
            ),
            (
                "hawkmesh_host_probes_not_sent_total",
                "counter",
                "Probes the kernel refused to send (no route...).",
                |m| &m.probes_not_sent,
            ),
            (
                "hawkmesh_host_probes_inconsistent_total",
                "counter",
                "Probes whose timestamps contradicted each other (not uploaded).",
                |m| &m.probes_inconsistent,
            ),
            (
                "hawkmesh_host_host_clock_results_total",
                "counter",
                "Answered probes measured on the host clock: no kernel or NIC timestamp came.",
                |m| &m.host_clock_results,
            ),
            (
                "hawkmesh_host_acks_sent_total",
                "counter",
                "ACKs and delay ACKs sent answering probes.",
                |m| &m.acks_sent,
            ),
            (
                "hawkmesh_host_datagrams_dropped_total",
                "counter",
                "Datagrams dropped: malformed, misaddressed or stale.",
                |m| &m.datagrams_dropped,
            ),
            (
                "hawkmesh_host_probe_targets",
                "gauge",
                "Targets in the current pinglist.",
                |m| &m.targets,
            ),
            (
                "hawkmesh_host_traces_started_total",
                "counter",
                "Path traces started.",
                |m| &m.traces_started,
            ),
            (
                "hawkmesh_host_traces_completed_total",
                "counter",
                "Path traces that gave a path.",
                |m| &m.traces_completed,
            ),
            (
                "hawkmesh_host_traces_failed_total",
                "counter",
                "Path traces that failed.",
                |m| &m.traces_failed,
            ),
            (
                "hawkmesh_host_icmp_unreachable_total",
                "counter",
                "ICMP destination-unreachable answers to probes, ACKs or traces.",
                |m| &m.icmp_unreachable,
            ),
            (
                "hawkmesh_host_service_connections",
                "gauge",
                "Service connections traced.",
                |m| &m.service_targets,
            ),
            (
                "hawkmesh_host_service_probes_answered_total",
                "counter",
                "Service-tracing probes answered.",
                |m| &m.service_probes_answered,
            ),
            (
                "hawkmesh_host_polls_sent_total",
                "counter",
                "HAWKEYE polling packets sent on a service connection's high RTT.",
                |m| &m.polls_sent,
            ),
            (
                "hawkmesh_host_polls_limited_total",
                "counter",
                "Polls held back by the polling rate limits.",
                |m| &m.polls_limited,
            ),
            (
                "hawkmesh_host_polls_failed_total",
                "counter",
                "Polls that failed to send.",
                |m| &m.polls_failed,
            ),
        ];
        for (name, kind, help, field) in per_interface {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for m in &self.interfaces {
                let _ = writeln!(
                    out,
                    "{name}{{host=\"{host}\",nic=\"{}\"}} {}",
                    m.nic,
                    get(field(m))
                );
            }
        }
        for (name, help, pick) in [
            (
                "hawkmesh_host_network_rtt_seconds",
                "Network RTT of answered probes, (⑤−②) − (④−③).",
                (|m| &m.network_rtt) as fn(&InterfaceMetrics) -> &Histogram,
            ),
            (
                "hawkmesh_host_responder_delay_seconds",
                "Responder delay of answered probes, ④−③.",
                |m| &m.responder_delay,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} histogram");
            for m in &self.interfaces {
                pick(m).write(
                    &mut out,
                    name,
                    &format!("host=\"{host}\",nic=\"{}\"", m.nic),
                );
            }
        }
        let scalars: [(&str, &str, &str, &AtomicU64); 17] = [
            (
                "hawkmesh_host_registrations_total",
                "counter",
                "Registrations the controller accepted.",
                &self.registrations,
            ),
            (
                "hawkmesh_host_pinglist_fetches_total",
                "counter",
                "Pinglists fetched.",
                &self.pinglist_fetches,
            ),
            (
                "hawkmesh_host_pinglist_failures_total",
                "counter",
                "Pinglist fetches that failed.",
                &self.pinglist_failures,
            ),
            (
                "hawkmesh_host_results_total",
                "counter",
                "Probe results produced for upload.",
                &self.results,
            ),
            (
                "hawkmesh_host_results_dropped_pending_total",
                "counter",
                "Results dropped before batching (too many waiting).",
                &self.results_dropped_pending,
            ),
            (
                "hawkmesh_host_batches_total",
                "counter",
                "Result batches made.",
                &self.batches,
            ),
            (
                "hawkmesh_host_uploads_ok_total",
                "counter",
                "Uploads the analyzer acknowledged.",
                &self.uploads_ok,
            ),
            (
                "hawkmesh_host_uploads_failed_total",
                "counter",
                "Uploads that failed (the batch is kept and sent again unless refused for good).",
                &self.uploads_failed,
            ),
            (
                "hawkmesh_host_uploads_duplicate_total",
                "counter",
                "Uploads acknowledged as duplicates (resent after a lost answer).",
                &self.uploads_duplicate,
            ),
            (
                "hawkmesh_host_results_delivered_total",
                "counter",
                "Results the analyzer acknowledged.",
                &self.results_delivered,
            ),
            (
                "hawkmesh_host_results_late_total",
                "counter",
                "Results the analyzer counted late (their period was analysed already).",
                &self.results_late,
            ),
            (
                "hawkmesh_host_batches_dropped_full_total",
                "counter",
                "Batches dropped from a full buffer (the analyzer away too long).",
                &self.batches_dropped_full,
            ),
            (
                "hawkmesh_host_batches_dropped_invalid_total",
                "counter",
                "Batches the analyzer refused as malformed (INVALID_ARGUMENT).",
                &self.batches_dropped_invalid,
            ),
            (
                "hawkmesh_host_batches_dropped_too_old_total",
                "counter",
                "Batches the analyzer refused as too old (OUT_OF_RANGE).",
                &self.batches_dropped_too_old,
            ),
            (
                "hawkmesh_host_results_dropped_total",
                "counter",
                "Results in dropped batches.",
                &self.results_dropped,
            ),
            (
                "hawkmesh_host_buffered_bytes",
                "gauge",
                "Bytes of batches waiting for the analyzer's acknowledgement.",
                &self.buffered_bytes,
            ),
            (
                "hawkmesh_host_buffered_batches",
                "gauge",
                "Batches waiting for the analyzer's acknowledgement.",
                &self.buffered_batches,
            ),
        ];
        for (name, kind, help, value) in scalars {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name}{{host=\"{host}\"}} {}", get(value));
        }
        out
    }
}

/// A label value with `\`, `"` and newlines escaped (the exposition format's rule).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_has_cumulative_buckets_and_escaped_labels() {
        let metrics = Metrics::new(&[0, 1]);
        metrics.interfaces[1].network_rtt.observe(7_000);
        metrics.interfaces[1].network_rtt.observe(7_000_000);
        metrics.interfaces[1].network_rtt.observe(900_000_000);
        metrics.interfaces[0]
            .probes_sent
            .store(12, Ordering::Relaxed);
        metrics.buffered_bytes.store(4096, Ordering::Relaxed);
        let text = metrics.render("h\"0");
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
                .to_string()
        };
        assert_eq!(
            line("hawkmesh_host_probes_sent_total{host=\"h\\\"0\",nic=\"0\"}"),
            "hawkmesh_host_probes_sent_total{host=\"h\\\"0\",nic=\"0\"} 12"
        );
        let bucket = |le: &str| {
            line(&format!(
                "hawkmesh_host_network_rtt_seconds_bucket{{host=\"h\\\"0\",nic=\"1\",le=\"{le}\"}}"
            ))
            .rsplit(' ')
            .next()
            .unwrap_or_default()
            .to_string()
        };
        assert_eq!(bucket("0.000005"), "0");
        assert_eq!(bucket("0.00001"), "1");
        assert_eq!(bucket("0.01"), "2");
        assert_eq!(bucket("0.5"), "2");
        assert_eq!(bucket("+Inf"), "3");
        assert!(line("hawkmesh_host_buffered_bytes{").ends_with(" 4096"));
        assert!(text.contains("# TYPE hawkmesh_host_network_rtt_seconds histogram"));
    }
}
