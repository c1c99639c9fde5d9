//! The host agent's overhead (issue 25): what `hawkmesh host-agent` costs a host whose 8
//! RNICs each probe about 150 times a second over the kernel-UDP transport, against the
//! issue's targets of at most 1 % of one core and 10 MB resident (R-Pingmesh §6: 3 % CPU
//! and 18.5 MB for its agent).
//!
//! ```sh
//! cargo bench -p hawkmesh-host-agent --features daemon --bench overhead
//! cargo bench -p hawkmesh-host-agent --features daemon --bench overhead -- --secs 120
//! cargo bench -p hawkmesh-host-agent --features daemon --bench overhead -- --soak-secs 3600
//! ```
//!
//! The lab ([`lab`]): network namespaces, one per host, each with 8 veth "RNICs" on one
//! bridge, and a management bridge to the real analyzer service (run in this process, its
//! pingmesh controller computing the pinglists over a rail-optimised fabric description:
//! NIC n of every host under ToR n, two spines). Every host runs the real daemon-only
//! `hawkmesh-host-agent` binary (built with the bench; `--agent` takes another) as a
//! process of its own, with mutual TLS to the analyzer; the measured one is `h0`,
//! configured with the production defaults (5-s uploads, 5-minute pinglist refresh,
//! 500-ms timeout). The controller's inter-ToR rate is chosen so that
//! each RNIC's pinglist asks for `--rate` probes a second (ToR-mesh at R-Pingmesh §5's 10
//! probes/s, inter-ToR the rest); the other hosts probe alike, so h0 also answers about as
//! many probes as it sends. The probe rate is read from h0's own counters
//! (`hawkmesh_host_probes_sent_total` per NIC), not assumed.
//!
//! What is measured ([`measure`]): h0's CPU time (utime + stime, `/proc/PID/stat`) over a
//! window after a warm-up, as a share of one core, and its resident memory (`VmRSS` at the
//! window's start and end, `VmHWM` the peak since it started, `/proc/PID/status`). The
//! kernel here is built without `CONFIG_IRQ_TIME_ACCOUNTING`, so softirq work done while
//! h0's threads run (the veth transmit and, over the bridge, the receiving namespace's UDP
//! input for the datagrams h0 sends) is charged to h0; the hosts are symmetric, so this
//! stands for the receive work h0's own datagrams cause on a real host.
//!
//! With `--soak-secs N` the resident size is sampled every `--sample-secs` (60) for N
//! seconds after the warm-up, and the run fails when, after the first `--settle-secs`
//! (300), it grows by more than `--max-growth-kib` (1024) over the sample taken then.
//! Everything the run creates (processes, namespaces, files) is removed when it ends,
//! failed or interrupted (SIGINT, SIGTERM); a SIGKILL leaves it behind.

#[cfg(target_os = "linux")]
#[path = "../../tests/support/mod.rs"]
mod support;

#[cfg(target_os = "linux")]
mod lab;
#[cfg(target_os = "linux")]
mod measure;

#[cfg(target_os = "linux")]
fn main() {
    std::process::exit(measure::main());
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("the overhead benchmark needs Linux (network namespaces, /proc)");
    std::process::exit(2);
}
