//! DCQCN and ECN knobs changed while a simulation runs (PARALEON dispatches a new setting
//! every monitor interval): between two [`Simulation::run_until`] calls, a tuner sets the
//! knobs of every NIC (reaction and notification point) and the ECN profile of every switch
//! egress queue, by their names in [`hawkmesh_knobs`].
//!
//! Every knob of the table is honoured except `cnp_dscp`: netsim classifies by 802.1p
//! priority, so the CNPs' class is `cnp_802p_prio`, and a `cnp_dscp` change is refused
//! rather than ignored. Timers already running keep their deadline and take the new
//! period from their next round; rates, α and targets carry on from where they are.

use hawkmesh_knobs::knob;

use super::{Owner, Simulation};
use crate::dcqcn::DcqcnParams;

impl Simulation {
    /// Sets knobs by name (values in the knobs' units: µs, bytes, Mb/s, 1/1024, KB…).
    /// All or nothing: an unknown name, a value out of range, or Kmin above Kmax refuses
    /// the whole change, naming it.
    pub fn set_knobs(&mut self, values: &[(&str, f64)]) -> Result<(), String> {
        let mut c = self.dcqcn_config.clone();
        let (mut kmin, mut kmax, mut pmax) = (None, None, None);
        let mut cnp_priority = None;
        for (name, v) in values {
            let k = knob(name).map_err(|e| e.to_string())?;
            k.validate(*v).map_err(|e| e.to_string())?;
            let v = *v;
            match k.name {
                "rpg_time_reset" => c.rpg_time_reset = v,
                "rpg_byte_reset" => c.rpg_byte_reset = v as u64,
                "rpg_threshold" => c.rpg_threshold = v as u32,
                "rpg_max_rate" => c.rpg_max_rate = v,
                "rpg_ai_rate" => c.rpg_ai_rate = v,
                "rpg_hai_rate" => c.rpg_hai_rate = v,
                "rpg_gd" => c.rpg_gd = v as u32,
                "rpg_min_dec_fac" => c.rpg_min_dec_fac = v,
                "rpg_min_rate" => c.rpg_min_rate = v,
                "rate_to_set_on_first_cnp" => c.rate_to_set_on_first_cnp = v,
                "rate_reduce_monitor_period" => c.rate_reduce_monitor_period = v,
                "clamp_tgt_rate" => c.clamp_tgt_rate = v != 0.0,
                "clamp_tgt_rate_after_time_inc" => c.clamp_tgt_rate_after_time_inc = v != 0.0,
                "dce_tcp_g" => c.dce_tcp_g = v as u32,
                "dce_tcp_rtt" => c.dce_tcp_rtt = v,
                "initial_alpha_value" => c.initial_alpha_value = v as u32,
                "min_time_between_cnps" => c.min_time_between_cnps = v,
                "cnp_802p_prio" => {
                    c.cnp_802p_prio = Some(v as u8);
                    cnp_priority = Some(v as u8);
                }
                "kmin_kb" => kmin = Some((v * 1000.0) as u64),
                "kmax_kb" => kmax = Some((v * 1000.0) as u64),
                "pmax" => pmax = Some(v),
                other => {
                    return Err(format!(
                        "{other}: netsim classifies packets by 802.1p priority, so it has no \
                         effect here (the CNPs' class is cnp_802p_prio)"
                    ))
                }
            }
        }
        // Kmin ≤ Kmax on every switch port after the change.
        if kmin.is_some() || kmax.is_some() {
            for port in &self.ports {
                if matches!(port.owner, Owner::Switch(_)) {
                    let lo = kmin.unwrap_or(port.kmin);
                    let hi = kmax.unwrap_or(port.kmax);
                    if lo > hi {
                        return Err(format!(
                            "kmin_kb {} above kmax_kb {}",
                            lo as f64 / 1000.0,
                            hi as f64 / 1000.0
                        ));
                    }
                }
            }
        }
        self.p.dcqcn = DcqcnParams::from_config(&c);
        if let Some(p) = cnp_priority {
            self.p.cnp_priority = p;
        }
        self.dcqcn_config = c;
        for port in &mut self.ports {
            if matches!(port.owner, Owner::Switch(_)) {
                if let Some(v) = kmin {
                    port.kmin = v;
                }
                if let Some(v) = kmax {
                    port.kmax = v;
                }
                if let Some(v) = pmax {
                    port.pmax = v;
                }
            }
        }
        self.knob_changes += 1;
        Ok(())
    }

    /// How many times [`Simulation::set_knobs`] changed the knobs.
    pub fn knob_changes(&self) -> u64 {
        self.knob_changes
    }

    /// The value in force of a knob (the ECN knobs: of the first switch port; None for a
    /// knob netsim does not model, or a fabric without switches).
    pub fn knob_value(&self, name: &str) -> Option<f64> {
        let c = &self.dcqcn_config;
        let switch_port = self
            .ports
            .iter()
            .find(|p| matches!(p.owner, Owner::Switch(_)));
        Some(match knob(name).ok()?.name {
            "rpg_time_reset" => c.rpg_time_reset,
            "rpg_byte_reset" => c.rpg_byte_reset as f64,
            "rpg_threshold" => f64::from(c.rpg_threshold),
            "rpg_max_rate" => c.rpg_max_rate,
            "rpg_ai_rate" => c.rpg_ai_rate,
            "rpg_hai_rate" => c.rpg_hai_rate,
            "rpg_gd" => f64::from(c.rpg_gd),
            "rpg_min_dec_fac" => c.rpg_min_dec_fac,
            "rpg_min_rate" => c.rpg_min_rate,
            "rate_to_set_on_first_cnp" => c.rate_to_set_on_first_cnp,
            "rate_reduce_monitor_period" => c.rate_reduce_monitor_period,
            "clamp_tgt_rate" => f64::from(u8::from(c.clamp_tgt_rate)),
            "clamp_tgt_rate_after_time_inc" => f64::from(u8::from(c.clamp_tgt_rate_after_time_inc)),
            "dce_tcp_g" => f64::from(c.dce_tcp_g),
            "dce_tcp_rtt" => c.dce_tcp_rtt,
            "initial_alpha_value" => f64::from(c.initial_alpha_value),
            "min_time_between_cnps" => c.min_time_between_cnps,
            "cnp_802p_prio" => f64::from(self.p.cnp_priority),
            "kmin_kb" => switch_port?.kmin as f64 / 1000.0,
            "kmax_kb" => switch_port?.kmax as f64 / 1000.0,
            "pmax" => switch_port?.pmax,
            _ => return None,
        })
    }
}
