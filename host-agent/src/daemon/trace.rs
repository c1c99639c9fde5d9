//! Path tracing (R-Pingmesh §4.1): a UDP traceroute that keeps the probe's 5-tuple, so
//! that ECMP hashes it onto the probe's path, scheduled by [`PathTracer`] under a rate
//! limit, with router addresses mapped to the fabric's ports.
//!
//! A trace of the 5-tuple (this interface's address, source port `p`) → (peer's address,
//! the well-known port) sends datagrams from the socket bound to `p` with TTL 1, 2, … (one
//! at a time; a hop that does not answer within the hop timeout is asked again, twice)
//! to the peer's well-known port. Each router the TTL runs out at answers with an ICMP
//! time-exceeded from the address of the interface the datagram came in by (Linux routers:
//! `net.ipv4.icmp_errors_use_inbound_ifaddr = 1`; switches do so by default), which the
//! socket's error queue returns with the offender's address (`IP_RECVERR`, ip(7)) and the
//! datagram's payload (which TTL it was).
//!
//! From addresses to ports: the `[[port_address]]` table of the configuration (generated
//! by operators from their switch configurations) names the port each router interface
//! address belongs to: the *ingress* port of that hop. The path the analyzer wants is the
//! *egress* port of each node (hawkmesh.v1 `Hop`), which is the port at the other end of
//! the ingress port's link: the fabric description (the `topology.json` the agent is
//! given) has the cabling. So hop i's egress port is the fabric peer of hop i+1's ingress
//! port; the first hop's is this interface's own NIC (checked against the first router's
//! ingress port), and the last switch's egress port is the one cabled to the destination
//! RNIC (from the fabric: the trace ends when the TTL runs out at the destination's ToR,
//! whose egress toward the RNIC needs no answer of its own, and no trace datagram reaches
//! the peer agent). A table of ingress ports (one row per router interface address, as
//! switch configurations list them) rather than of egress ports keeps the table a plain
//! address inventory; the fabric description gives the rest.
//!
//! ACK paths: the responder's first ACK leaves from the probe's source port to the
//! prober's well-known port, so the ACK's 5-tuple is (responder address, `p`) → (prober
//! address, well-known port): the same shape as a probe's. A responder traces the
//! 5-tuples of the ACKs it sends exactly as a prober traces its probes', and uploads every
//! traced path as an `AckRoute` (its NIC, the peer RNIC, the source port); the analyzer
//! gives a prober's result of that 5-tuple the route as its ACK path. One table of traced
//! 5-tuples per interface serves both: a 5-tuple an agent probes on and one it answers on
//! with the same ports are the same 5-tuple.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use hawkmesh_proto::v1 as pb;
use hawkmesh_wire::topology::{FabricTopology, NodeKind, PortNo, PortRef};

use crate::paths::{PathTracer, PathTracingConfig};
use crate::udp::{IcmpKind, IcmpReport};

/// "HMTR": a hawkmesh trace datagram (a probe payload starts with "HMPR").
pub const TRACE_MAGIC: [u8; 4] = *b"HMTR";
/// Bytes of a trace datagram's payload: magic, version, TTL, two reserved bytes, the
/// trace's id.
pub const TRACE_PAYLOAD_BYTES: usize = 12;
const TRACE_VERSION: u8 = 1;

/// A trace datagram's payload: which trace and which TTL it was sent with (the ICMP answer
/// quotes it back).
pub fn trace_payload(id: u32, ttl: u8) -> [u8; TRACE_PAYLOAD_BYTES] {
    let mut b = [0u8; TRACE_PAYLOAD_BYTES];
    b[..4].copy_from_slice(&TRACE_MAGIC);
    b[4] = TRACE_VERSION;
    b[5] = ttl;
    b[8..12].copy_from_slice(&id.to_be_bytes());
    b
}

/// The (id, TTL) of a quoted trace payload, if it is one.
pub fn parse_trace_payload(bytes: &[u8]) -> Option<(u32, u8)> {
    if bytes.len() < TRACE_PAYLOAD_BYTES || bytes[..4] != TRACE_MAGIC || bytes[4] != TRACE_VERSION {
        return None;
    }
    let id = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    Some((id, bytes[5]))
}

/// One row of `[[port_address]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAddress {
    /// A router interface's address.
    pub ip: IpAddr,
    /// The switch, by its name in the fabric description.
    pub node: String,
    /// The port that address is on.
    pub port: PortNo,
}

/// Router addresses and the fabric's cabling: how offenders become ports.
#[derive(Clone, Debug)]
pub struct PortMap {
    fabric: FabricTopology,
    ingress: HashMap<IpAddr, PortRef>,
    peers: HashMap<PortRef, PortRef>,
}

impl PortMap {
    /// Checks every row against the fabric (a switch, a cabled port, each address once);
    /// errors name the row.
    pub fn new(fabric: FabricTopology, rows: &[PortAddress]) -> Result<PortMap, String> {
        fabric
            .validate()
            .map_err(|e| format!("the fabric description: {e}"))?;
        let peers: HashMap<PortRef, PortRef> = fabric
            .links
            .iter()
            .flat_map(|l| [(l.a, l.b), (l.b, l.a)])
            .collect();
        let mut ingress = HashMap::new();
        for (i, row) in rows.iter().enumerate() {
            let place = format!("port_address[{i}] ({} = {}:{})", row.ip, row.node, row.port);
            let node = fabric.node_by_name(&row.node).ok_or_else(|| {
                format!("{place}: no node {:?} in the fabric description", row.node)
            })?;
            if node.kind != NodeKind::Switch {
                return Err(format!("{place}: {} is a host, not a router", row.node));
            }
            let port = PortRef {
                node: node.id,
                port: row.port,
            };
            if !peers.contains_key(&port) {
                return Err(format!(
                    "{place}: port {} of {} has no link in the fabric description",
                    row.port, row.node
                ));
            }
            if ingress.insert(row.ip, port).is_some() {
                return Err(format!("{place}: address {} given twice", row.ip));
            }
        }
        Ok(PortMap {
            fabric,
            ingress,
            peers,
        })
    }

    /// The port at the other end of `port`'s link.
    pub fn peer(&self, port: PortRef) -> Option<PortRef> {
        self.peers.get(&port).copied()
    }

    /// The RNIC (host name, NIC) with address `ip` (the fabric's addressing: the host's
    /// address plus the NIC index).
    pub fn rnic(&self, ip: IpAddr) -> Option<(String, u32)> {
        let IpAddr::V4(v4) = ip else {
            return None;
        };
        let (host, nic) = self.fabric.host_by_nic_ipv4(v4.octets())?;
        Some((host.name.clone(), u32::from(nic)))
    }

    /// The host port of `host`'s NIC `nic`, if cabled.
    pub fn nic_port(&self, host: &str, nic: u32) -> Option<PortRef> {
        let node = self.fabric.node_by_name(host)?;
        let port = PortRef {
            node: node.id,
            port: PortNo::try_from(nic).ok()?,
        };
        self.peers.contains_key(&port).then_some(port)
    }

    fn hop(&self, port: PortRef) -> pb::Hop {
        pb::Hop {
            node: self
                .fabric
                .nodes
                .get(port.node as usize)
                .map(|n| n.name.clone())
                .unwrap_or_default(),
            port: u32::from(port.port),
        }
    }
}

/// A 5-tuple traced: (this interface's address, `src_port`) → (`peer`, the well-known
/// port).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceKey {
    /// The peer RNIC's address.
    pub peer: IpAddr,
    /// The 5-tuple's source port on this side.
    pub src_port: u16,
}

/// A traced path: egress ports, this interface's NIC first.
pub type Path = Arc<[pb::Hop]>;

/// A datagram a trace wants sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceSend {
    /// The 5-tuple.
    pub key: TraceKey,
    /// Its TTL.
    pub ttl: u8,
    /// Its payload.
    pub payload: [u8; TRACE_PAYLOAD_BYTES],
}

/// Settings of the traces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceSettings {
    /// The schedule (rate limit, refresh, table size).
    pub schedule: PathTracingConfig,
    /// The largest TTL tried.
    pub max_ttl: u8,
    /// How long a hop has to answer before it is asked again (twice at most).
    pub hop_timeout_ns: u64,
}

/// Counters of the traces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceCounts {
    /// Traces started.
    pub started: u64,
    /// Traces that gave a path.
    pub completed: u64,
    /// Traces that failed (no answer, an unknown router address, a route the fabric
    /// description does not have).
    pub failed: u64,
    /// Trace datagrams sent.
    pub datagrams: u64,
    /// ICMP answers that matched no trace in progress (late, or for probes).
    pub unmatched: u64,
}

#[derive(Debug)]
struct Active {
    id: u32,
    ttl: u8,
    sent_ns: u64,
    tries: u8,
    /// Ingress ports of the hops that answered, in TTL order.
    ingress: Vec<PortRef>,
    /// The destination RNIC's ToR port (the last egress), and the ToR.
    last: PortRef,
}

/// One interface's traces.
#[derive(Debug)]
pub struct Tracer {
    settings: TraceSettings,
    map: Arc<PortMap>,
    /// This interface's NIC port.
    local: PortRef,
    schedule: PathTracer<TraceKey, Path>,
    active: HashMap<TraceKey, Active>,
    next_id: u32,
    finished: Vec<(TraceKey, Path)>,
    counts: TraceCounts,
    /// The last failure, with its reason.
    pub last_failure: Option<String>,
}

/// Tries of a hop (the first and two more).
const HOP_TRIES: u8 = 3;
/// Finished traces kept for [`Tracer::take_finished`] at most.
const MAX_FINISHED: usize = 4096;

impl Tracer {
    /// The traces of `host`'s NIC `nic`.
    pub fn new(
        settings: TraceSettings,
        map: Arc<PortMap>,
        host: &str,
        nic: u32,
    ) -> Result<Tracer, String> {
        let local = map.nic_port(host, nic).ok_or_else(|| {
            format!("path tracing: {host} NIC {nic} has no link in the fabric description")
        })?;
        if settings.max_ttl == 0 || settings.hop_timeout_ns == 0 {
            return Err("path tracing: max_ttl and hop_timeout_ms must be above 0".into());
        }
        Ok(Tracer {
            schedule: PathTracer::new(settings.schedule)?,
            settings,
            map,
            local,
            active: HashMap::new(),
            next_id: 1,
            finished: Vec::new(),
            counts: TraceCounts::default(),
            last_failure: None,
        })
    }

    /// The 5-tuple `key` is in use (probed on, or answered on) at `now_ns`; its last traced
    /// path.
    pub fn need(&mut self, key: TraceKey, now_ns: u64) -> Option<Path> {
        self.schedule.need(&key, now_ns).cloned()
    }

    /// Starts the traces due and asks again hops that did not answer in time; the
    /// datagrams to send.
    pub fn poll(&mut self, now_ns: u64) -> Vec<TraceSend> {
        let mut sends = Vec::new();
        // Hops that did not answer in time.
        let late: Vec<TraceKey> = self
            .active
            .iter()
            .filter(|(_, a)| now_ns.saturating_sub(a.sent_ns) >= self.settings.hop_timeout_ns)
            .map(|(k, _)| *k)
            .collect();
        for key in late {
            let Some(active) = self.active.get_mut(&key) else {
                continue;
            };
            if active.tries >= HOP_TRIES {
                let ttl = active.ttl;
                self.fail(
                    key,
                    format!("no answer from hop {ttl} after {HOP_TRIES} tries"),
                    now_ns,
                );
                continue;
            }
            active.tries += 1;
            active.sent_ns = now_ns;
            sends.push(TraceSend {
                key,
                ttl: active.ttl,
                payload: trace_payload(active.id, active.ttl),
            });
        }
        for key in self.schedule.due(now_ns) {
            if self.active.contains_key(&key) {
                continue;
            }
            self.counts.started += 1;
            let Some((host, nic)) = self.map.rnic(key.peer) else {
                self.fail(
                    key,
                    format!("{} is no RNIC of the fabric description", key.peer),
                    now_ns,
                );
                continue;
            };
            let last = self
                .map
                .nic_port(&host, nic)
                .and_then(|port| self.map.peer(port));
            let Some(last) = last else {
                self.fail(key, format!("{host} NIC {nic} has no link"), now_ns);
                continue;
            };
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            self.active.insert(
                key,
                Active {
                    id,
                    ttl: 1,
                    sent_ns: now_ns,
                    tries: 1,
                    ingress: Vec::new(),
                    last,
                },
            );
            sends.push(TraceSend {
                key,
                ttl: 1,
                payload: trace_payload(id, 1),
            });
        }
        self.counts.datagrams += sends.len() as u64;
        sends
    }

    /// An ICMP answer came back on the socket of source port `report.src_port`: the next
    /// datagram of its trace, if it goes on.
    pub fn on_icmp(&mut self, report: &IcmpReport, now_ns: u64) -> Option<TraceSend> {
        let (Some((peer, _)), Some((id, ttl))) =
            (report.destination, parse_trace_payload(&report.payload))
        else {
            self.counts.unmatched += 1;
            return None;
        };
        let key = TraceKey {
            peer,
            src_port: report.src_port,
        };
        let matches = self
            .active
            .get(&key)
            .is_some_and(|a| a.id == id && a.ttl == ttl);
        if !matches {
            self.counts.unmatched += 1;
            return None;
        }
        let offender = match (report.kind, report.offender) {
            (IcmpKind::TimeExceeded, Some(offender)) => offender,
            (kind, offender) => {
                self.fail(
                    key,
                    format!("hop {ttl} answered {kind:?} from {offender:?}"),
                    now_ns,
                );
                return None;
            }
        };
        let Some(ingress) = self.map.ingress.get(&offender).copied() else {
            self.fail(
                key,
                format!("hop {ttl} answered from {offender}, which no [[port_address]] row names"),
                now_ns,
            );
            return None;
        };
        let active = self.active.get_mut(&key)?;
        active.ingress.push(ingress);
        if ingress.node == active.last.node {
            let active = self.active.remove(&key)?;
            match self.path(&active) {
                Ok(path) => {
                    self.counts.completed += 1;
                    self.schedule.traced(&key, Some(path.clone()), now_ns);
                    if self.finished.len() < MAX_FINISHED {
                        self.finished.push((key, path));
                    }
                }
                Err(reason) => self.fail(key, reason, now_ns),
            }
            return None;
        }
        if active.ttl >= self.settings.max_ttl {
            let max = self.settings.max_ttl;
            self.fail(
                key,
                format!("the destination's switch not reached within {max} hops"),
                now_ns,
            );
            return None;
        }
        active.ttl += 1;
        active.tries = 1;
        active.sent_ns = now_ns;
        self.counts.datagrams += 1;
        Some(TraceSend {
            key,
            ttl: active.ttl,
            payload: trace_payload(active.id, active.ttl),
        })
    }

    /// The egress ports of a finished trace.
    fn path(&self, active: &Active) -> Result<Path, String> {
        let first = active
            .ingress
            .first()
            .ok_or_else(|| "no hop answered".to_string())?;
        if self.map.peer(*first) != Some(self.local) {
            return Err(format!(
                "the first router's port {} is not cabled to this NIC in the fabric description",
                self.map.hop(*first).node + ":" + &first.port.to_string()
            ));
        }
        let mut path = vec![self.map.hop(self.local)];
        for ingress in &active.ingress[1..] {
            let egress = self.map.peer(*ingress).ok_or_else(|| {
                format!(
                    "{:?} has no link in the fabric description",
                    self.map.hop(*ingress)
                )
            })?;
            path.push(self.map.hop(egress));
        }
        path.push(self.map.hop(active.last));
        Ok(path.into())
    }

    fn fail(&mut self, key: TraceKey, reason: String, now_ns: u64) {
        self.active.remove(&key);
        self.counts.failed += 1;
        self.schedule.traced(&key, None, now_ns);
        self.last_failure = Some(format!(
            "trace of source port {} to {}: {reason}",
            key.src_port, key.peer
        ));
    }

    /// The traces finished since the last call, with their paths.
    pub fn take_finished(&mut self) -> Vec<(TraceKey, Path)> {
        std::mem::take(&mut self.finished)
    }

    /// Counters.
    pub fn counts(&self) -> TraceCounts {
        self.counts
    }

    /// Traces in progress.
    pub fn active(&self) -> usize {
        self.active.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_wire::topology::{LinkDesc, NodeDesc};

    /// h0 — tor0 — spine0 — tor1 — h1, NIC 0 each; ToR port 0 faces its host, 2 the spine;
    /// spine port t faces tor t.
    fn fabric() -> FabricTopology {
        let node = |id: u32, name: &str, kind, ipv4| NodeDesc {
            id,
            name: name.into(),
            kind,
            tier: None,
            ipv4,
        };
        let link = |a: (u32, u16), b: (u32, u16)| LinkDesc {
            a: PortRef {
                node: a.0,
                port: a.1,
            },
            b: PortRef {
                node: b.0,
                port: b.1,
            },
            gbps: 100.0,
            delay_ns: 1_000,
        };
        FabricTopology {
            nodes: vec![
                node(0, "tor0", NodeKind::Switch, None),
                node(1, "tor1", NodeKind::Switch, None),
                node(2, "spine0", NodeKind::Switch, None),
                node(3, "h0", NodeKind::Host, Some([10, 0, 0, 1])),
                node(4, "h1", NodeKind::Host, Some([10, 0, 1, 1])),
            ],
            links: vec![
                link((3, 0), (0, 0)),
                link((4, 0), (1, 0)),
                link((0, 2), (2, 0)),
                link((1, 2), (2, 1)),
            ],
        }
    }

    fn row(ip: &str, node: &str, port: PortNo) -> PortAddress {
        PortAddress {
            ip: ip.parse().expect("an address"),
            node: node.into(),
            port,
        }
    }

    fn rows() -> Vec<PortAddress> {
        vec![
            row("172.16.0.1", "tor0", 0),
            row("172.16.0.3", "tor0", 2),
            row("172.16.2.1", "spine0", 0),
            row("172.16.2.2", "spine0", 1),
            row("172.16.1.1", "tor1", 0),
            row("172.16.1.3", "tor1", 2),
        ]
    }

    const MS: u64 = 1_000_000;

    fn tracer() -> Tracer {
        let map = Arc::new(PortMap::new(fabric(), &rows()).expect("a port map"));
        Tracer::new(
            TraceSettings {
                schedule: PathTracingConfig {
                    traces_per_s: 100.0,
                    burst: 4,
                    refresh_ns: 60_000 * MS,
                    capacity: 16,
                },
                max_ttl: 4,
                hop_timeout_ns: 100 * MS,
            },
            map,
            "h0",
            0,
        )
        .expect("a tracer")
    }

    fn key() -> TraceKey {
        TraceKey {
            peer: "10.0.1.1".parse().expect("an address"),
            src_port: 50_123,
        }
    }

    /// The time-exceeded answer of the router at `offender` to `send`.
    fn answer(send: &TraceSend, offender: &str) -> IcmpReport {
        IcmpReport {
            src_port: send.key.src_port,
            destination: Some((send.key.peer, 4791)),
            offender: Some(offender.parse().expect("an address")),
            kind: IcmpKind::TimeExceeded,
            payload: send.payload.to_vec(),
            at_ns: 0,
        }
    }

    fn hops(path: &[pb::Hop]) -> Vec<(String, u32)> {
        path.iter().map(|h| (h.node.clone(), h.port)).collect()
    }

    #[test]
    fn a_trace_turns_ingress_addresses_into_the_egress_ports_of_the_path() {
        let mut t = tracer();
        assert_eq!(t.need(key(), 0), None);
        let first = t.poll(0);
        assert_eq!(first.len(), 1);
        assert_eq!((first[0].key, first[0].ttl), (key(), 1));
        assert_eq!(parse_trace_payload(&first[0].payload).map(|p| p.1), Some(1));
        // tor0 answers from its port facing h0, spine0 from its port facing tor0, tor1
        // (the destination's ToR) from its port facing spine0: the trace is complete.
        let second = t
            .on_icmp(&answer(&first[0], "172.16.0.1"), MS)
            .expect("TTL 2");
        assert_eq!(second.ttl, 2);
        let third = t
            .on_icmp(&answer(&second, "172.16.2.1"), 2 * MS)
            .expect("TTL 3");
        assert_eq!(third.ttl, 3);
        assert_eq!(t.on_icmp(&answer(&third, "172.16.1.3"), 3 * MS), None);
        let expected = vec![
            ("h0".to_string(), 0),
            ("tor0".to_string(), 2),
            ("spine0".to_string(), 1),
            ("tor1".to_string(), 0),
        ];
        let path = t.need(key(), 4 * MS).expect("a traced path");
        assert_eq!(hops(&path), expected);
        let finished = t.take_finished();
        assert_eq!(finished.len(), 1);
        assert_eq!((finished[0].0, hops(&finished[0].1)), (key(), expected));
        assert_eq!(
            t.counts(),
            TraceCounts {
                started: 1,
                completed: 1,
                failed: 0,
                datagrams: 3,
                unmatched: 0,
            }
        );
        // An answer for a finished trace, or one that is no trace datagram, matches nothing.
        assert_eq!(t.on_icmp(&answer(&third, "172.16.1.3"), 5 * MS), None);
        let mut probe = answer(&third, "172.16.1.3");
        probe.payload = b"HMPR\x01".to_vec();
        assert_eq!(t.on_icmp(&probe, 5 * MS), None);
        assert_eq!(t.counts().unmatched, 2);
        assert_eq!(t.active(), 0);
    }

    #[test]
    fn a_silent_hop_is_asked_three_times_and_an_unknown_router_fails_the_trace() {
        let mut t = tracer();
        t.need(key(), 0);
        let first = t.poll(0);
        assert_eq!(t.poll(50 * MS), Vec::new(), "not late yet");
        let again = t.poll(100 * MS);
        assert_eq!(again, first, "the same TTL, the same payload");
        assert_eq!(t.poll(200 * MS).len(), 1);
        assert_eq!(t.poll(300 * MS), Vec::new());
        assert_eq!(t.counts().failed, 1);
        let reason = t.last_failure.clone().unwrap_or_default();
        assert!(
            reason.contains("source port 50123 to 10.0.1.1: no answer from hop 1 after 3 tries"),
            "{reason}"
        );
        // Traced again after the refresh time; this time a router no row names answers.
        let retry = t.poll(60_300 * MS);
        assert_eq!(retry.len(), 1);
        assert_eq!(
            t.on_icmp(&answer(&retry[0], "192.0.2.9"), 60_301 * MS),
            None
        );
        let reason = t.last_failure.clone().unwrap_or_default();
        assert!(
            reason.contains("hop 1 answered from 192.0.2.9, which no [[port_address]] row names"),
            "{reason}"
        );
        assert_eq!(t.need(key(), 60_302 * MS), None);
    }

    #[test]
    fn the_address_table_is_checked_against_the_fabric_row_by_row() {
        let bad = |rows: Vec<PortAddress>| PortMap::new(fabric(), &rows).unwrap_err();
        assert!(bad(vec![row("172.16.9.1", "tor9", 0)])
            .starts_with("port_address[0] (172.16.9.1 = tor9:0): no node \"tor9\""));
        assert!(bad(vec![row("172.16.9.1", "h0", 0)]).contains("h0 is a host, not a router"));
        assert!(bad(vec![row("172.16.9.1", "tor0", 7)])
            .contains("port 7 of tor0 has no link in the fabric description"));
        assert!(bad(vec![
            row("172.16.9.1", "tor0", 0),
            row("172.16.9.1", "tor0", 2)
        ])
        .starts_with("port_address[1] (172.16.9.1 = tor0:2): address 172.16.9.1 given twice"));
        let map = Arc::new(PortMap::new(fabric(), &rows()).expect("a port map"));
        let e = Tracer::new(tracer().settings, map, "h0", 3).unwrap_err();
        assert!(e.contains("h0 NIC 3 has no link"), "{e}");
        assert_eq!(
            parse_trace_payload(&trace_payload(0xdead_beef, 7)),
            Some((0xdead_beef, 7))
        );
        assert_eq!(parse_trace_payload(b"HMTR"), None);
    }
}
