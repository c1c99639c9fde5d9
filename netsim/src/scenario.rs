//! Scenario files: the TOML format every simulation is driven by (format version 1).
//!
//! Every field is documented in `docs/scenario.md`. Parsing is strict (unknown fields are
//! errors) and every error names the file, the line and the field.

use hawkmesh_knobs::{self as knobs, Knob};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Current scenario format version.
pub const FORMAT_VERSION: u32 = 1;

/// A scenario error with its place in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {field}: {reason}")]
pub struct ScenarioError {
    /// The scenario file (or `<string>`).
    pub file: String,
    /// 1-based line (0 when the place is unknown, e.g. an unreadable file).
    pub line: usize,
    /// Dotted path of the offending field, e.g. `workload[1].receiver`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// A whole scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Format version; must be 1.
    pub version: u32,
    /// Short name used in reports.
    #[serde(default = "default_name")]
    pub name: String,
    /// Seed of every random choice (workload, ECN marking, loss, ECMP seeds).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Simulated time in microseconds.
    pub duration_us: f64,
    /// The fabric.
    pub topology: TopologySpec,
    /// Switch buffer, PFC, ECN and scheduling settings.
    #[serde(default)]
    pub switch: SwitchConfig,
    /// Host NIC settings: transport, DCQCN.
    #[serde(default)]
    pub nic: NicConfig,
    /// Traffic.
    #[serde(default)]
    pub workload: Vec<WorkloadSpec>,
    /// Injected anomalies.
    #[serde(default)]
    pub fault: Vec<FaultSpec>,
    /// Static route overrides (applied after shortest-path ECMP routing).
    #[serde(default)]
    pub route: Vec<RouteOverride>,
    /// What to record.
    #[serde(default)]
    pub output: OutputConfig,
    /// What the scenario may cost before it is refused (raise them for a bigger machine).
    #[serde(default)]
    pub limits: Limits,
}

/// Resource limits a scenario is checked against before anything is built: its cost is
/// estimated from the file (nodes, links, simulated time, flows, queue samples) and a
/// scenario above a limit is refused with an error naming the field, the estimate and the
/// limit. The defaults fit a few GB of memory; `[limits]` raises them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Hosts + switches.
    pub max_nodes: u64,
    /// Links (a host NIC's link counts once).
    pub max_links: u64,
    /// Simulated time of the scenario and of every workload window, µs.
    pub max_duration_us: f64,
    /// Flows the workloads create (Poisson traffic by its expected count).
    pub max_flows: u64,
    /// Queue-depth samples (switch ports × duration / sampling period).
    pub max_queue_samples: u64,
    /// Switch buffer, MB (the largest switch chips have 64–128 MB).
    pub max_buffer_mb: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_nodes: 100_000,
            max_links: 1_000_000,
            max_duration_us: 10_000_000.0,
            max_flows: 5_000_000,
            max_queue_samples: 50_000_000,
            max_buffer_mb: 1024.0,
        }
    }
}

/// Hosts, switches and links a topology has, from its spec alone (`None` for an HPCC file,
/// known only once read; its reader checks its own counts).
pub fn topology_size(topology: &TopologySpec) -> Option<(f64, f64, f64)> {
    let f = |v: &u32| f64::from(*v);
    Some(match topology {
        TopologySpec::FatTree { k, .. } => {
            let k = f(k);
            let hosts = k * k * k / 4.0;
            (hosts, 5.0 * k * k / 4.0, 3.0 * hosts)
        }
        TopologySpec::Clos {
            pods,
            tors_per_pod,
            aggs_per_pod,
            cores,
            hosts_per_tor,
            ..
        } => {
            let tors = f(pods) * f(tors_per_pod);
            let aggs = f(pods) * f(aggs_per_pod);
            let hosts = tors * f(hosts_per_tor);
            let core_links = aggs * (f(cores) / f(aggs_per_pod).max(1.0));
            (
                hosts,
                tors + aggs + f(cores),
                hosts + tors * f(aggs_per_pod) + core_links,
            )
        }
        TopologySpec::LeafSpine {
            leaves,
            spines,
            hosts_per_leaf,
            links_per_spine,
            ..
        } => {
            let hosts = f(leaves) * f(hosts_per_leaf);
            (
                hosts,
                f(leaves) + f(spines),
                hosts + f(leaves) * f(spines) * f(links_per_spine),
            )
        }
        TopologySpec::Rail {
            groups,
            hosts_per_group,
            rails,
            spines,
            ..
        } => {
            let hosts = f(groups) * f(hosts_per_group);
            let rail_switches = f(groups) * f(rails);
            (
                hosts,
                rail_switches + f(spines),
                hosts * f(rails) + rail_switches * f(spines),
            )
        }
        TopologySpec::Ring {
            switches,
            hosts_per_switch,
            ..
        } => {
            let hosts = f(switches) * f(hosts_per_switch);
            (hosts, f(switches), hosts + f(switches))
        }
        TopologySpec::Graph {
            switches,
            hosts,
            links,
        } => (
            hosts.len() as f64,
            switches.len() as f64,
            links.len() as f64,
        ),
        TopologySpec::HpccFile { .. } => return None,
    })
}

fn default_name() -> String {
    "scenario".into()
}
fn default_seed() -> u64 {
    1
}

/// The fabric's shape.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TopologySpec {
    /// k-ary fat-tree (Al-Fares et al.): k pods of k/2 ToR + k/2 aggregation switches,
    /// (k/2)² core switches, k/2 hosts per ToR.
    FatTree {
        /// Even number ≥ 2.
        k: u32,
        /// Host link speed.
        #[serde(default = "default_gbps")]
        host_gbps: f64,
        /// Switch-to-switch link speed.
        #[serde(default = "default_gbps")]
        fabric_gbps: f64,
        /// Propagation delay of every link, ns.
        #[serde(default = "default_delay_ns")]
        delay_ns: u64,
    },
    /// Three-tier Clos with explicit sizes (e.g. the HPCC 320-host fabric: 5 pods × 4 ToR,
    /// 4 aggregation per pod, 16 cores, 16 hosts per ToR).
    Clos {
        /// Number of pods.
        pods: u32,
        /// ToR switches per pod; each connects to every aggregation switch of its pod.
        tors_per_pod: u32,
        /// Aggregation switches per pod.
        aggs_per_pod: u32,
        /// Core switches; aggregation switch j of every pod connects to cores
        /// j·(cores/aggs_per_pod) .. (j+1)·(cores/aggs_per_pod).
        cores: u32,
        /// Hosts per ToR.
        hosts_per_tor: u32,
        /// Host link speed.
        #[serde(default = "default_gbps")]
        host_gbps: f64,
        /// Switch-to-switch link speed.
        #[serde(default = "default_gbps")]
        fabric_gbps: f64,
        /// Propagation delay of every link, ns.
        #[serde(default = "default_delay_ns")]
        delay_ns: u64,
    },
    /// Two-tier leaf-spine; oversubscription = hosts_per_leaf·host_gbps /
    /// (spines·links_per_spine·fabric_gbps).
    LeafSpine {
        /// Leaf (ToR) switches.
        leaves: u32,
        /// Spine switches.
        spines: u32,
        /// Hosts per leaf.
        hosts_per_leaf: u32,
        /// Parallel links from each leaf to each spine.
        #[serde(default = "one")]
        links_per_spine: u32,
        /// Host link speed.
        #[serde(default = "default_gbps")]
        host_gbps: f64,
        /// Leaf-spine link speed.
        #[serde(default = "default_gbps")]
        fabric_gbps: f64,
        /// Propagation delay, ns.
        #[serde(default = "default_delay_ns")]
        delay_ns: u64,
    },
    /// Rail-optimised fabric: every host has `rails` NICs; NIC r of every host in a group of
    /// `hosts_per_group` connects to rail switch r of that group; rail switches connect to
    /// every spine.
    Rail {
        /// Host groups (scalable units).
        groups: u32,
        /// Hosts per group.
        hosts_per_group: u32,
        /// NICs per host = rail switches per group.
        rails: u32,
        /// Spine switches.
        spines: u32,
        /// NIC speed.
        #[serde(default = "default_gbps")]
        host_gbps: f64,
        /// Rail-spine link speed.
        #[serde(default = "default_gbps")]
        fabric_gbps: f64,
        /// Propagation delay, ns.
        #[serde(default = "default_delay_ns")]
        delay_ns: u64,
    },
    /// Switches in a ring, each with hosts (deadlock studies).
    Ring {
        /// Switches in the ring (≥ 3).
        switches: u32,
        /// Hosts per switch.
        hosts_per_switch: u32,
        /// Host link speed.
        #[serde(default = "default_gbps")]
        host_gbps: f64,
        /// Ring link speed.
        #[serde(default = "default_gbps")]
        fabric_gbps: f64,
        /// Propagation delay, ns.
        #[serde(default = "default_delay_ns")]
        delay_ns: u64,
    },
    /// An arbitrary graph.
    Graph {
        /// Switch names.
        switches: Vec<String>,
        /// Host names (one NIC each).
        hosts: Vec<String>,
        /// Links between named nodes.
        links: Vec<GraphLink>,
    },
    /// Import of the HPCC simulator's topology file
    /// (`nodes switches links`, switch ids, then `src dst rate delay error_rate`).
    HpccFile {
        /// Path, relative to the scenario file.
        path: PathBuf,
    },
}

fn default_gbps() -> f64 {
    100.0
}
fn default_delay_ns() -> u64 {
    2000
}
fn one() -> u32 {
    1
}

/// A link of a [`TopologySpec::Graph`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphLink {
    /// One end (node name).
    pub a: String,
    /// Other end (node name).
    pub b: String,
    /// Speed.
    #[serde(default = "default_gbps")]
    pub gbps: f64,
    /// Propagation delay, ns.
    #[serde(default = "default_delay_ns")]
    pub delay_ns: u64,
}

/// Switch data-path settings (semantics of the HPCC reference's SwitchMmu, see FACTS.md).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SwitchConfig {
    /// Shared packet buffer per switch, MiB.
    pub buffer_mb: f64,
    /// Guaranteed bytes per ingress (port, priority), KiB.
    pub reserve_kb: f64,
    /// PFC headroom per ingress port, KiB; `None` = 3 × link bandwidth-delay product
    /// (what the reference uses).
    pub headroom_kb: Option<f64>,
    /// XON when headroom is empty and shared usage + this offset ≤ threshold, KiB.
    pub resume_offset_kb: f64,
    /// Dynamic threshold: (buffer − headroom − reserve − shared_used) >> shift, where shift is
    /// this value for ports at host speed and one less per doubling of port speed.
    pub pfc_alpha_shift: u32,
    /// Generate PFC at all (false = lossy fabric: drops when the buffer is full).
    pub pfc_enabled: bool,
    /// Quanta carried by XOFF frames (512-bit times each); the receiver pauses that long
    /// unless refreshed or resumed.
    pub pause_quanta: u16,
    /// Re-send XOFF while still congested after this many µs; `None` = half the pause time.
    pub pause_refresh_us: Option<f64>,
    /// Data-queue scheduler: `rr` (packet round robin) or `dwrr`.
    pub scheduler: Scheduler,
    /// DWRR weights of the eight priorities (quantum = weight × MTU).
    pub dwrr_weights: [u32; 8],
    /// Priority of the strict-priority control queue (CNP, ACK/NACK, polling packets);
    /// never paused, not counted against PFC buffers.
    pub control_priority: u8,
    /// ECN marking.
    pub ecn: EcnConfig,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        SwitchConfig {
            buffer_mb: 32.0,
            reserve_kb: 4.0,
            headroom_kb: None,
            resume_offset_kb: 3.0,
            pfc_alpha_shift: 3,
            pfc_enabled: true,
            pause_quanta: 0xFFFF,
            pause_refresh_us: None,
            scheduler: Scheduler::Rr,
            dwrr_weights: [1; 8],
            control_priority: 7,
            ecn: EcnConfig::default(),
        }
    }
}

/// Data-queue scheduling discipline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    /// One packet per non-empty, non-paused queue in turn.
    Rr,
    /// Deficit weighted round robin.
    Dwrr,
}

/// ECN marking at dequeue on the instantaneous queue length (RED-style, like SONiC's
/// `WRED_PROFILE` with ecn enabled). Defaults and valid ranges of Kmin, Kmax and Pmax are
/// those of [`hawkmesh_knobs::KMIN`], [`hawkmesh_knobs::KMAX`] and [`hawkmesh_knobs::PMAX`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EcnConfig {
    /// Mark at all.
    pub enabled: bool,
    /// Kmin per Gbit/s of port speed, KB (4 → 400 KB at 100G, 1600 KB at 400G).
    pub kmin_kb_per_gbps: f64,
    /// Kmax per Gbit/s of port speed, KB.
    pub kmax_kb_per_gbps: f64,
    /// Marking probability at Kmax.
    pub pmax: f64,
    /// Explicit per-speed settings that override the proportional defaults.
    pub per_speed: Vec<EcnSpeed>,
}

impl Default for EcnConfig {
    fn default() -> Self {
        EcnConfig {
            enabled: true,
            kmin_kb_per_gbps: const { knobs::KMIN.default_per_gbps() },
            kmax_kb_per_gbps: const { knobs::KMAX.default_per_gbps() },
            pmax: const { knobs::PMAX.fixed_default() },
            per_speed: Vec::new(),
        }
    }
}

/// ECN thresholds for ports of one speed.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EcnSpeed {
    /// Port speed these thresholds apply to.
    pub gbps: f64,
    /// Kmin, KB.
    pub kmin_kb: f64,
    /// Kmax, KB.
    pub kmax_kb: f64,
    /// Pmax.
    pub pmax: f64,
}

/// Host NIC settings.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NicConfig {
    /// RDMA payload bytes per packet (the reference's PACKET_PAYLOAD_SIZE).
    pub mtu_payload_bytes: u32,
    /// Extra bytes per frame on the wire beyond the RoCEv2 headers and FCS (e.g. 20 for
    /// preamble + inter-frame gap; 0 like the reference).
    pub wire_overhead_bytes: u32,
    /// Priority of RDMA data.
    pub data_priority: u8,
    /// Acknowledge every N data packets (and always the last one).
    pub ack_every_packets: u32,
    /// Queue ACKs and NACKs travel in through the switches: `control` (the strict-priority
    /// control queue, never paused) or `data` (the flow's own priority, PFC-accounted and
    /// paused with it, as RoCEv2 ACKs and the HPCC reference's switches do).
    pub ack_priority: AckPriority,
    /// Minimum gap between two NACKs for the same expected sequence, µs.
    pub nack_interval_us: f64,
    /// Go-back-N retransmission timeout without ACK progress, µs.
    pub retransmit_timeout_us: f64,
    /// Congestion control.
    pub cc: CongestionControl,
    /// DCQCN knobs, named as NVIDIA ConnectX names them.
    pub dcqcn: DcqcnConfig,
    /// Host NIC receive buffer that triggers PFC toward the ToR when the NIC cannot drain
    /// at line rate (slow receiver), KiB.
    pub rx_buffer_xoff_kb: f64,
    /// XON when the receive buffer falls below this, KiB.
    pub rx_buffer_xon_kb: f64,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            mtu_payload_bytes: 1000,
            wire_overhead_bytes: 0,
            data_priority: 3,
            ack_every_packets: 1,
            ack_priority: AckPriority::Control,
            nack_interval_us: 500.0,
            retransmit_timeout_us: 1000.0,
            cc: CongestionControl::Dcqcn,
            dcqcn: DcqcnConfig::default(),
            rx_buffer_xoff_kb: 64.0,
            rx_buffer_xon_kb: 32.0,
        }
    }
}

/// Where ACKs and NACKs queue in the switches (see [`NicConfig::ack_priority`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckPriority {
    /// The switch control priority: strict priority, never paused, not PFC-accounted.
    Control,
    /// The priority of the flow's data.
    Data,
}

/// Congestion control algorithm of the NICs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CongestionControl {
    /// DCQCN (Zhu et al., SIGCOMM'15) as NVIDIA ConnectX implements it.
    Dcqcn,
    /// Line rate always (PFC only).
    None,
}

/// DCQCN reaction-point and notification-point knobs with ConnectX names (the mlx5 sysfs
/// files under `ecn/roce_rp/` and `ecn/roce_np/`), units and defaults. Units, valid ranges and
/// defaults come from `hawkmesh-knobs` ([`hawkmesh_knobs::KNOBS`]), which the tuner and the
/// host agent share.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DcqcnConfig {
    /// Rate-increase timer period, µs.
    pub rpg_time_reset: f64,
    /// Rate-increase byte counter, bytes (0 disables the byte counter, as in the reference).
    pub rpg_byte_reset: u64,
    /// Increase events before leaving fast recovery.
    pub rpg_threshold: u32,
    /// Maximum rate, Mb/s (0 = line rate).
    pub rpg_max_rate: f64,
    /// Additive increase step, Mb/s.
    pub rpg_ai_rate: f64,
    /// Hyper increase step, Mb/s.
    pub rpg_hai_rate: f64,
    /// Decrease factor shift: rate × (1 − α·1024 / 2^rpg_gd); 11 gives the classic α/2.
    pub rpg_gd: u32,
    /// Largest single decrease, percent of the current rate that must remain.
    pub rpg_min_dec_fac: f64,
    /// Minimum rate, Mb/s.
    pub rpg_min_rate: f64,
    /// Rate on the first CNP of a QP, Mb/s (0 = keep the current rate).
    pub rate_to_set_on_first_cnp: f64,
    /// α EWMA weight in 1/1024: α ← (g/1024)·α + (1 − g/1024)·[CNP in period].
    pub dce_tcp_g: u32,
    /// α update period, µs.
    pub dce_tcp_rtt: f64,
    /// Rate-decrease check period, µs.
    pub rate_reduce_monitor_period: f64,
    /// α on the first CNP, 1/1024.
    pub initial_alpha_value: u32,
    /// Notification point: minimum gap between CNPs of one QP, µs.
    pub min_time_between_cnps: f64,
    /// Always set the target rate to the current rate on a decrease.
    pub clamp_tgt_rate: bool,
    /// Set the target rate to the current rate on a decrease that follows a timer increase.
    pub clamp_tgt_rate_after_time_inc: bool,
    /// Priority CNPs are sent on (None = the switch control priority).
    pub cnp_802p_prio: Option<u8>,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        // Evaluated at compile time: a knob whose default is not of the field's type fails
        // the build.
        DcqcnConfig {
            rpg_time_reset: const { knobs::RPG_TIME_RESET.fixed_default() },
            rpg_byte_reset: const { knobs::RPG_BYTE_RESET.default_u64() },
            rpg_threshold: const { knobs::RPG_THRESHOLD.default_u32() },
            rpg_max_rate: const { knobs::RPG_MAX_RATE.fixed_default() },
            rpg_ai_rate: const { knobs::RPG_AI_RATE.fixed_default() },
            rpg_hai_rate: const { knobs::RPG_HAI_RATE.fixed_default() },
            rpg_gd: const { knobs::RPG_GD.default_u32() },
            rpg_min_dec_fac: const { knobs::RPG_MIN_DEC_FAC.fixed_default() },
            rpg_min_rate: const { knobs::RPG_MIN_RATE.fixed_default() },
            rate_to_set_on_first_cnp: const { knobs::RATE_TO_SET_ON_FIRST_CNP.fixed_default() },
            dce_tcp_g: const { knobs::DCE_TCP_G.default_u32() },
            dce_tcp_rtt: const { knobs::DCE_TCP_RTT.fixed_default() },
            rate_reduce_monitor_period: const { knobs::RATE_REDUCE_MONITOR_PERIOD.fixed_default() },
            initial_alpha_value: const { knobs::INITIAL_ALPHA_VALUE.default_u32() },
            min_time_between_cnps: const { knobs::MIN_TIME_BETWEEN_CNPS.fixed_default() },
            clamp_tgt_rate: const { knobs::CLAMP_TGT_RATE.default_flag() },
            clamp_tgt_rate_after_time_inc: const { knobs::CLAMP_TGT_RATE_AFTER_TIME_INC.default_flag() },
            // knobs::CNP_802P_PRIO defaults to `switch.control_priority` (resolved in build).
            cnp_802p_prio: None,
        }
    }
}

/// A traffic source.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum WorkloadSpec {
    /// Poisson flow arrivals per host with sizes from a CDF, to uniformly random other hosts,
    /// at `load` of each host's link rate.
    Poisson {
        /// Offered load, 0 < load ≤ 1.
        load: f64,
        /// `websearch`, `fb_hadoop`, or a CDF file (`size cumulative_percent` per line).
        cdf: String,
        /// Arrivals start, µs.
        #[serde(default)]
        start_us: f64,
        /// Arrivals stop after, µs.
        duration_us: f64,
        /// Participating hosts (names); empty = all.
        #[serde(default)]
        hosts: Vec<String>,
        /// NIC of every participating host (multi-NIC hosts: the rail), default 0.
        #[serde(default, skip_serializing_if = "is_zero")]
        nic: u32,
        /// Priority (None = the NIC data priority).
        #[serde(default)]
        priority: Option<u8>,
    },
    /// Many-to-one: every sender sends `size_bytes` to the receiver at the same time,
    /// `repeat` times every `interval_us`.
    Incast {
        /// Sender host names.
        senders: Vec<String>,
        /// Receiver host name.
        receiver: String,
        /// Bytes per sender per burst.
        size_bytes: u64,
        /// First burst, µs.
        start_us: f64,
        /// Bursts.
        #[serde(default = "one")]
        repeat: u32,
        /// Gap between bursts, µs.
        #[serde(default)]
        interval_us: f64,
        /// Run DCQCN on these flows (false = line-rate micro-bursts).
        #[serde(default = "yes")]
        congestion_control: bool,
        /// NIC of the senders and the receiver (multi-NIC hosts: the rail), default 0.
        #[serde(default, skip_serializing_if = "is_zero")]
        nic: u32,
        /// Priority (None = the NIC data priority).
        #[serde(default)]
        priority: Option<u8>,
    },
    /// Training-style all-to-all rounds: every host sends `size_bytes` to every other host,
    /// then all are silent for `off_us`; a round starts when the previous one finished.
    Alltoall {
        /// Participating hosts; empty = all.
        #[serde(default)]
        hosts: Vec<String>,
        /// Bytes per pair per round.
        size_bytes: u64,
        /// Rounds.
        rounds: u32,
        /// First round, µs.
        #[serde(default)]
        start_us: f64,
        /// Silence between rounds, µs.
        #[serde(default)]
        off_us: f64,
        /// NIC of every participating host (multi-NIC hosts: the rail), default 0.
        #[serde(default, skip_serializing_if = "is_zero")]
        nic: u32,
        /// Priority (None = the NIC data priority).
        #[serde(default)]
        priority: Option<u8>,
    },
    /// Explicit flows.
    Flows {
        /// The flows.
        flows: Vec<FlowSpec>,
    },
    /// The HPCC simulator's flow file (`count`, then `src dst priority dport size start_s`),
    /// hosts by node index of the HPCC topology.
    HpccFlowFile {
        /// Path, relative to the scenario file.
        path: PathBuf,
    },
}

fn yes() -> bool {
    true
}

fn one_cycle() -> u32 {
    1
}

fn is_zero(value: &u32) -> bool {
    *value == 0
}

/// One explicit flow.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowSpec {
    /// Sender host name.
    pub src: String,
    /// Receiver host name.
    pub dst: String,
    /// Bytes.
    pub size_bytes: u64,
    /// Start, µs.
    #[serde(default)]
    pub start_us: f64,
    /// Priority (None = the NIC data priority).
    #[serde(default)]
    pub priority: Option<u8>,
    /// UDP source port (None = assigned).
    #[serde(default)]
    pub sport: Option<u16>,
    /// Sender NIC index for multi-NIC hosts.
    #[serde(default)]
    pub src_nic: u32,
    /// Receiver NIC index for multi-NIC hosts.
    #[serde(default)]
    pub dst_nic: u32,
    /// Run congestion control on this flow.
    #[serde(default = "yes")]
    pub congestion_control: bool,
}

/// An injected anomaly; each becomes a ground-truth record.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultSpec {
    /// A NIC keeps sending PAUSE on `priority` for `duration_us` (PFC storm).
    PfcInjection {
        /// Host name.
        host: String,
        /// NIC index.
        #[serde(default)]
        nic: u32,
        /// Paused priority (None = the NIC data priority).
        #[serde(default)]
        priority: Option<u8>,
        /// Start, µs.
        start_us: f64,
        /// Duration, µs.
        duration_us: f64,
    },
    /// The host's NIC drains received packets at `drain_gbps` only and pauses its ToR when
    /// its receive buffer fills.
    SlowReceiver {
        /// Host name.
        host: String,
        /// NIC index.
        #[serde(default)]
        nic: u32,
        /// Drain rate.
        drain_gbps: f64,
        /// Start, µs.
        start_us: f64,
        /// Duration, µs.
        duration_us: f64,
    },
    /// A link goes down at `down_us` and comes back at `up_us`; packets sent meanwhile are lost.
    /// With `count` > 1 it flaps: the same down/up cycle repeats every `period_us`.
    LinkFlap {
        /// One end (node name).
        a: String,
        /// Other end (node name).
        b: String,
        /// Down, µs.
        down_us: f64,
        /// Up again, µs.
        up_us: f64,
        /// Down/up cycles (1 = a single outage).
        #[serde(default = "one_cycle")]
        count: u32,
        /// Time from one cycle's down to the next one's, µs (needed when `count` > 1; longer
        /// than the outage `up_us - down_us`).
        #[serde(default)]
        period_us: Option<f64>,
        /// Recompute routes around the failed link this long after each change, µs
        /// (None = routes stay, traffic hashed onto the link is lost while it is down).
        #[serde(default)]
        reroute_after_us: Option<f64>,
    },
    /// Each packet crossing the link (either direction) is lost with probability `rate`.
    RandomLoss {
        /// One end (node name).
        a: String,
        /// Other end (node name).
        b: String,
        /// Loss probability.
        rate: f64,
        /// Only packets from `a` toward `b` are lost (a failing transmitter or a dirty
        /// fibre in one direction); both directions when false.
        #[serde(default)]
        one_way: bool,
    },
    /// A link silently drops the packets (either direction) whose UDP source port lies in
    /// `[src_port_min, src_port_max]`: an ACL misconfiguration that hits some 5-tuples only
    /// (RoCEv2 carries a queue pair's flow label in the UDP source port).
    AclDrop {
        /// One end (node name).
        a: String,
        /// Other end (node name).
        b: String,
        /// Lowest dropped UDP source port.
        src_port_min: u16,
        /// Highest dropped UDP source port.
        src_port_max: u16,
    },
    /// Labels the static routes of this scenario as a misconfiguration creating a cyclic
    /// buffer dependency (the routes themselves are `[[route]]` entries).
    RoutingLoop {
        /// Switch names forming the loop, in order.
        switches: Vec<String>,
        /// When the misconfiguration takes effect, µs (routes apply from then on).
        #[serde(default)]
        start_us: f64,
    },
    /// A switch sends `fraction` of the flows it could spread over its ECMP group to one port.
    EcmpImbalance {
        /// Switch name.
        switch: String,
        /// The favoured next-hop node (name of the neighbour).
        toward: String,
        /// Fraction of flows pinned to it.
        fraction: f64,
    },
    /// Marks the incast workloads of this scenario as an injected micro-burst anomaly
    /// (ground truth: the receiver's ToR port is the initial congestion point).
    IncastBurst {
        /// Index of the `[[workload]]` (kind = incast) this label applies to.
        workload: usize,
    },
}

/// A static route: at `switch`, traffic to `dst` leaves through the links toward `via`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteOverride {
    /// Switch name.
    pub switch: String,
    /// Destination host name.
    pub dst: String,
    /// Only traffic to this NIC of `dst` (its address on one rail); every NIC when absent.
    #[serde(default)]
    pub nic: Option<u32>,
    /// Next-hop neighbour names (ECMP over them).
    pub via: Vec<String>,
    /// When the route takes effect, µs.
    #[serde(default)]
    pub start_us: f64,
}

/// What to record.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputConfig {
    /// Queue-depth sampling period, µs (0 disables sampling).
    pub queue_sample_interval_us: f64,
    /// Record individual PFC frames (pause/resume events).
    pub pfc_events: bool,
    /// Flow-size bins for the FCT slowdown summary, bytes (upper bounds).
    pub fct_bins: Vec<u64>,
}

impl Default for OutputConfig {
    fn default() -> Self {
        OutputConfig {
            queue_sample_interval_us: 10.0,
            pfc_events: true,
            fct_bins: vec![10_000, 100_000, 1_000_000, 10_000_000, u64::MAX],
        }
    }
}

impl Scenario {
    /// Reads and validates a scenario file; relative paths inside resolve against its folder.
    pub fn load(path: &Path) -> Result<LoadedScenario, ScenarioError> {
        let file = path.display().to_string();
        let source = std::fs::read_to_string(path).map_err(|error| ScenarioError {
            file: file.clone(),
            line: 0,
            field: "(file)".into(),
            reason: format!("cannot read: {error}"),
        })?;
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&source, &file, base_dir)
    }

    /// Parses and validates scenario text; `file` names it in errors.
    pub fn parse(
        source: &str,
        file: &str,
        base_dir: PathBuf,
    ) -> Result<LoadedScenario, ScenarioError> {
        let scenario: Scenario = toml::from_str(source).map_err(|error| {
            let start = error.span().map(|span| span.start).unwrap_or(0);
            let mut line = error
                .span()
                .map(|_| line_of_offset(source, start))
                .unwrap_or(0);
            let message = error.message().to_string();
            let mut field = "(syntax)".to_string();
            // Name the field; for unknown keys inside a table, point at the key's own line.
            for prefix in ["unknown field `", "missing field `", "duplicate field `"] {
                if let Some(rest) = message.strip_prefix(prefix) {
                    let name = rest.split('`').next().unwrap_or_default();
                    field = name.to_string();
                    if prefix.starts_with("unknown") {
                        let after = &source[start.min(source.len())..];
                        if let Some(offset) = after.lines().position(|l| {
                            l.trim_start()
                                .strip_prefix(name)
                                .is_some_and(|r| r.trim_start().starts_with('='))
                        }) {
                            line += offset;
                        }
                    }
                }
            }
            ScenarioError {
                file: file.into(),
                line,
                field,
                reason: message,
            }
        })?;
        let loaded = LoadedScenario {
            scenario,
            source: source.to_string(),
            file: file.to_string(),
            base_dir,
        };
        loaded.validate_fields()?;
        Ok(loaded)
    }
}

/// A parsed scenario together with its text, for locating later (semantic) errors.
#[derive(Clone, Debug)]
pub struct LoadedScenario {
    /// The scenario.
    pub scenario: Scenario,
    /// Its source text.
    pub source: String,
    /// File name for errors.
    pub file: String,
    /// Folder that relative paths resolve against.
    pub base_dir: PathBuf,
}

impl LoadedScenario {
    /// A scenario built in code (tests, generators); errors point at `<code>`.
    pub fn from_scenario(scenario: Scenario) -> Result<Self, ScenarioError> {
        let loaded = LoadedScenario {
            scenario,
            source: String::new(),
            file: "<code>".into(),
            base_dir: PathBuf::from("."),
        };
        loaded.validate_fields()?;
        Ok(loaded)
    }

    /// An error at `field` (dotted path such as `workload[2].load`), located in the source.
    pub fn error(&self, field: &str, reason: impl Into<String>) -> ScenarioError {
        ScenarioError {
            file: self.file.clone(),
            line: locate(&self.source, field),
            field: field.into(),
            reason: reason.into(),
        }
    }

    fn validate_fields(&self) -> Result<(), ScenarioError> {
        let s = &self.scenario;
        if s.version != FORMAT_VERSION {
            return Err(self.error(
                "version",
                format!(
                    "unsupported format version {}; this hawkmesh reads version {FORMAT_VERSION}",
                    s.version
                ),
            ));
        }
        positive(self, "duration_us", s.duration_us)?;
        self.check_limits()?;
        match &s.topology {
            TopologySpec::FatTree {
                k,
                host_gbps,
                fabric_gbps,
                ..
            } => {
                if *k < 2 || k % 2 != 0 {
                    return Err(
                        self.error("topology.k", format!("k must be even and ≥ 2, got {k}"))
                    );
                }
                positive(self, "topology.host_gbps", *host_gbps)?;
                positive(self, "topology.fabric_gbps", *fabric_gbps)?;
            }
            TopologySpec::Clos {
                pods,
                tors_per_pod,
                aggs_per_pod,
                cores,
                hosts_per_tor,
                host_gbps,
                fabric_gbps,
                ..
            } => {
                for (name, value) in [
                    ("topology.pods", pods),
                    ("topology.tors_per_pod", tors_per_pod),
                    ("topology.aggs_per_pod", aggs_per_pod),
                    ("topology.cores", cores),
                    ("topology.hosts_per_tor", hosts_per_tor),
                ] {
                    if *value == 0 {
                        return Err(self.error(name, "must be at least 1"));
                    }
                }
                if cores % aggs_per_pod != 0 {
                    return Err(self.error(
                        "topology.cores",
                        format!(
                            "cores ({cores}) must be a multiple of aggs_per_pod ({aggs_per_pod})"
                        ),
                    ));
                }
                positive(self, "topology.host_gbps", *host_gbps)?;
                positive(self, "topology.fabric_gbps", *fabric_gbps)?;
            }
            TopologySpec::LeafSpine {
                leaves,
                spines,
                hosts_per_leaf,
                links_per_spine,
                host_gbps,
                fabric_gbps,
                ..
            } => {
                for (name, value) in [
                    ("topology.leaves", leaves),
                    ("topology.spines", spines),
                    ("topology.hosts_per_leaf", hosts_per_leaf),
                    ("topology.links_per_spine", links_per_spine),
                ] {
                    if *value == 0 {
                        return Err(self.error(name, "must be at least 1"));
                    }
                }
                positive(self, "topology.host_gbps", *host_gbps)?;
                positive(self, "topology.fabric_gbps", *fabric_gbps)?;
            }
            TopologySpec::Rail {
                groups,
                hosts_per_group,
                rails,
                spines,
                host_gbps,
                fabric_gbps,
                ..
            } => {
                for (name, value) in [
                    ("topology.groups", groups),
                    ("topology.hosts_per_group", hosts_per_group),
                    ("topology.rails", rails),
                    ("topology.spines", spines),
                ] {
                    if *value == 0 {
                        return Err(self.error(name, "must be at least 1"));
                    }
                }
                positive(self, "topology.host_gbps", *host_gbps)?;
                positive(self, "topology.fabric_gbps", *fabric_gbps)?;
            }
            TopologySpec::Ring {
                switches,
                host_gbps,
                fabric_gbps,
                ..
            } => {
                if *switches < 3 {
                    return Err(self.error("topology.switches", "a ring needs at least 3 switches"));
                }
                positive(self, "topology.host_gbps", *host_gbps)?;
                positive(self, "topology.fabric_gbps", *fabric_gbps)?;
            }
            TopologySpec::Graph {
                switches,
                hosts,
                links,
            } => {
                if switches.is_empty() || hosts.is_empty() || links.is_empty() {
                    return Err(self.error(
                        "topology",
                        "a graph needs at least one switch, one host and one link",
                    ));
                }
                for (index, link) in links.iter().enumerate() {
                    positive(self, &format!("topology.links[{index}].gbps"), link.gbps)?;
                    if hosts.contains(&link.a) && hosts.contains(&link.b) {
                        return Err(self.error(
                            &format!("topology.links[{index}]"),
                            format!(
                                "links two hosts ({} and {}): hosts attach to switches",
                                link.a, link.b
                            ),
                        ));
                    }
                }
            }
            TopologySpec::HpccFile { .. } => {}
        }
        let sw = &s.switch;
        positive(self, "switch.buffer_mb", sw.buffer_mb)?;
        non_negative(self, "switch.reserve_kb", sw.reserve_kb)?;
        non_negative(self, "switch.resume_offset_kb", sw.resume_offset_kb)?;
        if let Some(headroom) = sw.headroom_kb {
            non_negative(self, "switch.headroom_kb", headroom)?;
        }
        if sw.pause_quanta == 0 {
            return Err(self.error(
                "switch.pause_quanta",
                "XOFF quanta must be non-zero (0 means XON)",
            ));
        }
        if let Some(refresh) = sw.pause_refresh_us {
            positive(self, "switch.pause_refresh_us", refresh)?;
        }
        if sw.control_priority > 7 {
            return Err(self.error("switch.control_priority", "priorities are 0..=7"));
        }
        if sw.dwrr_weights.contains(&0) {
            return Err(self.error("switch.dwrr_weights", "every weight must be at least 1"));
        }
        // ECN thresholds and probability: ranges from hawkmesh-knobs.
        let ecn = &sw.ecn;
        self.knob_per_gbps(
            "switch.ecn.kmin_kb_per_gbps",
            &knobs::KMIN,
            ecn.kmin_kb_per_gbps,
        )?;
        self.knob_per_gbps(
            "switch.ecn.kmax_kb_per_gbps",
            &knobs::KMAX,
            ecn.kmax_kb_per_gbps,
        )?;
        self.knob("switch.ecn.pmax", &knobs::PMAX, ecn.pmax)?;
        if ecn.kmax_kb_per_gbps < ecn.kmin_kb_per_gbps {
            return Err(self.error("switch.ecn.kmax_kb_per_gbps", "Kmax must not be below Kmin"));
        }
        for (index, speed) in ecn.per_speed.iter().enumerate() {
            let at = |field: &str| format!("switch.ecn.per_speed[{index}].{field}");
            self.knob(&at("kmin_kb"), &knobs::KMIN, speed.kmin_kb)?;
            self.knob(&at("kmax_kb"), &knobs::KMAX, speed.kmax_kb)?;
            self.knob(&at("pmax"), &knobs::PMAX, speed.pmax)?;
            if speed.kmax_kb < speed.kmin_kb {
                return Err(self.error(&at("kmax_kb"), "Kmax must not be below Kmin"));
            }
        }
        let nic = &s.nic;
        if nic.mtu_payload_bytes == 0 || nic.mtu_payload_bytes > 9000 {
            return Err(self.error("nic.mtu_payload_bytes", "must be within 1..=9000"));
        }
        if nic.data_priority > 7 || nic.data_priority == sw.control_priority {
            return Err(self.error(
                "nic.data_priority",
                "must be 0..=7 and differ from switch.control_priority",
            ));
        }
        if nic.ack_every_packets == 0 {
            return Err(self.error("nic.ack_every_packets", "must be at least 1"));
        }
        positive(self, "nic.retransmit_timeout_us", nic.retransmit_timeout_us)?;
        non_negative(self, "nic.nack_interval_us", nic.nack_interval_us)?;
        if nic.rx_buffer_xon_kb >= nic.rx_buffer_xoff_kb {
            return Err(self.error(
                "nic.rx_buffer_xon_kb",
                "must be below nic.rx_buffer_xoff_kb",
            ));
        }
        // DCQCN knobs: ranges from hawkmesh-knobs, in its table's order. The two flags are
        // `bool`s, whose type is their range.
        let d = &nic.dcqcn;
        for (knob, value) in [
            (&knobs::RPG_TIME_RESET, d.rpg_time_reset),
            (&knobs::RPG_BYTE_RESET, d.rpg_byte_reset as f64),
            (&knobs::RPG_THRESHOLD, d.rpg_threshold as f64),
            (&knobs::RPG_MAX_RATE, d.rpg_max_rate),
            (&knobs::RPG_AI_RATE, d.rpg_ai_rate),
            (&knobs::RPG_HAI_RATE, d.rpg_hai_rate),
            (&knobs::RPG_GD, d.rpg_gd as f64),
            (&knobs::RPG_MIN_DEC_FAC, d.rpg_min_dec_fac),
            (&knobs::RPG_MIN_RATE, d.rpg_min_rate),
            (&knobs::RATE_TO_SET_ON_FIRST_CNP, d.rate_to_set_on_first_cnp),
            (
                &knobs::RATE_REDUCE_MONITOR_PERIOD,
                d.rate_reduce_monitor_period,
            ),
            (&knobs::DCE_TCP_G, d.dce_tcp_g as f64),
            (&knobs::DCE_TCP_RTT, d.dce_tcp_rtt),
            (&knobs::INITIAL_ALPHA_VALUE, d.initial_alpha_value as f64),
            (&knobs::MIN_TIME_BETWEEN_CNPS, d.min_time_between_cnps),
        ] {
            self.knob(&format!("nic.dcqcn.{}", knob.name), knob, value)?;
        }
        if let Some(priority) = d.cnp_802p_prio {
            self.knob(
                "nic.dcqcn.cnp_802p_prio",
                &knobs::CNP_802P_PRIO,
                priority as f64,
            )?;
        }
        for (index, workload) in s.workload.iter().enumerate() {
            let at = |field: &str| format!("workload[{index}].{field}");
            match workload {
                WorkloadSpec::Poisson {
                    load,
                    duration_us,
                    priority,
                    ..
                } => {
                    if !(*load > 0.0 && *load <= 1.0) {
                        return Err(self.error(&at("load"), "must be within (0, 1]"));
                    }
                    positive(self, &at("duration_us"), *duration_us)?;
                    check_priority(self, &at("priority"), *priority)?;
                }
                WorkloadSpec::Incast {
                    senders,
                    size_bytes,
                    repeat,
                    interval_us,
                    priority,
                    ..
                } => {
                    if senders.is_empty() {
                        return Err(self.error(&at("senders"), "needs at least one sender"));
                    }
                    if *size_bytes == 0 {
                        return Err(self.error(&at("size_bytes"), "must be at least 1"));
                    }
                    if *repeat > 1 && *interval_us <= 0.0 {
                        return Err(
                            self.error(&at("interval_us"), "repeated bursts need interval_us > 0")
                        );
                    }
                    check_priority(self, &at("priority"), *priority)?;
                }
                WorkloadSpec::Alltoall {
                    size_bytes,
                    rounds,
                    priority,
                    ..
                } => {
                    if *size_bytes == 0 || *rounds == 0 {
                        return Err(self.error(
                            &at("size_bytes"),
                            "size_bytes and rounds must be at least 1",
                        ));
                    }
                    check_priority(self, &at("priority"), *priority)?;
                }
                WorkloadSpec::Flows { flows } => {
                    for (flow_index, flow) in flows.iter().enumerate() {
                        if flow.size_bytes == 0 {
                            return Err(self.error(
                                &format!("workload[{index}].flows[{flow_index}].size_bytes"),
                                "must be at least 1",
                            ));
                        }
                        check_priority(
                            self,
                            &format!("workload[{index}].flows[{flow_index}].priority"),
                            flow.priority,
                        )?;
                    }
                }
                WorkloadSpec::HpccFlowFile { .. } => {}
            }
        }
        for (index, fault) in s.fault.iter().enumerate() {
            let at = |field: &str| format!("fault[{index}].{field}");
            match fault {
                FaultSpec::PfcInjection {
                    duration_us,
                    priority,
                    ..
                } => {
                    positive(self, &at("duration_us"), *duration_us)?;
                    check_priority(self, &at("priority"), *priority)?;
                }
                FaultSpec::SlowReceiver {
                    drain_gbps,
                    duration_us,
                    ..
                } => {
                    positive(self, &at("drain_gbps"), *drain_gbps)?;
                    positive(self, &at("duration_us"), *duration_us)?;
                }
                FaultSpec::LinkFlap {
                    down_us,
                    up_us,
                    count,
                    period_us,
                    ..
                } => {
                    if up_us <= down_us {
                        return Err(self.error(&at("up_us"), "must be after down_us"));
                    }
                    if *count == 0 {
                        return Err(self.error(&at("count"), "must be at least 1"));
                    }
                    match period_us {
                        None if *count > 1 => {
                            return Err(
                                self.error(&at("period_us"), "is needed when count is more than 1")
                            );
                        }
                        Some(period) if !(period.is_finite() && *period > up_us - down_us) => {
                            return Err(self.error(
                                &at("period_us"),
                                "must be longer than the outage (up_us - down_us)",
                            ));
                        }
                        _ => {}
                    }
                }
                FaultSpec::RandomLoss { rate, .. } => {
                    if !(0.0..=1.0).contains(rate) {
                        return Err(self.error(&at("rate"), "must be within [0, 1]"));
                    }
                }
                FaultSpec::AclDrop {
                    src_port_min,
                    src_port_max,
                    ..
                } => {
                    if src_port_max < src_port_min {
                        return Err(
                            self.error(&at("src_port_max"), "must be at least src_port_min")
                        );
                    }
                }
                FaultSpec::RoutingLoop { switches, .. } => {
                    if switches.len() < 2 {
                        return Err(self.error(&at("switches"), "a loop needs at least 2 switches"));
                    }
                }
                FaultSpec::EcmpImbalance { fraction, .. } => {
                    if !(0.0..=1.0).contains(fraction) {
                        return Err(self.error(&at("fraction"), "must be within [0, 1]"));
                    }
                }
                FaultSpec::IncastBurst { workload } => match s.workload.get(*workload) {
                    Some(WorkloadSpec::Incast { .. }) => {}
                    Some(WorkloadSpec::Flows { flows }) => {
                        // Explicit flows form an incast when they share one receiver NIC.
                        let Some(first) = flows.first() else {
                            return Err(self.error(
                                &at("workload"),
                                format!("workload[{workload}] has no flows"),
                            ));
                        };
                        if let Some(other) = flows
                            .iter()
                            .position(|f| f.dst != first.dst || f.dst_nic != first.dst_nic)
                        {
                            return Err(self.error(
                                &at("workload"),
                                format!(
                                    "workload[{workload}] is not an incast: flows[{other}] goes to {} NIC {}, flows[0] to {} NIC {}",
                                    flows[other].dst, flows[other].dst_nic, first.dst, first.dst_nic
                                ),
                            ));
                        }
                    }
                    _ => {
                        return Err(self.error(
                            &at("workload"),
                            format!(
                                "workload[{workload}] is neither an incast nor a flows workload with one receiver"
                            ),
                        ));
                    }
                },
            }
        }
        for (index, route) in s.route.iter().enumerate() {
            if route.via.is_empty() {
                return Err(self.error(
                    &format!("route[{index}].via"),
                    "needs at least one next hop",
                ));
            }
        }
        non_negative(
            self,
            "output.queue_sample_interval_us",
            s.output.queue_sample_interval_us,
        )?;
        if s.output.fct_bins.is_empty() || s.output.fct_bins.windows(2).any(|w| w[0] >= w[1]) {
            return Err(self.error("output.fct_bins", "must be a non-empty increasing list"));
        }
        Ok(())
    }
}

impl LoadedScenario {
    /// The scenario's estimated cost against its [`Limits`] (module doc of [`Limits`]).
    fn check_limits(&self) -> Result<(), ScenarioError> {
        let s = &self.scenario;
        let limits = &s.limits;
        for (field, value) in [
            ("limits.max_duration_us", limits.max_duration_us),
            ("limits.max_buffer_mb", limits.max_buffer_mb),
        ] {
            positive(self, field, value)?;
        }
        let over = |field: &str, what: String, estimate: f64, limit: String, name: &str| {
            self.error(
                field,
                format!(
                    "{what} is {estimate:.0}, above the limit of {limit} (raise limits.{name} if the machine can hold it)"
                ),
            )
        };
        if s.duration_us > limits.max_duration_us {
            return Err(over(
                "duration_us",
                "the simulated time in µs".into(),
                s.duration_us,
                limits.max_duration_us.to_string(),
                "max_duration_us",
            ));
        }
        if let Some((hosts, switches, links)) = topology_size(&s.topology) {
            let nodes = hosts + switches;
            if nodes > limits.max_nodes as f64 {
                return Err(over(
                    "topology",
                    "the number of hosts and switches".into(),
                    nodes,
                    limits.max_nodes.to_string(),
                    "max_nodes",
                ));
            }
            if links > limits.max_links as f64 {
                return Err(over(
                    "topology",
                    "the number of links".into(),
                    links,
                    limits.max_links.to_string(),
                    "max_links",
                ));
            }
            let interval = s.output.queue_sample_interval_us;
            if interval > 0.0 {
                // Every link has a switch port at one end or both.
                let samples = 2.0 * links * (s.duration_us / interval);
                if samples > limits.max_queue_samples as f64 {
                    return Err(over(
                        "output.queue_sample_interval_us",
                        "the number of queue samples (switch ports × duration / period)".into(),
                        samples,
                        limits.max_queue_samples.to_string(),
                        "max_queue_samples",
                    ));
                }
            }
        }
        if s.switch.buffer_mb > limits.max_buffer_mb {
            return Err(over(
                "switch.buffer_mb",
                "the switch buffer in MB".into(),
                s.switch.buffer_mb,
                limits.max_buffer_mb.to_string(),
                "max_buffer_mb",
            ));
        }
        for (index, workload) in s.workload.iter().enumerate() {
            let window = match workload {
                WorkloadSpec::Poisson {
                    start_us,
                    duration_us,
                    ..
                } => Some(("duration_us", start_us + duration_us)),
                WorkloadSpec::Incast {
                    start_us,
                    repeat,
                    interval_us,
                    ..
                } => Some((
                    "interval_us",
                    start_us + f64::from(repeat.saturating_sub(1)) * interval_us,
                )),
                _ => None,
            };
            if let Some((field, end)) = window {
                if !(end.is_finite() && end <= limits.max_duration_us) {
                    return Err(over(
                        &format!("workload[{index}].{field}"),
                        "the end of the workload's window in µs".into(),
                        end,
                        limits.max_duration_us.to_string(),
                        "max_duration_us",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks a DCQCN or ECN knob against its range in hawkmesh-knobs; the error names
    /// `field` and the reason gives the range, e.g. `must be within [10, 11], got 12`.
    fn knob(&self, field: &str, knob: &Knob, value: f64) -> Result<(), ScenarioError> {
        knob.validate(value)
            .map_err(|error| self.error(field, error.reason()))
    }

    /// Like [`LoadedScenario::knob`] for a per-Gbit/s coefficient of a threshold.
    fn knob_per_gbps(&self, field: &str, knob: &Knob, value: f64) -> Result<(), ScenarioError> {
        knob.validate_per_gbps(value)
            .map_err(|error| self.error(field, error.reason()))
    }
}

fn positive(loaded: &LoadedScenario, field: &str, value: f64) -> Result<(), ScenarioError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(loaded.error(field, format!("must be a positive number, got {value}")))
    }
}

fn non_negative(loaded: &LoadedScenario, field: &str, value: f64) -> Result<(), ScenarioError> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(loaded.error(field, format!("must be zero or positive, got {value}")))
    }
}

fn check_priority(
    loaded: &LoadedScenario,
    field: &str,
    priority: Option<u8>,
) -> Result<(), ScenarioError> {
    match priority {
        Some(p) if p > 7 => Err(loaded.error(field, format!("priorities are 0..=7, got {p}"))),
        Some(p) if p == loaded.scenario.switch.control_priority => {
            Err(loaded.error(field, "data must not use the switch control priority"))
        }
        _ => Ok(()),
    }
}

fn line_of_offset(source: &str, offset: usize) -> usize {
    source[..offset.min(source.len())]
        .bytes()
        .filter(|b| *b == b'\n')
        .count()
        + 1
}

/// Finds the line of a dotted field path such as `workload[2].load` or `switch.ecn.pmax` in
/// TOML text written in the usual style (one `[table]` / `[[array]]` header per table, one
/// key per line). Falls back to the nearest table header found, or 0.
pub fn locate(source: &str, path: &str) -> usize {
    // Split `workload[2].flows[0].size_bytes` into segments with optional indices.
    let segments: Vec<(&str, Option<usize>)> = path
        .split('.')
        .map(|segment| match segment.find('[') {
            Some(open) => {
                let index = segment[open + 1..segment.len().saturating_sub(1)]
                    .parse()
                    .ok();
                (&segment[..open], index)
            }
            None => (segment, None),
        })
        .collect();
    let lines: Vec<&str> = source.lines().collect();
    let mut best = 0;
    // Walk table headers: find the header that matches the longest prefix of the path.
    let mut table_prefix: Vec<String> = Vec::new();
    let mut occurrences: std::collections::HashMap<String, usize> = Default::default();
    let mut table_start = None;
    for depth in (1..=segments.len()).rev() {
        let header_path: Vec<&str> = segments[..depth].iter().map(|(name, _)| *name).collect();
        let header = header_path.join(".");
        let wanted_index = segments[depth - 1].1;
        occurrences.clear();
        for (number, line) in lines.iter().enumerate() {
            let trimmed = line.trim();
            let name = if let Some(rest) = trimmed.strip_prefix("[[") {
                rest.split("]]").next().map(str::trim)
            } else if let Some(rest) = trimmed.strip_prefix('[') {
                rest.split(']').next().map(str::trim)
            } else {
                None
            };
            if let Some(name) = name {
                if name == header {
                    let seen = occurrences.entry(name.to_string()).or_insert(0);
                    if wanted_index.unwrap_or(0) == *seen {
                        table_start = Some(number);
                        table_prefix = header_path.iter().map(|s| s.to_string()).collect();
                        break;
                    }
                    *seen += 1;
                }
            }
        }
        if table_start.is_some() {
            break;
        }
    }
    let start = match table_start {
        Some(start) => {
            best = start + 1;
            start + 1
        }
        None => 0,
    };
    // Within the table, look for the first remaining key.
    if let Some((key, _)) = segments.get(table_prefix.len()) {
        for (number, line) in lines.iter().enumerate().skip(start) {
            let trimmed = line.trim_start();
            if trimmed.starts_with('[')
                && number != start.saturating_sub(1)
                && table_start.is_some()
            {
                break;
            }
            if trimmed.starts_with('[') && table_start.is_none() {
                break;
            }
            if let Some(rest) = trimmed.strip_prefix(key) {
                if rest.trim_start().starts_with('=') {
                    return number + 1;
                }
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
version = 1
duration_us = 100

[topology]
kind = "fat_tree"
k = 4

[[workload]]
kind = "incast"
senders = ["h1", "h2"]
receiver = "h0"
size_bytes = 1000
start_us = 0

[[workload]]
kind = "poisson"
load = 1.5
cdf = "websearch"
duration_us = 10
"#;

    #[test]
    fn errors_name_file_line_and_field() {
        let error = Scenario::parse(MINIMAL, "x.toml", PathBuf::new()).unwrap_err();
        assert_eq!(error.file, "x.toml");
        assert_eq!(error.field, "workload[1].load");
        assert_eq!(error.line, 18, "{error}");
        assert!(error
            .to_string()
            .starts_with("x.toml:18: workload[1].load:"));
    }

    #[test]
    fn unknown_fields_and_syntax_errors_are_located() {
        let text =
            "version = 1\nduration_us = 10\n[topology]\nkind = \"fat_tree\"\nk = 4\nspeed = 3\n";
        let error = Scenario::parse(text, "y.toml", PathBuf::new()).unwrap_err();
        assert_eq!(error.line, 6, "{error}");
        assert!(error.reason.contains("speed"), "{error}");
        let error = Scenario::parse("version = \n", "z.toml", PathBuf::new()).unwrap_err();
        assert_eq!(error.line, 1);
    }

    #[test]
    fn semantic_checks_cover_sections() {
        let text = "version = 1\nduration_us = 10\n[topology]\nkind = \"fat_tree\"\nk = 3\n";
        let error = Scenario::parse(text, "t.toml", PathBuf::new()).unwrap_err();
        assert_eq!((error.field.as_str(), error.line), ("topology.k", 5));
        let text = "version = 1\nduration_us = 10\n[topology]\nkind = \"ring\"\nswitches = 4\nhosts_per_switch = 1\n[switch.ecn]\npmax = 2.0\n";
        let error = Scenario::parse(text, "t.toml", PathBuf::new()).unwrap_err();
        assert_eq!((error.field.as_str(), error.line), ("switch.ecn.pmax", 8));
        let text = "version = 2\nduration_us = 10\n[topology]\nkind = \"ring\"\nswitches = 4\nhosts_per_switch = 1\n";
        let error = Scenario::parse(text, "t.toml", PathBuf::new()).unwrap_err();
        assert_eq!((error.field.as_str(), error.line), ("version", 1));
    }

    #[test]
    fn dcqcn_and_ecn_defaults_come_from_the_knob_table_unchanged() {
        // The values netsim used before hawkmesh-knobs held them: every simulation result
        // depends on them.
        let d = DcqcnConfig::default();
        assert_eq!(
            (
                d.rpg_time_reset,
                d.rpg_byte_reset,
                d.rpg_threshold,
                d.rpg_max_rate
            ),
            (300.0, 32767, 1, 0.0)
        );
        assert_eq!(
            (d.rpg_ai_rate, d.rpg_hai_rate, d.rpg_gd, d.rpg_min_dec_fac),
            (5.0, 50.0, 11, 50.0)
        );
        assert_eq!(
            (
                d.rpg_min_rate,
                d.rate_to_set_on_first_cnp,
                d.dce_tcp_g,
                d.dce_tcp_rtt
            ),
            (1.0, 0.0, 1019, 1.0)
        );
        assert_eq!(
            (
                d.rate_reduce_monitor_period,
                d.initial_alpha_value,
                d.min_time_between_cnps
            ),
            (4.0, 1023, 4.0)
        );
        assert_eq!(
            (
                d.clamp_tgt_rate,
                d.clamp_tgt_rate_after_time_inc,
                d.cnp_802p_prio
            ),
            (false, true, None)
        );
        assert_eq!(
            knobs::CNP_802P_PRIO.default,
            knobs::KnobDefault::SameAs("switch.control_priority")
        );
        let e = EcnConfig::default();
        assert_eq!(
            (e.enabled, e.kmin_kb_per_gbps, e.kmax_kb_per_gbps, e.pmax),
            (true, 4.0, 16.0, 0.2)
        );
    }

    /// Parses `body` after a version and duration line; the error's field and reason.
    fn refused(duration_us: &str, body: &str) -> (String, String) {
        let text = format!("version = 1\nduration_us = {duration_us}\n{body}");
        let error = Scenario::parse(&text, "t.toml", PathBuf::new()).expect_err(body);
        (error.field, error.reason)
    }

    #[test]
    fn oversized_scenarios_are_refused_before_anything_is_built() {
        let fat = "[topology]\nkind = \"fat_tree\"\nk = 400\n";
        let (field, reason) = refused("10", fat);
        assert_eq!(field, "topology");
        assert!(
            reason.contains("16200000") && reason.contains("limits.max_nodes"),
            "{reason}"
        );
        let ring = "[topology]\nkind = \"ring\"\nswitches = 10000000\nhosts_per_switch = 1\n";
        assert!(refused("10", ring).1.contains("max_nodes"));
        let small = "[topology]\nkind = \"fat_tree\"\nk = 4\n";
        assert_eq!(refused("1e300", small).0, "duration_us");
        let poisson = format!(
            "{small}[[workload]]\nkind = \"poisson\"\nload = 0.5\ncdf = \"websearch\"\nduration_us = 1e12\n"
        );
        assert_eq!(refused("10", &poisson).0, "workload[0].duration_us");
        let sampling = format!("{small}[output]\nqueue_sample_interval_us = 1e-6\n");
        let (field, reason) = refused("1000", &sampling);
        assert_eq!(field, "output.queue_sample_interval_us");
        assert!(reason.contains("max_queue_samples"), "{reason}");
        let buffer = format!("{small}[switch]\nbuffer_mb = 1e15\n");
        assert_eq!(refused("10", &buffer).0, "switch.buffer_mb");
        // The user may raise a limit for a bigger machine.
        let raised = format!("{fat}[limits]\nmax_nodes = 20000000\nmax_links = 100000000\nmax_queue_samples = 1000000000\n");
        let text = format!("version = 1\nduration_us = 10\n{raised}");
        assert!(Scenario::parse(&text, "t.toml", PathBuf::new()).is_ok());
    }

    #[test]
    fn graphs_without_switches_hosts_or_links_and_host_to_host_links_are_errors() {
        let empty = "[topology]\nkind = \"graph\"\nswitches = []\nhosts = []\nlinks = []\n";
        assert_eq!(refused("10", empty).0, "topology");
        let direct = "[topology]\nkind = \"graph\"\nswitches = [\"s0\"]\nhosts = [\"a\", \"b\"]\nlinks = [{ a = \"a\", b = \"s0\" }, { a = \"a\", b = \"b\" }]\n";
        let (field, reason) = refused("10", direct);
        assert_eq!(field, "topology.links[1]");
        assert!(reason.contains("two hosts"), "{reason}");
    }
}
