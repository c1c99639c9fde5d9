//! The switch's CPU port as Linux shows it (cargo feature `cpu-port`): on a Tofino the
//! PCIe CPU port is the `bf_pci0` netdev of the SDE's `bf_kpkt` module, which adds and
//! strips no header — the socket sees the bytes the P4 egress deparser emits: a polling
//! packet's CPU copy (an Ethernet/IPv4/UDP frame) or an eviction report (the report header,
//! then the evicting packet). Intel's reference switch stack reads it the same way: an
//! `AF_PACKET` / `SOCK_RAW` socket bound to the netdev's ifindex for `ETH_P_ALL`
//! (packet(7)).
//!
//! The socket is bound with the interface's link-layer address as `getifaddrs(3)` returns
//! it (protocol 0 in a bind keeps the socket's own protocol, packet(7)); frames of other
//! interfaces queued before the bind and copies of frames sent out of the interface
//! (`PACKET_OUTGOING`) are dropped. A reader thread with a receive timeout hands frames to
//! the agent over a bounded channel and counts what it had to drop.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use nix::sys::socket::{
    bind, recvfrom, send, setsockopt, socket, sockopt, AddressFamily, LinkAddr, MsgFlags, SockFlag,
    SockProtocol, SockType,
};
use nix::sys::time::{TimeVal, TimeValLike};

use crate::backend::{CpuFrame, CpuFrameKind};

/// `PACKET_OUTGOING` (linux/if_packet.h): a copy of a frame sent out of the interface.
const PACKET_OUTGOING: u8 = 4;

/// Socket receive buffer, bytes (bounded memory; thousands of CPU copies).
const RECEIVE_BUFFER: usize = 8 << 20;

/// Largest frame read (a jumbo frame plus the eviction report in front of it).
pub const MAX_FRAME: usize = 10_240;

/// Why the CPU port cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CpuPortError {
    /// No interface of that name.
    #[error("CPU port `{0}`: no such network interface")]
    NoInterface(String),
    /// A system call failed.
    #[error("CPU port `{interface}`: {what}: {source}")]
    Io {
        /// The interface.
        interface: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        source: nix::Error,
    },
}

/// An `AF_PACKET` socket on one interface.
#[derive(Debug)]
pub struct CpuPort {
    fd: OwnedFd,
    ifindex: usize,
    interface: String,
}

impl CpuPort {
    /// Opens the CPU port `interface` (needs `CAP_NET_RAW`); a receive returns after at most
    /// `timeout` without a frame.
    pub fn open(interface: &str, timeout: Duration) -> Result<CpuPort, CpuPortError> {
        let io = |what: &'static str| {
            let interface = interface.to_string();
            move |source| CpuPortError::Io {
                interface,
                what,
                source,
            }
        };
        let link: LinkAddr = nix::ifaddrs::getifaddrs()
            .map_err(io("listing interfaces"))?
            .filter(|a| a.interface_name == interface)
            .find_map(|a| a.address.and_then(|s| s.as_link_addr().copied()))
            .ok_or_else(|| CpuPortError::NoInterface(interface.to_string()))?;
        let fd = socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::EthAll,
        )
        .map_err(io("opening an AF_PACKET socket"))?;
        bind(fd.as_raw_fd(), &link).map_err(io("binding the socket"))?;
        // Room for bursts while the reader thread is descheduled: the kernel drops what
        // does not fit the socket's buffer. Root may exceed `net.core.rmem_max`.
        if setsockopt(&fd, sockopt::RcvBufForce, &RECEIVE_BUFFER).is_err() {
            setsockopt(&fd, sockopt::RcvBuf, &RECEIVE_BUFFER)
                .map_err(io("setting the receive buffer"))?;
        }
        let micros = timeout.as_micros().clamp(1, i64::MAX as u128) as i64;
        setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::microseconds(micros))
            .map_err(io("setting the receive timeout"))?;
        Ok(CpuPort {
            fd,
            ifindex: link.ifindex(),
            interface: interface.to_string(),
        })
    }

    /// The interface's name.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The next frame that arrived on the interface into `buf` (its length), or `None` when
    /// the timeout passed first. A frame longer than `buf` is cut to it.
    pub fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>, CpuPortError> {
        loop {
            match recvfrom::<LinkAddr>(self.fd.as_raw_fd(), buf) {
                Ok((n, Some(from)))
                    if from.ifindex() == self.ifindex && from.pkttype() != PACKET_OUTGOING =>
                {
                    return Ok(Some(n))
                }
                Ok(_) => continue,
                Err(nix::Error::EAGAIN | nix::Error::EINTR) => return Ok(None),
                Err(source) => {
                    return Err(CpuPortError::Io {
                        interface: self.interface.clone(),
                        what: "receiving",
                        source,
                    })
                }
            }
        }
    }

    /// Sends one frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> Result<(), CpuPortError> {
        send(self.fd.as_raw_fd(), frame, MsgFlags::empty())
            .map(|_| ())
            .map_err(|source| CpuPortError::Io {
                interface: self.interface.clone(),
                what: "sending",
                source,
            })
    }
}

/// A reader thread: it ends with the error that stopped it, if one did.
pub type Reader = JoinHandle<Result<(), CpuPortError>>;

/// What a reader thread did.
#[derive(Debug, Default)]
pub struct ReaderStats {
    /// Frames handed to the agent.
    pub delivered: AtomicU64,
    /// Frames dropped because the agent's queue was full.
    pub dropped: AtomicU64,
}

/// Reads `port` on a thread until `stop` is set or the agent's side of `to` is gone:
/// each frame is classified, stamped by `clock` (the switch time the agent works in) and
/// queued; a full queue drops the frame and counts it. Returns the join handle and the
/// counters, or why the thread could not start.
pub fn spawn_reader(
    port: CpuPort,
    to: SyncSender<CpuFrame>,
    clock: Box<dyn Fn() -> u64 + Send>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(Reader, Arc<ReaderStats>)> {
    let stats = Arc::new(ReaderStats::default());
    let counters = stats.clone();
    let handle = std::thread::Builder::new()
        .name(format!("cpu-port {}", port.interface()))
        .spawn(move || {
            let mut buf = vec![0u8; MAX_FRAME];
            while !stop.load(Ordering::Relaxed) {
                let Some(n) = port.recv(&mut buf)? else {
                    continue;
                };
                let frame = CpuFrame {
                    time_ns: clock(),
                    kind: CpuFrameKind::of(&buf[..n]),
                    bytes: buf[..n].to_vec(),
                };
                match to.try_send(frame) {
                    Ok(()) => counters.delivered.fetch_add(1, Ordering::Relaxed),
                    Err(TrySendError::Full(_)) => counters.dropped.fetch_add(1, Ordering::Relaxed),
                    Err(TrySendError::Disconnected(_)) => break,
                };
            }
            Ok(())
        })?;
    Ok((handle, stats))
}
