//! hawkmesh-knobs — the DCQCN and ECN knobs, defined once.
//!
//! DCQCN is tuned through about twenty settings spread over three places: the sending NIC
//! (the *reaction point*, which cuts and regrows each queue pair's rate), the receiving NIC
//! (the *notification point*, which turns ECN marks into CNPs) and every switch queue (the
//! *congestion point*, which marks packets with ECN between Kmin and Kmax with a probability
//! up to Pmax). This crate is the one table of them ([`KNOBS`]); for each knob it records
//!
//! - the identifier netsim's scenario files use ([`Knob::name`], [`Knob::scenario`]),
//! - the NVIDIA ConnectX name: the file under `/sys/class/net/<if>/ecn/roce_rp/` or
//!   `roce_np/` of the mlx5 driver ([`Knob::connectx`], [`Knob::sysfs_path`]), or for the
//!   switch knobs the field of SONiC's `WRED_PROFILE` ([`Knob::sonic`]),
//! - the unit ([`Unit`]), whether it is a whole number, and the valid range ([`Range`]),
//! - the default netsim uses ([`KnobDefault`]) and, separately, the ConnectX firmware
//!   default where it is known ([`Knob::connectx_default`]),
//! - the direction that favours throughput; the opposite favours delay ([`Tuning`]),
//!   following PARALEON (Chen et al., ICNP 2024), §III-C.
//!
//! It offers lookup by any of those names ([`find`], [`knob`]), validation with an error
//! naming the knob, the value and the range ([`Knob::validate`], [`validate`]), and unit
//! conversions between the scenario's units, SI units and what the devices take
//! ([`Knob::to_si`], [`Knob::to_device`], [`Knob::from_device`]).
//!
//! Who uses it:
//! - **netsim** takes its `[nic.dcqcn]` and `[switch.ecn]` defaults and range checks from
//!   here (`hawkmesh_netsim::scenario`), so the simulator, the docs and the tools agree;
//! - the **PARALEON tuner** (to come) walks the knobs in their throughput- or
//!   delay-friendly [`Direction`] and keeps every candidate inside [`Knob::range`];
//! - the **host agent** (to come) writes the RNIC knobs to the mlx5 sysfs files with
//!   [`Knob::to_device`] and reads them back with [`Knob::from_device`].
//!
//! The crate depends on nothing in the workspace, so any of them can use it.
//!
//! Ranges are the values that are physically meaningful in netsim's model (negative rates
//! and thresholds, NaN and infinities never are); where ConnectX firmware is known to take a
//! narrower range, the knob's comment says so. Defaults are netsim's scenario defaults —
//! changing one changes every simulation result, so the table carries them as they are and
//! records ConnectX's own default beside them.
//!
//! ```
//! use hawkmesh_knobs::{knob, Direction, RPG_HAI_RATE};
//! let hai = knob("rpg_hai_rate").unwrap();
//! assert_eq!(hai, &RPG_HAI_RATE);
//! assert_eq!(hai.sysfs_path("eth2").unwrap(), "/sys/class/net/eth2/ecn/roce_rp/rpg_hai_rate");
//! assert_eq!(hai.tuning.unwrap().throughput, Direction::Increase);
//! let error = knob("rpg_gd").unwrap().validate(12.0).unwrap_err();
//! assert_eq!(error.to_string(), "rpg_gd: must be within [10, 11], got 12");
//! ```

use serde::Serialize;
use std::fmt;

pub mod apply;
mod table;

pub use table::*;

/// What a knob belongs to. PARALEON §II sorts the RNIC-side DCQCN parameters into rate
/// increase, rate decrease, α update and notification point, beside the switches' ECN
/// thresholds; which knob falls where follows the mechanism each one drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Group {
    /// Reaction point (sending NIC): timer and byte counter that regrow the rate.
    RateIncrease,
    /// Reaction point: how and how often a CNP cuts the rate.
    RateDecrease,
    /// Reaction point: the congestion estimate α.
    AlphaUpdate,
    /// Notification point (receiving NIC): CNP generation.
    NotificationPoint,
    /// Congestion point (switch egress queue): RED-style ECN marking.
    EcnMarking,
}

impl Group {
    /// Where the knob lives.
    pub const fn device(self) -> Device {
        match self {
            Group::EcnMarking => Device::Switch,
            _ => Device::Rnic,
        }
    }

    /// The mlx5 sysfs directory under `/sys/class/net/<if>/ecn/` (None for switch knobs).
    pub const fn connectx_dir(self) -> Option<&'static str> {
        match self {
            Group::RateIncrease | Group::RateDecrease | Group::AlphaUpdate => Some("roce_rp"),
            Group::NotificationPoint => Some("roce_np"),
            Group::EcnMarking => None,
        }
    }
}

/// The device a knob is set on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Device {
    /// The RDMA NIC (NVIDIA ConnectX).
    Rnic,
    /// The switch (per egress queue).
    Switch,
}

/// The unit of a knob's value, as netsim's scenario and the ConnectX sysfs files write it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Microseconds.
    Microseconds,
    /// Bytes.
    Bytes,
    /// Megabits per second (10⁶ bit/s).
    MegabitsPerSecond,
    /// A count of events.
    Count,
    /// A base-2 logarithm (`rpg_gd`: the decrease divides by 2^value).
    Log2,
    /// Percent (0–100).
    Percent,
    /// A fixed-point fraction in units of 1/1024.
    Per1024,
    /// 0 = off, 1 = on.
    Flag,
    /// An IEEE 802.1p priority (0–7).
    Priority,
    /// A DSCP code point (0–63).
    Dscp,
    /// Kilobytes of 1000 bytes (ECN thresholds, as switch vendors count them).
    Kilobytes,
    /// A probability (0–1).
    Probability,
}

impl Unit {
    /// The symbol written after a value ("" for dimensionless units).
    pub const fn symbol(self) -> &'static str {
        match self {
            Unit::Microseconds => "µs",
            Unit::Bytes => "B",
            Unit::MegabitsPerSecond => "Mb/s",
            Unit::Percent => "%",
            Unit::Per1024 => "/1024",
            Unit::Kilobytes => "KB",
            Unit::Count
            | Unit::Log2
            | Unit::Flag
            | Unit::Priority
            | Unit::Dscp
            | Unit::Probability => "",
        }
    }

    /// Factor from this unit to its base unit, and the base unit's symbol: µs → s, Mb/s →
    /// bit/s, KB → B, percent and 1/1024 → a plain fraction. Other units are their own base.
    pub const fn si(self) -> (f64, &'static str) {
        match self {
            Unit::Microseconds => (1e-6, "s"),
            Unit::MegabitsPerSecond => (1e6, "bit/s"),
            Unit::Kilobytes => (1e3, "B"),
            Unit::Percent => (0.01, ""),
            Unit::Per1024 => (1.0 / 1024.0, ""),
            Unit::Bytes => (1.0, "B"),
            Unit::Count
            | Unit::Log2
            | Unit::Flag
            | Unit::Priority
            | Unit::Dscp
            | Unit::Probability => (1.0, ""),
        }
    }
}

/// The valid values of a knob: finite numbers from `min` (inclusive unless `min_exclusive`)
/// up to `max` (inclusive; None = no upper bound).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Range {
    /// Lower bound.
    pub min: f64,
    /// The lower bound itself is excluded (`> min`).
    pub min_exclusive: bool,
    /// Upper bound, inclusive; None = unbounded.
    pub max: Option<f64>,
}

impl Range {
    /// `[min, max]`.
    pub const fn closed(min: f64, max: f64) -> Self {
        Range {
            min,
            min_exclusive: false,
            max: Some(max),
        }
    }

    /// `[min, ∞)`.
    pub const fn at_least(min: f64) -> Self {
        Range {
            min,
            min_exclusive: false,
            max: None,
        }
    }

    /// `(min, ∞)`.
    pub const fn above(min: f64) -> Self {
        Range {
            min,
            min_exclusive: true,
            max: None,
        }
    }

    /// Whether `value` is finite and inside the range.
    pub fn contains(&self, value: f64) -> bool {
        let above_min = if self.min_exclusive {
            value > self.min
        } else {
            value >= self.min
        };
        value.is_finite() && above_min && self.max.is_none_or(|max| value <= max)
    }
}

impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let open = if self.min_exclusive { '(' } else { '[' };
        match self.max {
            Some(max) => write!(f, "{open}{}, {max}]", self.min),
            None => write!(f, "{open}{}, ∞)", self.min),
        }
    }
}

/// netsim's default for a knob.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KnobDefault {
    /// A fixed value in the knob's unit.
    Value(f64),
    /// Proportional to the port speed: this many units per Gbit/s (the scenario field is the
    /// per-Gbit/s coefficient, e.g. `switch.ecn.kmin_kb_per_gbps`).
    PerGbps(f64),
    /// Taken from another scenario setting (named by its path) when the knob is not set.
    SameAs(&'static str),
}

/// Which way a knob moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Raise the value (for a flag: set it).
    Increase,
    /// Lower the value (for a flag: clear it).
    Decrease,
}

impl Direction {
    /// The other way.
    pub const fn opposite(self) -> Direction {
        match self {
            Direction::Increase => Direction::Decrease,
            Direction::Decrease => Direction::Increase,
        }
    }
}

/// Where a tuning direction comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// PARALEON states it (§III-C, "Observations on parameter impacts", from its NS3
    /// single- and inter-parameter experiments, Figs. 5 and 6).
    Paraleon,
    /// Reasoned from the DCQCN state machine netsim implements; PARALEON does not state it.
    Mechanism,
}

/// The direction of a knob that favours throughput; the opposite favours low delay.
/// PARALEON's guided simulated annealing (§III-C, Alg. 1 lines 14–22) drives each knob in the
/// dominant flow type's direction with probability min(μ, η) and the other way otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Tuning {
    /// The throughput-friendly direction.
    pub throughput: Direction,
    /// Where that comes from.
    pub basis: Basis,
}

impl Tuning {
    /// The delay-friendly direction.
    pub const fn delay(self) -> Direction {
        self.throughput.opposite()
    }
}

/// One knob. The table is [`KNOBS`]; each knob is also a constant (e.g. [`RPG_TIME_RESET`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Knob {
    /// The identifier: netsim's scenario key where netsim exposes the knob (also the
    /// ConnectX name for every RNIC knob netsim exposes), else the ConnectX name.
    pub name: &'static str,
    /// What it belongs to (and so which device and sysfs directory).
    pub group: Group,
    /// The mlx5 sysfs file under `/sys/class/net/<if>/ecn/roce_rp/` or `roce_np/`.
    pub connectx: Option<&'static str>,
    /// The SONiC `WRED_PROFILE` field (switch knobs; green colour).
    pub sonic: Option<&'static str>,
    /// The scenario fields that set it (`[]` marks an array element); empty when netsim does
    /// not model the knob.
    pub scenario: &'static [&'static str],
    /// Unit of the value (in the scenario, in the sysfs file for RNIC knobs).
    pub unit: Unit,
    /// Only whole numbers are valid.
    pub integer: bool,
    /// The valid values.
    pub range: Range,
    /// netsim's default.
    pub default: KnobDefault,
    /// The ConnectX firmware default, where known and where the knob is on the RNIC.
    pub connectx_default: Option<f64>,
    /// The throughput-friendly direction (None: no monotonic direction, or not a tuning
    /// knob such as the CNP's priority).
    pub tuning: Option<Tuning>,
    /// What it does, in netsim's model.
    pub meaning: &'static str,
}

impl Knob {
    /// The device a knob is set on.
    pub const fn device(&self) -> Device {
        self.group.device()
    }

    /// The name on the device: the ConnectX sysfs name or the SONiC field.
    pub const fn device_name(&self) -> Option<&'static str> {
        match self.connectx {
            Some(name) => Some(name),
            None => self.sonic,
        }
    }

    /// The mlx5 sysfs file of an RNIC knob on `interface`, where MLNX_OFED's mlx5 driver
    /// creates it: `/sys/class/net/<if>/ecn/roce_rp/<name>` or `.../roce_np/<name>`.
    pub fn sysfs_path(&self, interface: &str) -> Option<String> {
        let dir = self.group.connectx_dir()?;
        let name = self.connectx?;
        Some(format!("/sys/class/net/{interface}/ecn/{dir}/{name}"))
    }

    /// The fixed default. Panics (at compile time when called in a `const` context) when the
    /// default is not a fixed value.
    pub const fn fixed_default(&self) -> f64 {
        match self.default {
            KnobDefault::Value(value) => value,
            _ => panic!("this knob's default is not a fixed value"),
        }
    }

    /// The default on a port of `gbps` Gbit/s: a fixed value as it is, a speed-proportional
    /// one scaled (`kmin_kb_per_gbps` × 100 at 100 Gbit/s); `None` for a default taken from
    /// another scenario setting, which only a scenario can resolve.
    pub fn default_at(&self, gbps: f64) -> Option<f64> {
        match self.default {
            KnobDefault::Value(value) => Some(value),
            KnobDefault::PerGbps(per_gbps) => Some(per_gbps * gbps),
            KnobDefault::SameAs(_) => None,
        }
    }

    /// The fixed default as a `u32`; panics when it is not a whole number in range.
    pub const fn default_u32(&self) -> u32 {
        let value = self.fixed_default();
        let whole = value as u32;
        assert!(whole as f64 == value, "the default is not a u32");
        whole
    }

    /// The fixed default as a `u64`; panics when it is not a whole number in range.
    pub const fn default_u64(&self) -> u64 {
        let value = self.fixed_default();
        let whole = value as u64;
        assert!(whole as f64 == value, "the default is not a u64");
        whole
    }

    /// The fixed default of a flag; panics when it is neither 0 nor 1.
    pub const fn default_flag(&self) -> bool {
        let value = self.fixed_default();
        assert!(value == 0.0 || value == 1.0, "the default is not a flag");
        value == 1.0
    }

    /// The per-Gbit/s coefficient of a speed-proportional default; panics (at compile time
    /// in a `const` context) for any other default.
    pub const fn default_per_gbps(&self) -> f64 {
        match self.default {
            KnobDefault::PerGbps(value) => value,
            _ => panic!("this knob's default is not per Gbit/s"),
        }
    }

    /// Checks a value in the knob's unit: finite, inside [`Knob::range`], and whole when the
    /// knob takes whole numbers.
    pub fn validate(&self, value: f64) -> Result<(), KnobError> {
        self.check(value, self.unit.symbol().to_string())
    }

    /// Checks the per-Gbit/s coefficient of a speed-proportional knob (netsim's
    /// `kmin_kb_per_gbps`). Every such knob's range is `[0, ∞)` (tested), so a coefficient
    /// is valid exactly when the thresholds it gives at every positive port speed are.
    pub fn validate_per_gbps(&self, per_gbps: f64) -> Result<(), KnobError> {
        self.check(per_gbps, format!("{} per Gbit/s", self.unit.symbol()))
    }

    fn check(&self, value: f64, unit: String) -> Result<(), KnobError> {
        if !self.range.contains(value) {
            return Err(KnobError::OutOfRange {
                knob: self.name,
                value,
                range: self.range,
                unit,
            });
        }
        if self.integer && value.fract() != 0.0 {
            return Err(KnobError::NotWhole {
                knob: self.name,
                value,
            });
        }
        Ok(())
    }

    /// The value in its base unit (see [`Unit::si`]): `rpg_ai_rate` 5 → 5e6 bit/s.
    pub fn to_si(&self, value: f64) -> f64 {
        value * self.unit.si().0
    }

    /// How many device units one unit of the knob is: 1 for the RNIC knobs (the ConnectX
    /// sysfs files take the scenario's units), 1000 for ECN thresholds (SONiC takes bytes),
    /// 100 for Pmax (SONiC takes percent).
    pub const fn device_scale(&self) -> f64 {
        match self.unit {
            Unit::Kilobytes => 1000.0,
            Unit::Probability => 100.0,
            _ => 1.0,
        }
    }

    /// The integer to write to the device (the sysfs file, or the SONiC field): validates
    /// the value, then scales it; the device takes whole numbers only.
    pub fn to_device(&self, value: f64) -> Result<u64, KnobError> {
        if self.device_name().is_none() {
            return Err(KnobError::NotOnDevice { knob: self.name });
        }
        self.validate(value)?;
        let scaled = value * self.device_scale();
        let whole = scaled.round();
        if (scaled - whole).abs() > 1e-9 * whole.abs().max(1.0) {
            return Err(KnobError::NotWhole {
                knob: self.name,
                value,
            });
        }
        Ok(whole as u64)
    }

    /// A value read from the device, in the knob's unit.
    pub fn from_device(&self, raw: u64) -> f64 {
        raw as f64 / self.device_scale()
    }
}

/// A knob that does not exist or a value it does not take.
#[derive(Clone, Debug, PartialEq)]
pub enum KnobError {
    /// No knob has this name.
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The value is NaN, infinite or outside the range.
    OutOfRange {
        /// The knob.
        knob: &'static str,
        /// The value.
        value: f64,
        /// Its valid range.
        range: Range,
        /// The unit the value and range are in.
        unit: String,
    },
    /// The knob takes whole numbers only.
    NotWhole {
        /// The knob.
        knob: &'static str,
        /// The value.
        value: f64,
    },
    /// The knob has no device counterpart (netsim-only).
    NotOnDevice {
        /// The knob.
        knob: &'static str,
    },
}

impl KnobError {
    /// What is wrong, without the knob's name (for messages that name the field already).
    pub fn reason(&self) -> String {
        match self {
            KnobError::Unknown { name } => format!("unknown knob `{name}`"),
            KnobError::OutOfRange {
                value, range, unit, ..
            } => {
                let unit = if unit.is_empty() {
                    String::new()
                } else {
                    format!(" {unit}")
                };
                format!("must be within {range}{unit}, got {value}")
            }
            KnobError::NotWhole { value, .. } => {
                format!("must be a whole number, got {value}")
            }
            KnobError::NotOnDevice { .. } => "has no device setting".to_string(),
        }
    }
}

impl fmt::Display for KnobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KnobError::Unknown { .. } => f.write_str(&self.reason()),
            KnobError::OutOfRange { knob, .. }
            | KnobError::NotWhole { knob, .. }
            | KnobError::NotOnDevice { knob } => write!(f, "{knob}: {}", self.reason()),
        }
    }
}

impl std::error::Error for KnobError {}

/// The knob called `name` (its identifier, ConnectX name or SONiC name).
pub fn find(name: &str) -> Option<&'static Knob> {
    KNOBS
        .iter()
        .find(|k| k.name == name || k.connectx == Some(name) || k.sonic == Some(name))
}

/// Like [`find`], with an error naming the unknown knob.
pub fn knob(name: &str) -> Result<&'static Knob, KnobError> {
    find(name).ok_or_else(|| KnobError::Unknown {
        name: name.to_string(),
    })
}

/// Checks `value` for the knob called `name`.
pub fn validate(name: &str, value: f64) -> Result<(), KnobError> {
    knob(name)?.validate(value)
}

/// The knobs of one group, in table order.
pub fn in_group(group: Group) -> impl Iterator<Item = &'static Knob> {
    KNOBS.iter().filter(move |k| k.group == group)
}

#[cfg(test)]
mod tests;
