//! The table.
//!
//! Sources, per column:
//! - ConnectX names: the sysfs attributes MLNX_OFED's mlx5 Ethernet driver creates under
//!   `ecn/roce_rp/` and `ecn/roce_np/`, the same names as the fields of the
//!   PRM's `cong_control_r_roce_ecn_rp` / `_np` structures in `mlx5_ifc.h` and, upper-cased
//!   with a `_P<port>` suffix, the `mlxconfig` parameters.
//! - ConnectX defaults: the values `mlxconfig` reports for an unmodified ConnectX
//!   (RPG_TIME_RESET 300, RPG_BYTE_RESET 32767, ..., CNP_802P_PRIO 6, CNP_DSCP 48). The
//!   default of `min_time_between_cnps` differs between firmware releases and is left out.
//! - netsim defaults and ranges: netsim's scenario (`docs/scenario.md`) as it was before this
//!   table existed — carried over unchanged so that every simulation result stays
//!   byte-identical. Where netsim did not check a range before, the range here only excludes
//!   values that mean nothing physically (negative rates or thresholds, NaN, ∞).
//! - Directions: PARALEON (ICNP 2024) §III-C where it states them ([`Basis::Paraleon`]), else
//!   the DCQCN mechanism ([`Basis::Mechanism`]).
//! - The expert setting: PARALEON Table I ([`PARALEON_EXPERT`]).

use crate::{Basis, Direction, Group, Knob, KnobDefault, Range, Tuning, Unit};

const fn paraleon(throughput: Direction) -> Option<Tuning> {
    Some(Tuning {
        throughput,
        basis: Basis::Paraleon,
    })
}

const fn mechanism(throughput: Direction) -> Option<Tuning> {
    Some(Tuning {
        throughput,
        basis: Basis::Mechanism,
    })
}

use Direction::{Decrease, Increase};

// ---- Reaction point: rate increase ------------------------------------------------------

/// `rpg_time_reset`: the rate-increase timer.
pub const RPG_TIME_RESET: Knob = Knob {
    name: "rpg_time_reset",
    group: Group::RateIncrease,
    connectx: Some("rpg_time_reset"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_time_reset"],
    unit: Unit::Microseconds,
    integer: false,
    range: Range::above(0.0),
    default: KnobDefault::Value(300.0),
    connectx_default: Some(300.0),
    // PARALEON §III-C: "drive rpg_time_reset and K_max in the same throughput-friendly
    // direction (i.e., decrement rpg_time_reset and increment K_max)" (Fig. 6(a)).
    tuning: paraleon(Decrease),
    meaning: "period of the timer that raises the rate while no CNP arrives",
};

/// `rpg_byte_reset`: the rate-increase byte counter.
pub const RPG_BYTE_RESET: Knob = Knob {
    name: "rpg_byte_reset",
    group: Group::RateIncrease,
    connectx: Some("rpg_byte_reset"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_byte_reset"],
    unit: Unit::Bytes,
    integer: true,
    range: Range::at_least(0.0),
    default: KnobDefault::Value(32767.0),
    connectx_default: Some(32767.0),
    // Smaller counts raise the rate more often, but 0 switches the counter off (the HPCC
    // reference's profile), so there is no monotonic direction.
    tuning: None,
    meaning: "bytes sent between byte-counter rate increases (0 disables the counter)",
};

/// `rpg_threshold`: increase events spent in fast recovery.
pub const RPG_THRESHOLD: Knob = Knob {
    name: "rpg_threshold",
    group: Group::RateIncrease,
    connectx: Some("rpg_threshold"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_threshold"],
    unit: Unit::Count,
    integer: true,
    // netsim has never checked it; 0 is meaningful (no fast recovery at all).
    range: Range::at_least(0.0),
    default: KnobDefault::Value(1.0),
    connectx_default: Some(1.0),
    // Fewer fast-recovery stages start additive/hyper increase of the target sooner.
    tuning: mechanism(Decrease),
    meaning: "timer or byte-counter events in fast recovery before the target rate grows",
};

/// `rpg_max_rate`: the rate cap.
pub const RPG_MAX_RATE: Knob = Knob {
    name: "rpg_max_rate",
    group: Group::RateIncrease,
    connectx: Some("rpg_max_rate"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_max_rate"],
    unit: Unit::MegabitsPerSecond,
    integer: false,
    range: Range::at_least(0.0),
    default: KnobDefault::Value(0.0),
    connectx_default: Some(0.0),
    // 0 means line rate, so raising it from 0 lowers the cap: no monotonic direction.
    tuning: None,
    meaning: "highest rate a queue pair may reach (0 = line rate)",
};

/// `rpg_ai_rate`: the additive-increase step.
pub const RPG_AI_RATE: Knob = Knob {
    name: "rpg_ai_rate",
    group: Group::RateIncrease,
    connectx: Some("rpg_ai_rate"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_ai_rate"],
    unit: Unit::MegabitsPerSecond,
    integer: false,
    range: Range::at_least(0.0),
    default: KnobDefault::Value(5.0),
    connectx_default: Some(5.0),
    // Larger steps regrow the rate faster. PARALEON's experts raise it (Table I: 50 Mb/s)
    // but §III-C states a direction only for hai_rate.
    tuning: mechanism(Increase),
    meaning: "target-rate step of additive increase",
};

/// `rpg_hai_rate`: the hyper-increase step.
pub const RPG_HAI_RATE: Knob = Knob {
    name: "rpg_hai_rate",
    group: Group::RateIncrease,
    connectx: Some("rpg_hai_rate"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_hai_rate"],
    unit: Unit::MegabitsPerSecond,
    integer: false,
    range: Range::at_least(0.0),
    default: KnobDefault::Value(50.0),
    connectx_default: Some(50.0),
    // PARALEON §III-C: "incrementing its value is a throughput-friendly direction ...
    // decrementing is a delay-friendly direction for hai_rate" (Fig. 5).
    tuning: paraleon(Increase),
    meaning: "target-rate step of hyper increase",
};

// ---- Reaction point: rate decrease ------------------------------------------------------

/// `rpg_gd`: the decrease's divisor, as a power of two.
pub const RPG_GD: Knob = Knob {
    name: "rpg_gd",
    group: Group::RateDecrease,
    connectx: Some("rpg_gd"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_gd"],
    unit: Unit::Log2,
    integer: true,
    // The range netsim has always enforced (its check said "ConnectX accepts 10..=11").
    // Below 10 the cut α·1024/2^gd would exceed α and only rpg_min_dec_fac would bound it.
    range: Range::closed(10.0, 11.0),
    default: KnobDefault::Value(11.0),
    connectx_default: Some(11.0),
    // A larger divisor cuts less per CNP.
    tuning: mechanism(Increase),
    meaning: "decrease: rate × (1 − α·1024/2^gd); 11 gives DCQCN's α/2",
};

/// `rpg_min_dec_fac`: the share of the rate a single decrease keeps at least.
pub const RPG_MIN_DEC_FAC: Knob = Knob {
    name: "rpg_min_dec_fac",
    group: Group::RateDecrease,
    connectx: Some("rpg_min_dec_fac"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_min_dec_fac"],
    unit: Unit::Percent,
    integer: false,
    range: Range::closed(0.0, 100.0),
    default: KnobDefault::Value(50.0),
    connectx_default: Some(50.0),
    // Keeping more of the rate per cut favours throughput.
    tuning: mechanism(Increase),
    meaning: "a single decrease keeps at least this share of the rate",
};

/// `rpg_min_rate`: the rate floor.
pub const RPG_MIN_RATE: Knob = Knob {
    name: "rpg_min_rate",
    group: Group::RateDecrease,
    connectx: Some("rpg_min_rate"),
    sonic: None,
    scenario: &["nic.dcqcn.rpg_min_rate"],
    unit: Unit::MegabitsPerSecond,
    integer: false,
    range: Range::above(0.0),
    default: KnobDefault::Value(1.0),
    connectx_default: Some(1.0),
    tuning: mechanism(Increase),
    meaning: "lowest rate a decrease may set",
};

/// `rate_to_set_on_first_cnp`: the rate after a queue pair's first CNP.
pub const RATE_TO_SET_ON_FIRST_CNP: Knob = Knob {
    name: "rate_to_set_on_first_cnp",
    group: Group::RateDecrease,
    connectx: Some("rate_to_set_on_first_cnp"),
    sonic: None,
    scenario: &["nic.dcqcn.rate_to_set_on_first_cnp"],
    unit: Unit::MegabitsPerSecond,
    integer: false,
    range: Range::at_least(0.0),
    default: KnobDefault::Value(0.0),
    connectx_default: Some(0.0),
    // 0 means "keep the current rate": no monotonic direction.
    tuning: None,
    meaning: "rate set on a queue pair's first CNP (0 = keep the current rate)",
};

/// `rate_reduce_monitor_period`: the decrease check period.
pub const RATE_REDUCE_MONITOR_PERIOD: Knob = Knob {
    name: "rate_reduce_monitor_period",
    group: Group::RateDecrease,
    connectx: Some("rate_reduce_monitor_period"),
    sonic: None,
    scenario: &["nic.dcqcn.rate_reduce_monitor_period"],
    unit: Unit::Microseconds,
    integer: false,
    range: Range::above(0.0),
    default: KnobDefault::Value(4.0),
    connectx_default: Some(4.0),
    // PARALEON studies it (§III-C, Fig. 5, "similar analysis can apply") without stating
    // the sign in the text; a longer period cuts at most once per longer interval.
    tuning: mechanism(Increase),
    meaning: "period of the check that cuts the rate when a CNP arrived in it",
};

/// `clamp_tgt_rate`: target rate ← current rate on every decrease.
pub const CLAMP_TGT_RATE: Knob = Knob {
    name: "clamp_tgt_rate",
    group: Group::RateDecrease,
    connectx: Some("clamp_tgt_rate"),
    sonic: None,
    scenario: &["nic.dcqcn.clamp_tgt_rate"],
    unit: Unit::Flag,
    integer: true,
    range: Range::closed(0.0, 1.0),
    default: KnobDefault::Value(0.0),
    connectx_default: Some(0.0),
    // Clamping forgets the pre-congestion target, so recovery is slower.
    tuning: mechanism(Decrease),
    meaning: "on every decrease, set the target rate to the current rate",
};

/// `clamp_tgt_rate_after_time_inc`: clamp after a timer increase.
pub const CLAMP_TGT_RATE_AFTER_TIME_INC: Knob = Knob {
    name: "clamp_tgt_rate_after_time_inc",
    group: Group::RateDecrease,
    connectx: Some("clamp_tgt_rate_after_time_inc"),
    sonic: None,
    scenario: &["nic.dcqcn.clamp_tgt_rate_after_time_inc"],
    unit: Unit::Flag,
    integer: true,
    range: Range::closed(0.0, 1.0),
    default: KnobDefault::Value(1.0),
    connectx_default: Some(1.0),
    tuning: mechanism(Decrease),
    meaning: "set the target rate to the current rate on a decrease that follows a timer increase",
};

// ---- Reaction point: α update -----------------------------------------------------------

/// `dce_tcp_g`: the α filter's weight.
pub const DCE_TCP_G: Knob = Knob {
    name: "dce_tcp_g",
    group: Group::AlphaUpdate,
    connectx: Some("dce_tcp_g"),
    sonic: None,
    scenario: &["nic.dcqcn.dce_tcp_g"],
    unit: Unit::Per1024,
    integer: true,
    range: Range::closed(0.0, 1023.0),
    default: KnobDefault::Value(1019.0),
    connectx_default: Some(1019.0),
    // α both rises and decays more slowly with a larger weight: no monotonic direction.
    tuning: None,
    meaning: "α ← (g/1024)·α + (1 − g/1024)·[CNP in the period]",
};

/// `dce_tcp_rtt`: the α update period.
pub const DCE_TCP_RTT: Knob = Knob {
    name: "dce_tcp_rtt",
    group: Group::AlphaUpdate,
    connectx: Some("dce_tcp_rtt"),
    sonic: None,
    scenario: &["nic.dcqcn.dce_tcp_rtt"],
    unit: Unit::Microseconds,
    integer: false,
    range: Range::above(0.0),
    default: KnobDefault::Value(1.0),
    connectx_default: Some(1.0),
    // Same as dce_tcp_g: slower updates slow both α's rise and its decay.
    tuning: None,
    meaning: "period of the α update",
};

/// `initial_alpha_value`: α at a queue pair's first CNP.
pub const INITIAL_ALPHA_VALUE: Knob = Knob {
    name: "initial_alpha_value",
    group: Group::AlphaUpdate,
    connectx: Some("initial_alpha_value"),
    sonic: None,
    scenario: &["nic.dcqcn.initial_alpha_value"],
    unit: Unit::Per1024,
    integer: true,
    // netsim has always required α > 0 at the first CNP.
    range: Range::closed(1.0, 1023.0),
    default: KnobDefault::Value(1023.0),
    connectx_default: Some(1023.0),
    // A smaller initial α makes the first cuts smaller.
    tuning: mechanism(Decrease),
    meaning: "α when a queue pair receives its first CNP",
};

// ---- Notification point -----------------------------------------------------------------

/// `min_time_between_cnps`: the CNP pacing of the receiving NIC.
pub const MIN_TIME_BETWEEN_CNPS: Knob = Knob {
    name: "min_time_between_cnps",
    group: Group::NotificationPoint,
    connectx: Some("min_time_between_cnps"),
    sonic: None,
    scenario: &["nic.dcqcn.min_time_between_cnps"],
    unit: Unit::Microseconds,
    integer: false,
    range: Range::at_least(0.0),
    default: KnobDefault::Value(4.0),
    // Left out: it differs between firmware releases (the ConnectX whose `mlxconfig` dump
    // gave the other defaults reports MIN_TIME_BETWEEN_CNPS = 2). netsim keeps its 4 µs.
    connectx_default: None,
    // Fewer CNPs mean fewer cuts. PARALEON's experts raise it (Table I: 96 µs) but §III-C
    // states no direction for it.
    tuning: mechanism(Increase),
    meaning: "a receiving queue pair sends at most one CNP per this period",
};

/// `cnp_dscp`: the DSCP of CNPs. Not modelled by netsim (its CNPs carry the DSCP of their
/// priority, `priority << 3 | 2`).
pub const CNP_DSCP: Knob = Knob {
    name: "cnp_dscp",
    group: Group::NotificationPoint,
    connectx: Some("cnp_dscp"),
    sonic: None,
    scenario: &[],
    unit: Unit::Dscp,
    integer: true,
    // A 6-bit field of the PRM's cong_control_r_roce_ecn_np.
    range: Range::closed(0.0, 63.0),
    default: KnobDefault::Value(48.0),
    connectx_default: Some(48.0),
    tuning: None,
    meaning: "DSCP of the CNPs a receiving NIC sends",
};

/// `cnp_802p_prio`: the priority of CNPs.
pub const CNP_802P_PRIO: Knob = Knob {
    name: "cnp_802p_prio",
    group: Group::NotificationPoint,
    connectx: Some("cnp_802p_prio"),
    sonic: None,
    scenario: &["nic.dcqcn.cnp_802p_prio"],
    unit: Unit::Priority,
    integer: true,
    // A 3-bit field of the PRM's cong_control_r_roce_ecn_np.
    range: Range::closed(0.0, 7.0),
    // netsim sends CNPs on the switches' strict-priority control queue unless set; ConnectX
    // uses priority 6.
    default: KnobDefault::SameAs("switch.control_priority"),
    connectx_default: Some(6.0),
    tuning: None,
    meaning: "IEEE 802.1p priority of the CNPs a receiving NIC sends",
};

// ---- Congestion point: switch ECN marking -----------------------------------------------

/// Kmin: where ECN marking starts, per egress queue.
pub const KMIN: Knob = Knob {
    name: "kmin_kb",
    group: Group::EcnMarking,
    connectx: None,
    sonic: Some("green_min_threshold"),
    scenario: &[
        "switch.ecn.kmin_kb_per_gbps",
        "switch.ecn.per_speed[].kmin_kb",
    ],
    unit: Unit::Kilobytes,
    integer: false,
    range: Range::at_least(0.0),
    // 400 KB at 100G; 1600 KB at 400G, the Kmin of PARALEON Table I, whose testbed (§II)
    // has 400 Gbit/s links.
    default: KnobDefault::PerGbps(4.0),
    connectx_default: None,
    // PARALEON's experts raise Kmin with Kmax (Table I); §III-C states a direction for Kmax
    // only. A higher Kmin marks later.
    tuning: mechanism(Increase),
    meaning: "queue length where ECN marking starts (probability 0 up to here)",
};

/// Kmax: where the marking probability reaches Pmax, per egress queue.
pub const KMAX: Knob = Knob {
    name: "kmax_kb",
    group: Group::EcnMarking,
    connectx: None,
    sonic: Some("green_max_threshold"),
    scenario: &[
        "switch.ecn.kmax_kb_per_gbps",
        "switch.ecn.per_speed[].kmax_kb",
    ],
    unit: Unit::Kilobytes,
    integer: false,
    range: Range::at_least(0.0),
    // 1600 KB at 100G; 6400 KB at 400G, the Kmax of PARALEON Table I.
    default: KnobDefault::PerGbps(16.0),
    connectx_default: None,
    // PARALEON §III-C: "increment K_max" is throughput-friendly (Figs. 5, 6(a)).
    tuning: paraleon(Increase),
    meaning: "queue length where the marking probability reaches Pmax (every packet above)",
};

/// Pmax: the marking probability at Kmax.
pub const PMAX: Knob = Knob {
    name: "pmax",
    group: Group::EcnMarking,
    connectx: None,
    sonic: Some("green_drop_probability"),
    scenario: &["switch.ecn.pmax", "switch.ecn.per_speed[].pmax"],
    unit: Unit::Probability,
    integer: false,
    range: Range::closed(0.0, 1.0),
    default: KnobDefault::Value(0.2),
    connectx_default: None,
    // Fewer marks between Kmin and Kmax mean fewer CNPs.
    tuning: mechanism(Decrease),
    meaning: "marking probability at Kmax (linear from 0 at Kmin)",
};

/// Every knob: the reaction point (rate increase, rate decrease, α update), the
/// notification point, then the switch.
pub static KNOBS: &[Knob] = &[
    RPG_TIME_RESET,
    RPG_BYTE_RESET,
    RPG_THRESHOLD,
    RPG_MAX_RATE,
    RPG_AI_RATE,
    RPG_HAI_RATE,
    RPG_GD,
    RPG_MIN_DEC_FAC,
    RPG_MIN_RATE,
    RATE_TO_SET_ON_FIRST_CNP,
    RATE_REDUCE_MONITOR_PERIOD,
    CLAMP_TGT_RATE,
    CLAMP_TGT_RATE_AFTER_TIME_INC,
    DCE_TCP_G,
    DCE_TCP_RTT,
    INITIAL_ALPHA_VALUE,
    MIN_TIME_BETWEEN_CNPS,
    CNP_DSCP,
    CNP_802P_PRIO,
    KMIN,
    KMAX,
    PMAX,
];

/// PARALEON Table I: the "key DCQCN parameters tuned by network experts (others are remained
/// default)", as (knob name, value in the knob's unit). The paper calls the rates `ai_rate`
/// and `hai_rate`. Its testbed (§II) has 400 Gbit/s links, where Kmin and Kmax equal netsim's
/// default 4 and 16 KB per Gbit/s.
pub const PARALEON_EXPERT: &[(&str, f64)] = &[
    ("rpg_ai_rate", 50.0),
    ("rpg_hai_rate", 150.0),
    ("rate_reduce_monitor_period", 80.0),
    ("min_time_between_cnps", 96.0),
    ("kmin_kb", 1600.0),
    ("kmax_kb", 6400.0),
    ("pmax", 0.2),
];
