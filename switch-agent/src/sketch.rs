//! PARALEON's sketch readout on a ToR's control plane (PARALEON §III-B): every monitor
//! interval λ_MI the Elastic Sketch's registers are read through the switch backend — the
//! path the telemetry collection takes (the model in process, BF Runtime on a Tofino) — the
//! heavy part's flows and their estimates taken out, and the registers cleared for the next
//! interval. The tuner's `TorMonitor` takes the result (as bytes: the packets times the
//! interval's mean packet size, which the port counters give).
//!
//! Read, then clear: packets inserted between a register's read and its reset are lost to
//! both intervals (PARALEON reads and resets the same way; at ~µs per register on BF
//! Runtime's batched reads this is a few packets per interval).

use std::collections::BTreeMap;

use hawkmesh_dataplane::sketch::{distinct_flows, SketchDump, SketchGeometry};
use hawkmesh_wire::dataplane::{
    Register, SKETCH_FLAG_BIT, SKETCH_HEAVY_BUCKETS, SKETCH_LAMBDA, SKETCH_LIGHT_COUNTERS,
};

use crate::backend::{BackendError, SwitchBackend};

/// The sketch's geometry as the generated program builds it (`hawkmesh_wire::dataplane`).
pub fn deployed_geometry() -> SketchGeometry {
    SketchGeometry {
        heavy_bits: SKETCH_HEAVY_BUCKETS.trailing_zeros() as u8,
        light_bits: SKETCH_LIGHT_COUNTERS.trailing_zeros() as u8,
        lambda: SKETCH_LAMBDA,
    }
}

/// One interval's readout of a ToR's sketch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SketchReadout {
    /// Heavy-part flows (fingerprint → estimated packets).
    pub flows: BTreeMap<u32, u32>,
    /// Remembered flows the heavy part no longer holds that sent packets into the light
    /// part (fingerprint → estimated packets; `dataplane::sketch::displaced`).
    pub displaced: BTreeMap<u32, u32>,
    /// Packets the sketch counted in all (the `sketch_total` cells summed).
    pub packets: u64,
    /// Heavy buckets.
    pub buckets: usize,
    /// Heavy buckets no flow reached this interval.
    pub empty_buckets: usize,
}

impl SketchReadout {
    /// Distinct flows that reached the sketch this interval (linear counting over the
    /// heavy part, `dataplane::sketch::distinct_flows`).
    pub fn reached(&self) -> f64 {
        distinct_flows(self.buckets, self.empty_buckets)
    }

    /// The flows named (heavy and displaced) with the bytes each sent, at `packet_bytes`
    /// a packet.
    pub fn named_bytes(&self, packet_bytes: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.flows
            .iter()
            .chain(self.displaced.iter())
            .map(move |(fp, p)| (u64::from(*fp), u64::from(*p).saturating_mul(packet_bytes)))
    }
}

/// Reads the sketch's registers through `backend`, returns the heavy part's flows, and
/// clears the registers. A register of the wrong size for `geometry` is an error naming it
/// (a program built with other sizes), not a silent misread.
///
/// `remembered` are the flows the control plane's monitor remembers (`TorMonitor::
/// remembered`: fingerprints widened to its ids; one wider than a fingerprint is not the
/// sketch's and is skipped): those whose bucket another flow holds are looked up in the
/// light part too (a flow that lost its bucket still sends; without them a collision reads
/// as the flow going idle).
pub fn read_and_reset(
    backend: &mut dyn SwitchBackend,
    geometry: SketchGeometry,
    remembered: impl IntoIterator<Item = u64>,
) -> Result<SketchReadout, BackendError> {
    let heavy = 1usize << geometry.heavy_bits;
    let light_cells = 1usize << geometry.light_bits;
    let mut read = |register: Register, cells: usize| -> Result<Vec<u64>, BackendError> {
        let values = backend.read_register(register)?;
        if values.len() != cells {
            return Err(BackendError::Register {
                register,
                reason: format!(
                    "{} cells, the sketch's geometry needs {cells}",
                    values.len()
                ),
            });
        }
        Ok(values)
    };
    let key = read(Register::SKETCH_KEY, heavy)?;
    let votes = read(Register::SKETCH_VOTES, heavy)?;
    let total = read(Register::SKETCH_TOTAL, heavy)?;
    // The light part is 16× the heavy part and the heavy flows' estimates need only the
    // cells of flows flagged as having been evicted (Elastic Sketch's query: vote⁺ plus
    // the light counter when the flag is set), and the displaced flows' own: read those
    // cells alone. Over BF Runtime this is one request for some cells instead of all
    // 65,536.
    if Register::SKETCH_LIGHT.cells() as usize != light_cells {
        return Err(BackendError::Register {
            register: Register::SKETCH_LIGHT,
            reason: format!(
                "{} cells in the program, the sketch's geometry needs {light_cells}",
                Register::SKETCH_LIGHT.cells()
            ),
        });
    }
    let mut wanted: Vec<u32> = key
        .iter()
        .zip(&votes)
        .filter(|(k, v)| **k as u32 != 0 && **v & u64::from(SKETCH_FLAG_BIT) != 0)
        .map(|(k, _)| geometry.light(*k as u32) as u32)
        .collect();
    let held = |fp: u32| key.get(geometry.bucket(fp)).map_or(0, |k| *k as u32);
    let candidates: Vec<u32> = remembered
        .into_iter()
        .filter_map(|id| u32::try_from(id).ok())
        .filter(|fp| {
            let k = held(*fp);
            k != 0 && k != *fp
        })
        .collect();
    wanted.extend(candidates.iter().map(|fp| geometry.light(*fp) as u32));
    wanted.sort_unstable();
    wanted.dedup();
    if wanted.iter().any(|i| *i as usize >= light_cells) {
        return Err(BackendError::Register {
            register: Register::SKETCH_LIGHT,
            reason: format!("a light index past the geometry's {light_cells} cells"),
        });
    }
    let cells = backend.read_register_cells(Register::SKETCH_LIGHT, &wanted)?;
    if cells.len() != wanted.len() {
        return Err(BackendError::Register {
            register: Register::SKETCH_LIGHT,
            reason: format!("{} of {} cells read", cells.len(), wanted.len()),
        });
    }
    let mut light = vec![0u64; light_cells];
    for (i, v) in wanted.iter().zip(cells) {
        light[*i as usize] = v;
    }
    let dump = SketchDump {
        geometry,
        key: &key,
        votes: &votes,
        light: &light,
    };
    let displaced = candidates
        .iter()
        .map(|fp| (*fp, dump.displaced(*fp)))
        .filter(|(_, p)| *p > 0)
        .collect();
    let readout = SketchReadout {
        flows: dump.heavy_flows(),
        displaced,
        packets: total.iter().map(|t| t & 0xFFFF_FFFF).sum(),
        buckets: heavy,
        empty_buckets: dump.empty_buckets(),
    };
    for register in [
        Register::SKETCH_KEY,
        Register::SKETCH_VOTES,
        Register::SKETCH_LIGHT,
        Register::SKETCH_TOTAL,
    ] {
        backend.reset_register(register)?;
    }
    Ok(readout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ModelBackend;
    use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
    use hawkmesh_dataplane::ir::Program;
    use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
    use hawkmesh_dataplane::packets;
    use hawkmesh_dataplane::sketch::fingerprint;
    use hawkmesh_wire::dataplane::CPU_PORT;
    use hawkmesh_wire::telemetry::FiveTuple;
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    fn fp(flow: &FiveTuple) -> u32 {
        fingerprint(flow.src_ip, flow.dst_ip, flow.src_port, flow.dst_port)
    }

    fn send(model: &Rc<RefCell<Model>>, program: &Program, flow: &FiveTuple, n: u32) {
        for i in 0..n {
            let p = packets::rocev2_data(program, flow, 0, 2, 64, i, 1024);
            let input = IngressInput {
                ingress_port: 0,
                tstamp_ns: u64::from(i) * 1_000,
                routed_egress_port: Some(2),
            };
            model
                .borrow_mut()
                .process(&p, &input, 0)
                .expect("processed");
        }
    }

    /// A flow the monitor remembers that lost its heavy bucket to another is read from the
    /// light part (its packets, not zero: a collision is not the flow going idle); one
    /// whose bucket no flow reached is not asked for; the distinct flows are counted.
    #[test]
    fn a_remembered_flow_displaced_from_the_heavy_part_is_read_from_the_light_part() {
        let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
        let model = Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model");
        let model = Rc::new(RefCell::new(model));
        let mut backend = ModelBackend::new(model.clone());
        let geometry = deployed_geometry();
        let first = FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 1, 1]);
        // Another flow in the same heavy bucket, with another light counter.
        let other = (49153..u16::MAX)
            .map(|port| FiveTuple::rocev2([10, 0, 0, 1], port, [10, 0, 1, 1]))
            .find(|f| {
                geometry.bucket(fp(f)) == geometry.bucket(fp(&first))
                    && geometry.light(fp(f)) != geometry.light(fp(&first))
            })
            .expect("a colliding flow");
        let idle = FiveTuple::rocev2([10, 0, 0, 9], 50000, [10, 0, 1, 9]);

        // Interval 1: `other` alone holds the bucket.
        send(&model, &program, &other, 4);
        let one = read_and_reset(&mut backend, geometry, []).expect("interval 1");
        assert_eq!(one.flows.get(&fp(&other)), Some(&4));
        // Interval 2: `first` takes the bucket, `other` sends 3 packets and loses the vote.
        send(&model, &program, &first, 5);
        send(&model, &program, &other, 3);
        let two = read_and_reset(
            &mut backend,
            geometry,
            [fp(&other), fp(&idle), fp(&first)].map(u64::from),
        )
        .expect("interval 2");
        assert_eq!(two.flows.keys().copied().collect::<Vec<_>>(), [fp(&first)]);
        assert_eq!(
            two.displaced
                .iter()
                .map(|(k, v)| (*k, *v))
                .collect::<Vec<_>>(),
            [(fp(&other), 3)],
            "only the remembered flow whose bucket another holds, at its packets"
        );
        assert_eq!(two.packets, 8);
        // Two flows reached one bucket: linear counting says ~1 (the bucket is the unit).
        let buckets = 1usize << geometry.heavy_bits;
        assert_eq!((two.buckets, two.empty_buckets), (buckets, buckets - 1));
        assert!((two.reached() - 1.0).abs() < 0.01, "{}", two.reached());
        let named: Vec<(u64, u64)> = two.named_bytes(1_000).collect();
        assert_eq!(
            named,
            [
                (u64::from(fp(&first)), 5_000),
                (u64::from(fp(&other)), 3_000)
            ]
        );
    }
}
