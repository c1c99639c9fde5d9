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
