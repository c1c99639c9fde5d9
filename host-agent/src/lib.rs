//! The host side of HAWKEYE (§3.2 "anomaly detection at end hosts"): watch every RDMA flow's
//! RTT from its ACK timestamps and, when it exceeds a threshold relative to the flow's base
//! RTT, send a polling packet that carries the victim's 5-tuple, at most once per flow per
//! suppression interval.
//!
//! [`RttDetector`] is the decision logic, shared by the host-agent daemon (RTT samples from
//! CQE timestamps) and by the simulator glue in `hawkmesh-lab` (samples from netsim's host
//! hook). It is pure and deterministic: time is passed in, nothing is read from a clock.

//!
//! [`PauseHistory`] tells from the NIC's PFC pause-duration counter whether the sender
//! itself was held while a sampled packet was in flight.
//!
//! [`probe`] is R-Pingmesh's probing bookkeeping: a [`Prober`] turns a probe's six
//! timestamps into network RTT and both hosts' delays, a [`Responder`] answers with two ACKs;
//! both transport-independent (verbs UD, kernel UDP, netsim).
//!
//! [`transport::ProbeTransport`] is what probing needs from a transport (post a datagram,
//! learn when it left and what arrived, with NIC, kernel or host-clock timestamps);
//! [`engine::Engine`] runs a prober and a responder over any transport; [`udp`] is the
//! kernel-UDP transport with `SO_TIMESTAMPING` (Linux); [`paths::PathTracer`] schedules
//! path tracing of the probed 5-tuples under a rate limit; [`rdma_netlink`] finds service
//! connections in the kernel's RDMA resource dump (the fallback to eBPF);
//! [`polling_sender`] sends the HAWKEYE polling packet through a raw socket, rate-limited;
//! [`services`] is where service connections come from (static list, RDMA netlink);
//! `verbs` (feature `verbs`, Linux) is the RDMA verbs UD transport with NIC completion
//! timestamps; `ebpf` (feature `ebpf`, Linux x86-64) traces the service's RC connections
//! with kprobes on the kernel verbs, the offsets it needs read by [`btf`] from the kernel's
//! BTF.
//!
//! With the cargo feature `daemon` (Linux), [`daemon`] is `hawkmesh host-agent`: the agent
//! an operator runs on every host, registering with the pingmesh controller, probing its
//! pinglist over kernel UDP and uploading the results.

pub mod btf;
#[cfg(all(feature = "daemon", target_os = "linux"))]
pub mod daemon;
pub mod detector;
#[cfg(all(target_os = "linux", target_arch = "x86_64", feature = "ebpf"))]
pub mod ebpf;
pub mod engine;
pub mod knob_writer;
pub mod paths;
pub mod pause;
#[cfg(target_os = "linux")]
pub mod polling_sender;
pub mod probe;
pub mod rate;
pub mod rdma_netlink;
pub mod services;
pub mod transport;
#[cfg(target_os = "linux")]
pub mod udp;
#[cfg(all(target_os = "linux", feature = "verbs"))]
pub mod verbs;

pub use detector::{DetectorConfig, PollingTrigger, RttDetector};
pub use pause::PauseHistory;
pub use probe::{ProbeOutcome, ProbeResult, Prober, ProberConfig, Responder};
