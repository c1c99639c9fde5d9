//! Control-plane objects of the switch program, as every backend takes them (the executable
//! model, BF Runtime on Tofino): table entries. Tables and registers themselves are named by
//! the generated typed ids [`crate::dataplane::Table`] and [`crate::dataplane::Register`].

/// A table entry as the control plane adds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableEntry {
    /// Key values, one per key field (ternary: value).
    pub key: Vec<u64>,
    /// Ternary masks (empty for exact tables).
    pub mask: Vec<u64>,
    /// Ternary priority (lower wins).
    pub priority: u32,
    /// Action name.
    pub action: String,
    /// Action parameters.
    pub params: Vec<u64>,
}

use crate::dataplane::{Table, ECMP_BUCKETS, ECN_RANDOM_BITS, QDEPTH_UNIT_BYTES_TOFINO};
use std::net::Ipv4Addr;

impl TableEntry {
    /// An exact-match entry.
    pub fn exact(key: Vec<u64>, action: &str, params: Vec<u64>) -> Self {
        TableEntry {
            key,
            mask: vec![],
            priority: 0,
            action: action.to_string(),
            params,
        }
    }
}

/// The `forward` entries of destination `dst` whose ECMP next hops are `ports` (in order):
/// one `set_route` entry per ECMP bucket, bucket `b` to `ports[b % ports.len()]`; none for
/// no ports.
pub fn forward_entries(dst: Ipv4Addr, ports: &[u16]) -> Vec<TableEntry> {
    if ports.is_empty() {
        return Vec::new();
    }
    (0..u64::from(ECMP_BUCKETS))
        .map(|b| {
            let port = ports[b as usize % ports.len()];
            TableEntry::exact(
                vec![u64::from(u32::from(dst)), b],
                "set_route",
                vec![u64::from(port)],
            )
        })
        .collect()
}

/// The one-hot port masks the control plane installs at start-up for a program with `ports`
/// front-panel ports, in ingress (`port_mask`) and egress (`egress_port_mask`): Tofino's ALUs
/// shift by immediates only, so `1 << port` is a table (one 32-bit parameter per 32 ports).
pub fn port_mask_entries(ports: u16) -> Vec<(Table, TableEntry)> {
    let words = u64::from(ports).div_ceil(32);
    let mut out = Vec::new();
    for (table, action) in [
        (Table::PORT_MASK, "port_mask_set"),
        (Table::EGRESS_PORT_MASK, "egress_port_mask_set"),
    ] {
        for port in 0..u64::from(ports) {
            let params = (0..words)
                .map(|w| {
                    if port / 32 == w {
                        1u64 << (port % 32)
                    } else {
                        0
                    }
                })
                .collect();
            out.push((table, TableEntry::exact(vec![port], action, params)));
        }
    }
    out
}

/// Where polling packets may come from on a port (the data plane's `polling_port` guard).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PollingFrom {
    /// A host-facing port: polling accepted within the port's rate limit.
    Host,
    /// A fabric-facing port (another switch): polling trusted.
    Fabric,
}

impl PollingFrom {
    /// The program's action.
    pub fn action(self) -> &'static str {
        match self {
            PollingFrom::Host => "polling_from_host",
            PollingFrom::Fabric => "polling_from_fabric",
        }
    }
}

/// The `polling_port` entry of `port` (a port without one refuses polling).
pub fn polling_port_entry(port: u16, from: PollingFrom) -> TableEntry {
    TableEntry::exact(vec![u64::from(port)], from.action(), vec![])
}

/// The unit of a target's egress queue depth (the program's `enq_qdepth`), in which the
/// `ecn_profile` thresholds are written. The one place where the control plane turns the
/// ECN knobs' bytes into the program's unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QdepthUnit {
    /// Tofino's `eg_intr_md.enq_qdepth`: cells of [`QDEPTH_UNIT_BYTES_TOFINO`] (80) bytes;
    /// the lab's netsim adapter (`lab::switch_pipeline`) counts a queue of `b` bytes as
    /// `ceil(b / 80)` cells, and the agent's telemetry (`switch_agent::collect`) turns cells
    /// back into bytes with the same constant.
    TofinoCells,
    /// BMv2's `standard_metadata.enq_qdepth`: packets. A byte threshold becomes a packet
    /// count for packets of `packet_bytes` (e.g. the fabric's MTU-sized frames).
    Bmv2Packets {
        /// Bytes of the packets the queue is assumed to hold.
        packet_bytes: u32,
    },
}

impl QdepthUnit {
    /// Bytes per unit.
    pub fn unit_bytes(self) -> u64 {
        match self {
            QdepthUnit::TofinoCells => u64::from(QDEPTH_UNIT_BYTES_TOFINO),
            QdepthUnit::Bmv2Packets { packet_bytes } => u64::from(packet_bytes.max(1)),
        }
    }

    /// `bytes` in units, rounded up: a queue of `b ≥ bytes` bytes holds at least this many
    /// units (the netsim adapter rounds a queue's bytes up to cells the same way), so a
    /// byte threshold is crossed no later in units than in bytes.
    pub fn from_bytes(self, bytes: u64) -> u64 {
        bytes.div_ceil(self.unit_bytes())
    }
}

/// An ECN marking profile as the knobs give it (DCQCN's RED: Kmin, Kmax, Pmax; DCQCN,
/// SIGCOMM'15 §3.1), in bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EcnProfile {
    /// Queue depth where marking starts (probability 0), bytes.
    pub kmin_bytes: u64,
    /// Queue depth where the probability reaches `pmax`; at and above it every ECN-capable
    /// packet is marked, bytes.
    pub kmax_bytes: u64,
    /// Marking probability just below Kmax, in `[0, 1]`.
    pub pmax: f64,
}

/// An ECN profile the program cannot hold.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EcnProfileError {
    /// Pmax outside `[0, 1]` or not a number.
    #[error("ecn_profile: pmax {0} is not a probability in [0, 1]")]
    Pmax(f64),
    /// Kmin above Kmax.
    #[error("ecn_profile: kmin {kmin_bytes} B is above kmax {kmax_bytes} B")]
    Order {
        /// Kmin, bytes.
        kmin_bytes: u64,
        /// Kmax, bytes.
        kmax_bytes: u64,
    },
    /// A threshold beyond the 32-bit queue depth.
    #[error(
        "ecn_profile: {name} {bytes} B is {units} queue-depth units, beyond the program's 32 bits"
    )]
    TooDeep {
        /// `kmin` or `kmax`.
        name: &'static str,
        /// The threshold, bytes.
        bytes: u64,
        /// In the program's unit.
        units: u64,
    },
}

/// The `ecn_profile` entries of egress `port` for `profile` on a target whose queue depth
/// is in `unit`: one `ecn_red(kmax, mark_above)` per random draw `r` in
/// `0..2^ECN_RANDOM_BITS`. The program marks an ECN-capable packet when its queue depth `q`
/// (in `unit`) is `≥ kmax` or `> mark_above`, where `mark_above = Kmin + U_r` and `U_r` is
/// the midpoint quantile `floor((r + ½)·R / 2^bits)` of a uniform `U` on `[0, R)`,
/// `R = (Kmax − Kmin)/Pmax` (`hawkeye/ecn.rs` explains why): a packet with
/// `Kmin < q < Kmax` is marked with probability `Pmax·(q − Kmin)/(Kmax − Kmin)` within
/// `1/2^(bits+1)`. Pmax 0 marks only at Kmax and above.
pub fn ecn_profile_entries(
    port: u16,
    profile: &EcnProfile,
    unit: QdepthUnit,
) -> Result<Vec<TableEntry>, EcnProfileError> {
    let pmax = profile.pmax;
    if !(0.0..=1.0).contains(&pmax) {
        return Err(EcnProfileError::Pmax(pmax));
    }
    if profile.kmin_bytes > profile.kmax_bytes {
        return Err(EcnProfileError::Order {
            kmin_bytes: profile.kmin_bytes,
            kmax_bytes: profile.kmax_bytes,
        });
    }
    let units = |name: &'static str, bytes: u64| {
        let units = unit.from_bytes(bytes);
        if units > u64::from(u32::MAX) {
            Err(EcnProfileError::TooDeep { name, bytes, units })
        } else {
            Ok(units)
        }
    };
    let kmin = units("kmin", profile.kmin_bytes)?;
    let kmax = units("kmax", profile.kmax_bytes)?;
    let draws = 1u64 << ECN_RANDOM_BITS;
    Ok((0..draws)
        .map(|r| {
            let mark_above = if pmax == 0.0 {
                u64::from(u32::MAX)
            } else {
                let range = (kmax - kmin) as f64 / pmax;
                let quantile = ((r as f64 + 0.5) * range / draws as f64).floor() as u64;
                (kmin + quantile).min(u64::from(u32::MAX))
            };
            TableEntry::exact(vec![u64::from(port), r], "ecn_red", vec![kmax, mark_above])
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_spread_next_hops_in_order() {
        let e = forward_entries(Ipv4Addr::new(10, 0, 1, 1), &[3, 5, 9]);
        assert_eq!(e.len(), ECMP_BUCKETS as usize);
        let ports: Vec<u64> = e.iter().map(|x| x.params[0]).collect();
        assert_eq!(&ports[..4], &[3, 5, 9, 3]);
        assert_eq!(e[5].key, vec![0x0A00_0101, 5]);
        assert!(forward_entries(Ipv4Addr::new(10, 0, 1, 1), &[]).is_empty());
    }

    #[test]
    fn masks_are_one_hot_per_word() {
        let m = port_mask_entries(40);
        assert_eq!(m.len(), 80);
        assert_eq!(m[33].1.params, vec![0, 1 << 1]);
        assert_eq!(m[40].0, Table::EGRESS_PORT_MASK);
        assert_eq!(m[40].1.params, vec![1, 0]);
    }

    #[test]
    fn ecn_thresholds_round_bytes_up_to_the_unit_and_quantiles_spread_over_the_ramp() {
        assert_eq!(QdepthUnit::TofinoCells.from_bytes(400_000), 5000);
        assert_eq!(QdepthUnit::TofinoCells.from_bytes(81), 2);
        assert_eq!(
            QdepthUnit::Bmv2Packets { packet_bytes: 1000 }.from_bytes(5_500),
            6
        );
        let profile = EcnProfile {
            kmin_bytes: 8_000,
            kmax_bytes: 16_000,
            pmax: 0.5,
        };
        let e = ecn_profile_entries(3, &profile, QdepthUnit::TofinoCells).unwrap();
        assert_eq!(e.len(), 256);
        // Kmin 100 cells, Kmax 200 cells, R = 200 cells: U_r = floor((r + ½)·200/256).
        assert_eq!(e[0].key, vec![3, 0]);
        assert_eq!(e[0].params, vec![200, 100]);
        assert_eq!(e[255].params, vec![200, 100 + 199]);
        // Half the draws have U_r below 100 cells: a queue 100 cells above Kmin (here
        // Kmax) would be marked with probability 100/R = 1/2 without the Kmax rule.
        let below = e.iter().filter(|x| x.params[1] < 200).count();
        assert_eq!(below, 128);
    }

    #[test]
    fn ecn_profiles_the_program_cannot_hold_are_refused_by_name() {
        let bad = |kmin_bytes, kmax_bytes, pmax| {
            ecn_profile_entries(
                0,
                &EcnProfile {
                    kmin_bytes,
                    kmax_bytes,
                    pmax,
                },
                QdepthUnit::TofinoCells,
            )
            .unwrap_err()
            .to_string()
        };
        assert!(bad(1, 2, 1.5).contains("pmax 1.5"));
        assert!(bad(1, 2, f64::NAN).contains("pmax NaN"));
        assert!(bad(3, 2, 0.1).contains("kmin 3 B is above kmax 2 B"));
        assert!(bad(0, u64::MAX / 2, 0.1).contains("kmax"));
        // Pmax 0: only Kmax and above mark.
        let e = ecn_profile_entries(
            1,
            &EcnProfile {
                kmin_bytes: 0,
                kmax_bytes: 800,
                pmax: 0.0,
            },
            QdepthUnit::TofinoCells,
        )
        .unwrap();
        assert!(e.iter().all(|x| x.params == vec![10, u64::from(u32::MAX)]));
    }
}
