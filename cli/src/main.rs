//! `hawkmesh` — the command-line entry point.

mod eval;
mod fitf;
mod fitf_watch;
mod pingmesh;
mod tune;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Parser, Debug)]
#[command(
    name = "hawkmesh",
    version,
    about = "Find out why RDMA traffic is slow, and rehearse it in simulation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum PingmeshCommand {
    /// R-Pingmesh's evaluation in netsim: fault families (link loss, ACL drops, link down,
    /// RNIC down, host down, agent restart, CPU overload, and fault-free traces) injected
    /// into drawn fabrics, the real prober/responder library on every RNIC, one analysis
    /// period; writes results.json and report.md.
    Eval(pingmesh::PingmeshEvalArgs),
}

#[derive(Subcommand, Debug)]
enum TuneCommand {
    /// PARALEON's evaluation in netsim (§IV): the paper's fabric under FB_Hadoop, the ON/OFF
    /// all-to-all and the influx, each with the NVIDIA defaults, the expert setting, a
    /// pretrained one, naive SA and PARALEON; FCT slowdowns, utility per interval and FSD
    /// accuracy (PARALEON vs naive Elastic Sketch vs NetFlow); writes results.json and
    /// report.md.
    Eval(tune::TuneEvalArgs),
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The whole HAWKEYE loop on the built-in scenario (PFC backpressure from an incast on
    /// the K=4 fat-tree): simulated fabric with the generated data plane in every switch,
    /// host RTT triggers, switch agents streaming to the analyzer service over gRPC; prints
    /// the diagnosis and writes the HTML report.
    Demo {
        /// Output directory (simulation results, diagnoses, HTML reports, analyzer store).
        #[arg(long, default_value = "out/demo")]
        out: PathBuf,
        /// Run this scenario instead of the built-in one.
        #[arg(long)]
        scenario: Option<PathBuf>,
        /// Override the scenario's seed (the same scenario and seed give the same output).
        #[arg(long)]
        seed: Option<u64>,
        /// Run R-Pingmesh beside HAWKEYE: probing agents on every RNIC whose service
        /// tracing triggers the polling, the analyzer's pingmesh controller taking their
        /// results; each incident report then says where (pingmesh) beside why (HAWKEYE).
        #[arg(long)]
        pingmesh: bool,
    },
    /// HAWKEYE's evaluation (paper §4.2–4.3): randomised traces of every anomaly class on
    /// the K=4 fat-tree, the whole loop at each epoch size and RTT threshold, HAWKEYE vs
    /// full polling vs victim-only, telemetry ablations; writes results.json, report.md and
    /// SVG figures.
    Eval(eval::EvalArgs),
    /// R-Pingmesh: probing between RNICs, RNIC-vs-switch localisation and service impact.
    Pingmesh {
        #[command(subcommand)]
        command: PingmeshCommand,
    },
    /// PARALEON: DCQCN/ECN tuning from the ToRs' flow-size distribution.
    Tune {
        #[command(subcommand)]
        command: TuneCommand,
    },
    /// Packet-level simulation of a RoCEv2 fabric.
    Sim {
        #[command(subcommand)]
        command: SimCommand,
    },
    /// The analyzer service: gRPC report collection, incidents, HTTP API.
    Analyzer {
        #[command(subcommand)]
        command: AnalyzerCommand,
    },
    /// A small certificate authority for a lab: certificates for the analyzer and for
    /// every agent (mutual TLS, the agent named by its certificate).
    Pki {
        #[command(subcommand)]
        command: PkiCommand,
    },
    /// The switch agent daemon on a Tofino switch's CPU: programs the switch over BF
    /// Runtime (bf_switchd), reads polling copies and eviction reports from the CPU port
    /// (bf_pci0), collects telemetry and streams reports to the analyzer (hw-lab/tofino.md).
    /// Runs until SIGINT or SIGTERM.
    SwitchAgent {
        /// The configuration (TOML; hw-lab/switch-agent.toml is an example).
        #[arg(long)]
        config: PathBuf,
    },
    /// The host agent daemon on an RDMA host: registers its RNICs with the pingmesh
    /// controller, probes its pinglist over kernel UDP (SO_TIMESTAMPING), answers other
    /// agents' probes, uploads the results and serves /metrics (hw-lab/README.md). Runs
    /// until SIGINT or SIGTERM; exits non-zero when some results could not be delivered.
    HostAgent {
        /// The configuration (TOML; hw-lab/host-agent.toml is an example with every key).
        #[arg(long)]
        config: PathBuf,
    },
    /// Set DCQCN/ECN knobs on this machine's devices (what the PARALEON tuner dispatches):
    /// ConnectX RNIC knobs through the mlx5 sysfs files of each --interface (or mlxconfig
    /// firmware settings with --mlxconfig-device), switch ECN knobs through SONiC's
    /// `config ecn` with --sonic-profile, or into the hawkmesh switch program's own
    /// `ecn_profile` table over BF Runtime with --bfrt and --ecn-ports (kmin_kb, kmax_kb and
    /// pmax all given: every entry holds the three). --dry-run prints what would be written.
    /// Values in the knob table's units: `hawkmesh knobs-set --interface eth2
    /// rpg_hai_rate=150 rate_reduce_monitor_period=80`.
    #[command(name = "knobs-set")]
    KnobsSet {
        /// RNIC interfaces whose sysfs knobs to set (mlx5: /sys/class/net/IF/ecn/).
        #[arg(long = "interface")]
        interfaces: Vec<String>,
        /// Prefix of the sysfs paths (a copy of the tree, for a trial run).
        #[arg(long, default_value = "/")]
        sysfs_root: PathBuf,
        /// Set the knobs as mlxconfig firmware settings of this device instead.
        #[arg(long)]
        mlxconfig_device: Option<String>,
        /// The device port for mlxconfig's `_P<port>` names.
        #[arg(long, default_value_t = 1)]
        mlxconfig_port: u8,
        /// Set the switch ECN knobs in this SONiC WRED profile (e.g. AZURE_LOSSLESS).
        #[arg(long)]
        sonic_profile: Option<String>,
        /// Set the switch ECN knobs in the hawkmesh program's `ecn_profile` table of the
        /// switch whose BF Runtime server is at HOST:PORT (bf_switchd: 50052); a dry run
        /// connects and checks the program, and writes nothing.
        #[arg(long, value_name = "HOST:PORT")]
        bfrt: Option<String>,
        /// BF Runtime client id (unique among the switch's clients; the switch agent is 1).
        #[arg(long, default_value_t = 2)]
        bfrt_client_id: u32,
        /// Egress ports whose ECN profile --bfrt sets: `0-31,48`.
        #[arg(long, value_name = "PORTS")]
        ecn_ports: Option<String>,
        /// Print what would be written; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// knob=value pairs (names from the knob table: rpg_hai_rate, kmax_kb, pmax...).
        #[arg(required = true)]
        values: Vec<String>,
    },
    /// Congestion from port counters (the InfiniBand study's Forced Idle Time Fraction,
    /// Yellowstone Eq. 3): samples PortXmitWait and the PFC counters of a netsim scenario's
    /// ports while it runs (or replays recorded samples), and writes intervals.csv,
    /// rounds.csv, fitf.json, report.html (the study's plots) and metrics.prom.
    Fitf(fitf::FitfArgs),
    /// Send one HAWKEYE polling packet for a victim flow out of a network interface (lab
    /// bring-up of a switch running the program; the host agent sends them on its own when
    /// a flow's RTT crosses its threshold). Needs CAP_NET_RAW.
    Poll {
        /// The interface to send on (e.g. the host side of a switch port).
        #[arg(long)]
        interface: String,
        /// The slow flow: SRC_IP:SRC_PORT->DST_IP[:DST_PORT].
        #[arg(long)]
        victim: String,
        /// The polling event id (any number unique in the fabric for a while; the host
        /// agent puts its host id above a sequence number).
        #[arg(long)]
        event: u64,
        /// Hops the polling packet may take.
        #[arg(long, default_value_t = 16)]
        hop_limit: u8,
    },
    /// Explain why a flow is slow from HAWKEYE telemetry reports (provenance graph and
    /// signature diagnosis).
    Diagnose {
        /// A directory of reports (`*.json`, `*.hkt`) or one report file.
        #[arg(long)]
        reports: PathBuf,
        /// The fabric (`topology.json` as written by `hawkmesh sim run`).
        #[arg(long)]
        topology: PathBuf,
        /// The slow flow: SRC_IP:SRC_PORT->DST_IP[:DST_PORT], e.g. 11.0.4.1:49152->11.0.0.1:4791.
        #[arg(long)]
        victim: String,
        /// Expected epoch size in ns (refuses reports with another).
        #[arg(long)]
        epoch: Option<u64>,
        /// Write diagnosis.json, diagnosis.txt, provenance.dot and report.html here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print the JSON instead of the text explanation.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum AnalyzerCommand {
    /// Serve until interrupted (Ctrl-C).
    Serve {
        /// The fabric (`topology.json`).
        #[arg(long)]
        topology: PathBuf,
        /// Store directory (created if needed; replayed on start).
        #[arg(long, default_value = "analyzer-data")]
        data: PathBuf,
        /// gRPC listen address for switch agents.
        #[arg(long, default_value = "127.0.0.1:50051")]
        grpc: std::net::SocketAddr,
        /// HTTP listen address for the API and HTML reports.
        #[arg(long, default_value = "127.0.0.1:8080")]
        http: std::net::SocketAddr,
        /// How long an incident waits for missing switches, ms.
        #[arg(long, default_value_t = 2000)]
        timeout_ms: u64,
        /// Incidents first stored longer ago than this many days are dropped from the store.
        #[arg(long, default_value_t = 30.0)]
        retention_days: f64,
        /// The store's log is kept under this many MiB: beyond it the oldest concluded
        /// incidents are dropped (to three quarters of it) and the log is compacted.
        #[arg(long, default_value_t = 1024)]
        max_store_mib: u64,
        /// The analyzer's certificate (PEM): with --tls-key and --client-ca, agents connect
        /// over mutual TLS and are identified by their certificates.
        #[arg(long, requires_all = ["tls_key", "client_ca"], conflicts_with = "plaintext")]
        tls_cert: Option<PathBuf>,
        /// The analyzer's private key (PEM).
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// The CA agents' certificates must chain to (PEM).
        #[arg(long, requires = "tls_cert")]
        client_ca: Option<PathBuf>,
        /// Serve gRPC without TLS (loopback addresses only; nobody is identified).
        #[arg(long)]
        plaintext: bool,
        /// The pingmesh analysis period, s (R-Pingmesh: 20).
        #[arg(long, default_value_t = 20.0)]
        pingmesh_period_s: f64,
        /// Run without the pingmesh controller (switch telemetry only).
        #[arg(long)]
        no_pingmesh: bool,
        /// Run without the PARALEON tuning controller (`hawkmesh.v1.TuningController`:
        /// the ToRs' FSDs and hosts' metrics in, versioned DCQCN/ECN settings out).
        #[arg(long)]
        no_tuning: bool,
    },
}

#[derive(Subcommand, Debug)]
enum PkiCommand {
    /// Make a CA in DIR (`ca.pem`, `ca-key.pem`); an existing CA is never overwritten.
    Init {
        /// Directory of the CA and the certificates it issues.
        #[arg(long, default_value = "pki")]
        dir: PathBuf,
        /// The CA's common name.
        #[arg(long, default_value = "hawkmesh lab CA")]
        name: String,
    },
    /// Issue `NAME.pem` and `NAME-key.pem`: an agent's certificate (NAME = its node name,
    /// e.g. tor3), or the analyzer's with `--server-name` (its DNS names or addresses).
    Issue {
        /// Directory of the CA.
        #[arg(long, default_value = "pki")]
        dir: PathBuf,
        /// The node name (agents) or a name for the analyzer's files.
        #[arg(long)]
        name: String,
        /// A DNS name or IP address the analyzer is reached by (repeatable).
        #[arg(long = "server-name")]
        server_names: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    /// Run a scenario file and write its results.
    Run {
        /// The scenario (TOML, see docs/scenario.md).
        scenario: PathBuf,
        /// Output directory (result.json, summary.txt, fct.txt, pfc_events.csv, ...).
        #[arg(long, default_value = "out")]
        out: PathBuf,
        /// Override the scenario's seed.
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Check a scenario file without running it.
    Check {
        /// The scenario.
        scenario: PathBuf,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(error) = run(cli) {
        eprintln!("error: {error:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo {
            out,
            scenario,
            seed,
            pingmesh,
        } => demo(&out, scenario.as_deref(), seed, pingmesh),
        Command::Eval(args) => eval::run(args),
        Command::Tune { command } => match command {
            TuneCommand::Eval(args) => tune::eval(&args),
        },
        Command::Pingmesh { command } => match command {
            PingmeshCommand::Eval(args) => pingmesh::eval(args),
        },
        Command::Sim { command } => match command {
            SimCommand::Run {
                scenario,
                out,
                seed,
            } => sim_run(&scenario, &out, seed),
            SimCommand::Check { scenario } => {
                let loaded = hawkmesh_netsim::Scenario::load(&scenario)?;
                let sim = hawkmesh_netsim::Simulation::new(&loaded)?;
                print_warnings(sim.warnings());
                println!(
                    "{}: ok ({} nodes, {} links)",
                    scenario.display(),
                    sim.topology().nodes.len(),
                    sim.topology().links.len()
                );
                Ok(())
            }
        },
        Command::Fitf(args) => fitf::run(&args),
        Command::SwitchAgent { config } => switch_agent(&config),
        Command::HostAgent { config } => host_agent(&config),
        Command::KnobsSet {
            interfaces,
            sysfs_root,
            mlxconfig_device,
            mlxconfig_port,
            sonic_profile,
            bfrt,
            bfrt_client_id,
            ecn_ports,
            dry_run,
            values,
        } => knobs_set(
            &interfaces,
            &sysfs_root,
            mlxconfig_device.as_deref().map(|d| (d, mlxconfig_port)),
            sonic_profile.as_deref(),
            bfrt.as_deref()
                .map(|b| (b, bfrt_client_id, ecn_ports.as_deref())),
            dry_run,
            &values,
        ),
        Command::Poll {
            interface,
            victim,
            event,
            hop_limit,
        } => poll(&interface, &victim, event, hop_limit),
        Command::Analyzer {
            command:
                AnalyzerCommand::Serve {
                    topology,
                    data,
                    grpc,
                    http,
                    timeout_ms,
                    retention_days,
                    max_store_mib,
                    tls_cert,
                    tls_key,
                    client_ca,
                    plaintext,
                    pingmesh_period_s,
                    no_pingmesh,
                    no_tuning,
                },
        } => {
            let tls = match (tls_cert, tls_key, client_ca) {
                (Some(cert), Some(key), Some(client_ca)) => {
                    hawkmesh_analyzer_server::tls::TlsMode::Mutual {
                        cert,
                        key,
                        client_ca,
                    }
                }
                _ if plaintext => hawkmesh_analyzer_server::tls::TlsMode::PlaintextLoopback,
                _ => anyhow::bail!(
                    "give the analyzer its certificate (--tls-cert, --tls-key, --client-ca; \
                     `hawkmesh pki` makes them for a lab), or ask for --plaintext on a loopback \
                     address"
                ),
            };
            if !(retention_days.is_finite() && retention_days > 0.0 && retention_days <= 36_500.0) {
                anyhow::bail!(
                    "--retention-days {retention_days}: must be a number of days in (0, 36500]"
                );
            }
            if max_store_mib == 0 || max_store_mib > 1 << 30 {
                anyhow::bail!("--max-store-mib {max_store_mib}: must be in 1..=2^30");
            }
            let retention = hawkmesh_analyzer_server::incidents::Retention {
                max_age: std::time::Duration::from_secs_f64(retention_days * 86_400.0),
                max_bytes: max_store_mib << 20,
            };
            let pingmesh = if no_pingmesh {
                None
            } else {
                if !(pingmesh_period_s.is_finite() && (0.001..=3600.0).contains(&pingmesh_period_s))
                {
                    anyhow::bail!(
                        "--pingmesh-period-s {pingmesh_period_s}: must be in [0.001, 3600]"
                    );
                }
                let period_ns = (pingmesh_period_s * 1e9) as u64;
                Some(hawkmesh_analyzer_server::pingmesh::PingmeshConfig {
                    period_ns,
                    // Results are waited for half a period (uploads come every 5 s).
                    grace_ns: period_ns / 2,
                    ..Default::default()
                })
            };
            serve(
                &topology,
                data,
                (grpc, http),
                timeout_ms,
                retention,
                tls,
                (pingmesh, !no_tuning),
            )
        }
        Command::Pki { command } => match command {
            PkiCommand::Init { dir, name } => {
                hawkmesh_analyzer_server::tls::Pki::create(&dir, &name)?;
                println!(
                    "CA made in {}: ca.pem (give it to the analyzer as --client-ca and to every agent), ca-key.pem (keep it private)",
                    dir.display()
                );
                Ok(())
            }
            PkiCommand::Issue {
                dir,
                name,
                server_names,
            } => {
                let pki = hawkmesh_analyzer_server::tls::Pki::open(&dir)?;
                pki.issue(&name, &server_names)?;
                println!(
                    "issued {} and {}",
                    pki.cert_path(&name).display(),
                    pki.key_path(&name).display()
                );
                Ok(())
            }
        },
        Command::Diagnose {
            reports,
            topology,
            victim,
            epoch,
            out,
            json,
        } => diagnose(&reports, &topology, &victim, epoch, out.as_deref(), json),
    }
}

/// The built-in demo scenario (also `scenarios/k4-incast.toml`).
const DEMO_SCENARIO: &str = include_str!("../../scenarios/k4-incast.toml");

fn demo(
    out: &Path,
    scenario: Option<&Path>,
    seed: Option<u64>,
    pingmesh: bool,
) -> anyhow::Result<()> {
    let mut loaded = match scenario {
        Some(path) => hawkmesh_netsim::Scenario::load(path)?,
        None => hawkmesh_netsim::Scenario::parse(
            DEMO_SCENARIO,
            "scenarios/k4-incast.toml (built in)",
            PathBuf::from("scenarios"),
        )?,
    };
    if let Some(seed) = seed {
        loaded.scenario.seed = seed;
    }
    // The lab builds the simulation itself; build the fabric here too for its warnings.
    print_warnings(&hawkmesh_netsim::fabric::build_with_warnings(&loaded)?.1);
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    // A fresh analyzer store: an earlier run's incidents would be replayed into this one.
    let store = out.join("analyzer-data");
    match std::fs::remove_dir_all(&store) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(e).with_context(|| format!("removing the old store {}", store.display()))
        }
    }
    let started = Instant::now();
    let mut config = hawkmesh_lab::LoopConfig::new(store);
    if pingmesh {
        config.pingmesh = Some(hawkmesh_lab::PingmeshLoop::new(
            loaded.scenario.switch.control_priority,
        ));
    }
    let outcome = hawkmesh_lab::run(&loaded, &config)?;
    outcome
        .sim
        .write(&out.join("sim"))
        .with_context(|| format!("writing {}", out.display()))?;
    print!("{}", outcome.sim.summary());
    let read = outcome
        .collections
        .iter()
        .filter(|c| c.read_registers)
        .count();
    let bytes: usize = outcome.collections.iter().map(|c| c.report_bytes).sum();
    println!(
        "hosts sent {} polling packets; switch agents made {} reports ({} register reads, {} bytes over gRPC); the analyzer concluded {} incidents",
        outcome.triggers.len(),
        outcome.collections.len(),
        read,
        bytes,
        outcome.incidents.len()
    );
    std::fs::write(
        out.join("collections.json"),
        serde_json::to_string_pretty(&outcome.collections)?,
    )?;
    std::fs::write(
        out.join("incidents.json"),
        serde_json::to_string_pretty(&outcome.incidents)?,
    )?;
    if let Some(pingmesh) = &outcome.pingmesh {
        std::fs::write(
            out.join("pingmesh.json"),
            serde_json::to_string_pretty(pingmesh)?,
        )?;
        let problems: usize = pingmesh.periods.iter().map(|p| p.problems.len()).sum();
        println!(
            "pingmesh: {} RNICs' agents uploaded {} results in {} batches over gRPC; {} periods analysed, {} problems (pingmesh.json)",
            pingmesh.registrations,
            pingmesh.results,
            pingmesh.batches,
            pingmesh.periods.len(),
            problems
        );
    }
    // Every incident in one line each, then the most telling one in full: a PFC anomaly
    // (backpressure, storm, deadlock) over plain contention, complete over timed out,
    // more reporting switches over fewer.
    println!(
        "\n{:>14}  {:<10}  {:>8}  verdict",
        "event", "state", "switches"
    );
    for incident in &outcome.incidents {
        let summary = &incident.summary;
        if let Some(html) = &incident.html {
            std::fs::write(
                out.join(format!("incident-{}.html", summary.event_id)),
                html,
            )?;
        }
        println!(
            "{:>14}  {:<10}  {:>8}  {}",
            summary.event_id,
            summary.state.as_str(),
            summary.reported_switches.len(),
            summary.verdict.as_deref().unwrap_or("-")
        );
    }
    // The injected anomalies' initial congestion ports (ground truth).
    let initial: Vec<(u64, u64)> = outcome
        .sim
        .ground_truth
        .iter()
        .flat_map(|a| a.initial_ports.iter())
        .map(|p| (u64::from(p.node), u64::from(p.port)))
        .collect();
    let rank = |incident: &hawkmesh_lab::IncidentOutcome| {
        let anomalies = || {
            incident
                .diagnosis
                .as_ref()
                .and_then(|d| d["anomalies"].as_array().cloned())
                .unwrap_or_default()
        };
        let names_truth = anomalies().iter().any(|a| {
            a["root_cause"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| {
                    initial.contains(&(
                        p["switch"].as_u64().unwrap_or(u64::MAX),
                        p["port"].as_u64().unwrap_or(u64::MAX),
                    ))
                })
        });
        let pfc = anomalies().iter().any(|a| {
            matches!(a["type"].as_str(), Some(kind) if kind != "unresolved_pfc" && kind != "normal_flow_contention")
        });
        let complete =
            incident.summary.state == hawkmesh_analyzer_server::incidents::IncidentState::Complete;
        (
            names_truth,
            pfc,
            complete,
            incident.summary.reported_switches.len(),
        )
    };
    match outcome
        .incidents
        .iter()
        .filter(|i| i.text.is_some())
        .max_by_key(|i| rank(i))
    {
        Some(incident) => {
            let id = incident.summary.event_id;
            println!("\nincident {id} ({}):", incident.summary.state.as_str());
            print!("{}", incident.text.as_deref().unwrap_or_default());
            if let Some(joint) = &incident.pingmesh {
                println!("{}", joint.verdict);
            }
            println!(
                "report: {}",
                out.join(format!("incident-{id}.html")).display()
            );
        }
        None => println!("no incident was diagnosed (no flow crossed the RTT threshold)"),
    }
    println!(
        "done in {:.1} s; everything is in {}",
        started.elapsed().as_secs_f64(),
        out.display()
    );
    Ok(())
}

fn serve(
    topology: &Path,
    data: PathBuf,
    (grpc, http): (std::net::SocketAddr, std::net::SocketAddr),
    timeout_ms: u64,
    retention: hawkmesh_analyzer_server::incidents::Retention,
    tls: hawkmesh_analyzer_server::tls::TlsMode,
    // The pingmesh controller's settings (none: off), and whether the tuning controller runs.
    (pingmesh, tuning): (
        Option<hawkmesh_analyzer_server::pingmesh::PingmeshConfig>,
        bool,
    ),
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(topology)
        .with_context(|| format!("reading {}", topology.display()))?;
    let topology: hawkmesh_wire::topology::FabricTopology = serde_json::from_str(&text)
        .with_context(|| format!("{}: not a topology.json", topology.display()))?;
    topology.validate()?;
    // The service's events (listening, incidents concluded, rejected input, store failures)
    // go to stderr; RUST_LOG-style filtering is not needed for one daemon's few events.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
    let secured = match &tls {
        hawkmesh_analyzer_server::tls::TlsMode::Mutual { .. } => "mutual TLS",
        hawkmesh_analyzer_server::tls::TlsMode::PlaintextLoopback => "plaintext, loopback",
    };
    let tuning = tuning
        .then(|| hawkmesh_analyzer_server::tuning_service::TuningConfig::for_fabric(&topology));
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let server = hawkmesh_analyzer_server::start(hawkmesh_analyzer_server::ServerConfig {
            grpc_addr: grpc,
            http_addr: http,
            data_dir: data,
            topology,
            incident_timeout: std::time::Duration::from_millis(timeout_ms),
            options: hawkmesh_analyzer::DiagnoseOptions::default(),
            retention,
            limits: hawkmesh_analyzer_server::incidents::IntakeLimits::default(),
            connections: hawkmesh_analyzer_server::conn::ConnectionLimits::default(),
            tls,
            pingmesh,
            tuning,
        })
        .await
        .map_err(|e| match e {
            hawkmesh_analyzer_server::ServerError::Pingmesh(e) => anyhow::anyhow!(
                "{e} (the pingmesh controller needs every host's address in the topology; \
                 --no-pingmesh runs the analyzer without it)"
            ),
            e => e.into(),
        })?;
        println!(
            "analyzer: gRPC ({secured}) on {}, HTTP on http://{}/api/incidents{}",
            server.grpc_addr,
            server.http_addr,
            if server.pingmesh.is_some() {
                format!(" and http://{}/pingmesh", server.http_addr)
            } else {
                String::new()
            }
        );
        tokio::signal::ctrl_c().await?;
        server.stop().await;
        anyhow::Ok(())
    })
}

fn poll(interface: &str, victim: &str, event: u64, hop_limit: u8) -> anyhow::Result<()> {
    use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
    use hawkmesh_dataplane::packets::{polling_packet, Polling};
    let victim: hawkmesh_wire::telemetry::FiveTuple = victim
        .parse()
        .with_context(|| format!("--victim {victim}"))?;
    if hop_limit == 0 {
        anyhow::bail!("--hop-limit 0: a switch drops a polling packet with no hops left");
    }
    let program = program(&HawkeyeParams::default())?;
    let packet = polling_packet(&program, &Polling::new(event, victim, hop_limit));
    let port = hawkmesh_switch_agent::cpu_port::CpuPort::open(
        interface,
        std::time::Duration::from_millis(10),
    )?;
    port.send(&packet)?;
    println!(
        "sent polling event {event} for {victim} out of {interface} ({} bytes)",
        packet.len()
    );
    Ok(())
}

fn switch_agent(config: &Path) -> anyhow::Result<()> {
    use hawkmesh_switch_agent::cpu_port::CpuPort;
    use hawkmesh_switch_agent::daemon::{self, DaemonConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let config = DaemonConfig::load(config)?;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .try_init()
        .map_err(|e| anyhow::anyhow!("installing the log subscriber: {e}"))?;
    let cpu = CpuPort::open(
        &config.cpu_port.interface,
        std::time::Duration::from_millis(50),
    )?;
    let runtime = tokio::runtime::Runtime::new()?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        runtime.spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut term) = signal(SignalKind::terminate()) else {
                tracing::error!("cannot watch SIGTERM; stop with Ctrl-C");
                let _ = tokio::signal::ctrl_c().await;
                stop.store(true, Ordering::Release);
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("stopping: serving the polling events accepted, draining reports");
            stop.store(true, Ordering::Release);
        });
    }
    tracing::info!(
        "switch agent `{}`: BF Runtime {}, CPU port {}, analyzer {}",
        config.switch,
        config.bfrt.address,
        config.cpu_port.interface,
        config.analyzer.endpoint
    );
    let summary = daemon::run(&config, cpu, runtime.handle().clone(), stop)?;
    println!(
        "switch agent `{}` stopped: {} polling copies, {} reports ({} delivered, {} undelivered, {} dropped while the analyzer was away), {} events unreported, {} switch reconnections",
        config.switch,
        summary.polling_copies,
        summary.reports,
        summary.reports_sent,
        summary.reports_unsent,
        summary.reports_dropped,
        summary.events_unreported,
        summary.switch_reconnects
    );
    if config.tuning.is_some() {
        println!(
            "tuning: {} intervals reported, {} not, {} settings written",
            summary.tuning_reports, summary.tuning_failures, summary.settings_applied
        );
    }
    if summary.reports_unsent + summary.reports_dropped + summary.events_unreported > 0 {
        anyhow::bail!("some polling events were not delivered to the analyzer");
    }
    Ok(())
}

fn knobs_set(
    interfaces: &[String],
    sysfs_root: &Path,
    mlxconfig: Option<(&str, u8)>,
    sonic_profile: Option<&str>,
    bfrt: Option<(&str, u32, Option<&str>)>,
    dry_run: bool,
    values: &[String],
) -> anyhow::Result<()> {
    use hawkmesh_knobs::apply::{changes, parse_assignments, KnobWriter};
    use hawkmesh_knobs::Device;

    let pairs = parse_assignments(values).map_err(anyhow::Error::msg)?;
    let named: Vec<(&str, f64)> = pairs.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let changes = changes(&named)?;
    let mut writers: Vec<Box<dyn KnobWriter>> = Vec::new();
    if let Some((device, port)) = mlxconfig {
        writers.push(Box::new(hawkmesh_host_agent::knob_writer::Mlxconfig::new(
            device, port, dry_run,
        )));
    } else if !interfaces.is_empty() {
        writers.push(Box::new(
            hawkmesh_host_agent::knob_writer::ConnectxSysfs::new(
                sysfs_root,
                interfaces.to_vec(),
                dry_run,
            ),
        ));
    }
    if let Some(profile) = sonic_profile {
        writers.push(Box::new(hawkmesh_switch_agent::ecn_writer::SonicEcn::new(
            profile, dry_run,
        )));
    }
    // Kept alive while the BF Runtime writer works (dropped after the writers).
    let mut runtime = None;
    if let Some((address, client_id, ports)) = bfrt {
        let (writer, bfrt_runtime) =
            program_ecn_writer(address, client_id, ports, &changes, dry_run)?;
        writers.push(writer);
        runtime = Some(bfrt_runtime);
    }
    for c in &changes {
        let device = c.knob.device();
        if !writers.iter().any(|w| w.device() == device) {
            anyhow::bail!(
                "{}: a {} knob, and no writer for it was given ({})",
                c.knob.name,
                if device == Device::Rnic {
                    "RNIC"
                } else {
                    "switch"
                },
                if device == Device::Rnic {
                    "--interface or --mlxconfig-device"
                } else {
                    "--sonic-profile or --bfrt"
                }
            );
        }
    }
    for writer in &mut writers {
        for applied in writer.apply(&changes)? {
            println!("{applied}");
        }
    }
    drop(writers);
    drop(runtime);
    Ok(())
}

/// Egress ports as `0-31,48`.
fn parse_ports(text: &str) -> anyhow::Result<Vec<u16>> {
    let mut ports = Vec::new();
    for word in text.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let number = |s: &str| {
            s.trim()
                .parse::<u16>()
                .map_err(|e| anyhow::anyhow!("--ecn-ports: `{word}`: {e}"))
        };
        match word.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (number(lo)?, number(hi)?);
                if lo > hi {
                    anyhow::bail!("--ecn-ports: `{word}`: {lo} is above {hi}");
                }
                ports.extend(lo..=hi);
            }
            None => ports.push(number(word)?),
        }
    }
    ports.sort_unstable();
    ports.dedup();
    if ports.is_empty() {
        anyhow::bail!("--ecn-ports: no port in `{text}`");
    }
    Ok(ports)
}

/// The writer of the program's `ecn_profile` over BF Runtime, and the runtime its client
/// runs on. The table's entries each hold Kmin, Kmax and Pmax, and the switch's current
/// profile is not read back, so the setting must give all three.
fn program_ecn_writer(
    address: &str,
    client_id: u32,
    ports: Option<&str>,
    changes: &[hawkmesh_knobs::apply::Change],
    dry_run: bool,
) -> anyhow::Result<(
    Box<dyn hawkmesh_knobs::apply::KnobWriter>,
    tokio::runtime::Runtime,
)> {
    use anyhow::Context as _;
    use hawkmesh_knobs::{KMAX, KMIN, PMAX};
    use hawkmesh_switch_agent::bfrt_backend::{BfrtBackend, BfrtEndpoint};
    use hawkmesh_switch_agent::ecn_table::ProgramEcn;
    use hawkmesh_wire::control::{EcnProfile, QdepthUnit};

    let ports = parse_ports(ports.context("--bfrt needs --ecn-ports")?)?;
    let value = |name: &str| {
        changes
            .iter()
            .find(|c| c.knob.name == name)
            .map(|c| c.knob.to_si(c.value))
            .with_context(|| {
                format!("{name}: --bfrt writes whole ecn_profile entries; give kmin_kb, kmax_kb and pmax")
            })
    };
    // to_si: kilobytes of 1,000 bytes to bytes.
    let profile = EcnProfile {
        kmin_bytes: value(KMIN.name)?.round() as u64,
        kmax_bytes: value(KMAX.name)?.round() as u64,
        pmax: value(PMAX.name)?,
    };
    let mut endpoint = BfrtEndpoint::parse(address).map_err(|e| anyhow::anyhow!("--bfrt {e}"))?;
    endpoint.client_id = client_id;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let backend = BfrtBackend::connect(runtime.handle().clone(), &endpoint)
        .with_context(|| format!("--bfrt {address}"))?;
    // A Tofino counts queue depth in 80-byte cells.
    let writer = ProgramEcn::new(backend, ports, QdepthUnit::TofinoCells, profile, dry_run);
    Ok((Box::new(writer), runtime))
}

fn host_agent(config: &Path) -> anyhow::Result<()> {
    // The same entry point as the daemon-only binary `hawkmesh-host-agent`.
    let summary = hawkmesh_host_agent::daemon::serve(config)?;
    println!("{summary}");
    if summary.undelivered() > 0 {
        anyhow::bail!(
            "{} results were not delivered to the analyzer",
            summary.undelivered()
        );
    }
    Ok(())
}

fn diagnose(
    reports: &Path,
    topology: &Path,
    victim: &str,
    epoch: Option<u64>,
    out: Option<&Path>,
    json: bool,
) -> anyhow::Result<()> {
    use hawkmesh_analyzer::render;
    let output = hawkmesh_analyzer::diagnose_files(reports, topology, victim, epoch)?;
    let text = render::to_text(&output.diagnosis);
    let json_text = render::to_json(&output.diagnosis)?;
    if let Some(dir) = out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let write = |name: &str, body: &str| {
            let path = dir.join(name);
            std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))
        };
        write("diagnosis.json", &json_text)?;
        write("diagnosis.txt", &text)?;
        write(
            "provenance.dot",
            &render::to_dot(&output.diagnosis, &output.view),
        )?;
        write(
            "report.html",
            &render::to_html(&output.diagnosis, &output.view)?,
        )?;
    }
    if json {
        println!("{json_text}");
    } else {
        print!("{text}");
        if let Some(dir) = out {
            println!("report: {}", dir.join("report.html").display());
        }
    }
    Ok(())
}

/// Prints warnings about a scenario's inputs to stderr, one per line.
fn print_warnings(warnings: &[hawkmesh_netsim::Warning]) {
    for warning in warnings {
        eprintln!("warning: {warning}");
    }
}

fn sim_run(scenario: &Path, out: &Path, seed: Option<u64>) -> anyhow::Result<()> {
    let mut loaded = hawkmesh_netsim::Scenario::load(scenario)?;
    if let Some(seed) = seed {
        loaded.scenario.seed = seed;
    }
    let started = Instant::now();
    let mut sim = hawkmesh_netsim::Simulation::new(&loaded)?;
    print_warnings(sim.warnings());
    sim.run();
    let wall = started.elapsed();
    let s = &loaded.scenario;
    let result = sim.result(&s.name, s.seed, &s.output.fct_bins);
    result
        .write(out)
        .with_context(|| format!("writing results to {}", out.display()))?;
    print!("{}", result.summary());
    let events = result.totals.events;
    println!(
        "wall {:.2} s, {:.2} M events/s, at most {} events pending; results in {}",
        wall.as_secs_f64(),
        events as f64 / wall.as_secs_f64().max(1e-9) / 1e6,
        sim.max_pending_events(),
        out.display()
    );
    Ok(())
}
