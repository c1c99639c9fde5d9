//! Service tracing in the daemon (R-Pingmesh §4.1.2): reads the service's connections from
//! its sources ([`crate::services`]: eBPF, the kernel's RDMA netlink dump, a static file)
//! every `service_tracing.poll_ms`, asks the controller for each peer's comm info (its UD
//! queue pair: service tracing probes the peer's agent on the connection's own 5-tuple),
//! and turns them into each interface's service-tracing loop ([`ServiceLoop`]).
//!
//! Runs on a thread of its own (the sources are blocking system calls); the controller is
//! asked through the daemon's runtime. Peers the controller does not know are remembered
//! and asked again after the pinglist refresh time; each is logged once per refresh.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hawkmesh_proto::v1 as pb;

use super::config::{DaemonConfig, ServiceSourceChoice};
use super::plan::{ServiceLoop, ServiceTarget};
use super::uplink::Controller;
use crate::services::{ServiceConnection, ServiceSource, StaticList};

/// The sources `config` asks for that can be opened here, and why the others cannot.
pub fn open_sources(config: &DaemonConfig) -> (Vec<Box<dyn ServiceSource + Send>>, Vec<String>) {
    let st = &config.service_tracing;
    let mut sources: Vec<Box<dyn ServiceSource + Send>> = Vec::new();
    let mut missing = Vec::new();
    let want_kernel = matches!(
        st.source,
        ServiceSourceChoice::Auto | ServiceSourceChoice::Ebpf | ServiceSourceChoice::Netlink
    );
    if matches!(
        st.source,
        ServiceSourceChoice::Auto | ServiceSourceChoice::Ebpf
    ) {
        match open_ebpf(st.max_connections) {
            Ok(source) => sources.push(source),
            Err(reason) => missing.push(format!("eBPF: {reason}")),
        }
    }
    let netlink_wanted = st.source == ServiceSourceChoice::Netlink
        || (st.source == ServiceSourceChoice::Auto && sources.is_empty());
    if want_kernel && netlink_wanted {
        let mut netlink = crate::services::NetlinkSource::default();
        match netlink.connections() {
            Ok(_) => sources.push(Box::new(netlink)),
            Err(reason) => missing.push(format!("RDMA netlink: {reason}")),
        }
    }
    if matches!(
        st.source,
        ServiceSourceChoice::Auto | ServiceSourceChoice::Static
    ) {
        if let Some(path) = &st.static_file {
            sources.push(Box::new(StaticList::new(path, st.max_connections)));
        }
    }
    (sources, missing)
}

#[cfg(all(target_os = "linux", target_arch = "x86_64", feature = "ebpf"))]
fn open_ebpf(max: usize) -> Result<Box<dyn ServiceSource + Send>, String> {
    let tracer = crate::ebpf::QpTracer::open().map_err(|e| e.to_string())?;
    Ok(Box::new(crate::ebpf::EbpfSource::new(tracer, max)))
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64", feature = "ebpf")))]
fn open_ebpf(_max: usize) -> Result<Box<dyn ServiceSource + Send>, String> {
    Err("this build has no eBPF tracer (build hawkmesh with `--features ebpf`)".into())
}

/// What one poll found, per interface NIC.
#[derive(Debug, Default, PartialEq)]
pub struct Found {
    /// Each interface's service loop.
    pub loops: BTreeMap<u32, ServiceLoop>,
    /// Connections of no interface of this agent.
    pub foreign: usize,
    /// Connections left out over `max_connections`.
    pub over: usize,
    /// Connections whose peer has no comm info (yet).
    pub unresolved: usize,
}

/// The peers' comm info, by address.
#[derive(Debug, Default)]
pub struct CommCache {
    known: HashMap<IpAddr, (ServiceTarget, Instant)>,
    unknown: HashMap<IpAddr, Instant>,
    ttl: Duration,
}

impl CommCache {
    /// A cache whose entries are asked again after `ttl`.
    pub fn new(ttl: Duration) -> Self {
        CommCache {
            ttl,
            ..CommCache::default()
        }
    }

    /// The addresses to ask for among `peers`.
    pub fn to_ask(&self, peers: impl Iterator<Item = IpAddr>, now: Instant) -> Vec<IpAddr> {
        let fresh = |at: &Instant| now.duration_since(*at) < self.ttl;
        let mut ask: Vec<IpAddr> = peers
            .filter(|ip| {
                !self.known.get(ip).is_some_and(|(_, at)| fresh(at))
                    && !self.unknown.get(ip).is_some_and(fresh)
            })
            .collect();
        ask.sort_unstable();
        ask.dedup();
        ask
    }

    /// Files the controller's answer to a request for `asked`; returns the reasons of the
    /// addresses newly found unknown.
    pub fn file(
        &mut self,
        asked: &[IpAddr],
        reply: &pb::CommInfoReply,
        now: Instant,
    ) -> Vec<String> {
        let mut answered = Vec::new();
        for t in &reply.targets {
            let Ok(ip) = t.ip.parse::<IpAddr>() else {
                continue;
            };
            answered.push(ip);
            self.unknown.remove(&ip);
            self.known.insert(
                ip,
                (
                    ServiceTarget {
                        ip,
                        qpn: t.qpn,
                        host: t.host.clone(),
                        nic: t.nic,
                        src_port: 0,
                    },
                    now,
                ),
            );
        }
        for ip in asked {
            if !answered.contains(ip) {
                self.known.remove(ip);
                self.unknown.insert(*ip, now);
            }
        }
        reply.unknown.clone()
    }

    /// The peer behind `ip`, if known.
    pub fn get(&self, ip: &IpAddr) -> Option<&ServiceTarget> {
        self.known.get(ip).map(|(t, _)| t)
    }

    /// Bounds the cache: entries older than twice the ttl go.
    pub fn expire(&mut self, now: Instant) {
        let keep = |at: &Instant| now.duration_since(*at) < self.ttl * 2;
        self.known.retain(|_, (_, at)| keep(at));
        self.unknown.retain(|_, at| keep(at));
    }
}

/// Groups `connections` into each interface's loop (`interfaces`: NIC and address), the
/// peers resolved through `cache`; at most `max` connections, in a stable order.
pub fn loops(
    config: &DaemonConfig,
    mut connections: Vec<ServiceConnection>,
    cache: &CommCache,
) -> Found {
    let st = &config.service_tracing;
    let mut found = Found::default();
    for i in &config.interfaces {
        found.loops.insert(
            i.nic,
            ServiceLoop {
                targets: Vec::new(),
                per_target_ns: st.interval_ms.saturating_mul(1_000_000),
                max_pps: st.max_pps,
            },
        );
    }
    connections.sort_unstable();
    connections.dedup_by_key(|c| (c.local, c.remote, c.src_port));
    let mut taken = 0;
    for c in connections {
        let Some(nic) = config
            .interfaces
            .iter()
            .find(|i| i.ip == c.local)
            .map(|i| i.nic)
        else {
            found.foreign += 1;
            continue;
        };
        let Some(peer) = cache.get(&c.remote) else {
            found.unresolved += 1;
            continue;
        };
        if taken >= st.max_connections {
            found.over += 1;
            continue;
        }
        taken += 1;
        if let Some(l) = found.loops.get_mut(&nic) {
            l.targets.push(ServiceTarget {
                src_port: c.src_port,
                ..peer.clone()
            });
        }
    }
    found
}

/// The service-tracing thread: polls the sources, resolves the peers and hands each
/// interface's loop to `publish` whenever it changed, until `stop`.
pub fn run(
    config: Arc<DaemonConfig>,
    mut sources: Vec<Box<dyn ServiceSource + Send>>,
    mut controller: Controller,
    runtime: tokio::runtime::Handle,
    stop: Arc<AtomicBool>,
    publish: impl Fn(BTreeMap<u32, ServiceLoop>),
) {
    let poll = Duration::from_millis(config.service_tracing.poll_ms);
    let mut cache = CommCache::new(config.pinglist_refresh());
    let mut last: Option<BTreeMap<u32, ServiceLoop>> = None;
    let mut failing: HashMap<&'static str, String> = HashMap::new();
    let mut logged_over = false;
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        let mut connections = Vec::new();
        for source in &mut sources {
            match source.connections() {
                Ok(found) => {
                    if failing.remove(source.name()).is_some() {
                        tracing::info!(
                            source = source.name(),
                            "service connections readable again"
                        );
                    }
                    connections.extend(found);
                }
                Err(reason) => {
                    if failing.get(source.name()) != Some(&reason) {
                        tracing::warn!(
                            source = source.name(),
                            "reading service connections failed: {reason}"
                        );
                        failing.insert(source.name(), reason);
                    }
                }
            }
        }
        let now = Instant::now();
        cache.expire(now);
        let ask = cache.to_ask(connections.iter().map(|c| c.remote), now);
        if !ask.is_empty() {
            let ips = ask.iter().map(|ip| ip.to_string()).collect();
            match runtime.block_on(controller.comm_info(ips)) {
                Ok(reply) => {
                    for reason in cache.file(&ask, &reply, now) {
                        tracing::warn!("a service connection's peer has no comm info: {reason}");
                    }
                }
                Err(status) => tracing::warn!(
                    "asking the controller for service peers' comm info failed ({}: {})",
                    status.code(),
                    status.message()
                ),
            }
        }
        let found = loops(&config, connections, &cache);
        if found.over > 0 && !logged_over {
            logged_over = true;
            tracing::warn!(
                over = found.over,
                max = config.service_tracing.max_connections,
                "more service connections than service_tracing.max_connections: the rest are not traced"
            );
        }
        if last.as_ref() != Some(&found.loops) {
            let count: usize = found.loops.values().map(|l| l.targets.len()).sum();
            tracing::info!(
                connections = count,
                foreign = found.foreign,
                unresolved = found.unresolved,
                "service connections traced"
            );
            publish(found.loops.clone());
            last = Some(found.loops);
        }
        // Sleep out the poll time in small steps (a stop is noticed within 50 ms).
        while started.elapsed() < poll && !stop.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50).min(poll));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> DaemonConfig {
        DaemonConfig::parse(
            r#"
            host = "h0"
            state_dir = "/tmp/x"
            [analyzer]
            endpoint = "http://127.0.0.1:1"
            [service_tracing]
            max_connections = 2
            interval_ms = 10
            max_pps = 150
            [[interface]]
            nic = 0
            ip = "10.0.0.1"
            id = 1
            [[interface]]
            nic = 1
            ip = "10.0.0.2"
            id = 2
            "#,
            "test.toml",
        )
        .expect("a configuration")
    }

    fn connection(local: &str, remote: &str, src_port: u16) -> ServiceConnection {
        ServiceConnection {
            local: local.parse().expect("an address"),
            remote: remote.parse().expect("an address"),
            src_port,
            lqpn: None,
            rqpn: None,
        }
    }

    /// Connections go to the loop of the interface they were opened on, with their peer's
    /// comm info; foreign, unresolved and excess ones are counted, not traced.
    #[test]
    fn connections_become_their_interfaces_loops_with_the_peers_comm_info() {
        let config = config();
        let now = Instant::now();
        let mut cache = CommCache::new(Duration::from_secs(300));
        let peers = ["10.0.1.1", "10.0.2.1", "10.0.9.9"].map(|p| p.parse::<IpAddr>().unwrap());
        assert_eq!(cache.to_ask(peers.iter().copied(), now), peers.to_vec());
        let reply = pb::CommInfoReply {
            targets: ["10.0.1.1", "10.0.2.1"]
                .iter()
                .enumerate()
                .map(|(i, ip)| pb::ProbeTarget {
                    host: format!("h{}", i + 1),
                    nic: 0,
                    ip: ip.to_string(),
                    qpn: 0x100 + i as u32,
                    kind: pb::ProbeKind::ServiceTracing as i32,
                    ..pb::ProbeTarget::default()
                })
                .collect(),
            unknown: vec!["10.0.9.9: no RNIC has it".into()],
        };
        let unknown = cache.file(&peers, &reply, now);
        assert_eq!(unknown, vec!["10.0.9.9: no RNIC has it".to_string()]);
        // Nothing to ask again before the refresh time, the unknown one included.
        assert!(cache.to_ask(peers.iter().copied(), now).is_empty());
        assert_eq!(
            cache.to_ask(peers.iter().copied(), now + Duration::from_secs(301)),
            peers.to_vec()
        );
        let found = loops(
            &config,
            vec![
                connection("10.0.0.1", "10.0.1.1", 0xC001),
                connection("10.0.0.2", "10.0.2.1", 0xC002),
                connection("10.0.0.2", "10.0.2.1", 0xC002),
                connection("10.0.0.1", "10.0.9.9", 0xC003),
                connection("10.0.0.7", "10.0.1.1", 0xC004),
                connection("10.0.0.2", "10.0.1.1", 0xC005),
            ],
            &cache,
        );
        assert_eq!((found.foreign, found.unresolved, found.over), (1, 1, 1));
        let nic0 = &found.loops[&0];
        assert_eq!(nic0.targets.len(), 1);
        assert_eq!(
            (
                nic0.targets[0].host.as_str(),
                nic0.targets[0].qpn,
                nic0.targets[0].src_port
            ),
            ("h1", 0x100, 0xC001)
        );
        assert_eq!(nic0.per_target_ns, 10_000_000);
        assert_eq!(found.loops[&1].targets.len(), 1);
        // In address order, 10.0.0.2 → 10.0.1.1 comes before → 10.0.2.1, which is over.
        assert_eq!(
            (
                found.loops[&1].targets[0].host.as_str(),
                found.loops[&1].targets[0].src_port
            ),
            ("h1", 0xC005)
        );
        // 150 probes/s at most: one connection every 10 ms is 100/s, under the cap.
        assert_eq!(nic0.interval_ns(), 10_000_000);
    }
}
