//! What the daemon labs share (feature `daemon`): the analyzer service with its pingmesh
//! controller in a management namespace, the lab's PKI and management network, fabric
//! descriptions, agent configurations, the agents' metrics endpoint. Used by
//! `tests/daemon_netns.rs` (daemons in-process) and `benches/overhead.rs` (daemons as
//! processes).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hawkmesh_analyzer_server::pingmesh::{PeriodView, PingmeshConfig};
use hawkmesh_analyzer_server::pingmesh_service::PingmeshShared;
use hawkmesh_analyzer_server::tls::{Pki, TlsMode};
use hawkmesh_analyzer_server::{start, RunningServer, ServerConfig};
use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeKind, PortRef};

use super::Netns;

/// The analyzer's address on the management bridge.
pub const ANALYZER_IP: &str = "192.168.77.1";
/// The analyzer's gRPC port.
pub const ANALYZER_PORT: u16 = 50_051;

/// A temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("hawkmesh-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temporary directory");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds a fabric description node by node and cable by cable (each 100 Gb/s, 1 µs).
pub struct FabricBuilder {
    nodes: Vec<NodeDesc>,
    links: Vec<LinkDesc>,
}

impl FabricBuilder {
    pub fn new() -> Self {
        FabricBuilder {
            nodes: Vec::new(),
            links: Vec::new(),
        }
    }

    pub fn node(
        &mut self,
        name: &str,
        kind: NodeKind,
        tier: Option<u8>,
        ipv4: Option<[u8; 4]>,
    ) -> u32 {
        let id = self.nodes.len() as u32;
        self.nodes.push(NodeDesc {
            id,
            name: name.into(),
            kind,
            tier,
            ipv4,
        });
        id
    }

    pub fn link(&mut self, a: (u32, u16), b: (u32, u16)) {
        self.links.push(LinkDesc {
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
        });
    }

    pub fn build(self) -> FabricTopology {
        let topology = FabricTopology {
            nodes: self.nodes,
            links: self.links,
        };
        topology.validate().expect("a valid fabric");
        topology
    }
}

/// The analyzer service in the management namespace, stopped and started again on the
/// same data directory and port.
pub struct Analyzer {
    runtime: tokio::runtime::Runtime,
    server: Option<RunningServer>,
    /// What it is started with (a lab may change it between a stop and a restart).
    pub config: ServerConfig,
}

impl Analyzer {
    /// Its runtime's threads live in `mgmt` (created there), so its sockets do.
    pub fn start(mgmt: &Netns, config: ServerConfig) -> Analyzer {
        let runtime = mgmt
            .spawn(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the analyzer's runtime")
            })
            .join()
            .expect("runtime thread");
        let mut analyzer = Analyzer {
            runtime,
            server: None,
            config,
        };
        analyzer.restart();
        analyzer
    }

    pub fn restart(&mut self) {
        assert!(self.server.is_none());
        let config = self.config.clone();
        // Spawned, not run on this thread: the listeners are bound by a worker, in mgmt.
        let server = self
            .runtime
            .block_on(self.runtime.spawn(start(config)))
            .expect("the start task")
            .expect("the analyzer starts");
        self.server = Some(server);
    }

    pub fn stop(&mut self) {
        if let Some(server) = self.server.take() {
            self.runtime
                .block_on(self.runtime.spawn(server.stop()))
                .expect("the stop task");
        }
    }

    pub fn pingmesh(&self) -> PingmeshShared {
        self.server
            .as_ref()
            .and_then(|s| s.pingmesh.clone())
            .expect("a running pingmesh controller")
    }

    /// Every period report kept.
    pub fn periods(&self) -> Vec<PeriodView> {
        let shared = self.pingmesh();
        let controller = shared.lock().expect("the controller");
        controller.periods(None, 1000).0
    }
}

impl Drop for Analyzer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The lab's PKI: a CA, the analyzer's certificate, one per host.
pub fn pki(dir: &Path, hosts: &[&str]) -> Pki {
    let pki = Pki::create(dir, "hawkmesh lab CA").expect("a CA");
    pki.issue("analyzer", &["analyzer.lab".to_string()])
        .expect("the analyzer's certificate");
    for host in hosts {
        pki.issue(host, &[]).expect("a host certificate");
    }
    pki
}

/// The analyzer's configuration: gRPC on the management bridge with mutual TLS (the lab's
/// CA), the pingmesh controller as `pingmesh` says.
pub fn analyzer_config(
    topology: FabricTopology,
    data: &Path,
    pki: &Pki,
    pingmesh: PingmeshConfig,
) -> ServerConfig {
    let mut config = ServerConfig::loopback(
        topology,
        data.to_path_buf(),
        format!("{ANALYZER_IP}:{ANALYZER_PORT}")
            .parse()
            .expect("an address"),
    );
    config.tls = TlsMode::Mutual {
        cert: pki.cert_path("analyzer"),
        key: pki.key_path("analyzer"),
        client_ca: pki.cert_path("ca"),
    };
    config.pingmesh = Some(pingmesh);
    config
}

/// The management network: a bridge in `mgmt` holding the analyzer's address; each host
/// gets a veth into it (`mgmt0`, 192.168.77.(10 + index)).
pub fn management(mgmt: &Netns) {
    mgmt.ip(&["link", "add", "br0", "type", "bridge"]);
    mgmt.ip(&["addr", "add", &format!("{ANALYZER_IP}/24"), "dev", "br0"]);
    mgmt.ip(&["link", "set", "br0", "up"]);
}

/// Gives `host` its veth into the management bridge (see [`management`]).
pub fn attach_management(mgmt: &Netns, host: &Netns, index: usize) {
    let port = format!("m{index}");
    host.ip(&[
        "link", "add", "mgmt0", "type", "veth", "peer", "name", &port, "netns", &mgmt.name,
    ]);
    mgmt.ip(&["link", "set", &port, "master", "br0", "up"]);
    host.ip(&[
        "addr",
        "add",
        &format!("192.168.77.{}/24", 10 + index),
        "dev",
        "mgmt0",
    ]);
    host.ip(&["link", "set", "mgmt0", "up"]);
}

/// `GET /metrics` on the daemon in `ns` (its namespace's loopback), if it answers.
pub fn try_scrape(ns: &Netns) -> Option<String> {
    ns.spawn(|| {
        let addr: SocketAddr = "127.0.0.1:9464".parse().expect("an address");
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        Some(response)
    })
    .join()
    .expect("the scrape thread")
}

/// `GET /metrics` on the daemon in `ns`, which must answer.
pub fn scrape(ns: &Netns) -> String {
    try_scrape(ns).expect("the daemon's metrics endpoint answers")
}

/// The value of the metric line starting with `prefix`.
pub fn metric(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in the metrics:\n{text}"))
}

/// Waits until `done` holds, at most `limit`.
pub fn wait_for(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An agent's configuration file: its host name, state directory, the analyzer over mutual
/// TLS on the management network, then `sections` (TOML: `[probing]`, `[upload]`,
/// `[metrics]`… as the lab wants them) and one `[[interface]]` per (NIC, address, id).
pub fn agent_toml(
    host: &str,
    state: &Path,
    pki: &Pki,
    interfaces: &[(u32, &str, u32)],
    sections: &str,
) -> String {
    let mut text = format!(
        r#"
host = "{host}"
state_dir = "{state}"
[analyzer]
endpoint = "https://{ANALYZER_IP}:{ANALYZER_PORT}"
ca = "{ca}"
cert = "{cert}"
key = "{key}"
name = "analyzer.lab"
{sections}
"#,
        state = state.display(),
        ca = pki.cert_path("ca").display(),
        cert = pki.cert_path(host).display(),
        key = pki.key_path(host).display(),
    );
    for (nic, ip, id) in interfaces {
        text.push_str(&format!(
            "[[interface]]\nnic = {nic}\nip = \"{ip}\"\nid = {id}\n"
        ));
    }
    text
}
