//! SRAM estimate per module of a program variant (like HAWKEYE Fig. 13b): register bits
//! grouped by the module named in each register declaration.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hawkmesh_dataplane::ir::Program;

/// Register bits per module.
pub fn sram_bits(p: &Program) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for r in &p.registers {
        *m.entry(r.module.clone()).or_insert(0) += r.width as u64 * r.size as u64;
    }
    m
}

/// A human-readable report.
pub fn report(p: &Program) -> String {
    let mut o = String::new();
    let bits = sram_bits(p);
    let total: u64 = bits.values().sum();
    let _ = writeln!(o, "{:<20} {:>14} {:>10}", "module", "SRAM bits", "KiB");
    for (module, b) in &bits {
        let _ = writeln!(o, "{module:<20} {b:>14} {:>10.1}", *b as f64 / 8192.0);
    }
    let _ = writeln!(
        o,
        "{:<20} {total:>14} {:>10.1}",
        "total",
        total as f64 / 8192.0
    );
    o
}
