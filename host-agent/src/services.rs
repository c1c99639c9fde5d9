//! Where an agent learns the service's own connections, for service tracing (R-Pingmesh
//! §4.1.2: each connection is probed on its own 5-tuple). Three sources, best first:
//! eBPF on the kernel verbs that connect and destroy RC QPs (sees every QP, with its flow
//! label), the kernel's RDMA resource dump ([`crate::rdma_netlink`]: rdma_cm connections),
//! and a static list an operator or a scheduler writes ([`StaticList`]). Each gives
//! [`ServiceConnection`]s; [`ServiceSource`] is what the daemon polls.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use hawkmesh_wire::roce::udp_sport;

/// One service connection: the RoCEv2 5-tuple its packets carry (destination port 4791).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServiceConnection {
    /// This end's address.
    pub local: IpAddr,
    /// The peer's address.
    pub remote: IpAddr,
    /// The RoCEv2 UDP source port of its packets (both directions).
    pub src_port: u16,
    /// Local QPN, when known.
    pub lqpn: Option<u32>,
    /// Remote QPN, when known.
    pub rqpn: Option<u32>,
}

/// A source of service connections.
pub trait ServiceSource {
    /// Its name in logs and metrics.
    fn name(&self) -> &'static str;
    /// The connections open now.
    fn connections(&mut self) -> Result<Vec<ServiceConnection>, String>;
}

/// Connections listed in a file (TOML), read again at every poll so the writer may change
/// it at any time:
///
/// ```toml
/// [[connection]]
/// local = "10.0.0.1"
/// remote = "10.0.1.1"
/// src_port = 49921          # or: lqpn = 0x11, rqpn = 0x22 [, flow_label = 0]
/// ```
#[derive(Clone, Debug)]
pub struct StaticList {
    path: PathBuf,
    max: usize,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ListFile {
    #[serde(default)]
    connection: Vec<Entry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    local: IpAddr,
    remote: IpAddr,
    src_port: Option<u16>,
    lqpn: Option<u32>,
    rqpn: Option<u32>,
    #[serde(default)]
    flow_label: u32,
}

impl StaticList {
    /// The list in `path`, at most `max` connections (more is an error, not a truncation).
    pub fn new(path: &Path, max: usize) -> Self {
        StaticList {
            path: path.to_path_buf(),
            max,
        }
    }

    /// Parses the list's text (`origin` names it in errors).
    pub fn parse(text: &str, origin: &str, max: usize) -> Result<Vec<ServiceConnection>, String> {
        let file: ListFile = toml::from_str(text).map_err(|e| format!("{origin}: {e}"))?;
        if file.connection.len() > max {
            return Err(format!(
                "{origin}: {} connections, at most {max}",
                file.connection.len()
            ));
        }
        let mut out = Vec::with_capacity(file.connection.len());
        for (i, e) in file.connection.into_iter().enumerate() {
            let place = || format!("{origin}: connection {}", i + 1);
            if e.local.is_ipv4() != e.remote.is_ipv4() {
                return Err(format!(
                    "{}: local and remote are different IP versions",
                    place()
                ));
            }
            if e.flow_label > hawkmesh_wire::roce::FLOW_LABEL_MASK {
                return Err(format!(
                    "{}: flow_label {:#x} is more than 20 bits",
                    place(),
                    e.flow_label
                ));
            }
            for (name, qpn) in [("lqpn", e.lqpn), ("rqpn", e.rqpn)] {
                if qpn.is_some_and(|q| q > 0xFF_FFFF) {
                    return Err(format!("{}: {name} is more than 24 bits", place()));
                }
            }
            let src_port = match (e.src_port, e.lqpn, e.rqpn) {
                (Some(port), _, _) if port < hawkmesh_wire::roce::UDP_SPORT_MIN => {
                    return Err(format!(
                        "{}: src_port {port} is below {:#x}, where RoCEv2 source ports start",
                        place(),
                        hawkmesh_wire::roce::UDP_SPORT_MIN
                    ))
                }
                (Some(port), _, _) => port,
                (None, Some(l), Some(r)) => udp_sport(e.flow_label, l, r),
                (None, _, _) => {
                    return Err(format!(
                        "{}: give src_port, or lqpn and rqpn to derive it",
                        place()
                    ))
                }
            };
            out.push(ServiceConnection {
                local: e.local,
                remote: e.remote,
                src_port,
                lqpn: e.lqpn,
                rqpn: e.rqpn,
            });
        }
        out.sort();
        out.dedup();
        Ok(out)
    }
}

impl ServiceSource for StaticList {
    fn name(&self) -> &'static str {
        "static list"
    }

    fn connections(&mut self) -> Result<Vec<ServiceConnection>, String> {
        let origin = self.path.display().to_string();
        let text = std::fs::read_to_string(&self.path).map_err(|e| format!("{origin}: {e}"))?;
        StaticList::parse(&text, &origin, self.max)
    }
}

/// The kernel's RDMA resource dump as a source (Linux).
#[cfg(target_os = "linux")]
#[derive(Clone, Copy, Debug, Default)]
pub struct NetlinkSource {
    /// Connected RC QPs without addresses at the last poll (connected without rdma_cm).
    pub unaddressed: usize,
}

#[cfg(target_os = "linux")]
impl ServiceSource for NetlinkSource {
    fn name(&self) -> &'static str {
        "RDMA netlink"
    }

    fn connections(&mut self) -> Result<Vec<ServiceConnection>, String> {
        let dump = crate::rdma_netlink::live::dump().map_err(|e| e.to_string())?;
        let (found, unaddressed) = dump.connections();
        self.unaddressed = unaddressed;
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_static_list_gives_ports_directly_or_from_the_qpns() {
        let text = r#"
            [[connection]]
            local = "10.0.0.1"
            remote = "10.0.1.1"
            src_port = 49921

            [[connection]]
            local = "10.0.0.1"
            remote = "10.0.2.1"
            lqpn = 0x11
            rqpn = 0x22
        "#;
        let list = StaticList::parse(text, "services.toml", 10).unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].src_port, 49921);
        assert_eq!(list[1].src_port, 0xC242);
        assert_eq!((list[1].lqpn, list[1].rqpn), (Some(0x11), Some(0x22)));
    }

    #[test]
    fn a_bad_list_is_refused_naming_the_connection() {
        let bad = |text: &str| StaticList::parse(text, "s.toml", 2).unwrap_err();
        let entry = |extra: &str| {
            format!("[[connection]]\nlocal = \"10.0.0.1\"\nremote = \"10.0.1.1\"\n{extra}\n")
        };
        assert_eq!(
            bad(&entry("")),
            "s.toml: connection 1: give src_port, or lqpn and rqpn to derive it"
        );
        assert!(bad(&entry("src_port = 4791")).contains("below 0xc000"));
        assert!(bad(&entry("lqpn = 0x1000000\nrqpn = 1")).contains("lqpn is more than 24 bits"));
        assert!(
            bad(&entry("lqpn = 1\nrqpn = 2\nflow_label = 0x100000")).contains("more than 20 bits")
        );
        assert!(bad(&entry("src_port = 50000\ncolour = 1")).contains("unknown field"));
        assert!(
            bad("[[connection]]\nlocal = \"10.0.0.1\"\nremote = \"::1\"\nsrc_port = 50000")
                .contains("different IP versions")
        );
        let three = entry("src_port = 50000").repeat(3);
        assert_eq!(bad(&three), "s.toml: 3 connections, at most 2");
        // A missing file names itself.
        let mut missing = StaticList::new(Path::new("/nonexistent/services.toml"), 2);
        assert!(missing
            .connections()
            .unwrap_err()
            .starts_with("/nonexistent/services.toml: "));
    }
}
