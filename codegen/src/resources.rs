//! SRAM estimate per module of a program variant (like HAWKEYE Fig. 13b): register bits
//! grouped by the module named in each register declaration, and the exact-match tables'
//! entries (the ECN profile's 2^ECN_RANDOM_BITS entries per port among them).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hawkmesh_dataplane::ir::{MatchKind, Program};

/// Register bits per module.
pub fn sram_bits(p: &Program) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for r in &p.registers {
        *m.entry(r.module.clone()).or_insert(0) += r.width as u64 * r.size as u64;
    }
    m
}

/// Exact-match table bits per table, named `table <name>`: entries × (key bits + the
/// widest action's data bits). A lower bound of what bf-p4c allocates (it adds version/valid
/// bits, action selectors and packs entries into 128-bit SRAM words); ternary tables live in
/// TCAM and are left out.
pub fn table_bits(p: &Program) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for t in &p.tables {
        if t.keys.iter().any(|(_, k)| *k == MatchKind::Ternary) {
            continue;
        }
        let key: u64 = t
            .keys
            .iter()
            .map(|(f, _)| u64::from(p.field(*f).width))
            .sum();
        let data = t
            .actions
            .iter()
            .map(|a| {
                p.actions[a.0 as usize]
                    .params
                    .iter()
                    .map(|f| u64::from(p.field(*f).width))
                    .sum::<u64>()
            })
            .max()
            .unwrap_or(0);
        m.insert(
            format!("table {}", t.name),
            (key + data) * u64::from(t.size),
        );
    }
    m
}

/// A human-readable report: registers per module, then exact-match tables.
pub fn report(p: &Program) -> String {
    let mut o = String::new();
    let mut bits = sram_bits(p);
    bits.extend(table_bits(p));
    let total: u64 = bits.values().sum();
    let _ = writeln!(o, "{:<24} {:>14} {:>10}", "module", "SRAM bits", "KiB");
    for (module, b) in &bits {
        let _ = writeln!(o, "{module:<24} {b:>14} {:>10.1}", *b as f64 / 8192.0);
    }
    let _ = writeln!(
        o,
        "{:<24} {total:>14} {:>10.1}",
        "total",
        total as f64 / 8192.0
    );
    o
}
