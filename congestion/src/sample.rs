//! The counter sample model: which port a reading is of (its node, tier and link direction,
//! as the Yellowstone study classifies ports), when it was taken, and the counters read.
//!
//! Timing follows the study's records (Yellowstone Eq. 2): `t_query_ns` is the time just
//! before the query was issued (tᵠ) and `turnaround_ns` the time until it returned (tᵖ); the
//! counter is taken to have been read at tᵠ + tᵖ/2.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Number of IEEE 802.1Qbb priorities.
pub const PRIORITIES: usize = 8;

/// The tier of the node a port belongs to. The study classifies switches by role
/// (ToR, Leaf, Spine and the Glade/DAV subsystems' leaves and spines); `Other` keeps such
/// site-specific categories.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// A host adapter (HCA / NIC).
    Host,
    /// Top-of-rack switch.
    Tor,
    /// Leaf (aggregation) switch.
    Leaf,
    /// Spine (core) switch.
    Spine,
    /// Another category (e.g. "GladeLeaf", "DAVSpine" in the study).
    Other(String),
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tier::Host => f.write_str("Host"),
            Tier::Tor => f.write_str("ToR"),
            Tier::Leaf => f.write_str("Leaf"),
            Tier::Spine => f.write_str("Spine"),
            Tier::Other(s) => f.write_str(s),
        }
    }
}

/// The direction of a port's link in the fat tree (Yellowstone §III: "up" links go to the
/// upper tier, "down" links towards the hosts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Towards the upper tier (e.g. ToR → leaf, host → ToR).
    Up,
    /// Towards the hosts (e.g. ToR → host, spine → leaf).
    Down,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Up => "up",
            Direction::Down => "down",
        })
    }
}

/// A port: the node (switch name / LID, or host) and port number, with the node's tier and
/// the link's direction.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PortId {
    /// The switch or host (a name, or an InfiniBand LID written in decimal).
    pub node: String,
    /// The port number on that node.
    pub port: u32,
    /// The node's tier.
    pub tier: Tier,
    /// The link's direction.
    pub dir: Direction,
}

impl PortId {
    /// A port.
    pub fn new(node: impl Into<String>, port: u32, tier: Tier, dir: Direction) -> Self {
        PortId {
            node: node.into(),
            port,
            tier,
            dir,
        }
    }

    /// The (node, port) pair that identifies the port, without its classification.
    pub fn key(&self) -> PortKey {
        PortKey {
            node: self.node.clone(),
            port: self.port,
        }
    }
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.port)
    }
}

/// A port's identity alone (node and port number), as used by link maps.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PortKey {
    /// The node.
    pub node: String,
    /// The port number.
    pub port: u32,
}

impl PortKey {
    /// A port key.
    pub fn new(node: impl Into<String>, port: u32) -> Self {
        PortKey {
            node: node.into(),
            port,
        }
    }
}

impl fmt::Display for PortKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.port)
    }
}

/// The width of a hardware counter. InfiniBand PortCounters fields are 32-bit and saturate
/// at all ones rather than wrapping (IBA vol. 1 §16.1.3.5); PortCountersExtended fields and
/// the Ethernet/SAI counters are 64-bit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Width {
    /// 32 bits, saturating at `0xFFFF_FFFF` (IB PortCounters).
    Bits32,
    /// 64 bits.
    #[default]
    Bits64,
}

impl Width {
    /// The largest value the counter can hold.
    pub fn max(self) -> u64 {
        match self {
            Width::Bits32 => u64::from(u32::MAX),
            Width::Bits64 => u64::MAX,
        }
    }
}

/// The PFC counters of one priority (IEEE 802.1Qbb), as NICs (mlx5 `ethtool -S`) and
/// switches (SAI port stats) expose them. A field a source does not report is `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PfcCounters {
    /// PFC frames received for this priority (the peer asking us to stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_pause: Option<u64>,
    /// PFC frames sent for this priority (we asking the peer to stop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_pause: Option<u64>,
    /// Time this priority's transmission was paused by received PFC frames, in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_pause_duration_us: Option<u64>,
    /// Time we held the peer paused on this priority, in µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_pause_duration_us: Option<u64>,
    /// Transitions into the paused state (mlx5 `rx_prioN_pause_transition`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_pause_transition: Option<u64>,
    /// Packets transmitted on this priority (or its queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_pkts: Option<u64>,
    /// Bytes transmitted on this priority (or its queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_bytes: Option<u64>,
}

impl PfcCounters {
    /// Whether no field is reported.
    pub fn is_empty(&self) -> bool {
        *self == PfcCounters::default()
    }
}

/// One reading of a port's counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// The port read.
    pub port: PortId,
    /// tᵠ: the time just before the query was issued, in ns.
    pub t_query_ns: u64,
    /// tᵖ: the query's turnaround, in ns.
    pub turnaround_ns: u64,
    /// PortXmitWait (InfiniBand), in ticks of τ; `None` where the source has none (Ethernet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xmit_wait: Option<u64>,
    /// The width of `xmit_wait` (32-bit in PortCounters, 64-bit in PortCountersExtended).
    #[serde(default)]
    pub wait_width: Width,
    /// PortXmitData (in 4-octet words for InfiniBand), when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xmit_data: Option<u64>,
    /// PortXmitPkts, when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xmit_pkts: Option<u64>,
    /// Per-priority PFC counters (RoCE); all `None` on InfiniBand.
    #[serde(default)]
    pub pfc: [PfcCounters; PRIORITIES],
}

impl Sample {
    /// A sample with no counters yet.
    pub fn new(port: PortId, t_query_ns: u64, turnaround_ns: u64) -> Self {
        Sample {
            port,
            t_query_ns,
            turnaround_ns,
            xmit_wait: None,
            wait_width: Width::Bits64,
            xmit_data: None,
            xmit_pkts: None,
            pfc: [PfcCounters::default(); PRIORITIES],
        }
    }

    /// The estimated time the counters were read: tᵠ + tᵖ/2 (Yellowstone Eq. 3), in ns.
    pub fn read_time_ns(&self) -> f64 {
        self.t_query_ns as f64 + self.turnaround_ns as f64 / 2.0
    }

    /// With PortXmitWait set.
    pub fn with_wait(mut self, wait: u64, width: Width) -> Self {
        self.xmit_wait = Some(wait);
        self.wait_width = width;
        self
    }

    /// The PFC counters of `priority` (`None` past 7).
    pub fn pfc(&self, priority: u8) -> Option<&PfcCounters> {
        self.pfc.get(usize::from(priority))
    }
}
