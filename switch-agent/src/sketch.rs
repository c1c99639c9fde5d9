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

use hawkmesh_dataplane::sketch::{SketchDump, SketchGeometry};
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
    /// Packets the sketch counted in all (the `sketch_total` cells summed).
    pub packets: u64,
}

/// Reads the sketch's registers through `backend`, returns the heavy part's flows, and
/// clears the registers. A register of the wrong size for `geometry` is an error naming it
/// (a program built with other sizes), not a silent misread.
pub fn read_and_reset(
    backend: &mut dyn SwitchBackend,
    geometry: SketchGeometry,
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
    // the light counter when the flag is set): read those cells alone. Over BF Runtime
    // this is one request for a few cells instead of all 65,536.
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
    let readout = SketchReadout {
        flows: dump.heavy_flows(),
        packets: total.iter().map(|t| t & 0xFFFF_FFFF).sum(),
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
