//! What the probing engine ([`crate::engine`]) needs from a transport: post a probe or ACK
//! datagram and learn when it left, and learn when datagrams arrived and from whom.
//!
//! One shape for every transport the agent has or will have:
//!
//! - kernel UDP ([`crate::udp`]): `SO_TIMESTAMPING` software timestamps (hardware ones where
//!   the NIC gives them), send completions from the socket's error queue;
//! - RDMA verbs UD (`verbs`, feature `verbs`): send and receive CQEs with completion
//!   timestamps where the device has them, the 5-tuple's source port set through the
//!   address handle's flow label and carried in the payload for the responder;
//! - netsim (`hawkmesh-lab`): send completions and receptions from the simulator's host hook.
//!
//! Every address a transport sends to is the peer agent's (its RNIC's) address; the
//! destination port (UDP) or queue pair (UD) is the peer's well-known one, so a probe and its
//! ACKs differ only in the 5-tuple's source port, which the caller picks per probe target
//! (ECMP hashes it, R-Pingmesh §4.1) and which the responder's ACKs keep (as RC ACKs do).
//!
//! Every event carries [`Stamps`]: the NIC's timestamp if there was one, the kernel's
//! (software) one if there was one, and always a host-clock reading taken by the transport
//! when it saw the event, the fallback when neither was given. Which one an interval uses
//! is chosen per interval by [`Stamps::common_clock`], so both ends are on one clock.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use thiserror::Error;

pub use crate::probe::TimestampSource;

/// A peer's UD address: the GID of its RNIC port and its probe queue pair's number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UdAddr {
    /// The port GID (RoCEv2 over IPv4: `::ffff:a.b.c.d`).
    pub gid: [u8; 16],
    /// The UD queue pair number (24 bits).
    pub qpn: u32,
}

impl UdAddr {
    /// The address of queue pair `qpn` behind the RoCEv2 IPv4 address `ip`.
    pub fn ipv4(ip: Ipv4Addr, qpn: u32) -> Self {
        UdAddr {
            gid: ip.to_ipv6_mapped().octets(),
            qpn,
        }
    }

    /// The address of queue pair `qpn` behind the RNIC address `ip` (IPv4: its RoCEv2
    /// IPv4-mapped GID, IBTA RoCEv2 Annex A17.4.5.1; IPv6: the address itself).
    pub fn of_ip(ip: IpAddr, qpn: u32) -> Self {
        match ip {
            IpAddr::V4(v4) => UdAddr::ipv4(v4, qpn),
            IpAddr::V6(v6) => UdAddr {
                gid: v6.octets(),
                qpn,
            },
        }
    }

    /// The RNIC's IP address the GID stands for (the IPv4 address of an IPv4-mapped GID).
    pub fn ip(&self) -> IpAddr {
        let v6 = self.gid_ip();
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// The GID as an IPv6 address (the IPv4-mapped form for RoCEv2 over IPv4).
    pub fn gid_ip(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }
}

impl fmt::Debug for UdAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for UdAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = self.gid_ip();
        match ip.to_ipv4_mapped() {
            Some(v4) => write!(f, "{v4}/qp{:#x}", self.qpn),
            None => write!(f, "[{ip}]/qp{:#x}", self.qpn),
        }
    }
}

/// The readings of one event (a send completion or a reception).
///
/// `software` and `host_ns` are on the same clock (for kernel UDP, `CLOCK_REALTIME`: the
/// kernel's software timestamps are in "system time", Linux
/// Documentation/networking/timestamping.rst §1); `hardware` is on the NIC's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stamps {
    /// The NIC's timestamp (ns on the NIC's clock), if it gave one.
    pub hardware: Option<u64>,
    /// The kernel's software timestamp (ns on the host clock), if it gave one.
    pub software: Option<u64>,
    /// The host clock when the transport saw the event: for a send, at its post (kernel
    /// UDP: right after `sendto` returned; verbs: right before the post, since Soft-RoCE
    /// may transmit inside it); for a reception, when it was read. Always present.
    pub host_ns: u64,
}

impl Stamps {
    /// An event with no timestamp but the host clock's.
    pub fn host_only(host_ns: u64) -> Self {
        Stamps {
            hardware: None,
            software: None,
            host_ns,
        }
    }

    /// The best single reading of this event, and where it came from.
    pub fn best(&self) -> (u64, TimestampSource) {
        match (self.hardware, self.software) {
            (Some(ns), _) => (ns, TimestampSource::Hardware),
            (None, Some(ns)) => (ns, TimestampSource::Software),
            (None, None) => (self.host_ns, TimestampSource::HostClock),
        }
    }

    /// Readings of `start` and `end` on one clock, for the interval between them (②→⑤ at
    /// the prober, ③→④ at the responder), and which clock: the NIC's when both ends have a
    /// NIC timestamp; else the host clock, with each end's kernel timestamp where it has one
    /// and its host-clock reading otherwise ([`TimestampSource::Software`] only when both
    /// ends had kernel timestamps). A NIC timestamp is never paired with a host-clock one:
    /// a NIC that stamps sends but not receives (its receive filter matches PTP only) would
    /// otherwise subtract two unrelated clocks.
    pub fn common_clock(start: &Stamps, end: &Stamps) -> (u64, u64, TimestampSource) {
        if let (Some(s), Some(e)) = (start.hardware, end.hardware) {
            return (s, e, TimestampSource::Hardware);
        }
        match (start.software, end.software) {
            (Some(s), Some(e)) => (s, e, TimestampSource::Software),
            (s, e) => (
                s.unwrap_or(start.host_ns),
                e.unwrap_or(end.host_ns),
                TimestampSource::HostClock,
            ),
        }
    }
}

/// Something a transport observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportEvent<A> {
    /// The datagram posted with `token` left (② for a probe, ④ for a first ACK).
    Sent {
        /// The caller's token from [`ProbeTransport::send`].
        token: u64,
        /// When it left.
        stamps: Stamps,
    },
    /// A datagram arrived at the well-known port / queue pair (③ for a probe, ⑤ for an
    /// ACK).
    Received {
        /// The sender's address.
        from: A,
        /// The 5-tuple's source port it carried (a probe's: the port its ACKs must keep).
        src_port: u16,
        /// When it arrived.
        stamps: Stamps,
        /// Its first bytes (at most [`MAX_DATAGRAM_BYTES`]; the payload parser checks them).
        payload: Vec<u8>,
    },
}

/// Bytes of a received datagram a transport keeps (a probe payload is 50; longer datagrams
/// are cut, so a flood of large ones costs no more memory than small ones).
pub const MAX_DATAGRAM_BYTES: usize = 128;

/// Why a transport could not do something; each variant names the place.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TransportError {
    /// A system call failed.
    #[error("{op} ({place}): {}", std::io::Error::from_raw_os_error(*errno))]
    Os {
        /// The call.
        op: &'static str,
        /// What it was applied to (addresses, ports, interface).
        place: String,
        /// The OS error number.
        errno: i32,
    },
    /// Another socket holds the source port a probe or ACK must leave from.
    #[error("source port {port} on {local} is bound by another socket")]
    SourcePortInUse {
        /// The local address.
        local: String,
        /// The port.
        port: u16,
    },
    /// A caller's argument or setting cannot be used.
    #[error("{place}: {reason}")]
    Invalid {
        /// The argument or setting.
        place: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// A probing transport, driven from one thread by the engine.
///
/// Contract:
///
/// - [`Self::send`] never blocks. Each successful send yields exactly one
///   [`TransportEvent::Sent`] for its token later, from [`Self::poll`]: with the NIC's or
///   kernel's timestamp, or, when none comes within a bounded wait, with the host-clock
///   reading taken when the post returned (its [`Stamps`] say which). A failed send yields
///   none.
/// - [`Self::poll`] returns within `wait` (plus scheduling), appending what is ready, at most
///   a bounded number of events per call, and keeps bounded memory whatever arrives.
pub trait ProbeTransport {
    /// A peer agent's address (an IP address for UDP; GID and QPN for UD).
    type Addr: Clone + Eq + fmt::Debug;

    /// The host clock (ns): ① and ⑥, and the clock of [`Stamps::host_ns`].
    fn now_ns(&self) -> u64;

    /// Posts `payload` to `to`'s well-known port from the 5-tuple source port `src_port`;
    /// its completion will carry `token`. Returns the post time on the host clock.
    fn send(
        &mut self,
        to: &Self::Addr,
        src_port: u16,
        payload: &[u8],
        token: u64,
    ) -> Result<u64, TransportError>;

    /// Waits up to `wait` for events and appends those ready to `events`.
    fn poll(
        &mut self,
        wait: Duration,
        events: &mut Vec<TransportEvent<Self::Addr>>,
    ) -> Result<(), TransportError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps(hardware: Option<u64>, software: Option<u64>, host_ns: u64) -> Stamps {
        Stamps {
            hardware,
            software,
            host_ns,
        }
    }

    #[test]
    fn an_interval_takes_one_clock_for_both_ends() {
        // Both NIC-stamped: the NIC's clock.
        let a = stamps(Some(10), Some(1_000), 1_100);
        let b = stamps(Some(30), Some(1_050), 1_200);
        assert_eq!(
            Stamps::common_clock(&a, &b),
            (10, 30, TimestampSource::Hardware)
        );
        // The NIC stamped the send but not the receive: the kernel's on both ends, never a
        // NIC reading against a host one.
        let b = stamps(None, Some(1_050), 1_200);
        assert_eq!(
            Stamps::common_clock(&a, &b),
            (1_000, 1_050, TimestampSource::Software)
        );
        // One end without any timestamp: host clock, with the other end's kernel reading.
        let c = stamps(None, None, 1_300);
        assert_eq!(
            Stamps::common_clock(&a, &c),
            (1_000, 1_300, TimestampSource::HostClock)
        );
        let d = stamps(Some(5), None, 900);
        assert_eq!(
            Stamps::common_clock(&d, &b),
            (900, 1_050, TimestampSource::HostClock)
        );
        assert_eq!(a.best(), (10, TimestampSource::Hardware));
        assert_eq!(b.best(), (1_050, TimestampSource::Software));
        assert_eq!(c.best(), (1_300, TimestampSource::HostClock));
    }

    #[test]
    fn errors_name_the_call_and_the_place() {
        let e = TransportError::Os {
            op: "sendto",
            place: "10.0.0.1:50000 -> 10.9.9.9:4791".into(),
            errno: 101,
        };
        let text = e.to_string();
        assert!(text.starts_with("sendto (10.0.0.1:50000 -> 10.9.9.9:4791): "));
        assert!(text.contains("unreachable"), "{text}");
    }
}
