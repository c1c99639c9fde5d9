//! Exact-match tables and their interning: models of one program share identical table
//! states and table sets.

use super::*;

/// Exact-match key hasher (keys are installed by the control plane; no need for SipHash).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        x ^ (x >> 33)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ *b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ ((v >> 64) as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    }
}

/// Most parameters of an action of a [`CTable::direct`] table.
pub(super) const DIRECT_PARAMS: usize = 2;
/// Keys below this are looked up in [`TableState::direct`] (ports); others in the hash map.
pub(super) const DIRECT_KEYS: u128 = 1024;

/// An entry of a directly indexed exact table (`action` is `NO_SLOT` where none).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Direct {
    pub(super) action: u16,
    pub(super) params: [u64; DIRECT_PARAMS],
}

pub(super) const NO_DIRECT: Direct = Direct {
    action: NO_SLOT,
    params: [0; DIRECT_PARAMS],
};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct TableState {
    /// The entries of `exact` with a key below `direct.len()` (ports), by key: one load per
    /// lookup instead of a hash probe and the parameters' own allocation.
    pub(super) direct: Vec<Direct>,
    pub(super) exact: HashMap<u128, (ActionId, Vec<u64>), BuildHasherDefault<KeyHasher>>,
    pub(super) ternary: Vec<(u128, u128, u32, ActionId, Vec<u64>)>,
    pub(super) entries: usize,
}

impl TableState {
    /// A hash of the entries (equal tables hash alike, whatever the order of insertion).
    pub(super) fn content_hash(&self) -> u64 {
        use std::hash::{BuildHasher, Hash};
        let build = BuildHasherDefault::<KeyHasher>::default();
        let mut h = build.build_hasher();
        self.direct.hash(&mut h);
        self.ternary.hash(&mut h);
        self.entries.hash(&mut h);
        let exact = self
            .exact
            .iter()
            .map(|e| build.hash_one(e))
            .fold(0u64, u64::wrapping_add);
        exact.hash(&mut h);
        h.finish()
    }
}

/// Tables with the same entries, shared by the models that installed them (a fabric's
/// switches mostly install the same port tables): one copy stays in cache for all of them.
pub(super) static TABLES: Mutex<Vec<(u64, Weak<TableState>)>> = Mutex::new(Vec::new());

/// The shared copy of `table` (registered if it is the first with these entries).
pub(super) fn intern_table(table: Arc<TableState>) -> Arc<TableState> {
    let Ok(mut all) = TABLES.lock() else {
        return table;
    };
    all.retain(|(_, t)| t.strong_count() > 0);
    let hash = table.content_hash();
    for (h, t) in all.iter() {
        if *h == hash {
            if let Some(t) = t.upgrade() {
                if *t == *table {
                    return t;
                }
            }
        }
    }
    all.push((hash, Arc::downgrade(&table)));
    table
}

/// Sets of (shared) tables, shared in turn by the models whose tables are all equal: a
/// lookup starts from a slice that stays in cache however many switches take turns.
pub(super) static TABLE_SETS: Mutex<Vec<Weak<[Arc<TableState>]>>> = Mutex::new(Vec::new());

/// The shared copy of a set of shared tables.
pub(super) fn intern_table_set(tables: Vec<Arc<TableState>>) -> Arc<[Arc<TableState>]> {
    let Ok(mut all) = TABLE_SETS.lock() else {
        return tables.into();
    };
    all.retain(|s| s.strong_count() > 0);
    let same = |s: &[Arc<TableState>]| {
        s.len() == tables.len() && s.iter().zip(&tables).all(|(a, b)| Arc::ptr_eq(a, b))
    };
    if let Some(found) = all.iter().filter_map(Weak::upgrade).find(|s| same(s)) {
        return found;
    }
    let set: Arc<[Arc<TableState>]> = tables.into();
    all.push(Arc::downgrade(&set));
    set
}
