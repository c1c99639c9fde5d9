//! The overhead lab: hosts of 8 RNICs (veth) on one bridge, the analyzer service with its
//! pingmesh controller, and `hawkmesh-host-agent` processes, one per host.
//!
//! The fabric description the controller builds its pinglists from is rail-optimised: NIC n
//! of every host is cabled to ToR n, each ToR to both spines. The namespaces do not route
//! like it: every RNIC is on one bridge (`sw0` in the namespace `fab`), which reaches every
//! RNIC from every other, as the fabric does; the agents' work per probe does not depend on
//! the path (no path tracing: it is off by default). Each RNIC's traffic leaves by its own
//! interface (a policy rule per source address), also to the host's other RNICs (the local
//! table is looked up after those rules), as the routed lab of `tests/daemon_netns.rs` does.
//! Neighbours are static ([`static_neighbours`]): no ARP.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use hawkmesh_analyzer_server::pingmesh::PingmeshConfig;
use hawkmesh_analyzer_server::tls::Pki;
use hawkmesh_pingmesh::inventory::Inventory;
use hawkmesh_pingmesh::pinglist::{PinglistConfig, Pinglists};
use hawkmesh_wire::topology::{FabricTopology, NodeKind};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::daemon_lab::{
    agent_toml, analyzer_config, attach_management, management, pki, Analyzer, FabricBuilder,
    TempDir, ANALYZER_IP,
};
use crate::support::Netns;

/// RNICs per host (issue 25: "8 RNICs × 150 probes/s").
pub const NICS: usize = 8;
/// Spines of the fabric description: 2 parallel paths between any two ToRs.
const SPINES: usize = 2;
/// ToR-mesh probes a second per RNIC: R-Pingmesh §5's 10 (the controller's default).
pub const TOR_MESH_PPS: f64 = 10.0;
/// The other hosts refetch their pinglists this often (ms), so that they probe the measured
/// host soon after it registers; the measured host keeps the default (5 minutes), and is
/// started after the others registered, so its first pinglist is whole.
const PEER_PINGLIST_REFRESH_MS: u64 = 5_000;
/// How long the agents get to register. An agent whose first connection attempt fails
/// retries after a back-off of up to 10 s (`upload.max_backoff_ms`), with a 5-s connect
/// timeout (`daemon/uplink.rs`): two attempts and more fit.
const REGISTER_WAIT: Duration = Duration::from_secs(60);
/// How long a stopped agent gets to drain its buffer and exit (its drain time is 10 s).
const STOP_WAIT: Duration = Duration::from_secs(20);

/// RNIC `n` of host `h`: the fabric's host address 10.0.h.1 plus the NIC (the controller's
/// inventory gives RNIC addresses so).
pub fn rnic_ip(h: usize, n: usize) -> String {
    format!("10.0.{h}.{}", 1 + n)
}

/// The fabric description: ToRs `tor0`–`tor7` (ids 0–7), spines, then hosts `h0`… with
/// NIC n on ToR n's port h; ToR t's port `hosts + s` faces spine s's port t.
pub fn fabric(hosts: usize) -> FabricTopology {
    let mut f = FabricBuilder::new();
    let tors: Vec<u32> = (0..NICS)
        .map(|t| f.node(&format!("tor{t}"), NodeKind::Switch, Some(0), None))
        .collect();
    let spines: Vec<u32> = (0..SPINES)
        .map(|s| f.node(&format!("spine{s}"), NodeKind::Switch, Some(1), None))
        .collect();
    for h in 0..hosts {
        let host = f.node(
            &format!("h{h}"),
            NodeKind::Host,
            None,
            Some([10, 0, h as u8, 1]),
        );
        for (n, tor) in tors.iter().enumerate() {
            f.link((host, n as u16), (*tor, h as u16));
        }
    }
    for (t, tor) in tors.iter().enumerate() {
        for (s, spine) in spines.iter().enumerate() {
            f.link((*tor, (hosts + s) as u16), (*spine, t as u16));
        }
    }
    f.build()
}

/// The controller's pinglist settings that make each of h0's RNICs probe `rate` times a
/// second, and that rate per NIC as the controller plans it.
///
/// An RNIC's inter-ToR rate is the ToR's per-link target times Eq. 1's k over the 5-tuples
/// the ToR has, times the 5-tuples the RNIC carries (`pingmesh/src/pinglist.rs`): linear in
/// `link_target_pps`. It is read off the controller's own lists at 1 probe/s and scaled.
pub fn pinglist_settings(
    topology: &FabricTopology,
    rate: f64,
) -> Result<(PinglistConfig, Vec<f64>), String> {
    let inventory = Inventory::from_topology(topology)
        .map_err(|e| format!("the lab's fabric description: {e}"))?;
    let unit = PinglistConfig {
        tor_mesh_pps: TOR_MESH_PPS,
        link_target_pps: 1.0,
        ..PinglistConfig::default()
    };
    let h0: Vec<usize> = (0..inventory.rnics().len())
        .filter(|id| inventory.rnics()[*id].host_name == "h0")
        .collect();
    let inter = |lists: &Pinglists| -> f64 {
        let sum: f64 = h0
            .iter()
            .map(|id| {
                lists.lists()[*id]
                    .inter_tor_interval_ns
                    .map_or(0.0, |ns| 1e9 / ns as f64)
            })
            .sum();
        sum / h0.len() as f64
    };
    let at_unit =
        Pinglists::build(&inventory, unit).map_err(|e| format!("the lab's pinglists: {e}"))?;
    let per_link = inter(&at_unit);
    if !(rate > TOR_MESH_PPS && per_link > 0.0) {
        return Err(format!(
            "--rate {rate}: must be above the ToR-mesh rate ({TOR_MESH_PPS} probes/s), the rest being inter-ToR"
        ));
    }
    let config = PinglistConfig {
        link_target_pps: (rate - TOR_MESH_PPS) / per_link,
        ..unit
    };
    let lists =
        Pinglists::build(&inventory, config).map_err(|e| format!("the lab's pinglists: {e}"))?;
    let planned = h0
        .iter()
        .map(|id| lists.lists()[*id].probes_per_second())
        .collect();
    Ok((config, planned))
}

/// A `hawkmesh-host-agent` (or `hawkmesh host-agent`) process in a host's namespace (`ip netns exec` execs the binary
/// in place: the child's pid is the agent's). Stopped with SIGTERM when dropped, killed if
/// it does not exit within [`STOP_WAIT`].
pub struct Agent {
    /// The host it runs as.
    pub host: String,
    /// Its standard output and error.
    pub log: PathBuf,
    child: Child,
}

impl Agent {
    fn spawn(binary: &Path, ns: &Netns, host: &str, config: &Path, log: &Path) -> Agent {
        let out = File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out
            .try_clone()
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(binary)
            // The CLI takes the daemon as a subcommand; the daemon-only binary is the daemon.
            .args(
                (binary.file_name().and_then(|n| n.to_str()) == Some("hawkmesh"))
                    .then_some("host-agent"),
            )
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting `ip netns exec {} {}`: {e}",
                    ns.name,
                    binary.display()
                )
            });
        Agent {
            host: host.to_string(),
            log: log.to_path_buf(),
            child,
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// SIGTERM, then waits for it (killing it after [`STOP_WAIT`]); its exit status.
    pub fn stop(&mut self) -> Result<ExitStatus, String> {
        if let Some(status) = self.exited() {
            return Ok(status);
        }
        let pid = Pid::from_raw(self.child.id() as i32);
        kill(pid, Signal::SIGTERM)
            .map_err(|e| format!("SIGTERM to {}'s agent (pid {pid}): {e}", self.host))?;
        let deadline = Instant::now() + STOP_WAIT;
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
                Err(e) => return Err(format!("waiting for {}'s agent: {e}", self.host)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        Err(format!(
            "{}'s agent (pid {pid}) did not exit within {STOP_WAIT:?} of SIGTERM: killed",
            self.host
        ))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("{e}");
        }
    }
}

/// Everything the run made; dropping it stops the agents, then the analyzer, deletes the
/// namespaces (their interfaces with them) and the files (fields drop in this order).
pub struct Lab {
    /// `agents[h]` runs as host `h`; `agents[0]` is the measured one (started last).
    pub agents: Vec<Agent>,
    /// The analyzer service with the pingmesh controller.
    pub analyzer: Analyzer,
    /// `hosts[h]` is host `h`'s namespace.
    pub hosts: Vec<Netns>,
    fab: Netns,
    mgmt: Netns,
    /// Configurations, state, logs, the PKI, the analyzer's data.
    pub dirs: TempDir,
}

/// Gives host `h` its RNICs (veths onto the bridge), their addresses and routing.
fn wire_host(host: &Netns, fab: &Netns, h: usize) {
    for setting in [
        // Datagrams between two RNICs of one host leave by one and come in by the other:
        // their source is a local address.
        "net.ipv4.conf.all.accept_local=1",
        "net.ipv4.conf.default.accept_local=1",
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
    ] {
        host.sysctl(setting);
    }
    for n in 0..NICS {
        let nic = format!("nic{n}");
        let port = format!("h{h}n{n}");
        host.ip(&[
            "link", "add", &nic, "type", "veth", "peer", "name", &port, "netns", &fab.name,
        ]);
        fab.ip(&["link", "set", &port, "master", "sw0", "up"]);
        let ip = rnic_ip(h, n);
        host.ip(&["addr", "add", &format!("{ip}/32"), "dev", &nic]);
        host.ip(&["link", "set", &nic, "up"]);
        let table = format!("{}", 100 + n);
        host.ip(&[
            "rule", "add", "pref", &table, "from", &ip, "iif", "lo", "lookup", &table,
        ]);
        host.ip(&[
            "route",
            "add",
            "10.0.0.0/16",
            "dev",
            &nic,
            "src",
            &ip,
            "table",
            &table,
        ]);
    }
    host.ip(&["rule", "add", "pref", "200", "lookup", "local"]);
    host.ip(&["rule", "del", "pref", "0"]);
}

/// The MAC address of `dev` in `ns`.
fn mac(ns: &Netns, dev: &str) -> String {
    let json = ns.ip_output(&["-j", "link", "show", "dev", dev]);
    let value: serde_json::Value = serde_json::from_str(&json)
        .unwrap_or_else(|e| panic!("`ip -j link show dev {dev}` in {}: {e}", ns.name));
    value[0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("no address of {dev} in {}: {json}", ns.name))
        .to_string()
}

/// Runs `commands` (one `ip` command a line, without `ip`) in `ns` with `ip -batch`.
fn batch(ns: &Netns, dir: &Path, commands: &str) {
    let file = dir.join(format!("{}.ip", ns.name));
    std::fs::write(&file, commands).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    ns.ip(&["-batch", &file.display().to_string()]);
}

/// Permanent neighbour entries for every address the lab's hosts talk to: each RNIC to
/// every other RNIC, each host to the analyzer and back. Linux's ARP table is one for all
/// namespaces, its dynamic entries capped at `net.ipv4.neigh.default.gc_thresh3` (1024
/// here) and collected above `gc_thresh2` (512): the 32 RNICs of 4 hosts resolving each
/// other come close (992 entries), and beside another lab the table overflows ("neighbor table overflow!",
/// datagrams dropped as `NEIGH_CREATEFAIL`, the agents' gRPC connections failing).
/// Permanent entries are exempt from the cap (net/core/neighbour.c, `neigh_alloc`).
fn static_neighbours(mgmt: &Netns, hosts: &[Netns], dir: &Path) {
    let rnic_macs: Vec<Vec<String>> = hosts
        .iter()
        .map(|host| (0..NICS).map(|n| mac(host, &format!("nic{n}"))).collect())
        .collect();
    let analyzer_mac = mac(mgmt, "br0");
    let mut analyzer_side = String::new();
    for (h, host) in hosts.iter().enumerate() {
        let mut commands =
            format!("neigh replace {ANALYZER_IP} lladdr {analyzer_mac} dev mgmt0 nud permanent\n");
        analyzer_side.push_str(&format!(
            "neigh replace 192.168.77.{} lladdr {} dev br0 nud permanent\n",
            10 + h,
            mac(host, "mgmt0")
        ));
        for n in 0..NICS {
            for (peer, macs) in rnic_macs.iter().enumerate() {
                for (m, mac) in macs.iter().enumerate() {
                    if (peer, m) != (h, n) {
                        commands.push_str(&format!(
                            "neigh replace {} lladdr {mac} dev nic{n} nud permanent\n",
                            rnic_ip(peer, m)
                        ));
                    }
                }
            }
        }
        batch(host, dir, &commands);
    }
    batch(mgmt, dir, &analyzer_side);
}

/// An agent's interfaces: (NIC, address, id); ids distinct per host's interface.
fn interfaces(h: usize) -> Vec<(u32, String, u32)> {
    (0..NICS)
        .map(|n| (n as u32, rnic_ip(h, n), ((h as u32 + 1) << 8) | n as u32))
        .collect()
}

impl Lab {
    /// Builds the namespaces of `hosts` hosts, the analyzer with `pinglists` (rotated every
    /// `rotation`, else the controller's hour), and starts an agent (`binary`) per host: the
    /// others first, h0 once they registered. Returns when h0 has registered too.
    /// `interrupted` is asked between the steps that wait.
    pub fn start(
        binary: &Path,
        hosts: usize,
        topology: FabricTopology,
        pinglists: PinglistConfig,
        rotation: Option<Duration>,
        interrupted: &dyn Fn() -> bool,
    ) -> Result<Lab, String> {
        let dirs = TempDir::new("overhead");
        let mgmt = Netns::add("ovh-mgmt");
        management(&mgmt);
        let fab = Netns::add("ovh-fab");
        fab.ip(&["link", "add", "sw0", "type", "bridge"]);
        fab.ip(&["link", "set", "sw0", "up"]);
        let mut namespaces = Vec::new();
        for h in 0..hosts {
            let host = Netns::add(&format!("ovh-h{h}"));
            attach_management(&mgmt, &host, h);
            wire_host(&host, &fab, h);
            namespaces.push(host);
        }
        // The bridge's address is its lowest port's unless set: set, it stays.
        mgmt.ip(&["link", "set", "br0", "address", "02:00:c0:a8:4d:01"]);
        static_neighbours(&mgmt, &namespaces, dirs.path());
        let names: Vec<String> = (0..hosts).map(|h| format!("h{h}")).collect();
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let pki: Pki = pki(&dirs.path().join("pki"), &name_refs);
        let analyzer = Analyzer::start(
            &mgmt,
            analyzer_config(
                topology,
                &dirs.path().join("analyzer"),
                &pki,
                PingmeshConfig {
                    pinglists,
                    rotation_ns: rotation.map_or(PingmeshConfig::default().rotation_ns, |r| {
                        r.as_nanos().try_into().unwrap_or(u64::MAX)
                    }),
                    ..PingmeshConfig::default()
                },
            ),
        );
        let mut lab = Lab {
            agents: Vec::new(),
            analyzer,
            hosts: namespaces,
            fab,
            mgmt,
            dirs,
        };
        // The others first (any order), h0 last; agents[h] is host h.
        let mut started: Vec<Option<Agent>> = (0..hosts).map(|_| None).collect();
        for h in (1..hosts).chain([0]) {
            let sections = if h == 0 {
                "[metrics]\nlisten = \"127.0.0.1:9464\"\n".to_string()
            } else {
                format!(
                    "[probing]\npinglist_refresh_ms = {PEER_PINGLIST_REFRESH_MS}\n\
                     [metrics]\nlisten = \"127.0.0.1:9464\"\n"
                )
            };
            let own = interfaces(h);
            let refs: Vec<(u32, &str, u32)> = own
                .iter()
                .map(|(n, ip, id)| (*n, ip.as_str(), *id))
                .collect();
            let state = lab.dirs.path().join(format!("h{h}-state"));
            let text = agent_toml(&names[h], &state, &pki, &refs, &sections);
            let config = lab.dirs.path().join(format!("h{h}.toml"));
            std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
            let log = lab.dirs.path().join(format!("h{h}.log"));
            started[h] = Some(Agent::spawn(
                binary,
                &lab.hosts[h],
                &names[h],
                &config,
                &log,
            ));
            let registered = if h == 0 { hosts } else { hosts - 1 };
            if h == 0 || h == hosts - 1 {
                lab.wait_registered(registered, &mut started, interrupted)?;
            }
        }
        lab.agents = started.into_iter().flatten().collect();
        Ok(lab)
    }

    /// Waits (at most [`REGISTER_WAIT`]) until `count` hosts registered with the
    /// controller, failing early when an agent exits.
    fn wait_registered(
        &self,
        count: usize,
        agents: &mut [Option<Agent>],
        interrupted: &dyn Fn() -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + REGISTER_WAIT;
        loop {
            let status = self
                .analyzer
                .pingmesh()
                .lock()
                .map_err(|_| "the pingmesh controller's lock is poisoned".to_string())?
                .status();
            if status.hosts_registered >= count {
                return Ok(());
            }
            for agent in agents.iter_mut().flatten() {
                if let Some(exit) = agent.exited() {
                    return Err(format!(
                        "{}'s agent exited ({exit}) before registering; its log ({}) ends:\n{}",
                        agent.host,
                        agent.log.display(),
                        agent.log_tail(20)
                    ));
                }
            }
            if interrupted() {
                return Err("interrupted".into());
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = agents
                    .iter()
                    .flatten()
                    .map(|a| format!("{}'s log ends:\n{}", a.host, a.log_tail(3)))
                    .collect();
                return Err(format!(
                    "{} of {count} hosts registered with the controller within {REGISTER_WAIT:?}\n{}",
                    status.hosts_registered,
                    logs.join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The namespace names, for messages.
    pub fn describe(&self) -> String {
        format!(
            "namespaces {}, {} and {}…{}",
            self.mgmt.name,
            self.fab.name,
            self.hosts.first().map_or("", |n| n.name.as_str()),
            self.hosts.last().map_or("", |n| n.name.as_str())
        )
    }
}
