//! The HAWKEYE polling packet on a real interface (HAWKEYE §3.2: when a flow's RTT crosses
//! the threshold, its host sends a polling packet carrying the victim's 5-tuple; the first
//! switch takes it from there, along the victim's path).
//!
//! Sent through a raw IPv4 socket (`SOCK_RAW`, `IPPROTO_UDP`, raw(7)): the agent writes the
//! UDP header and the polling header, the kernel adds the IPv4 header, routes it and
//! resolves the next hop. The packet's addresses are the victim's — source address and
//! port the victim's own, destination its destination with the polling UDP port
//! ([`POLLING_UDP_PORT`]) — so it leaves by the interface the victim leaves by, and no UDP
//! port has to be bound (the victim's source port belongs to the RNIC, or to a service).
//! Its DSCP is the control class (the switches' control priority).
//!
//! Bounded: one socket per local source address (at most [`PollingLimits::max_sources`]);
//! a token bucket on all polls, and at most one poll per victim per
//! [`PollingLimits::per_victim_gap_ns`] (the detector already suppresses a flow's repeats;
//! this guards the wire against a detector fed garbage). Refusals are counted.

use std::collections::{HashMap, VecDeque};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::rate::TokenBucket;
use hawkmesh_wire::dataplane::POLLING_UDP_PORT;
use hawkmesh_wire::polling::{Polling, POLLING_HEADER_BYTES};
use hawkmesh_wire::telemetry::FiveTuple;
use nix::sys::socket::{
    bind, sendto, setsockopt, socket, sockopt, AddressFamily, MsgFlags, SockFlag, SockProtocol,
    SockType, SockaddrIn,
};

/// How often the sender may poll.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PollingLimits {
    /// Polls per second, all victims (the token bucket's rate).
    pub per_second: f64,
    /// Polls that may leave at once.
    pub burst: u32,
    /// Least time between two polls for one victim.
    pub per_victim_gap_ns: u64,
    /// Victims remembered for the gap (least recent forgotten first).
    pub max_victims: usize,
    /// Local source addresses (sockets) at most.
    pub max_sources: usize,
}

impl Default for PollingLimits {
    /// 1,000 polls/s with a burst of 64 (a fabric-wide incident polls many flows at once),
    /// one poll per victim per millisecond (HAWKEYE's detector polls a flow at most three
    /// times in its 3-ms suppression interval), 4,096 victims, 64 addresses.
    fn default() -> Self {
        PollingLimits {
            per_second: 1_000.0,
            burst: 64,
            per_victim_gap_ns: 1_000_000,
            max_victims: 4096,
            max_sources: 64,
        }
    }
}

/// Why a poll did not leave.
#[derive(Debug, thiserror::Error)]
pub enum PollingSendError {
    /// Over the rate limit (all victims) or within the victim's gap.
    #[error("polling for {victim} refused: {reason}")]
    Limited {
        /// The victim.
        victim: FiveTuple,
        /// Which limit.
        reason: &'static str,
    },
    /// The victim is not an IPv4 flow from a local address, or too many addresses are in use.
    #[error("polling for {victim}: {reason}")]
    Invalid {
        /// The victim.
        victim: FiveTuple,
        /// Why.
        reason: String,
    },
    /// A socket call failed.
    #[error("polling socket {op} ({place}): {errno}")]
    Os {
        /// The call.
        op: &'static str,
        /// Addresses involved.
        place: String,
        /// The OS's error.
        errno: nix::errno::Errno,
    },
}

/// Counters of a [`PollingSender`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollingStats {
    /// Polls sent.
    pub sent: u64,
    /// Refused by the token bucket.
    pub over_rate: u64,
    /// Refused within a victim's gap.
    pub within_gap: u64,
    /// Failed to send (socket errors, bad victims).
    pub failed: u64,
}

/// Sends polling packets (see the module's documentation).
#[derive(Debug)]
pub struct PollingSender {
    limits: PollingLimits,
    dscp: u8,
    sockets: HashMap<Ipv4Addr, OwnedFd>,
    last_poll: HashMap<FiveTuple, u64>,
    order: VecDeque<FiveTuple>,
    budget: TokenBucket,
    stats: PollingStats,
}

impl PollingSender {
    /// A sender marking its packets with `dscp` (0–63: the switches' control class).
    pub fn new(limits: PollingLimits, dscp: u8) -> Result<Self, String> {
        if dscp > 63 {
            return Err(format!("polling DSCP {dscp}: at most 63"));
        }
        if !(limits.per_second.is_finite() && limits.per_second > 0.0)
            || limits.burst == 0
            || limits.max_victims == 0
            || limits.max_sources == 0
        {
            return Err(format!(
                "polling limits {limits:?}: rate, burst, victims and sources must be above 0"
            ));
        }
        Ok(PollingSender {
            limits,
            dscp,
            sockets: HashMap::new(),
            last_poll: HashMap::new(),
            order: VecDeque::new(),
            budget: TokenBucket::new(limits.per_second, limits.burst),
            stats: PollingStats::default(),
        })
    }

    /// Sends `polling` for its victim at `now_ns` (any monotonic clock), if the limits allow.
    pub fn send(&mut self, polling: &Polling, now_ns: u64) -> Result<(), PollingSendError> {
        let victim = polling.victim;
        if let Some(last) = self.last_poll.get(&victim) {
            if now_ns.saturating_sub(*last) < self.limits.per_victim_gap_ns {
                self.stats.within_gap += 1;
                return Err(PollingSendError::Limited {
                    victim,
                    reason: "polled within the per-victim gap",
                });
            }
        }
        self.budget.refill(now_ns);
        if !self.budget.ready() {
            self.stats.over_rate += 1;
            return Err(PollingSendError::Limited {
                victim,
                reason: "over the polling rate",
            });
        }
        match self.transmit(polling) {
            Ok(()) => {
                self.budget.take();
                self.stats.sent += 1;
                self.remember(victim, now_ns);
                Ok(())
            }
            Err(e) => {
                self.stats.failed += 1;
                Err(e)
            }
        }
    }

    /// The counters.
    pub fn stats(&self) -> PollingStats {
        self.stats
    }

    fn remember(&mut self, victim: FiveTuple, now_ns: u64) {
        if self.last_poll.insert(victim, now_ns).is_none() {
            self.order.push_back(victim);
        }
        while self.last_poll.len() > self.limits.max_victims {
            match self.order.pop_front() {
                Some(old) => {
                    self.last_poll.remove(&old);
                }
                None => break,
            }
        }
    }

    fn transmit(&mut self, polling: &Polling) -> Result<(), PollingSendError> {
        let victim = polling.victim;
        let (src, dst) = (Ipv4Addr::from(victim.src_ip), Ipv4Addr::from(victim.dst_ip));
        let place = format!("{src} -> {dst}:{POLLING_UDP_PORT}");
        if !self.sockets.contains_key(&src) {
            if self.sockets.len() >= self.limits.max_sources {
                return Err(PollingSendError::Invalid {
                    victim,
                    reason: format!(
                        "{} source addresses in use already (at most {})",
                        self.sockets.len(),
                        self.limits.max_sources
                    ),
                });
            }
            let fd = self.open(src, &place)?;
            self.sockets.insert(src, fd);
        }
        let datagram = udp_datagram(src, dst, victim.src_port, &polling.emit());
        let fd = &self.sockets[&src];
        sendto(
            fd.as_raw_fd(),
            &datagram,
            &SockaddrIn::from(SocketAddrV4::new(dst, 0)),
            MsgFlags::empty(),
        )
        .map_err(|errno| PollingSendError::Os {
            op: "sendto",
            place,
            errno,
        })?;
        Ok(())
    }

    fn open(&self, src: Ipv4Addr, place: &str) -> Result<OwnedFd, PollingSendError> {
        let os = |op| {
            let place = place.to_string();
            move |errno| PollingSendError::Os { op, place, errno }
        };
        let fd = socket(
            AddressFamily::Inet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::Udp,
        )
        .map_err(os("socket (raw UDP needs CAP_NET_RAW)"))?;
        // Source address: the victim's (it must be local: `bind` says if not).
        bind(fd.as_raw_fd(), &SockaddrIn::from(SocketAddrV4::new(src, 0))).map_err(os("bind"))?;
        setsockopt(&fd, sockopt::Ipv4Tos, &(i32::from(self.dscp) << 2)).map_err(os("IP_TOS"))?;
        // Nothing is read from it: a small receive buffer bounds the copies of incoming
        // UDP traffic a raw socket gets.
        setsockopt(&fd, sockopt::RcvBuf, &1).map_err(os("SO_RCVBUF"))?;
        Ok(fd)
    }
}

/// A UDP header and payload with the IPv4 checksum (RFC 768: over the pseudo-header of
/// source, destination, protocol and UDP length, then header and data; 0 sent as 0xFFFF).
fn udp_datagram(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, payload: &[u8]) -> Vec<u8> {
    let len = (8 + payload.len()) as u16;
    let mut out = Vec::with_capacity(len as usize);
    out.extend_from_slice(&src_port.to_be_bytes());
    out.extend_from_slice(&POLLING_UDP_PORT.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(payload);
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for pair in bytes.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
        }
    };
    add(&src.octets());
    add(&dst.octets());
    add(&[0, 17]);
    add(&len.to_be_bytes());
    add(&out);
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    let checksum = match !(sum as u16) {
        0 => 0xFFFF,
        c => c,
    };
    out[6..8].copy_from_slice(&checksum.to_be_bytes());
    out
}

/// Bytes of a polling datagram (UDP header and polling header).
pub const POLLING_DATAGRAM_BYTES: usize = 8 + POLLING_HEADER_BYTES;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_udp_checksum_verifies_and_the_header_is_the_victims() {
        let payload = [0xAB; 7];
        let d = udp_datagram(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 1, 1),
            49152,
            &payload,
        );
        assert_eq!(u16::from_be_bytes([d[0], d[1]]), 49152);
        assert_eq!(u16::from_be_bytes([d[2], d[3]]), POLLING_UDP_PORT);
        assert_eq!(u16::from_be_bytes([d[4], d[5]]) as usize, 15);
        // Summing everything again, checksum included, gives 0xFFFF (RFC 1071).
        let mut sum: u32 = 0;
        let mut add = |bytes: &[u8]| {
            for pair in bytes.chunks(2) {
                sum += u32::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
            }
        };
        add(&[10, 0, 0, 1, 10, 0, 1, 1, 0, 17, 0, 15]);
        add(&d);
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        assert_eq!(sum, 0xFFFF);
    }

    fn victim(port: u16) -> FiveTuple {
        FiveTuple {
            src_ip: [127, 0, 0, 1],
            dst_ip: [127, 0, 0, 1],
            src_port: port,
            dst_port: 4791,
            protocol: 17,
        }
    }

    #[test]
    fn limits_are_checked_and_refusals_counted() {
        assert!(PollingSender::new(PollingLimits::default(), 64).is_err());
        let mut sender = PollingSender::new(
            PollingLimits {
                per_second: 1_000.0,
                burst: 2,
                per_victim_gap_ns: 1_000_000,
                max_victims: 2,
                max_sources: 1,
            },
            48,
        )
        .unwrap();
        let poll = |port| Polling::new(1 << 40 | 1, victim(port), 8);
        sender.send(&poll(50_000), 0).unwrap();
        // The same victim within its gap.
        assert!(matches!(
            sender.send(&poll(50_000), 500_000),
            Err(PollingSendError::Limited { .. })
        ));
        sender.send(&poll(50_001), 500_000).unwrap();
        // The burst is spent: another victim waits for a token (1 per ms).
        assert!(sender.send(&poll(50_002), 600_000).is_err());
        sender.send(&poll(50_002), 1_600_000).unwrap();
        // A second source address is over the one allowed.
        let mut elsewhere = poll(50_003);
        elsewhere.victim.src_ip = [127, 0, 0, 2];
        let refused = sender.send(&elsewhere, 10_000_000).unwrap_err();
        assert!(
            refused.to_string().contains("source addresses in use"),
            "{refused}"
        );
        let stats = sender.stats();
        assert_eq!(
            (stats.sent, stats.within_gap, stats.over_rate, stats.failed),
            (3, 1, 1, 1)
        );
        // Victims remembered stay bounded.
        assert!(sender.last_poll.len() <= 2);
    }

    /// Over loopback: the datagram arrives from the victim's address and source port at the
    /// polling port, carries the polling header, and is marked with the control DSCP.
    #[test]
    fn a_poll_arrives_with_the_victims_addresses_its_header_and_the_control_dscp() {
        use nix::sys::socket::{recvmsg, ControlMessageOwned, SockaddrStorage};
        use std::io::IoSliceMut;
        use std::net::UdpSocket;
        let receiver = UdpSocket::bind(("127.0.0.1", POLLING_UDP_PORT)).unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        setsockopt(&receiver, sockopt::IpRecvTos, &true).unwrap();
        let mut sender = PollingSender::new(PollingLimits::default(), 46).unwrap();
        let polling = Polling::new(7 << 40 | 99, victim(50_100), 5);
        sender.send(&polling, 0).unwrap();
        loop {
            let mut buf = [0u8; 256];
            let mut cmsg = nix::cmsg_space!(u8);
            let mut iov = [IoSliceMut::new(&mut buf)];
            let msg = recvmsg::<SockaddrStorage>(
                receiver.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            )
            .expect("the polling packet arrives");
            let from = msg
                .address
                .and_then(|a| a.as_sockaddr_in().map(|a| a.port()));
            let tos = msg.cmsgs().unwrap().find_map(|c| match c {
                ControlMessageOwned::Ipv4Tos(t) => Some(t),
                _ => None,
            });
            let len = msg.bytes;
            if from != Some(50_100) {
                continue; // another test's poll
            }
            assert_eq!(len, POLLING_HEADER_BYTES);
            assert_eq!(Polling::parse(&buf[..len]).unwrap(), polling);
            assert_eq!(tos, Some(46 << 2));
            break;
        }
        assert_eq!(sender.stats().sent, 1);
    }
}
