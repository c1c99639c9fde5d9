//! The transport an interface probes over: kernel UDP ([`UdpTransport`]), or RDMA verbs UD
//! ([`crate::verbs::VerbsTransport`], feature `verbs`) with the kernel's UDP only for path
//! tracing. One address type for both, [`UdAddr`] (GID and queue pair number): kernel UDP
//! sends to the GID's IP address and reports senders with QPN 0 (the engine matches ACKs by
//! their sequence numbers, never by the sender's QPN).
//!
//! `probing.transport = "auto"` (the default) takes verbs where the build has them and the
//! interface's RDMA device opens, and falls back to kernel UDP otherwise, saying why.

use std::net::IpAddr;
use std::time::Duration;

use crate::transport::{ProbeTransport, TransportError, TransportEvent, UdAddr};
// RoCEv2's UDP destination port (generated from the data-plane source): the port verbs
// probes go to, and so the one their path traces keep.
use crate::udp::{IcmpReport, TimestampingSupport, UdpConfig, UdpTransport};
#[cfg(all(target_os = "linux", feature = "verbs"))]
use hawkmesh_wire::dataplane::ROCEV2_UDP_PORT;

use super::config::{DaemonConfig, InterfaceSection, TransportChoice};

/// One interface's probing transport.
pub enum Link {
    /// Kernel UDP to the agents' well-known port.
    Udp {
        /// The transport.
        udp: UdpTransport,
        /// Events as the UDP transport reports them, before their addresses are mapped.
        scratch: Vec<TransportEvent<IpAddr>>,
    },
    /// RDMA verbs UD; kernel UDP for path tracing only.
    #[cfg(all(target_os = "linux", feature = "verbs"))]
    Verbs {
        /// The UD queue pair (boxed: it is far larger than the UDP variant).
        verbs: Box<crate::verbs::VerbsTransport>,
        /// Trace datagrams (to RoCE's port 4791, from the probes' source ports), when path
        /// tracing is on.
        trace: Option<UdpTransport>,
        /// The trace sockets' send completions, read and dropped.
        scratch: Vec<TransportEvent<IpAddr>>,
    },
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Link {
    /// Opens the transport `config` asks for on `interface`. `Err` names the interface's
    /// problem; a fallback from verbs to UDP is logged with its reason.
    pub fn open(config: &DaemonConfig, interface: &InterfaceSection) -> Result<Link, String> {
        let choice = config.probing.transport;
        if choice != TransportChoice::Udp {
            match Self::open_verbs(config, interface) {
                Ok(link) => return Ok(link),
                Err(reason) if choice == TransportChoice::Verbs => return Err(reason),
                Err(reason) => tracing::warn!(
                    nic = interface.nic,
                    "RDMA verbs transport not available ({reason}): probing over kernel UDP, port {}",
                    config.probing.port
                ),
            }
        }
        let udp = UdpConfig {
            port: config.probing.port,
            max_source_sockets: config.probing.max_source_sockets,
            hardware_tx: config.probing.hardware_tx,
            tos: config.probing.dscp.map(|d| d << 2),
            trace: config.path_tracing.enabled,
            ..UdpConfig::new(interface.ip)
        };
        let udp = UdpTransport::new(udp).map_err(|e| e.to_string())?;
        match udp.timestamping() {
            TimestampingSupport::None => tracing::warn!(
                nic = interface.nic,
                "the kernel refused SO_TIMESTAMPING: every probe on this interface is measured on the host clock (results say so)"
            ),
            _ if !udp.rx_timestamps_ready() => tracing::warn!(
                nic = interface.nic,
                "the kernel did not stamp a received packet within 200 ms: the first probes may be measured on the host clock (results say so)"
            ),
            support => tracing::info!(nic = interface.nic, ?support, "interface open on kernel UDP"),
        }
        Ok(Link::Udp {
            udp,
            scratch: Vec::new(),
        })
    }

    #[cfg(all(target_os = "linux", feature = "verbs"))]
    fn open_verbs(config: &DaemonConfig, interface: &InterfaceSection) -> Result<Link, String> {
        use crate::verbs::{CompletionClock, VerbsConfig, VerbsTransport};
        let verbs = VerbsTransport::open(VerbsConfig {
            device: interface.rdma_device.clone(),
            port: interface.rdma_port,
            gid_index: interface.gid_index,
            traffic_class: config.probing.dscp.map_or(0, |d| d << 2),
            ..VerbsConfig::default()
        })
        .map_err(|e| e.to_string())?;
        let gid_ip = verbs.local_addr().ip();
        if gid_ip != interface.ip {
            return Err(format!(
                "{}: its GID is {gid_ip}, not this interface's address {} (set rdma_device and gid_index)",
                verbs.describe(),
                interface.ip
            ));
        }
        match verbs.completion_clock() {
            CompletionClock::HostClock { reason } => tracing::warn!(
                nic = interface.nic,
                "{}: no NIC completion timestamps ({reason}); probes are measured on the host clock and every result says so",
                verbs.describe()
            ),
            clock => tracing::info!(nic = interface.nic, ?clock, "{}: interface open on RDMA verbs", verbs.describe()),
        }
        let trace = if config.path_tracing.enabled {
            let udp = UdpConfig {
                // No probe arrives here: the kernel picks the port.
                port: 0,
                max_source_sockets: config.probing.max_source_sockets,
                trace: true,
                trace_port: Some(ROCEV2_UDP_PORT),
                ..UdpConfig::new(interface.ip)
            };
            Some(UdpTransport::new(udp).map_err(|e| format!("the path-tracing socket: {e}"))?)
        } else {
            None
        };
        Ok(Link::Verbs {
            verbs: Box::new(verbs),
            trace,
            scratch: Vec::new(),
        })
    }

    #[cfg(not(all(target_os = "linux", feature = "verbs")))]
    fn open_verbs(_config: &DaemonConfig, _interface: &InterfaceSection) -> Result<Link, String> {
        Err("this build has no verbs transport (build hawkmesh with `--features verbs`)".into())
    }

    /// What it is, for logs.
    pub fn describe(&self) -> String {
        match self {
            Link::Udp { udp, .. } => format!(
                "kernel UDP {}:{} ({:?})",
                udp.config().local,
                udp.config().port,
                udp.timestamping()
            ),
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs { verbs, .. } => verbs.describe(),
        }
    }

    /// The queue pair number to register, where the transport has a real one (verbs).
    pub fn qpn(&self) -> Option<u32> {
        match self {
            Link::Udp { .. } => None,
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs { verbs, .. } => Some(verbs.local_addr().qpn),
        }
    }

    /// The GID to register, where the transport has a real one (verbs).
    pub fn gid(&self) -> Option<[u8; 16]> {
        match self {
            Link::Udp { .. } => None,
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs { verbs, .. } => Some(verbs.local_addr().gid),
        }
    }

    /// Whether it probes over RDMA verbs.
    pub fn is_verbs(&self) -> bool {
        !matches!(self, Link::Udp { .. })
    }

    fn tracer(&mut self) -> Option<&mut UdpTransport> {
        match self {
            Link::Udp { udp, .. } => Some(udp),
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs { trace, .. } => trace.as_mut(),
        }
    }

    /// Sends a path-tracing datagram on the 5-tuple (this interface, `src_port`) → (`to`,
    /// the probes' destination port) with TTL `ttl`.
    pub fn send_trace(
        &mut self,
        to: &IpAddr,
        src_port: u16,
        ttl: u8,
        payload: &[u8],
    ) -> Result<(), TransportError> {
        match self.tracer() {
            Some(udp) => udp.send_trace(to, src_port, ttl, payload),
            None => Err(TransportError::Invalid {
                place: "path tracing".into(),
                reason: "not enabled on this interface".into(),
            }),
        }
    }

    /// The ICMP errors the interface's UDP sockets received since the last call.
    pub fn take_icmp(&mut self) -> Vec<IcmpReport> {
        match self {
            Link::Udp { udp, .. } => udp.take_icmp(),
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs {
                trace: Some(udp),
                scratch,
                ..
            } => {
                // The trace sockets are polled only here: their error queues hold the ICMP
                // answers (and their datagrams' send completions, which nothing waits for).
                scratch.clear();
                if let Err(error) = udp.poll(Duration::ZERO, scratch) {
                    tracing::debug!(%error, "polling the path-tracing sockets failed");
                }
                scratch.clear();
                udp.take_icmp()
            }
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs { trace: None, .. } => Vec::new(),
        }
    }
}

impl ProbeTransport for Link {
    type Addr = UdAddr;

    fn now_ns(&self) -> u64 {
        match self {
            Link::Udp { udp, .. } => udp.now_ns(),
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs { verbs, .. } => verbs.now_ns(),
        }
    }

    fn send(
        &mut self,
        to: &UdAddr,
        src_port: u16,
        payload: &[u8],
        token: u64,
    ) -> Result<u64, TransportError> {
        match self {
            Link::Udp { udp, .. } => udp.send(&to.ip(), src_port, payload, token),
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs { verbs, .. } => verbs.send(to, src_port, payload, token),
        }
    }

    fn poll(
        &mut self,
        wait: Duration,
        events: &mut Vec<TransportEvent<UdAddr>>,
    ) -> Result<(), TransportError> {
        match self {
            Link::Udp { udp, scratch } => {
                scratch.clear();
                let polled = udp.poll(wait, scratch);
                events.extend(scratch.drain(..).map(|event| match event {
                    TransportEvent::Sent { token, stamps } => {
                        TransportEvent::Sent { token, stamps }
                    }
                    TransportEvent::Received {
                        from,
                        src_port,
                        stamps,
                        payload,
                    } => TransportEvent::Received {
                        from: UdAddr::of_ip(from, 0),
                        src_port,
                        stamps,
                        payload,
                    },
                }));
                polled
            }
            #[cfg(all(target_os = "linux", feature = "verbs"))]
            Link::Verbs { verbs, .. } => verbs.poll(wait, events),
        }
    }
}
