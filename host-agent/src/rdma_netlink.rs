//! Service connections from the kernel's RDMA resource tracking (the fallback when eBPF
//! cannot trace the verbs): an RDMA netlink dump (`NETLINK_RDMA`, client `RDMA_NL_NLDEV`,
//! include/uapi/rdma/rdma_netlink.h) of each device's queue pairs (`RES_QP_GET`: local and
//! remote QPN, type, state) and rdma_cm ids (`RES_CM_ID_GET`: the QPN with source and
//! destination addresses), joined by local QPN. A connected RC QP (RTR or RTS) whose cm id
//! names both addresses is a service connection; its UDP source port follows from the two
//! QPNs ([`hawkmesh_wire::roce::udp_sport`], the flow label taken as 0: netlink does not
//! export it).
//!
//! What this cannot see, said plainly: QPs connected without rdma_cm (applications that
//! exchange GIDs out of band, NCCL among them) have no addresses in netlink — they are
//! counted in [`Dump::unaddressed`], and only the eBPF source finds them.
//!
//! Message layout (netlink(7)): a 16-byte `nlmsghdr` (length, type, flags, sequence, port
//! id; host byte order), for RDMA with no family header, then attributes (`nlattr`: u16
//! length, u16 type with the nested / byte-order flags, payload padded to 4 bytes).
//! The type of an RDMA message is `(client << 10) + op`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use hawkmesh_wire::roce::udp_sport;

use crate::services::ServiceConnection;

/// `RDMA_NL_NLDEV`.
pub const RDMA_NL_NLDEV: u16 = 5;
/// `RDMA_NLDEV_CMD_GET` (devices; can dump).
pub const CMD_GET: u16 = 1;
/// `RDMA_NLDEV_CMD_RES_QP_GET`.
pub const CMD_RES_QP_GET: u16 = 10;
/// `RDMA_NLDEV_CMD_RES_CM_ID_GET`.
pub const CMD_RES_CM_ID_GET: u16 = 11;

/// Attribute numbers (enum rdma_nldev_attr; ABI, never reordered).
pub mod attr {
    /// u32.
    pub const DEV_INDEX: u16 = 1;
    /// string.
    pub const DEV_NAME: u16 = 2;
    /// u32.
    pub const PORT_INDEX: u16 = 3;
    /// Nested table of QP entries.
    pub const RES_QP: u16 = 19;
    /// Nested QP entry.
    pub const RES_QP_ENTRY: u16 = 20;
    /// u32.
    pub const RES_LQPN: u16 = 21;
    /// u32 (RC and UC).
    pub const RES_RQPN: u16 = 22;
    /// u8 (enum ib_qp_type).
    pub const RES_TYPE: u16 = 26;
    /// u8 (enum ib_qp_state).
    pub const RES_STATE: u16 = 27;
    /// u32.
    pub const RES_PID: u16 = 28;
    /// Nested table of cm id entries.
    pub const RES_CM_ID: u16 = 30;
    /// Nested cm id entry.
    pub const RES_CM_ID_ENTRY: u16 = 31;
    /// struct __kernel_sockaddr_storage.
    pub const RES_SRC_ADDR: u16 = 33;
    /// struct __kernel_sockaddr_storage.
    pub const RES_DST_ADDR: u16 = 34;
}

/// `IB_QPT_RC`.
pub const QPT_RC: u8 = 2;
/// `IB_QPS_RTR`.
pub const QPS_RTR: u8 = 2;
/// `IB_QPS_RTS`.
pub const QPS_RTS: u8 = 3;

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_DUMP: u16 = 0x100 | 0x200;
const NLA_TYPE_MASK: u16 = 0x3FFF;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// Why a dump could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NetlinkError {
    /// The kernel has no RDMA netlink (no RDMA core, or no device was ever registered).
    #[error(
        "no RDMA netlink on this kernel ({0}): is rdma_core loaded and an RDMA device present?"
    )]
    Unsupported(String),
    /// A socket call failed.
    #[error("RDMA netlink {op}: {reason}")]
    Io {
        /// The call.
        op: &'static str,
        /// The OS's reason.
        reason: String,
    },
    /// The kernel refused the request.
    #[error("RDMA netlink request {cmd} refused: errno {errno}")]
    Refused {
        /// The command.
        cmd: u16,
        /// The (positive) errno.
        errno: i32,
    },
    /// A message that does not parse.
    #[error("RDMA netlink reply, byte {at}: {reason}")]
    Malformed {
        /// Offset in the bytes received.
        at: usize,
        /// What is wrong.
        reason: String,
    },
}

/// One queue pair.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpEntry {
    /// The device's index.
    pub dev_index: u32,
    /// Local QPN.
    pub lqpn: u32,
    /// Remote QPN (connected QPs).
    pub rqpn: Option<u32>,
    /// `enum ib_qp_type`.
    pub qp_type: u8,
    /// `enum ib_qp_state`.
    pub state: u8,
    /// The owning process.
    pub pid: Option<u32>,
}

/// One rdma_cm id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmIdEntry {
    /// The device's index.
    pub dev_index: u32,
    /// Its QP's local QPN, once bound.
    pub lqpn: Option<u32>,
    /// Source address.
    pub src: Option<SocketAddr>,
    /// Destination address.
    pub dst: Option<SocketAddr>,
}

/// What dump replies held.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dump {
    /// Devices: (index, name).
    pub devices: Vec<(u32, String)>,
    /// Queue pairs.
    pub qps: Vec<QpEntry>,
    /// cm ids.
    pub cm_ids: Vec<CmIdEntry>,
    /// The dump ended (`NLMSG_DONE`).
    pub done: bool,
}

impl Dump {
    /// Connected RC QPs joined with their cm ids' addresses; the second value counts the
    /// connected RC QPs without addresses (connected without rdma_cm).
    pub fn connections(&self) -> (Vec<ServiceConnection>, usize) {
        let mut found = Vec::new();
        let mut unaddressed = 0;
        for qp in &self.qps {
            let Some(rqpn) = qp.rqpn else { continue };
            if qp.qp_type != QPT_RC || !(qp.state == QPS_RTR || qp.state == QPS_RTS) {
                continue;
            }
            let cm = self
                .cm_ids
                .iter()
                .find(|c| c.dev_index == qp.dev_index && c.lqpn == Some(qp.lqpn));
            match cm.and_then(|c| Some((c.src?, c.dst?))) {
                Some((src, dst)) => found.push(ServiceConnection {
                    local: src.ip(),
                    remote: dst.ip(),
                    src_port: udp_sport(0, qp.lqpn, rqpn),
                    lqpn: Some(qp.lqpn),
                    rqpn: Some(rqpn),
                }),
                None => unaddressed += 1,
            }
        }
        found.sort();
        (found, unaddressed)
    }

    /// Connected RC QPs without addresses (see [`Dump::connections`]).
    pub fn unaddressed(&self) -> usize {
        self.connections().1
    }
}

/// A dump request for `cmd` (of device `dev_index` when given).
pub fn request(cmd: u16, seq: u32, dev_index: Option<u32>) -> Vec<u8> {
    let mut out = vec![0u8; NLMSG_HDR];
    if let Some(index) = dev_index {
        out.extend_from_slice(&8u16.to_ne_bytes());
        out.extend_from_slice(&attr::DEV_INDEX.to_ne_bytes());
        out.extend_from_slice(&index.to_ne_bytes());
    }
    let len = out.len() as u32;
    out[0..4].copy_from_slice(&len.to_ne_bytes());
    out[4..6].copy_from_slice(&((RDMA_NL_NLDEV << 10) + cmd).to_ne_bytes());
    out[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | NLM_F_DUMP).to_ne_bytes());
    out[8..12].copy_from_slice(&seq.to_ne_bytes());
    out
}

/// Adds the messages in `bytes` (one receive) to `dump`; `base` is the offset of `bytes` in
/// everything received, for error messages.
pub fn parse_into(dump: &mut Dump, bytes: &[u8], base: usize) -> Result<(), NetlinkError> {
    let mut at = 0;
    while at + NLMSG_HDR <= bytes.len() {
        let len = u32_at(bytes, at) as usize;
        let kind = u16_at(bytes, at + 4);
        if len < NLMSG_HDR || at + len > bytes.len() {
            return Err(NetlinkError::Malformed {
                at: base + at,
                reason: format!("message length {len} with {} bytes left", bytes.len() - at),
            });
        }
        let body = &bytes[at + NLMSG_HDR..at + len];
        match kind {
            NLMSG_DONE => dump.done = true,
            NLMSG_ERROR => {
                let errno = if body.len() >= 4 {
                    -(u32_at(body, 0) as i32)
                } else {
                    0
                };
                // An ACK is an error message with errno 0.
                if errno != 0 {
                    let cmd = if body.len() >= 4 + 6 {
                        u16_at(body, 4 + 4) & 0x3FF
                    } else {
                        0
                    };
                    return Err(NetlinkError::Refused { cmd, errno });
                }
            }
            kind if kind >> 10 == RDMA_NL_NLDEV => {
                parse_message(dump, kind & 0x3FF, body, base + at + NLMSG_HDR)?
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    if at < bytes.len() && at + NLMSG_HDR > bytes.len() && bytes.len() - at >= 4 {
        return Err(NetlinkError::Malformed {
            at: base + at,
            reason: format!("{} trailing bytes, less than a header", bytes.len() - at),
        });
    }
    Ok(())
}

fn parse_message(dump: &mut Dump, op: u16, body: &[u8], base: usize) -> Result<(), NetlinkError> {
    let top = attributes(body, base)?;
    let dev_index = top
        .iter()
        .find(|(t, _, _)| *t == attr::DEV_INDEX)
        .map(|(_, v, at)| u32_of(v, *at))
        .transpose()?;
    match op {
        CMD_GET => {
            let name = top
                .iter()
                .find(|(t, _, _)| *t == attr::DEV_NAME)
                .map(|(_, v, _)| text(v));
            if let (Some(index), Some(name)) = (dev_index, name) {
                dump.devices.push((index, name));
            }
        }
        CMD_RES_QP_GET | CMD_RES_CM_ID_GET => {
            let dev_index = dev_index.ok_or_else(|| NetlinkError::Malformed {
                at: base,
                reason: "a resource reply without a device index".into(),
            })?;
            let (table, entry) = if op == CMD_RES_QP_GET {
                (attr::RES_QP, attr::RES_QP_ENTRY)
            } else {
                (attr::RES_CM_ID, attr::RES_CM_ID_ENTRY)
            };
            for (_, nested, at) in top.iter().filter(|(t, _, _)| *t == table) {
                for (kind, fields, at) in attributes(nested, *at)? {
                    if kind != entry {
                        continue;
                    }
                    let fields = attributes(fields, at)?;
                    let get = |t: u16| fields.iter().find(|(k, _, _)| *k == t);
                    let u32_attr = |t: u16| get(t).map(|(_, v, at)| u32_of(v, *at)).transpose();
                    let u8_attr = |t: u16| get(t).and_then(|(_, v, _)| v.first().copied());
                    if op == CMD_RES_QP_GET {
                        let lqpn =
                            u32_attr(attr::RES_LQPN)?.ok_or_else(|| NetlinkError::Malformed {
                                at,
                                reason: "a QP entry without a local QPN".into(),
                            })?;
                        dump.qps.push(QpEntry {
                            dev_index,
                            lqpn,
                            rqpn: u32_attr(attr::RES_RQPN)?,
                            qp_type: u8_attr(attr::RES_TYPE).unwrap_or(0),
                            state: u8_attr(attr::RES_STATE).unwrap_or(0),
                            pid: u32_attr(attr::RES_PID)?,
                        });
                    } else {
                        let addr = |t: u16| get(t).map(|(_, v, at)| sockaddr(v, *at)).transpose();
                        dump.cm_ids.push(CmIdEntry {
                            dev_index,
                            lqpn: u32_attr(attr::RES_LQPN)?,
                            src: addr(attr::RES_SRC_ADDR)?.flatten(),
                            dst: addr(attr::RES_DST_ADDR)?.flatten(),
                        });
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// An attribute: its type without flags, its payload, the payload's offset.
type Attr<'a> = (u16, &'a [u8], usize);

/// The attributes of `bytes`.
fn attributes(bytes: &[u8], base: usize) -> Result<Vec<Attr<'_>>, NetlinkError> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= bytes.len() {
        let len = u16_at(bytes, at) as usize;
        if len < 4 || at + len > bytes.len() {
            return Err(NetlinkError::Malformed {
                at: base + at,
                reason: format!(
                    "attribute length {len} with {} bytes left",
                    bytes.len() - at
                ),
            });
        }
        let kind = u16_at(bytes, at + 2) & NLA_TYPE_MASK;
        out.push((kind, &bytes[at + 4..at + len], base + at + 4));
        at += (len + 3) & !3;
    }
    Ok(out)
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn u32_of(value: &[u8], at: usize) -> Result<u32, NetlinkError> {
    if value.len() < 4 {
        return Err(NetlinkError::Malformed {
            at,
            reason: format!("a u32 attribute of {} bytes", value.len()),
        });
    }
    Ok(u32_at(value, 0))
}

fn text(value: &[u8]) -> String {
    let end = value.iter().position(|b| *b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end]).into_owned()
}

/// A `struct sockaddr_storage` (family in host order, port in network order); `None` for
/// a family other than IPv4 or IPv6 (e.g. AF_IB).
fn sockaddr(value: &[u8], at: usize) -> Result<Option<SocketAddr>, NetlinkError> {
    let short = |need: usize| NetlinkError::Malformed {
        at,
        reason: format!("a socket address of {} bytes, {need} needed", value.len()),
    };
    if value.len() < 2 {
        return Err(short(2));
    }
    let port = |v: &[u8]| u16::from_be_bytes([v[2], v[3]]);
    match u16_at(value, 0) {
        AF_INET => {
            if value.len() < 8 {
                return Err(short(8));
            }
            let ip = Ipv4Addr::new(value[4], value[5], value[6], value[7]);
            Ok(Some(SocketAddr::new(IpAddr::V4(ip), port(value))))
        }
        AF_INET6 => {
            if value.len() < 24 {
                return Err(short(24));
            }
            let mut octets = [0u8; 16];
            octets.copy_from_slice(&value[8..24]);
            Ok(Some(SocketAddr::new(
                IpAddr::V6(Ipv6Addr::from(octets)),
                port(value),
            )))
        }
        _ => Ok(None),
    }
}

/// Reads the dumps from the kernel (Linux).
#[cfg(target_os = "linux")]
pub mod live {
    use super::*;
    use nix::sys::socket::{
        recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType,
    };
    use std::os::fd::{AsRawFd, OwnedFd};

    /// Limit on bytes read for one dump: a host with tens of thousands of QPs stays well
    /// under it; beyond it the dump is refused as runaway rather than held in memory.
    pub const MAX_DUMP_BYTES: usize = 64 << 20;

    /// Every device's QPs and cm ids, as one [`Dump`].
    pub fn dump() -> Result<Dump, NetlinkError> {
        let fd = open()?;
        let mut seq = 1;
        let devices = run(&fd, CMD_GET, &mut seq, None)?.devices;
        let mut all = Dump {
            devices: devices.clone(),
            done: true,
            ..Dump::default()
        };
        for (index, _) in devices {
            let qps = run(&fd, CMD_RES_QP_GET, &mut seq, Some(index))?;
            all.qps.extend(qps.qps);
            let cms = run(&fd, CMD_RES_CM_ID_GET, &mut seq, Some(index))?;
            all.cm_ids.extend(cms.cm_ids);
        }
        Ok(all)
    }

    fn open() -> Result<OwnedFd, NetlinkError> {
        socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRDMA,
        )
        .map_err(|e| match e {
            nix::errno::Errno::EPROTONOSUPPORT | nix::errno::Errno::EAFNOSUPPORT => {
                NetlinkError::Unsupported(e.desc().to_string())
            }
            e => NetlinkError::Io {
                op: "socket",
                reason: e.desc().to_string(),
            },
        })
    }

    fn run(
        fd: &OwnedFd,
        cmd: u16,
        seq: &mut u32,
        dev_index: Option<u32>,
    ) -> Result<Dump, NetlinkError> {
        *seq += 1;
        let message = request(cmd, *seq, dev_index);
        send(fd.as_raw_fd(), &message, MsgFlags::empty()).map_err(|e| NetlinkError::Io {
            op: "send",
            reason: e.desc().to_string(),
        })?;
        let mut dump = Dump::default();
        let mut buffer = vec![0u8; 64 << 10];
        let mut received = 0;
        while !dump.done {
            let n = recv(fd.as_raw_fd(), &mut buffer, MsgFlags::empty()).map_err(|e| {
                NetlinkError::Io {
                    op: "recv",
                    reason: e.desc().to_string(),
                }
            })?;
            if n == 0 {
                break;
            }
            parse_into(&mut dump, &buffer[..n], received)?;
            received += n;
            if received > MAX_DUMP_BYTES {
                return Err(NetlinkError::Malformed {
                    at: received,
                    reason: format!("a dump over {MAX_DUMP_BYTES} bytes"),
                });
            }
        }
        Ok(dump)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attribute, padded.
    fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((4 + payload.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(payload);
        while out.len() % 4 != 0 {
            out.push(0);
        }
        out
    }

    fn nested(kind: u16, children: &[Vec<u8>]) -> Vec<u8> {
        nla(kind | 0x8000, &children.concat())
    }

    fn message(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&0x2u16.to_ne_bytes()); // NLM_F_MULTI
        out.extend_from_slice(&7u32.to_ne_bytes());
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(body);
        out
    }

    fn qp(lqpn: u32, rqpn: Option<u32>, qp_type: u8, state: u8) -> Vec<u8> {
        let mut fields = vec![nla(attr::RES_LQPN, &lqpn.to_ne_bytes())];
        if let Some(r) = rqpn {
            fields.push(nla(attr::RES_RQPN, &r.to_ne_bytes()));
        }
        fields.push(nla(attr::RES_TYPE, &[qp_type]));
        fields.push(nla(attr::RES_STATE, &[state]));
        fields.push(nla(attr::RES_PID, &4242u32.to_ne_bytes()));
        nested(attr::RES_QP_ENTRY, &fields)
    }

    fn sockaddr_v4(ip: [u8; 4], port: u16) -> Vec<u8> {
        let mut out = vec![0u8; 128];
        out[0..2].copy_from_slice(&AF_INET.to_ne_bytes());
        out[2..4].copy_from_slice(&port.to_be_bytes());
        out[4..8].copy_from_slice(&ip);
        out
    }

    fn cm_id(lqpn: u32, src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        nested(
            attr::RES_CM_ID_ENTRY,
            &[
                nla(attr::RES_LQPN, &lqpn.to_ne_bytes()),
                nla(attr::RES_SRC_ADDR, &sockaddr_v4(src, 7471)),
                nla(attr::RES_DST_ADDR, &sockaddr_v4(dst, 7471)),
            ],
        )
    }

    fn device(index: u32) -> Vec<u8> {
        nla(attr::DEV_INDEX, &index.to_ne_bytes())
    }

    const QP_REPLY: u16 = (RDMA_NL_NLDEV << 10) + CMD_RES_QP_GET;
    const CM_REPLY: u16 = (RDMA_NL_NLDEV << 10) + CMD_RES_CM_ID_GET;

    #[test]
    fn connected_rc_qps_with_cm_addresses_are_service_connections() {
        let qps = [
            device(3),
            nested(
                attr::RES_QP,
                &[
                    qp(0x11, Some(0x22), QPT_RC, QPS_RTS),
                    qp(0x12, Some(0x40), QPT_RC, QPS_RTR),
                    // UD (4): no connection. RC still in INIT (1): not yet.
                    qp(0x13, None, 4, QPS_RTS),
                    qp(0x14, Some(0x41), QPT_RC, 1),
                    // Connected without rdma_cm: no addresses anywhere.
                    qp(0x15, Some(0x42), QPT_RC, QPS_RTS),
                ],
            ),
        ]
        .concat();
        let cms = [
            device(3),
            nested(
                attr::RES_CM_ID,
                &[
                    cm_id(0x11, [10, 0, 0, 1], [10, 0, 1, 1]),
                    cm_id(0x12, [10, 0, 0, 1], [10, 0, 2, 1]),
                ],
            ),
        ]
        .concat();
        // Two receives: the QP reply, then the cm id reply and the end of the dump.
        let mut dump = Dump::default();
        let first = message(QP_REPLY, &qps);
        parse_into(&mut dump, &first, 0).unwrap();
        assert!(!dump.done);
        let second = [message(CM_REPLY, &cms), message(NLMSG_DONE, &[0; 4])].concat();
        parse_into(&mut dump, &second, first.len()).unwrap();
        assert!(dump.done);
        assert_eq!(dump.qps.len(), 5);
        assert_eq!(dump.qps[0].pid, Some(4242));
        let (found, unaddressed) = dump.connections();
        assert_eq!(unaddressed, 1);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].local, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(found[0].remote, IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1)));
        assert_eq!((found[0].lqpn, found[0].rqpn), (Some(0x11), Some(0x22)));
        // rdma_calc_flow_label(0x11, 0x22) = 0x242 → port 0xC242, as both ends compute.
        assert_eq!(found[0].src_port, 0xC242);
        assert_eq!(found[1].remote, IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1)));
    }

    #[test]
    fn refusals_and_damage_are_errors_naming_the_place() {
        let mut dump = Dump::default();
        // NLMSG_ERROR with -EINVAL for a RES_QP_GET request.
        let mut body = (-22i32).to_ne_bytes().to_vec();
        body.extend_from_slice(&request(CMD_RES_QP_GET, 9, Some(1))[..16]);
        let refused = parse_into(&mut dump, &message(NLMSG_ERROR, &body), 0).unwrap_err();
        assert_eq!(
            refused,
            NetlinkError::Refused {
                cmd: CMD_RES_QP_GET,
                errno: 22
            }
        );
        // An ACK (errno 0) is no error.
        let mut ack = 0i32.to_ne_bytes().to_vec();
        ack.extend_from_slice(&request(CMD_GET, 9, None));
        parse_into(&mut dump, &message(NLMSG_ERROR, &ack), 0).unwrap();
        // An attribute claiming more bytes than there are.
        let mut bad = [device(1), nla(attr::RES_QP, &[0; 8])].concat();
        bad[8..10].copy_from_slice(&200u16.to_ne_bytes());
        let damaged = parse_into(&mut dump, &message(QP_REPLY, &bad), 100).unwrap_err();
        assert_eq!(
            damaged.to_string(),
            "RDMA netlink reply, byte 124: attribute length 200 with 12 bytes left"
        );
        // A message longer than what arrived.
        let mut cut = message(QP_REPLY, &device(1));
        cut.truncate(20);
        assert!(parse_into(&mut dump, &cut, 0)
            .unwrap_err()
            .to_string()
            .contains("message length 24 with 20 bytes left"));
        // A resource reply without a device, a QP entry without its QPN.
        let orphan = nested(attr::RES_QP, &[qp(1, None, QPT_RC, QPS_RTS)]);
        assert!(parse_into(&mut dump, &message(QP_REPLY, &orphan), 0)
            .unwrap_err()
            .to_string()
            .contains("without a device index"));
        let no_qpn = [
            device(1),
            nested(
                attr::RES_QP,
                &[nested(attr::RES_QP_ENTRY, &[nla(attr::RES_TYPE, &[2])])],
            ),
        ]
        .concat();
        assert!(parse_into(&mut dump, &message(QP_REPLY, &no_qpn), 0)
            .unwrap_err()
            .to_string()
            .contains("without a local QPN"));
    }

    #[test]
    fn requests_carry_the_rdma_type_dump_flags_and_the_device() {
        let r = request(CMD_RES_CM_ID_GET, 5, Some(2));
        assert_eq!(u32_at(&r, 0) as usize, r.len());
        assert_eq!(u16_at(&r, 4), (5 << 10) + 11);
        assert_eq!(u16_at(&r, 6), 0x1 | 0x4 | 0x300);
        assert_eq!(u32_at(&r, 8), 5);
        assert_eq!(&r[16..], &[device(2)].concat()[..]);
        assert_eq!(request(CMD_GET, 1, None).len(), 16);
    }

    /// On a kernel without RDMA (this project's CI machines) the live dump says so; with
    /// RDMA devices it lists them.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_live_dump_names_why_it_cannot_run_or_lists_the_devices() {
        let has_rdma = std::path::Path::new("/sys/class/infiniband").exists();
        match live::dump() {
            Ok(dump) => assert!(has_rdma, "a dump without RDMA devices: {dump:?}"),
            Err(NetlinkError::Unsupported(reason)) => {
                assert!(!has_rdma, "RDMA devices exist but: {reason}")
            }
            Err(other) => panic!("{other}"),
        }
    }
}
