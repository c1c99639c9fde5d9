//! eBPF service tracing (feature `ebpf`, Linux x86-64): kprobes on the kernel verbs that
//! connect and destroy queue pairs, so the agent learns the service's RC connections as
//! they are made — `ib_modify_qp_with_udata` taking a QP to RTR with an address vector and
//! a destination QP (its QPN, the peer's QPN, the destination GID and the flow label, hence
//! the 5-tuple's UDP source port, [`udp_sport`]), and `ib_destroy_qp_user` (Linux
//! drivers/infiniband/core/verbs.c; uverbs calls both for user QPs).
//!
//! The program is C (`host-agent/bpf/qp_trace.c`), compiled by build.rs with Debian's clang
//! (`-target bpf`) and loaded with aya. The structures it reads are `ib_core`'s, whose
//! layout changes between kernels: the offsets are read at load time from the running
//! kernel's BTF (`/sys/kernel/btf/vmlinux` and the module's split BTF
//! `/sys/kernel/btf/ib_core`, [`crate::btf`]) and written into the program's read-only
//! globals before it is loaded. Where it cannot load, [`QpTracer::open`] says why
//! (no kprobes, no BTF for `ib_core`, the verifier's or the kernel's refusal).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr, UdpSocket};
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use aya::maps::{MapData, RingBuf};
use aya::programs::KProbe;
use aya::{Ebpf, EbpfLoader};
use hawkmesh_wire::roce::udp_sport;
use nix::errno::Errno;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::time::TimeSpec;
use thiserror::Error;

use crate::btf::{Btf, BtfError};
use crate::services::{ServiceConnection, ServiceSource};

/// The compiled program (build.rs).
static PROGRAM: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/qp_trace.o"));

/// Where the kernel lists its kprobe PMU (present with CONFIG_KPROBES).
const KPROBE_PMU: &str = "/sys/bus/event_source/devices/kprobe";
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
const IB_CORE_BTF: &str = "/sys/kernel/btf/ib_core";

/// Events read per [`QpTracer::poll`] at most (the rest wait in the ring buffer).
const MAX_EVENTS_PER_POLL: usize = 1024;

/// Why the tracer cannot run.
#[derive(Debug, Error)]
pub enum TraceError {
    /// The kernel lacks what the tracer needs.
    #[error("eBPF service tracing unavailable: {0}")]
    Unavailable(String),
    /// The kernel's BTF could not be read or lacks a member.
    #[error("eBPF service tracing: {0}")]
    Btf(#[from] BtfError),
    /// Loading or attaching failed.
    #[error("eBPF service tracing: {step}: {reason}")]
    Load {
        /// What was being done.
        step: String,
        /// The loader's or kernel's error.
        reason: String,
    },
}

/// Offsets into this kernel's `ib_core` structures, as the program needs them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offsets {
    /// `struct ib_qp` `qp_num`.
    pub qp_num: u32,
    /// `struct ib_qp_attr` `qp_state`.
    pub attr_state: u32,
    /// `struct ib_qp_attr` `dest_qp_num`.
    pub attr_dest_qpn: u32,
    /// `struct ib_qp_attr` `ah_attr.grh.dgid`.
    pub attr_dgid: u32,
    /// `struct ib_qp_attr` `ah_attr.grh.flow_label`.
    pub attr_flow_label: u32,
}

impl Offsets {
    /// Reads them from parsed BTF (ib_core's, split over vmlinux's).
    pub fn from_btf(btf: &Btf) -> Result<Self, BtfError> {
        Ok(Offsets {
            qp_num: btf.offset_of("ib_qp", &["qp_num"])?,
            attr_state: btf.offset_of("ib_qp_attr", &["qp_state"])?,
            attr_dest_qpn: btf.offset_of("ib_qp_attr", &["dest_qp_num"])?,
            attr_dgid: btf.offset_of("ib_qp_attr", &["ah_attr", "grh", "dgid"])?,
            attr_flow_label: btf.offset_of("ib_qp_attr", &["ah_attr", "grh", "flow_label"])?,
        })
    }

    /// Reads them from the running kernel's BTF.
    pub fn from_kernel() -> Result<Self, TraceError> {
        let read = |path: &str| {
            std::fs::read(path).map_err(|e| {
                TraceError::Unavailable(format!(
                    "{path}: {e} (the ib_core module must be loaded, and the kernel built with \
                     CONFIG_DEBUG_INFO_BTF_MODULES)"
                ))
            })
        };
        let vmlinux = Btf::parse(VMLINUX_BTF, &read(VMLINUX_BTF)?, None)?;
        let ib_core = Btf::parse(IB_CORE_BTF, &read(IB_CORE_BTF)?, Some(vmlinux))?;
        Ok(Offsets::from_btf(&ib_core)?)
    }
}

/// A queue pair the tracer saw connect or go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpEvent {
    /// A QP was taken to RTR towards a peer QP (an RC/UC connection).
    Connect {
        /// The local QPN.
        qpn: u32,
        /// The peer's QPN.
        dest_qpn: u32,
        /// The peer's GID.
        dgid: [u8; 16],
        /// The GRH flow label given (0: derived from the QPNs).
        flow_label: u32,
        /// The connection's UDP source port, as the kernel derives it.
        src_port: u16,
    },
    /// A user QP was destroyed.
    Destroy {
        /// Its QPN.
        qpn: u32,
    },
}

/// Bytes of one event (`struct event` in bpf/qp_trace.c).
pub const EVENT_BYTES: usize = 32;

impl QpEvent {
    /// Parses one ring-buffer record (little-endian, as the program wrote it on x86-64).
    pub fn parse(bytes: &[u8]) -> Option<QpEvent> {
        if bytes.len() < EVENT_BYTES {
            return None;
        }
        let word =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let (kind, qpn, dest_qpn, flow_label) = (word(0), word(4), word(8), word(12));
        match kind {
            1 => {
                let mut dgid = [0; 16];
                dgid.copy_from_slice(&bytes[16..32]);
                Some(QpEvent::Connect {
                    qpn: qpn & 0x00FF_FFFF,
                    dest_qpn: dest_qpn & 0x00FF_FFFF,
                    dgid,
                    flow_label: flow_label & 0xF_FFFF,
                    src_port: udp_sport(flow_label, qpn & 0x00FF_FFFF, dest_qpn & 0x00FF_FFFF),
                })
            }
            2 => Some(QpEvent::Destroy {
                qpn: qpn & 0x00FF_FFFF,
            }),
            _ => None,
        }
    }
}

/// The loaded and attached tracer.
pub struct QpTracer {
    // Keeps the programs and their attachments alive.
    _ebpf: Ebpf,
    events: RingBuf<MapData>,
    offsets: Offsets,
    malformed: u64,
}

impl std::fmt::Debug for QpTracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpTracer")
            .field("offsets", &self.offsets)
            .field("malformed", &self.malformed)
            .finish_non_exhaustive()
    }
}

fn load_error(step: impl Into<String>, e: impl std::fmt::Display) -> TraceError {
    TraceError::Load {
        step: step.into(),
        reason: e.to_string(),
    }
}

impl QpTracer {
    /// Checks the kernel, reads the offsets from its BTF, loads the program and attaches
    /// both kprobes.
    pub fn open() -> Result<Self, TraceError> {
        if !Path::new(KPROBE_PMU).exists() {
            return Err(TraceError::Unavailable(format!(
                "kprobes are not available: {KPROBE_PMU} is missing (a kernel without \
                 CONFIG_KPROBES)"
            )));
        }
        let offsets = Offsets::from_kernel()?;
        let mut ebpf = EbpfLoader::new()
            .override_global("OFF_QP_NUM", &offsets.qp_num, true)
            .override_global("OFF_ATTR_STATE", &offsets.attr_state, true)
            .override_global("OFF_ATTR_DEST_QPN", &offsets.attr_dest_qpn, true)
            .override_global("OFF_ATTR_DGID", &offsets.attr_dgid, true)
            .override_global("OFF_ATTR_FLOW_LABEL", &offsets.attr_flow_label, true)
            .load(PROGRAM)
            .map_err(|e| load_error("loading bpf/qp_trace.c", e))?;
        for (name, function) in [
            ("qp_modify", "ib_modify_qp_with_udata"),
            ("qp_destroy", "ib_destroy_qp_user"),
        ] {
            let program: &mut KProbe = ebpf
                .program_mut(name)
                .ok_or_else(|| load_error(format!("program {name}"), "not in the object"))?
                .try_into()
                .map_err(|e| load_error(format!("program {name}"), e))?;
            program
                .load()
                .map_err(|e| load_error(format!("verifying {name}"), e))?;
            program
                .attach(function, 0)
                .map_err(|e| load_error(format!("kprobe on {function}"), e))?;
        }
        let map = ebpf
            .take_map("EVENTS")
            .ok_or_else(|| load_error("map EVENTS", "not in the object"))?;
        let events = RingBuf::try_from(map).map_err(|e| load_error("map EVENTS", e))?;
        Ok(QpTracer {
            _ebpf: ebpf,
            events,
            offsets,
            malformed: 0,
        })
    }

    /// The offsets the program was loaded with.
    pub fn offsets(&self) -> Offsets {
        self.offsets
    }

    /// Records that were not events (counted, dropped).
    pub fn malformed(&self) -> u64 {
        self.malformed
    }

    /// Waits up to `wait` for events and appends those ready (at most 1024) to `out`.
    pub fn poll(&mut self, wait: Duration, out: &mut Vec<QpEvent>) -> Result<(), TraceError> {
        if self.drain(MAX_EVENTS_PER_POLL, out) > 0 || wait.is_zero() {
            return Ok(());
        }
        let mut fds = [PollFd::new(self.events.as_fd(), PollFlags::POLLIN)];
        match ppoll(&mut fds, Some(TimeSpec::from_duration(wait)), None) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(load_error("ppoll on the ring buffer", e)),
        }
        self.drain(MAX_EVENTS_PER_POLL, out);
        Ok(())
    }

    fn drain(&mut self, budget: usize, out: &mut Vec<QpEvent>) -> usize {
        let mut read = 0;
        while read < budget {
            let Some(item) = self.events.next() else {
                break;
            };
            read += 1;
            match QpEvent::parse(&item) {
                Some(event) => out.push(event),
                None => self.malformed += 1,
            }
        }
        read
    }
}

/// The connections open now, from the tracer's events: a connect adds one (keyed by local
/// QPN), a destroy removes it. Bounded: beyond `max` open connections new ones are counted
/// and not kept (a destroy the ring buffer lost would otherwise grow the table for ever).
#[derive(Clone, Debug)]
pub struct ConnectionTable {
    open: BTreeMap<u32, ServiceConnection>,
    max: usize,
    /// Connections not kept (table full, or no local address for the peer).
    pub dropped: u64,
    /// The last reason one was not kept.
    pub last_drop: Option<String>,
}

/// The peer's address in a GID: IPv4 for `::ffff:a.b.c.d`, IPv6 otherwise.
pub fn gid_address(gid: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(gid);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

/// This host's address towards `remote`: the source the kernel's routing picks (a UDP
/// socket connected to the peer's RoCEv2 port sends nothing). On RoCEv2 the RNIC's address
/// is the one that routes to its peers; a host whose routing disagrees should use the
/// netlink or static source instead.
pub fn routed_local_address(remote: IpAddr) -> Result<IpAddr, String> {
    let any: IpAddr = if remote.is_ipv4() {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    } else {
        IpAddr::V6(Ipv6Addr::UNSPECIFIED)
    };
    let socket = UdpSocket::bind((any, 0)).map_err(|e| format!("UDP socket for {remote}: {e}"))?;
    socket
        .connect((remote, hawkmesh_wire::telemetry::ROCEV2_UDP_PORT))
        .map_err(|e| format!("no route to {remote}: {e}"))?;
    socket
        .local_addr()
        .map(|a| a.ip())
        .map_err(|e| format!("local address towards {remote}: {e}"))
}

impl ConnectionTable {
    /// An empty table keeping at most `max` connections.
    pub fn new(max: usize) -> Self {
        ConnectionTable {
            open: BTreeMap::new(),
            max: max.max(1),
            dropped: 0,
            last_drop: None,
        }
    }

    /// Applies one event; `local_for` gives this host's address towards a peer.
    pub fn apply(
        &mut self,
        event: &QpEvent,
        local_for: &mut dyn FnMut(IpAddr) -> Result<IpAddr, String>,
    ) {
        match *event {
            QpEvent::Connect {
                qpn,
                dest_qpn,
                dgid,
                src_port,
                ..
            } => {
                let remote = gid_address(dgid);
                if !self.open.contains_key(&qpn) && self.open.len() >= self.max {
                    self.dropped += 1;
                    self.last_drop = Some(format!(
                        "QP {qpn:#x} to {remote}: {} connections open, the table holds {}",
                        self.open.len(),
                        self.max
                    ));
                    return;
                }
                match local_for(remote) {
                    Ok(local) => {
                        self.open.insert(
                            qpn,
                            ServiceConnection {
                                local,
                                remote,
                                src_port,
                                lqpn: Some(qpn),
                                rqpn: Some(dest_qpn),
                            },
                        );
                    }
                    Err(reason) => {
                        self.dropped += 1;
                        self.last_drop = Some(format!("QP {qpn:#x}: {reason}"));
                    }
                }
            }
            QpEvent::Destroy { qpn } => {
                self.open.remove(&qpn);
            }
        }
    }

    /// The connections open now, by local QPN.
    pub fn connections(&self) -> Vec<ServiceConnection> {
        self.open.values().copied().collect()
    }
}

/// The eBPF tracer as a [`ServiceSource`] (the best of the three, `services`' module doc).
#[derive(Debug)]
pub struct EbpfSource {
    tracer: QpTracer,
    table: ConnectionTable,
}

impl EbpfSource {
    /// The tracer's connections, at most `max` open at once.
    pub fn new(tracer: QpTracer, max: usize) -> Self {
        EbpfSource {
            tracer,
            table: ConnectionTable::new(max),
        }
    }

    /// The table (with its drop counters).
    pub fn table(&self) -> &ConnectionTable {
        &self.table
    }
}

impl ServiceSource for EbpfSource {
    fn name(&self) -> &'static str {
        "ebpf"
    }

    fn connections(&mut self) -> Result<Vec<ServiceConnection>, String> {
        let mut events = Vec::new();
        // What the ring buffer holds now, in bounded rounds.
        for _ in 0..64 {
            events.clear();
            self.tracer
                .poll(Duration::ZERO, &mut events)
                .map_err(|e| e.to_string())?;
            if events.is_empty() {
                break;
            }
            for event in &events {
                self.table.apply(event, &mut routed_local_address);
            }
        }
        Ok(self.table.connections())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_buffer_records_become_events_with_the_kernel_source_port() {
        let mut record = [0u8; EVENT_BYTES];
        record[0] = 1;
        record[4..8].copy_from_slice(&0x12u32.to_le_bytes());
        record[8..12].copy_from_slice(&0x11u32.to_le_bytes());
        record[16..32].copy_from_slice(
            &std::net::Ipv4Addr::new(10, 77, 0, 1)
                .to_ipv6_mapped()
                .octets(),
        );
        // Flow label 0: the port from both QPNs (0x12 · 0x11 = 0x132 → 0xC132).
        assert_eq!(
            QpEvent::parse(&record),
            Some(QpEvent::Connect {
                qpn: 0x12,
                dest_qpn: 0x11,
                dgid: std::net::Ipv4Addr::new(10, 77, 0, 1)
                    .to_ipv6_mapped()
                    .octets(),
                flow_label: 0,
                src_port: 0xC132,
            })
        );
        // A set flow label gives the port.
        record[12..16].copy_from_slice(&0x5u32.to_le_bytes());
        assert!(matches!(
            QpEvent::parse(&record),
            Some(QpEvent::Connect {
                src_port: 0xC005,
                ..
            })
        ));
        record[0] = 2;
        assert_eq!(
            QpEvent::parse(&record),
            Some(QpEvent::Destroy { qpn: 0x12 })
        );
        record[0] = 9;
        assert_eq!(QpEvent::parse(&record), None);
        assert_eq!(QpEvent::parse(&record[..31]), None);
    }

    #[test]
    fn the_table_follows_connects_and_destroys_within_its_bound() {
        let peer = std::net::Ipv4Addr::new(10, 77, 0, 1)
            .to_ipv6_mapped()
            .octets();
        let connect = |qpn| QpEvent::Connect {
            qpn,
            dest_qpn: 0x11,
            dgid: peer,
            flow_label: 0,
            src_port: udp_sport(0, qpn, 0x11),
        };
        let local: IpAddr = "10.77.0.2".parse().unwrap();
        let mut resolve = |remote: IpAddr| {
            if remote == IpAddr::from([10, 77, 0, 1]) {
                Ok(local)
            } else {
                Err(format!("no route to {remote}"))
            }
        };
        let mut table = ConnectionTable::new(2);
        table.apply(&connect(0x12), &mut resolve);
        table.apply(&connect(0x13), &mut resolve);
        // Full: a third is counted, not kept.
        table.apply(&connect(0x14), &mut resolve);
        assert_eq!(table.dropped, 1);
        assert_eq!(
            table.connections(),
            [
                ServiceConnection {
                    local,
                    remote: "10.77.0.1".parse().unwrap(),
                    src_port: 0xC132,
                    lqpn: Some(0x12),
                    rqpn: Some(0x11),
                },
                ServiceConnection {
                    local,
                    remote: "10.77.0.1".parse().unwrap(),
                    src_port: udp_sport(0, 0x13, 0x11),
                    lqpn: Some(0x13),
                    rqpn: Some(0x11),
                },
            ]
        );
        table.apply(&QpEvent::Destroy { qpn: 0x12 }, &mut resolve);
        table.apply(&QpEvent::Destroy { qpn: 0x99 }, &mut resolve);
        assert_eq!(table.connections().len(), 1);
        // A peer without a route: counted with the reason.
        let unrouted = QpEvent::Connect {
            qpn: 0x15,
            dest_qpn: 0x11,
            dgid: "fe80::9".parse::<Ipv6Addr>().unwrap().octets(),
            flow_label: 0,
            src_port: udp_sport(0, 0x15, 0x11),
        };
        table.apply(&unrouted, &mut resolve);
        assert_eq!(table.dropped, 2);
        assert_eq!(
            table.last_drop.as_deref(),
            Some("QP 0x15: no route to fe80::9")
        );
        assert_eq!(gid_address(peer), IpAddr::from([10, 77, 0, 1]));
    }

    /// Where the kernel lacks kprobes (this project's development hosts and CI) or BTF for
    /// ib_core, opening says which.
    #[test]
    fn where_it_cannot_load_it_says_why() {
        let has_kprobes = Path::new(KPROBE_PMU).exists();
        let has_ib_core = Path::new(IB_CORE_BTF).exists();
        match QpTracer::open() {
            Ok(tracer) => assert!(has_kprobes && has_ib_core, "{tracer:?}"),
            Err(e) => {
                let text = e.to_string();
                if !has_kprobes {
                    assert_eq!(
                        text,
                        "eBPF service tracing unavailable: kprobes are not available: \
                         /sys/bus/event_source/devices/kprobe is missing (a kernel without \
                         CONFIG_KPROBES)"
                    );
                } else if !has_ib_core {
                    assert!(
                        text.starts_with("eBPF service tracing unavailable: /sys/kernel/btf/"),
                        "{text}"
                    );
                } else {
                    // With both, only the loader or the kernel can refuse; it names the step.
                    assert!(matches!(e, TraceError::Load { .. }), "{text}");
                }
            }
        }
    }
}
