//! The kernel-UDP probing transport: probes and ACKs as UDP datagrams, timestamped by the
//! kernel with `SO_TIMESTAMPING` (Linux Documentation/networking/timestamping.rst), for
//! labs, hosts without RNICs and CI.
//!
//! RoCE semantics kept (R-Pingmesh §4.1): every agent interface listens on one well-known
//! port ([`UdpConfig::port`], like RoCEv2's 4791); a probe goes to the responder's
//! well-known port from a source port the prober chose for that target (ECMP hashes it);
//! the responder's ACKs leave from that same source port to the prober's well-known port,
//! the reverse 5-tuple, as a UD or RC ACK would.
//!
//! Timestamps:
//!
//! - Every socket asks for software send and receive timestamps, the raw hardware ones, a
//!   per-send id and no payload echo: `SOF_TIMESTAMPING_SOFTWARE | RX_SOFTWARE | TX_SOFTWARE
//!   | RAW_HARDWARE | RX_HARDWARE | OPT_ID | OPT_TSONLY` (timestamping.rst §1.3), and with
//!   [`UdpConfig::hardware_tx`] also `TX_HARDWARE | OPT_TX_SWHW` (a NIC timestamp for each
//!   send, and the software one too: two messages per send, commit b50a5c70ffa4 "net: allow
//!   simultaneous SW and HW transmit timestamping"). A kernel that refuses the hardware flags
//!   gets the software set; one that refuses both gets none, and every event then says
//!   [`TimestampSource::HostClock`](crate::transport::TimestampSource).
//! - Receive: the `SCM_TIMESTAMPING` control message of `recvmsg`, `ts[0]` software,
//!   `ts[2]` hardware (timestamping.rst §2.1); a NIC gives the latter only when its driver's
//!   hardware timestamping is enabled (`SIOCSHWTSTAMP`, e.g. by ptp4l or `hwstamp_ctl`),
//!   which this transport does not change, since it is the device's setting, not the
//!   socket's.
//! - Send: the socket's error queue (`MSG_ERRQUEUE`) returns one message per timestamp with
//!   a `sock_extended_err` whose `ee_data` is the `OPT_ID` counter: "a monotonically
//!   increasing u32 (that wraps)" per socket, counting datagrams sent since the option was
//!   set (timestamping.rst §1.3.3). Each socket counts its own sends to map them back. A
//!   send that the kernel refuses may or may not have consumed an id (commit 4aecca4c7680
//!   "net_tstamp: add SCM_TS_OPT_ID", Linux 6.13, whose per-send id is the fix on kernels
//!   that have it; the counter works on all), so after a failed
//!   send the socket's error queue is drained and its counter reset (`OPT_ID` cleared and
//!   set again restarts it at 0, net/core/sock.c `sock_set_timestamping`); sends whose
//!   timestamps had not come by then complete on the host clock. A software timestamp
//!   earlier than its send's post began is refused as misattributed (both are system time).
//! - A send whose timestamp does not come within [`UdpConfig::tx_timestamp_wait`] completes
//!   with the host-clock reading taken when `sendto` returned (e.g. a datagram queued for a
//!   neighbour that never answers ARP never reaches the driver that stamps it).
//!
//! Sending from arbitrary source ports: a bounded cache of UDP sockets, one bound to each
//! source port in use on the interface's address, least recently used evicted
//! ([`UdpConfig::max_source_sockets`]). Chosen over one raw socket because the kernel then
//! routes, resolves neighbours, fills in the IP and UDP headers and checksums, and timestamps
//! with `OPT_ID` per socket exactly as for any UDP sender; a raw socket would need
//! `CAP_NET_RAW`, hand-built headers for both IP versions, and its own routing decisions.
//! The cost is one descriptor per cached port and a bind per new port; a flood of probes
//! from distinct source ports makes the responder cycle through the cache (bounded memory
//! and descriptors), and a port another process has bound cannot be used
//! ([`TransportError::SourcePortInUse`]). The cached sockets only send: datagrams that reach
//! them are read and counted as stray, within a small receive buffer. A child process forked
//! while a socket is open holds it until the child execs, so a port evicted and bound again
//! in that moment is still taken: the send is refused with that error, and the next one
//! binds it.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::libc;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use nix::sys::socket::{
    self, sockopt, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, SockaddrStorage, TimestampingFlag,
};
use nix::sys::time::TimeSpec;

use hawkmesh_wire::telemetry::ROCEV2_UDP_PORT;

use crate::transport::{
    ProbeTransport, Stamps, TransportError, TransportEvent, MAX_DATAGRAM_BYTES,
};

/// The default well-known port: RoCEv2's, so switches classify and hash probes as they do
/// RoCE traffic. On a host whose RNIC owns the address, the RNIC consumes UDP 4791 itself:
/// pick another port there.
pub const DEFAULT_PROBE_PORT: u16 = ROCEV2_UDP_PORT;

/// `ee_info` of a send timestamp (include/uapi/linux/errqueue.h: "driver passed skb to NIC,
/// or HW"); not in the `libc` crate.
const SCM_TSTAMP_SND: u32 = 0;

/// Events one [`UdpTransport::poll`] returns at most (the rest wait in the socket buffers).
const MAX_EVENTS_PER_POLL: usize = 256;
/// Error-queue or stray messages read from one socket per poll at most.
const MAX_READS_PER_SOCKET: usize = 64;
/// Datagrams one `recvmmsg` on the well-known socket reads at most.
const RECV_BATCH: usize = 16;
/// How long [`UdpTransport::new`] waits for the kernel to start stamping received packets.
const RX_WARM_UP: Duration = Duration::from_millis(200);

/// ICMP reports kept for [`UdpTransport::take_icmp`] at most (the oldest beyond are dropped,
/// counted).
const MAX_ICMP_REPORTS: usize = 4096;
/// Bytes of the original datagram's payload an [`IcmpReport`] keeps.
const ICMP_PAYLOAD_BYTES: usize = 64;

/// What an ICMP error said about a datagram a socket sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcmpKind {
    /// Time exceeded in transit: a router's answer to a datagram whose TTL ran out (ICMP
    /// type 11, ICMPv6 type 3).
    TimeExceeded,
    /// Destination unreachable, with its code (ICMP type 3, ICMPv6 type 1).
    Unreachable(u8),
    /// Another message: (type, code).
    Other(u8, u8),
}

/// An ICMP error the kernel queued on a socket (with [`UdpConfig::trace`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IcmpReport {
    /// The source port of the socket (the 5-tuple's) whose datagram caused it.
    pub src_port: u16,
    /// The datagram's destination address and port.
    pub destination: Option<(IpAddr, u16)>,
    /// Who sent the ICMP message (a router's interface address).
    pub offender: Option<IpAddr>,
    /// What it said.
    pub kind: IcmpKind,
    /// The first bytes of the datagram's payload, as the ICMP message quoted it.
    pub payload: Vec<u8>,
    /// When it was read (host clock).
    pub at_ns: u64,
}

/// Receive buffer of a source-port socket: room for a burst of send timestamps (the error
/// queue counts against it) and nothing more for stray datagrams.
const SOURCE_RCVBUF_BYTES: usize = 16 * 1024;

/// Settings of one agent interface's UDP transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UdpConfig {
    /// The interface's address (a unicast address of this host, not a wildcard: ACKs must
    /// leave from the address probes were sent to).
    pub local: IpAddr,
    /// The well-known port probes and ACKs arrive at, on every agent.
    pub port: u16,
    /// Source-port sockets kept open at most (each is a descriptor).
    pub max_source_sockets: usize,
    /// How long a send waits for its kernel timestamp before completing on the host clock.
    pub tx_timestamp_wait: Duration,
    /// Sends waiting for their timestamp at most; beyond, the oldest completes on the host
    /// clock.
    pub max_pending_tx: usize,
    /// Ask the NIC for send timestamps too (`TX_HARDWARE | OPT_TX_SWHW`): only where its
    /// hardware timestamping is on, since every send then waits for the NIC's timestamp
    /// (up to `tx_timestamp_wait`).
    pub hardware_tx: bool,
    /// IP TOS / IPv6 traffic class of probes and ACKs (DSCP << 2), so they can ride the
    /// RoCE traffic class; `None` keeps the system's.
    pub tos: Option<u8>,
    /// Path tracing: ask for the ICMP errors the sockets' datagrams cause
    /// (`IP_RECVERR` / `IPV6_RECVERR`, ip(7)): time-exceeded answers to
    /// [`UdpTransport::send_trace`], and unreachables for probes and ACKs, read from the
    /// error queue as [`IcmpReport`]s.
    pub trace: bool,
    /// The destination port of trace datagrams when it is not `port`: RoCEv2's 4791 where
    /// the probes themselves go over RDMA verbs and these sockets only trace their paths
    /// (then `port` may be 0: the kernel picks one, nothing is received on it).
    pub trace_port: Option<u16>,
}

impl UdpConfig {
    /// Defaults for the interface address `local`: port [`DEFAULT_PROBE_PORT`], 256 source
    /// sockets, 20 ms for send timestamps, 4096 pending sends, software timestamps only.
    pub fn new(local: IpAddr) -> Self {
        UdpConfig {
            local,
            port: DEFAULT_PROBE_PORT,
            max_source_sockets: 256,
            tx_timestamp_wait: Duration::from_millis(20),
            max_pending_tx: 4096,
            hardware_tx: false,
            tos: None,
            trace: false,
            trace_port: None,
        }
    }

    fn validate(&self) -> Result<(), TransportError> {
        let invalid = |place: &str, reason: String| TransportError::Invalid {
            place: format!("UdpConfig::{place}"),
            reason,
        };
        if self.local.is_unspecified() || self.local.is_multicast() {
            return Err(invalid(
                "local",
                format!("{} is not a unicast interface address", self.local),
            ));
        }
        if self.port == 0 && self.trace_port.is_none() {
            // Port 0 (an ephemeral one) only for sockets that trace and take no probes.
            return Err(invalid("port", "0 is not a well-known port".into()));
        }
        if self.trace_port == Some(0) {
            return Err(invalid("trace_port", "0 is not a port".into()));
        }
        if self.max_source_sockets == 0 {
            return Err(invalid("max_source_sockets", "must be at least 1".into()));
        }
        if self.max_pending_tx == 0 {
            return Err(invalid("max_pending_tx", "must be at least 1".into()));
        }
        if self.tx_timestamp_wait.is_zero() || self.tx_timestamp_wait > Duration::from_secs(1) {
            return Err(invalid(
                "tx_timestamp_wait",
                format!(
                    "{:?} is not within (0, 1 s]: a send completes on the host clock after it",
                    self.tx_timestamp_wait
                ),
            ));
        }
        Ok(())
    }
}

/// What `SO_TIMESTAMPING` the kernel accepted on the transport's sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampingSupport {
    /// Software and hardware reporting (whether the NIC gives hardware timestamps shows in
    /// [`UdpStats`]).
    SoftwareAndHardware,
    /// Software timestamps only (the hardware flags were refused).
    SoftwareOnly,
    /// None: every event is a host-clock reading.
    None,
}

/// Events by the kind of timestamp they carried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceCounts {
    /// With a NIC timestamp.
    pub hardware: u64,
    /// With a kernel software timestamp only.
    pub software: u64,
    /// With neither: the host-clock fallback.
    pub host_clock: u64,
}

impl SourceCounts {
    fn count(&mut self, stamps: &Stamps) {
        match (stamps.hardware, stamps.software) {
            (Some(_), _) => self.hardware += 1,
            (None, Some(_)) => self.software += 1,
            (None, None) => self.host_clock += 1,
        }
    }
}

/// Counters of a [`UdpTransport`]: which timestamps the interface gave, and what was
/// dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Datagrams received at the well-known port, by timestamp kind.
    pub rx: SourceCounts,
    /// Send completions, by timestamp kind.
    pub tx: SourceCounts,
    /// Received datagrams longer than [`MAX_DATAGRAM_BYTES`] (cut).
    pub oversized: u64,
    /// Datagrams that reached a source-port socket (read and dropped).
    pub stray: u64,
    /// Send timestamps that matched no pending send (late after a reset, or misattributed).
    pub tx_unmatched: u64,
    /// Counter resets after a failed send.
    pub tx_resyncs: u64,
    /// Error-queue messages that were not send timestamps.
    pub errqueue_other: u64,
    /// Failed reads (other than "nothing to read").
    pub recv_errors: u64,
    /// Source-port sockets opened.
    pub sockets_opened: u64,
    /// Source-port sockets closed to make room.
    pub sockets_evicted: u64,
    /// Trace datagrams sent ([`UdpTransport::send_trace`]).
    pub trace_sent: u64,
    /// ICMP time-exceeded messages read (with [`UdpConfig::trace`]).
    pub icmp_time_exceeded: u64,
    /// ICMP destination-unreachable messages read.
    pub icmp_unreachable: u64,
    /// Other ICMP messages read.
    pub icmp_other: u64,
    /// ICMP reports dropped because nobody took them.
    pub icmp_dropped: u64,
}

/// Waits, at most [`RX_WARM_UP`], until the kernel stamps received packets, by sending
/// datagrams to a socket of its own on `local` (looped back). Linux turns receive
/// timestamping on for the whole system from a work item after the first socket asks for
/// it (net/core/dev.c `net_enable_timestamp`, deferred where the kernel uses jump labels),
/// so on a system where no socket had it, the first datagrams would arrive unstamped.
/// Whether a stamped datagram came back (if not, receptions still say which they carry).
fn wait_for_rx_timestamps(local: IpAddr) -> bool {
    let family = if local.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let Ok(fd) = socket::socket(
        family,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    ) else {
        return false;
    };
    let flags = TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE;
    if socket::setsockopt(&fd, sockopt::Timestamping, &flags).is_err()
        || socket::bind(
            fd.as_raw_fd(),
            &SockaddrStorage::from(SocketAddr::new(local, 0)),
        )
        .is_err()
    {
        return false;
    }
    let Ok(own) = socket::getsockname::<SockaddrStorage>(fd.as_raw_fd()) else {
        return false;
    };
    let start = std::time::Instant::now();
    let mut buf = [0u8; 8];
    let mut cmsg = nix::cmsg_space!([libc::timespec; 3]);
    while start.elapsed() < RX_WARM_UP {
        if socket::sendto(fd.as_raw_fd(), &[0], &own, MsgFlags::empty()).is_err() {
            return false;
        }
        let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
        let _ = ppoll(
            &mut fds,
            Some(TimeSpec::from_duration(Duration::from_millis(5))),
            None,
        );
        loop {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let Ok(msg) = socket::recvmsg::<()>(
                fd.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_DONTWAIT,
            ) else {
                break;
            };
            let stamped = msg.cmsgs().is_ok_and(|mut cmsgs| {
                cmsgs.any(|c| {
                    matches!(c, ControlMessageOwned::ScmTimestampsns(ts)
                        if timespec_ns(&ts.system).is_some())
                })
            });
            if stamped {
                return true;
            }
        }
    }
    false
}

#[derive(Debug)]
struct PendingTx {
    key: u32,
    token: u64,
    /// Host clock before `sendto`.
    before_ns: u64,
    /// Host clock after `sendto` returned: the fallback.
    posted_ns: u64,
    software: Option<u64>,
    hardware: Option<u64>,
    /// A caller's send (probe, ACK), reported when it completes; a trace datagram's
    /// completion is only counted.
    report: bool,
}

#[derive(Debug)]
struct Sock {
    fd: OwnedFd,
    /// The port it is bound to.
    port: u16,
    /// The next `OPT_ID` the kernel will give a send on this socket.
    next_key: u32,
    /// Sends waiting for their timestamp, in send order.
    pending: VecDeque<PendingTx>,
    last_used: u64,
}

/// The epoll key of the well-known socket (source sockets are keyed by their port).
const LISTEN_KEY: u64 = u64::MAX;

/// The kernel-UDP transport of one agent interface (Linux).
#[derive(Debug)]
pub struct UdpTransport {
    config: UdpConfig,
    flags: Option<TimestampingFlag>,
    support: TimestampingSupport,
    rx_ready: bool,
    listen: Sock,
    sources: HashMap<u16, Sock>,
    /// Every socket's readiness (epoll(7)): a wait costs what is ready, not what is open.
    /// A source socket leaves it when it is closed.
    epoll: Epoll,
    use_tick: u64,
    pending_total: usize,
    /// Completions made outside `poll` (evictions, resets, overflow), bounded by the
    /// pending sends they came from.
    ready: VecDeque<TransportEvent<IpAddr>>,
    /// ICMP errors read, for [`UdpTransport::take_icmp`] (bounded).
    icmp: VecDeque<IcmpReport>,
    stats: UdpStats,
}

/// The host clock: `CLOCK_REALTIME`, the clock of the kernel's software timestamps.
pub fn host_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn os(op: &'static str, place: impl fmt::Display, errno: Errno) -> TransportError {
    TransportError::Os {
        op,
        place: place.to_string(),
        errno: errno as i32,
    }
}

fn timespec_ns(ts: &TimeSpec) -> Option<u64> {
    let (sec, nsec) = (ts.tv_sec(), ts.tv_nsec());
    if (sec == 0 && nsec == 0) || sec < 0 || nsec < 0 {
        return None;
    }
    u64::try_from(sec)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(u64::try_from(nsec).ok()?)
}

fn ip_port(addr: &SockaddrStorage) -> Option<(IpAddr, u16)> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some((IpAddr::V4(v4.ip()), v4.port()));
    }
    addr.as_sockaddr_in6()
        .map(|v6| (IpAddr::V6(v6.ip()), v6.port()))
}

fn base_flags() -> TimestampingFlag {
    TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_ID
        | TimestampingFlag::SOF_TIMESTAMPING_OPT_TSONLY
}

fn hardware_flags(hardware_tx: bool) -> TimestampingFlag {
    let mut flags = base_flags()
        | TimestampingFlag::SOF_TIMESTAMPING_RAW_HARDWARE
        | TimestampingFlag::SOF_TIMESTAMPING_RX_HARDWARE;
    if hardware_tx {
        // OPT_TX_SWHW is not among nix's named flags.
        flags |= TimestampingFlag::SOF_TIMESTAMPING_TX_HARDWARE
            | TimestampingFlag::from_bits_retain(libc::SOF_TIMESTAMPING_OPT_TX_SWHW);
    }
    flags
}

fn open_socket(
    config: &UdpConfig,
    port: u16,
    flags: Option<TimestampingFlag>,
    rcvbuf: Option<usize>,
) -> Result<OwnedFd, TransportError> {
    let local = SocketAddr::new(config.local, port);
    let family = if config.local.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket::socket(
        family,
        SockType::Datagram,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| os("socket", local, e))?;
    if let Some(flags) = flags {
        socket::setsockopt(&fd, sockopt::Timestamping, &flags)
            .map_err(|e| os("setsockopt SO_TIMESTAMPING", local, e))?;
    }
    if let Some(tos) = config.tos {
        let result = if config.local.is_ipv4() {
            socket::setsockopt(&fd, sockopt::Ipv4Tos, &libc::c_int::from(tos))
        } else {
            socket::setsockopt(&fd, sockopt::Ipv6TClass, &libc::c_int::from(tos))
        };
        result.map_err(|e| os("setsockopt IP_TOS", local, e))?;
    }
    if config.trace {
        let result = if config.local.is_ipv4() {
            socket::setsockopt(&fd, sockopt::Ipv4RecvErr, &true)
        } else {
            socket::setsockopt(&fd, sockopt::Ipv6RecvErr, &true)
        };
        result.map_err(|e| os("setsockopt IP_RECVERR", local, e))?;
    }
    if let Some(bytes) = rcvbuf {
        socket::setsockopt(&fd, sockopt::RcvBuf, &bytes)
            .map_err(|e| os("setsockopt SO_RCVBUF", local, e))?;
    }
    match socket::bind(fd.as_raw_fd(), &SockaddrStorage::from(local)) {
        Ok(()) => Ok(fd),
        Err(Errno::EADDRINUSE) => Err(TransportError::SourcePortInUse {
            local: config.local.to_string(),
            port,
        }),
        Err(e) => Err(os("bind", local, e)),
    }
}

/// A send completed: its event (none for a trace datagram), counted.
fn complete(p: PendingTx, stats: &mut UdpStats) -> Option<TransportEvent<IpAddr>> {
    let stamps = Stamps {
        hardware: p.hardware,
        software: p.software,
        host_ns: p.posted_ns,
    };
    stats.tx.count(&stamps);
    p.report.then_some(TransportEvent::Sent {
        token: p.token,
        stamps,
    })
}

fn ipv4(addr: &libc::sockaddr_in) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)))
}

fn ipv6(addr: &libc::sockaddr_in6) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(addr.sin6_addr.s6_addr))
}

/// Queues an ICMP report, dropping the oldest beyond the bound.
fn queue_icmp(icmp: &mut VecDeque<IcmpReport>, report: IcmpReport, stats: &mut UdpStats) {
    match report.kind {
        IcmpKind::TimeExceeded => stats.icmp_time_exceeded += 1,
        IcmpKind::Unreachable(_) => stats.icmp_unreachable += 1,
        IcmpKind::Other(..) => stats.icmp_other += 1,
    }
    while icmp.len() >= MAX_ICMP_REPORTS {
        icmp.pop_front();
        stats.icmp_dropped += 1;
    }
    icmp.push_back(report);
}

impl Sock {
    /// Reads this socket's error queue: send timestamps completing its pending sends, and
    /// ICMP errors (with [`UdpConfig::trace`]) into `icmp`.
    fn drain_errqueue(
        &mut self,
        hardware_tx: bool,
        stats: &mut UdpStats,
        pending_total: &mut usize,
        out: &mut Vec<TransportEvent<IpAddr>>,
        icmp: &mut VecDeque<IcmpReport>,
    ) {
        let fd = self.fd.as_raw_fd();
        let mut data = [0u8; ICMP_PAYLOAD_BYTES];
        let mut cmsg = nix::cmsg_space!(
            [libc::timespec; 3],
            libc::sock_extended_err,
            libc::sockaddr_in6
        );
        for read in 0..MAX_READS_PER_SOCKET {
            // A software send timestamp is queued before `sendto` returns: with none of this
            // socket's sends awaiting one, what else is queued (an ICMP error) is read at
            // the next poll (epoll reports EPOLLERR while the queue is not empty), and the
            // last, empty read is saved. A NIC's timestamp comes later: read to the end.
            if read > 0 && !hardware_tx && self.pending.is_empty() {
                break;
            }
            let mut iov = [IoSliceMut::new(&mut data)];
            let msg = match socket::recvmsg::<SockaddrStorage>(
                fd,
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(msg) => msg,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(_) => {
                    stats.recv_errors += 1;
                    break;
                }
            };
            let mut stamp = None;
            let mut key = None;
            let mut error = None;
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    match c {
                        ControlMessageOwned::ScmTimestampsns(ts) => {
                            stamp = Some((timespec_ns(&ts.system), timespec_ns(&ts.hw_raw)));
                        }
                        ControlMessageOwned::Ipv4RecvErr(ee, offender)
                            if ee.ee_origin == libc::SO_EE_ORIGIN_ICMP =>
                        {
                            let kind = match (ee.ee_type, ee.ee_code) {
                                (11, _) => IcmpKind::TimeExceeded,
                                (3, code) => IcmpKind::Unreachable(code),
                                (t, code) => IcmpKind::Other(t, code),
                            };
                            error = Some((kind, offender.as_ref().map(ipv4)));
                        }
                        ControlMessageOwned::Ipv6RecvErr(ee, offender)
                            if ee.ee_origin == libc::SO_EE_ORIGIN_ICMP6 =>
                        {
                            let kind = match (ee.ee_type, ee.ee_code) {
                                (3, _) => IcmpKind::TimeExceeded,
                                (1, code) => IcmpKind::Unreachable(code),
                                (t, code) => IcmpKind::Other(t, code),
                            };
                            error = Some((kind, offender.as_ref().map(ipv6)));
                        }
                        ControlMessageOwned::Ipv4RecvErr(ee, _)
                        | ControlMessageOwned::Ipv6RecvErr(ee, _)
                            if ee.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING
                                && ee.ee_errno == libc::ENOMSG as u32
                                && ee.ee_info == SCM_TSTAMP_SND =>
                        {
                            key = Some(ee.ee_data);
                        }
                        _ => {}
                    }
                }
            }
            if let Some((kind, offender)) = error {
                let destination = msg.address.as_ref().and_then(ip_port);
                let bytes = msg.bytes.min(ICMP_PAYLOAD_BYTES);
                let report = IcmpReport {
                    src_port: self.port,
                    destination,
                    offender,
                    kind,
                    payload: data[..bytes].to_vec(),
                    at_ns: host_now_ns(),
                };
                queue_icmp(icmp, report, stats);
                continue;
            }
            let (Some(key), Some((software, hardware))) = (key, stamp) else {
                stats.errqueue_other += 1;
                continue;
            };
            let Some(at) = self.pending.iter().position(|p| p.key == key) else {
                stats.tx_unmatched += 1;
                continue;
            };
            let p = &mut self.pending[at];
            match software {
                // Earlier than the post began: another send's timestamp.
                Some(ns) if ns < p.before_ns => {
                    stats.tx_unmatched += 1;
                    continue;
                }
                Some(ns) => p.software = Some(ns),
                None => {}
            }
            if hardware.is_some() {
                p.hardware = hardware;
            }
            // With OPT_TX_SWHW the software and the NIC timestamp come as two messages.
            if p.software.is_some() && (p.hardware.is_some() || !hardware_tx) {
                if let Some(p) = self.pending.remove(at) {
                    *pending_total -= 1;
                    out.extend(complete(p, stats));
                }
            }
        }
    }

    /// Completes every pending send on the host clock (or what timestamp it has).
    fn flush_pending(
        &mut self,
        stats: &mut UdpStats,
        pending_total: &mut usize,
        out: &mut VecDeque<TransportEvent<IpAddr>>,
    ) {
        for p in self.pending.drain(..) {
            *pending_total -= 1;
            out.extend(complete(p, stats));
        }
    }

    /// Reads and drops datagrams that reached a source-port socket.
    fn drain_stray(&mut self, stats: &mut UdpStats) {
        let mut buf = [0u8; 64];
        for _ in 0..MAX_READS_PER_SOCKET {
            match socket::recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                Ok(_) => stats.stray += 1,
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => break,
                Err(_) => {
                    stats.recv_errors += 1;
                    break;
                }
            }
        }
    }
}

impl UdpTransport {
    /// Opens the interface's well-known socket (`config.local`, `config.port`) and waits,
    /// at most 200 ms, until the kernel stamps received packets (the first socket to ask
    /// turns that on for the whole system, a moment later).
    pub fn new(config: UdpConfig) -> Result<Self, TransportError> {
        config.validate()?;
        // The richest timestamping the kernel accepts: hardware reporting, then software.
        let mut last_error = None;
        for (flags, support) in [
            (
                Some(hardware_flags(config.hardware_tx)),
                TimestampingSupport::SoftwareAndHardware,
            ),
            (Some(base_flags()), TimestampingSupport::SoftwareOnly),
            (None, TimestampingSupport::None),
        ] {
            match open_socket(&config, config.port, flags, None) {
                Ok(fd) => {
                    let rx_ready = flags.is_some() && wait_for_rx_timestamps(config.local);
                    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
                        .map_err(|e| os("epoll_create1", config.local, e))?;
                    epoll
                        .add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, LISTEN_KEY))
                        .map_err(|e| {
                            os(
                                "epoll_ctl ADD",
                                format!("{}:{}", config.local, config.port),
                                e,
                            )
                        })?;
                    return Ok(UdpTransport {
                        epoll,
                        rx_ready,
                        listen: Sock {
                            fd,
                            port: config.port,
                            next_key: 0,
                            pending: VecDeque::new(),
                            last_used: 0,
                        },
                        config,
                        flags,
                        support,
                        sources: HashMap::new(),
                        use_tick: 0,
                        pending_total: 0,
                        ready: VecDeque::new(),
                        icmp: VecDeque::new(),
                        stats: UdpStats::default(),
                    });
                }
                // Only a refused timestamping option makes the next, plainer try worth it.
                Err(
                    e @ TransportError::Os {
                        op: "setsockopt SO_TIMESTAMPING",
                        ..
                    },
                ) => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or(TransportError::Invalid {
            place: "UdpTransport::new".into(),
            reason: "no socket could be opened".into(),
        }))
    }

    /// The settings.
    pub fn config(&self) -> &UdpConfig {
        &self.config
    }

    /// What `SO_TIMESTAMPING` the kernel accepted.
    pub fn timestamping(&self) -> TimestampingSupport {
        self.support
    }

    /// Whether the kernel was stamping received packets when the transport started (see
    /// [`UdpTransport::new`]).
    pub fn rx_timestamps_ready(&self) -> bool {
        self.rx_ready
    }

    /// Counters, among them which timestamps the interface actually gave.
    pub fn stats(&self) -> UdpStats {
        self.stats
    }

    /// Source-port sockets open now.
    pub fn source_sockets(&self) -> usize {
        self.sources.len()
    }

    /// Sends waiting for their timestamp now.
    pub fn pending_sends(&self) -> usize {
        self.pending_total
    }

    fn sock_mut(&mut self, port: u16) -> Option<&mut Sock> {
        if port == self.config.port {
            Some(&mut self.listen)
        } else {
            self.sources.get_mut(&port)
        }
    }

    /// Makes sure a socket bound to `port` exists, evicting the least recently used one
    /// (preferring one with no send waiting for its timestamp) when the cache is full.
    fn ensure_source(&mut self, port: u16) -> Result<(), TransportError> {
        if port == self.config.port || self.sources.contains_key(&port) {
            return Ok(());
        }
        if self.sources.len() >= self.config.max_source_sockets {
            let idle = self
                .sources
                .iter()
                .filter(|(_, s)| s.pending.is_empty())
                .min_by_key(|(_, s)| s.last_used)
                .map(|(p, _)| *p);
            let victim = idle.or_else(|| {
                self.sources
                    .iter()
                    .min_by_key(|(_, s)| s.last_used)
                    .map(|(p, _)| *p)
            });
            if let Some(mut sock) = victim.and_then(|p| self.sources.remove(&p)) {
                let mut out = Vec::new();
                sock.drain_errqueue(
                    self.config.hardware_tx,
                    &mut self.stats,
                    &mut self.pending_total,
                    &mut out,
                    &mut self.icmp,
                );
                self.ready.extend(out);
                sock.flush_pending(&mut self.stats, &mut self.pending_total, &mut self.ready);
                self.stats.sockets_evicted += 1;
            }
        }
        let fd = open_socket(&self.config, port, self.flags, Some(SOURCE_RCVBUF_BYTES))?;
        self.epoll
            .add(&fd, EpollEvent::new(EpollFlags::EPOLLIN, u64::from(port)))
            .map_err(|e| os("epoll_ctl ADD", format!("{}:{port}", self.config.local), e))?;
        self.stats.sockets_opened += 1;
        self.sources.insert(
            port,
            Sock {
                fd,
                port,
                next_key: 0,
                pending: VecDeque::new(),
                last_used: self.use_tick,
            },
        );
        Ok(())
    }

    /// After a failed send on `port`: take the timestamps already queued, complete the rest
    /// on the host clock, and restart the socket's id counter at 0.
    fn resync(&mut self, port: u16) {
        let (Some(flags), hardware_tx) = (self.flags, self.config.hardware_tx) else {
            return;
        };
        let (stats, pending_total) = (&mut self.stats, &mut self.pending_total);
        let sock = if port == self.config.port {
            &mut self.listen
        } else {
            match self.sources.get_mut(&port) {
                Some(sock) => sock,
                None => return,
            }
        };
        let mut out = Vec::new();
        sock.drain_errqueue(hardware_tx, stats, pending_total, &mut out, &mut self.icmp);
        self.ready.extend(out);
        sock.flush_pending(stats, pending_total, &mut self.ready);
        let without_id = flags - TimestampingFlag::SOF_TIMESTAMPING_OPT_ID;
        let reset = socket::setsockopt(&sock.fd, sockopt::Timestamping, &without_id)
            .and_then(|()| socket::setsockopt(&sock.fd, sockopt::Timestamping, &flags));
        stats.tx_resyncs += 1;
        if reset.is_ok() {
            sock.next_key = 0;
        } else if port != self.config.port {
            // The counter's state is unknown: a fresh socket starts it at 0.
            self.sources.remove(&port);
        }
    }

    /// Completes, on the host clock, the sends whose timestamp has not come in time.
    fn sweep(&mut self, now: u64, out: &mut Vec<TransportEvent<IpAddr>>) {
        let wait = u64::try_from(self.config.tx_timestamp_wait.as_nanos()).unwrap_or(u64::MAX);
        let (stats, pending_total) = (&mut self.stats, &mut self.pending_total);
        for sock in std::iter::once(&mut self.listen).chain(self.sources.values_mut()) {
            while sock
                .pending
                .front()
                .is_some_and(|p| p.posted_ns.saturating_add(wait) <= now)
            {
                if let Some(p) = sock.pending.pop_front() {
                    *pending_total -= 1;
                    out.extend(complete(p, stats));
                }
            }
        }
    }

    /// When the next send times out waiting for its timestamp.
    fn next_deadline(&self) -> Option<u64> {
        let wait = u64::try_from(self.config.tx_timestamp_wait.as_nanos()).unwrap_or(u64::MAX);
        std::iter::once(&self.listen)
            .chain(self.sources.values())
            .filter_map(|s| s.pending.front())
            .map(|p| p.posted_ns.saturating_add(wait))
            .min()
    }

    /// Completes the oldest pending send on the host clock (the pending set is full).
    fn complete_oldest(&mut self) {
        let oldest = std::iter::once((self.config.port, &self.listen))
            .chain(self.sources.iter().map(|(p, s)| (*p, s)))
            .filter_map(|(port, s)| s.pending.front().map(|p| (p.posted_ns, port)))
            .min();
        let Some((_, port)) = oldest else {
            return;
        };
        let (stats, pending_total) = (&mut self.stats, &mut self.pending_total);
        let sock = if port == self.config.port {
            &mut self.listen
        } else {
            match self.sources.get_mut(&port) {
                Some(sock) => sock,
                None => return,
            }
        };
        if let Some(p) = sock.pending.pop_front() {
            *pending_total -= 1;
            self.ready.extend(complete(p, stats));
        }
    }

    /// Reads datagrams from the well-known socket, at most `budget`, [`RECV_BATCH`] per
    /// `recvmmsg`: a batch that comes back short emptied the socket, so a poll reads what
    /// is waiting without the last, empty read (`EAGAIN`) a `recvmsg` loop ends with.
    fn drain_datagrams(&mut self, budget: usize, out: &mut Vec<TransportEvent<IpAddr>>) {
        let fd: RawFd = self.listen.fd.as_raw_fd();
        let mut bufs = [[0u8; MAX_DATAGRAM_BYTES]; RECV_BATCH];
        let cmsg = nix::cmsg_space!([libc::timespec; 3]);
        let mut headers =
            socket::MultiHeaders::<SockaddrStorage>::preallocate(RECV_BATCH, Some(cmsg));
        let mut meta = Vec::with_capacity(RECV_BATCH);
        let mut read = 0;
        while read < budget {
            let want = (budget - read).min(RECV_BATCH);
            let mut iovs: Vec<[IoSliceMut; 1]> = bufs
                .iter_mut()
                .take(want)
                .map(|b| [IoSliceMut::new(b)])
                .collect();
            let batch = match socket::recvmmsg(
                fd,
                &mut headers,
                iovs.iter_mut(),
                MsgFlags::MSG_DONTWAIT,
                None,
            ) {
                Ok(batch) => batch,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(_) => {
                    self.stats.recv_errors += 1;
                    break;
                }
            };
            let host_ns = host_now_ns();
            meta.clear();
            meta.extend(batch.map(|msg| {
                let mut stamp = None;
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let ControlMessageOwned::ScmTimestampsns(ts) = c {
                            stamp = Some((timespec_ns(&ts.system), timespec_ns(&ts.hw_raw)));
                        }
                    }
                }
                (msg.bytes, msg.flags, msg.address, stamp)
            }));
            let got = meta.len();
            for ((bytes, flags, address, stamp), buf) in meta.drain(..).zip(bufs.iter()) {
                let Some((from, src_port)) = address.as_ref().and_then(ip_port) else {
                    self.stats.recv_errors += 1;
                    continue;
                };
                if flags.contains(MsgFlags::MSG_TRUNC) {
                    self.stats.oversized += 1;
                }
                let (software, hardware) = stamp.unwrap_or((None, None));
                let stamps = Stamps {
                    hardware,
                    software,
                    host_ns,
                };
                self.stats.rx.count(&stamps);
                out.push(TransportEvent::Received {
                    from,
                    src_port,
                    stamps,
                    payload: buf[..bytes.min(MAX_DATAGRAM_BYTES)].to_vec(),
                });
            }
            read += got;
            if got < want {
                break;
            }
        }
    }
}

/// Reads and clears the socket's pending error (`SO_ERROR`). With `IP_RECVERR` the kernel
/// sets it for every ICMP error the socket's datagrams cause, also on an unconnected socket
/// (net/ipv4/udp.c `__udp4_lib_err`), and the next send would fail with it
/// (`sock_alloc_send_pskb` returns `sock_error`): an answer to a trace datagram must not
/// fail the next probe from that port. Reading the error queue clears it too; this covers
/// an error that arrived since.
fn clear_socket_error(sock: &Sock) {
    let _ = socket::getsockopt(&sock.fd, sockopt::SocketError);
}

impl UdpTransport {
    /// Sends a trace datagram with `payload` to `to`'s well-known port from the socket of
    /// source port `src_port` (the 5-tuple of the probes, or of the ACKs, it traces) with
    /// TTL (IPv6: hop limit) `ttl`. Routers answer with ICMP time-exceeded, read with
    /// [`Self::take_icmp`] when [`UdpConfig::trace`] is on. Its send completion is counted
    /// but not reported.
    pub fn send_trace(
        &mut self,
        to: &IpAddr,
        src_port: u16,
        ttl: u8,
        payload: &[u8],
    ) -> Result<(), TransportError> {
        let local = self.config.local;
        if to.is_ipv4() != local.is_ipv4() {
            return Err(TransportError::Invalid {
                place: format!("trace destination {to}"),
                reason: format!("not of the address family of the interface address {local}"),
            });
        }
        if src_port == 0 || ttl == 0 {
            return Err(TransportError::Invalid {
                place: format!("trace to {to} from source port {src_port} with TTL {ttl}"),
                reason: "source port and TTL must be above 0".into(),
            });
        }
        self.use_tick += 1;
        let tick = self.use_tick;
        self.ensure_source(src_port)?;
        let destination = SocketAddr::new(*to, self.config.trace_port.unwrap_or(self.config.port));
        let timestamped = self.flags.is_some();
        let Some(sock) = self.sock_mut(src_port) else {
            return Err(TransportError::Invalid {
                place: format!("source port {src_port}"),
                reason: "no socket for it".into(),
            });
        };
        sock.last_used = tick;
        clear_socket_error(sock);
        let hops = libc::c_int::from(ttl);
        let cmsg = if local.is_ipv4() {
            ControlMessage::Ipv4Ttl(&hops)
        } else {
            ControlMessage::Ipv6HopLimit(&hops)
        };
        let before_ns = host_now_ns();
        let sent = socket::sendmsg(
            sock.fd.as_raw_fd(),
            &[IoSlice::new(payload)],
            &[cmsg],
            MsgFlags::empty(),
            Some(&SockaddrStorage::from(destination)),
        );
        let posted_ns = host_now_ns();
        match sent {
            Ok(_) => {
                if timestamped {
                    // The datagram takes an OPT_ID like any send: keep the count.
                    sock.pending.push_back(PendingTx {
                        key: sock.next_key,
                        token: 0,
                        before_ns,
                        posted_ns,
                        software: None,
                        hardware: None,
                        report: false,
                    });
                    sock.next_key = sock.next_key.wrapping_add(1);
                    self.pending_total += 1;
                    if self.pending_total > self.config.max_pending_tx {
                        self.complete_oldest();
                    }
                }
                self.stats.trace_sent += 1;
                Ok(())
            }
            Err(errno) => {
                self.resync(src_port);
                Err(os(
                    "sendmsg (trace)",
                    format!("{local}:{src_port} -> {destination} TTL {ttl}"),
                    errno,
                ))
            }
        }
    }

    /// The ICMP errors read since the last call, oldest first (with [`UdpConfig::trace`]).
    pub fn take_icmp(&mut self) -> Vec<IcmpReport> {
        self.icmp.drain(..).collect()
    }
}

impl ProbeTransport for UdpTransport {
    type Addr = IpAddr;

    fn now_ns(&self) -> u64 {
        host_now_ns()
    }

    fn send(
        &mut self,
        to: &IpAddr,
        src_port: u16,
        payload: &[u8],
        token: u64,
    ) -> Result<u64, TransportError> {
        let local = self.config.local;
        if to.is_ipv4() != local.is_ipv4() {
            return Err(TransportError::Invalid {
                place: format!("destination {to}"),
                reason: format!("not of the address family of the interface address {local}"),
            });
        }
        if src_port == 0 {
            return Err(TransportError::Invalid {
                place: format!("source port of a datagram to {to}"),
                reason: "0 is not a source port".into(),
            });
        }
        self.use_tick += 1;
        let tick = self.use_tick;
        self.ensure_source(src_port)?;
        let destination = SocketAddr::new(*to, self.config.port);
        let timestamped = self.flags.is_some();
        let trace = self.config.trace;
        let Some(sock) = self.sock_mut(src_port) else {
            return Err(TransportError::Invalid {
                place: format!("source port {src_port}"),
                reason: "no socket for it".into(),
            });
        };
        sock.last_used = tick;
        if trace {
            clear_socket_error(sock);
        }
        let before_ns = host_now_ns();
        let sent = socket::sendto(
            sock.fd.as_raw_fd(),
            payload,
            &SockaddrStorage::from(destination),
            MsgFlags::empty(),
        );
        let posted_ns = host_now_ns();
        match sent {
            Ok(n) if n == payload.len() => {
                if timestamped {
                    sock.pending.push_back(PendingTx {
                        key: sock.next_key,
                        token,
                        before_ns,
                        posted_ns,
                        software: None,
                        hardware: None,
                        report: true,
                    });
                    sock.next_key = sock.next_key.wrapping_add(1);
                    self.pending_total += 1;
                    if self.pending_total > self.config.max_pending_tx {
                        self.complete_oldest();
                    }
                } else {
                    let event = TransportEvent::Sent {
                        token,
                        stamps: Stamps::host_only(posted_ns),
                    };
                    self.stats.tx.host_clock += 1;
                    self.ready.push_back(event);
                }
                Ok(posted_ns)
            }
            Ok(n) => {
                self.resync(src_port);
                Err(TransportError::Invalid {
                    place: format!("{local}:{src_port} -> {destination}"),
                    reason: format!("sent {n} of {} bytes", payload.len()),
                })
            }
            Err(errno) => {
                self.resync(src_port);
                Err(os(
                    "sendto",
                    format!("{local}:{src_port} -> {destination}"),
                    errno,
                ))
            }
        }
    }

    fn poll(
        &mut self,
        wait: Duration,
        events: &mut Vec<TransportEvent<IpAddr>>,
    ) -> Result<(), TransportError> {
        let start = events.len();
        while events.len() - start < MAX_EVENTS_PER_POLL {
            match self.ready.pop_front() {
                Some(event) => events.push(event),
                None => break,
            }
        }
        let now = host_now_ns();
        let mut timeout = if events.len() > start {
            Duration::ZERO
        } else {
            wait
        };
        if let Some(deadline) = self.next_deadline() {
            timeout = timeout.min(Duration::from_nanos(deadline.saturating_sub(now)));
        }
        // epoll waits in whole milliseconds: round a wait up (a deadline is never missed
        // by spinning), and keep a zero wait zero.
        let millis = if timeout.is_zero() {
            0
        } else {
            timeout
                .as_nanos()
                .div_ceil(1_000_000)
                .min(u128::from(u16::MAX)) as u16
        };
        let mut ready = [EpollEvent::empty(); 64];
        let count = match self.epoll.wait(&mut ready, millis) {
            Ok(n) => n,
            Err(Errno::EINTR) => 0,
            Err(e) => {
                return Err(os(
                    "epoll_wait",
                    format!(
                        "{} sockets of {}",
                        1 + self.sources.len(),
                        self.config.local
                    ),
                    e,
                ))
            }
        };
        let readable: Vec<(Option<u16>, EpollFlags)> = ready[..count]
            .iter()
            .map(|e| {
                let port = (e.data() != LISTEN_KEY).then_some(e.data() as u16);
                (port, e.events())
            })
            .collect();
        let hardware_tx = self.config.hardware_tx;
        for (port, revents) in readable {
            let (stats, pending_total) = (&mut self.stats, &mut self.pending_total);
            match port {
                None => {
                    if revents.contains(EpollFlags::EPOLLERR) {
                        self.listen.drain_errqueue(
                            hardware_tx,
                            stats,
                            pending_total,
                            events,
                            &mut self.icmp,
                        );
                    }
                    if revents.contains(EpollFlags::EPOLLIN) {
                        let budget = MAX_EVENTS_PER_POLL.saturating_sub(events.len() - start);
                        self.drain_datagrams(budget, events);
                    }
                }
                Some(port) => {
                    let Some(sock) = self.sources.get_mut(&port) else {
                        continue;
                    };
                    if revents.contains(EpollFlags::EPOLLERR) {
                        sock.drain_errqueue(
                            hardware_tx,
                            stats,
                            pending_total,
                            events,
                            &mut self.icmp,
                        );
                    }
                    if revents.contains(EpollFlags::EPOLLIN) {
                        sock.drain_stray(stats);
                    }
                }
            }
        }
        self.sweep(host_now_ns(), events);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};

    use super::*;

    /// A port free on 127.0.0.1 a moment ago.
    fn free_port() -> u16 {
        UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|s| s.local_addr())
            .map(|a| a.port())
            .expect("a free port")
    }

    fn completions(transport: &mut UdpTransport, count: usize) -> Vec<(u64, Stamps)> {
        let mut events = Vec::new();
        let mut sent = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        while sent.len() < count && std::time::Instant::now() < deadline {
            transport
                .poll(Duration::from_millis(5), &mut events)
                .expect("poll");
            for event in events.drain(..) {
                if let TransportEvent::Sent { token, stamps } = event {
                    sent.push((token, stamps));
                }
            }
        }
        sent
    }

    /// After a failed send the socket's id counter restarts at 0 on both sides: the next
    /// send's kernel timestamp still finds its send.
    #[test]
    fn a_reset_counter_keeps_send_timestamps_matched() {
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut transport = UdpTransport::new(UdpConfig {
            port: free_port(),
            ..UdpConfig::new(local)
        })
        .expect("transport on 127.0.0.1");
        let src = free_port();
        for token in [1, 2] {
            transport.send(&local, src, &[0; 50], token).expect("send");
        }
        let first = completions(&mut transport, 2);
        assert_eq!(first.iter().map(|c| c.0).collect::<Vec<_>>(), [1, 2]);
        assert!(first.iter().all(|c| c.1.software.is_some()), "{first:?}");
        // The kernel's counter is at 2 now; a reset must bring it back to 0 with ours.
        transport.resync(src);
        transport.send(&local, src, &[0; 50], 3).expect("send");
        let after = completions(&mut transport, 1);
        assert_eq!(after.len(), 1);
        assert!(after[0].1.software.is_some(), "{after:?}");
        let stats = transport.stats();
        assert_eq!((stats.tx_resyncs, stats.tx_unmatched), (1, 0));
        assert_eq!(stats.tx.software, 3);
    }

    #[test]
    fn bad_settings_and_destinations_are_refused_naming_them() {
        let err = UdpTransport::new(UdpConfig::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED)))
            .expect_err("a wildcard address");
        assert_eq!(
            err.to_string(),
            "UdpConfig::local: 0.0.0.0 is not a unicast interface address"
        );
        let err = UdpTransport::new(UdpConfig {
            tx_timestamp_wait: Duration::ZERO,
            ..UdpConfig::new(IpAddr::V4(Ipv4Addr::LOCALHOST))
        })
        .expect_err("no wait");
        assert!(err
            .to_string()
            .starts_with("UdpConfig::tx_timestamp_wait: "));
        let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let mut transport = UdpTransport::new(UdpConfig {
            port: free_port(),
            ..UdpConfig::new(local)
        })
        .expect("transport on 127.0.0.1");
        let err = transport
            .send(&"::1".parse().expect("an address"), 50_000, &[0; 50], 1)
            .expect_err("another family");
        assert_eq!(
            err.to_string(),
            "destination ::1: not of the address family of the interface address 127.0.0.1"
        );
        let err = transport.send(&local, 0, &[0; 50], 1).expect_err("port 0");
        assert!(err.to_string().ends_with("0 is not a source port"));
        // A port another socket holds.
        let holder = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let taken = holder.local_addr().expect("address").port();
        assert_eq!(
            transport.send(&local, taken, &[0; 50], 2),
            Err(TransportError::SourcePortInUse {
                local: "127.0.0.1".into(),
                port: taken
            })
        );
    }
}
