//! RoCEv2's outer UDP source port, as the Linux RDMA stack derives it — what ECMP hashes,
//! and so what a probe must reproduce to take a connection's path.
//!
//! - A GRH flow label maps to the source port as `((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)) |
//!   0xC000` (`rdma_flow_label_to_udp_sport`, include/rdma/ib_verbs.h; rdma-core does the
//!   same for UD address handles).
//! - An RC/UC connection whose flow label is 0 gets one from both QPNs,
//!   `rdma_calc_flow_label(lqpn, rqpn)`: v = lqpn · rqpn; v ^= v >> 20; v ^= v >> 40; the low
//!   20 bits — symmetric, so both ends derive the same port (`rdma_get_udp_sport`, used by
//!   rxe and mlx5).

/// The 20 bits of a GRH flow label (IBTA 8.3.1).
pub const FLOW_LABEL_MASK: u32 = 0xF_FFFF;
/// The lowest RoCEv2 source port the mapping produces.
pub const UDP_SPORT_MIN: u16 = 0xC000;

/// The UDP source port a flow label maps to.
pub fn flow_label_to_udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & FLOW_LABEL_MASK;
    (((fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)) as u16) | UDP_SPORT_MIN
}

/// The flow label a connection without one gets from its two QPNs (symmetric).
pub fn calc_flow_label(lqpn: u32, rqpn: u32) -> u32 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    (v as u32) & FLOW_LABEL_MASK
}

/// A connection's UDP source port: from its flow label, or from its QPNs when the label is 0.
pub fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let fl = match flow_label & FLOW_LABEL_MASK {
        0 => calc_flow_label(lqpn, rqpn),
        fl => fl,
    };
    flow_label_to_udp_sport(fl)
}

/// A non-zero flow label that maps to `sport` (for a UD address handle: a zero label would
/// let the stack pick a random port); `None` below [`UDP_SPORT_MIN`], which no label gives.
pub fn flow_label_for_udp_sport(sport: u16) -> Option<u32> {
    if sport < UDP_SPORT_MIN {
        return None;
    }
    let low = u32::from(sport & 0x3FFF);
    // 0xC000 itself needs equal, non-zero halves: 0x4001 folds to 1 ^ 1 = 0.
    Some(if low == 0 { 0x4001 } else { low })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_roce_source_port_has_a_flow_label_that_maps_back_to_it() {
        for sport in UDP_SPORT_MIN..=u16::MAX {
            let fl = flow_label_for_udp_sport(sport).unwrap();
            assert_ne!(fl, 0);
            assert_eq!(flow_label_to_udp_sport(fl), sport, "{sport:#x}");
        }
        assert_eq!(flow_label_for_udp_sport(4791), None);
    }

    #[test]
    fn the_qpn_derived_label_is_symmetric_and_matches_the_kernel_formula() {
        // Worked by hand: 0x11 · 0x22 = 0x242; no bits above 20 to fold.
        assert_eq!(calc_flow_label(0x11, 0x22), 0x242);
        // 0x12345 · 0xABCDE = 0xC_3795_41D6 (36 bits); ^ (v >> 20) = 0xC_3795_41D6 ^ 0xC379
        // = 0xC_3795_82AF; the low 20 bits: 0x582AF.
        assert_eq!(calc_flow_label(0x12345, 0xABCDE), 0x582AF);
        assert_eq!(
            calc_flow_label(0x12345, 0xABCDE),
            calc_flow_label(0xABCDE, 0x12345)
        );
        // A set label wins; a zero one falls back to the QPNs, the same at both ends.
        assert_eq!(udp_sport(0x5, 1, 2), 0xC005);
        assert_eq!(udp_sport(0, 0x11, 0x22), 0xC242);
        assert_eq!(udp_sport(0, 0x22, 0x11), udp_sport(0, 0x11, 0x22));
        // The fold of the label's top six bits into the port's low bits.
        assert_eq!(flow_label_to_udp_sport(0xF_C000), 0xC000 | 0x3F);
    }
}
