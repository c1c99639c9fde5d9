//! The BF Runtime description of the switch's running program (`bfrt.json`: what bf-p4c
//! writes and bf_switchd serves in `GetForwardingPipelineConfig`), and the ids the agent
//! uses for each of its typed registers and tables, checked against it.
//!
//! Schema facts (p4c `backends/tofino/bf-p4c/control-plane/bfruntime.cpp`; open-p4studio
//! `bf_rt_common/bf_rt_info_impl.cpp`, the parser bf_switchd uses): a register is a table of
//! type `Register` keyed by `$REGISTER_INDEX`, its cell one data field per P4 struct member
//! (`<Control>.<register>.f1` for a plain `bit<W>`, `.lo` / `.hi` for the program's pair,
//! lower id = low word); a match table lists its key fields and `action_specs` with their
//! parameters. Selector tables wrap their data in a `oneof`; this parser reads it (rbfrt
//! 0.1.11 cannot), although the hawkmesh program has none.

use std::collections::BTreeMap;

use hawkmesh_wire::dataplane::{Register, Table};
use serde::Deserialize;

/// Why the description cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BfrtInfoError {
    /// Not the JSON of a BF Runtime description.
    #[error("bfrt.json: {0}")]
    Json(String),
    /// Two tables with one name or one id.
    #[error("bfrt.json: table `{0}` is described twice (name or id)")]
    Duplicate(String),
    /// The running program lacks an object the agent needs.
    #[error("the switch's program has no {kind} `{name}` (is another program or version loaded?)")]
    Missing {
        /// "register", "table", "action", "key field", "data field".
        kind: &'static str,
        /// The object.
        name: String,
    },
    /// An object exists but not in the shape the agent was built for.
    #[error("the switch's program has `{name}` but {what}")]
    Mismatch {
        /// The object.
        name: String,
        /// How it differs.
        what: String,
    },
}

#[derive(Deserialize)]
struct RawDoc {
    tables: Vec<RawTable>,
}

#[derive(Deserialize)]
struct RawTable {
    name: String,
    id: u32,
    table_type: String,
    size: u64,
    #[serde(default)]
    key: Vec<RawField>,
    #[serde(default)]
    action_specs: Vec<RawAction>,
    #[serde(default)]
    data: Vec<RawData>,
}

#[derive(Deserialize)]
struct RawAction {
    id: u32,
    name: String,
    #[serde(default)]
    data: Vec<RawField>,
}

#[derive(Deserialize)]
struct RawData {
    #[serde(default)]
    singleton: Option<RawField>,
    #[serde(default)]
    oneof: Vec<RawField>,
}

#[derive(Deserialize)]
struct RawField {
    id: u32,
    name: String,
    #[serde(default)]
    match_type: Option<String>,
    #[serde(rename = "type", default)]
    ty: Option<RawType>,
}

#[derive(Deserialize)]
struct RawType {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    width: Option<u32>,
}

/// A key or data field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldInfo {
    /// Field id.
    pub id: u32,
    /// Name (`meta.lookup_dst_addr`, `$REGISTER_INDEX`, `Ingress.port_packets.f1`).
    pub name: String,
    /// Width in bits (`bytes` fields: their width; `uintN`: N; `bool`: 1; else 0).
    pub width: u32,
    /// Match type of a key field (`Exact`, `Ternary`, ...); empty for data.
    pub match_type: String,
}

/// An action a table's entries may name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActionInfo {
    /// Action id.
    pub id: u32,
    /// Full name (`Ingress.set_route`).
    pub name: String,
    /// Parameters, in order.
    pub params: Vec<FieldInfo>,
}

/// One table of the description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// Full name (`pipe.Ingress.forward`).
    pub name: String,
    /// Table id.
    pub id: u32,
    /// `MatchAction_Direct`, `Register`, `PreMgid`, ...
    pub table_type: String,
    /// Entries (cells of a register).
    pub size: u64,
    /// Key fields, in order.
    pub keys: Vec<FieldInfo>,
    /// Actions.
    pub actions: Vec<ActionInfo>,
    /// Table-level data fields (a register's cell fields), singletons and `oneof` members.
    pub data: Vec<FieldInfo>,
}

impl TableInfo {
    /// The key field named `name`.
    pub fn key(&self, name: &str) -> Option<&FieldInfo> {
        self.keys.iter().find(|k| k.name == name)
    }
    /// The data field named `name`.
    pub fn data_field(&self, name: &str) -> Option<&FieldInfo> {
        self.data.iter().find(|d| d.name == name)
    }
    /// The action whose name is `name` or ends with `.name`.
    pub fn action(&self, name: &str) -> Option<&ActionInfo> {
        self.actions
            .iter()
            .find(|a| a.name == name || a.name.rsplit('.').next() == Some(name))
    }
}

fn field(raw: RawField) -> FieldInfo {
    let width = match raw.ty.as_ref() {
        Some(t) => match t.kind.as_str() {
            "bytes" => t.width.unwrap_or(0),
            "bool" => 1,
            k => k
                .strip_prefix("uint")
                .or_else(|| k.strip_prefix("int"))
                .and_then(|w| w.parse().ok())
                .unwrap_or(0),
        },
        None => 0,
    };
    FieldInfo {
        id: raw.id,
        name: raw.name,
        width,
        match_type: raw.match_type.unwrap_or_default(),
    }
}

/// A BF Runtime description: tables by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BfrtInfo {
    tables: BTreeMap<String, TableInfo>,
}

impl BfrtInfo {
    /// Parses a description (a program's bfrt.json, or bf_switchd's fixed tables, which have
    /// the same shape).
    pub fn parse(text: &[u8]) -> Result<BfrtInfo, BfrtInfoError> {
        let doc: RawDoc =
            serde_json::from_slice(text).map_err(|e| BfrtInfoError::Json(e.to_string()))?;
        let mut info = BfrtInfo::default();
        let mut ids = std::collections::BTreeSet::new();
        for t in doc.tables {
            if !ids.insert(t.id) || info.tables.contains_key(&t.name) {
                return Err(BfrtInfoError::Duplicate(t.name));
            }
            let data = t
                .data
                .into_iter()
                .flat_map(|d| d.singleton.into_iter().chain(d.oneof))
                .map(field)
                .collect();
            let table = TableInfo {
                name: t.name.clone(),
                id: t.id,
                table_type: t.table_type,
                size: t.size,
                keys: t.key.into_iter().map(field).collect(),
                actions: t
                    .action_specs
                    .into_iter()
                    .map(|a| ActionInfo {
                        id: a.id,
                        name: a.name,
                        params: a.data.into_iter().map(field).collect(),
                    })
                    .collect(),
                data,
            };
            info.tables.insert(t.name, table);
        }
        Ok(info)
    }

    /// Adds the tables of `other` (bf_switchd's fixed tables beside the program's).
    pub fn merge(&mut self, other: BfrtInfo) -> Result<(), BfrtInfoError> {
        for (name, t) in other.tables {
            if self.tables.contains_key(&name) || self.tables.values().any(|x| x.id == t.id) {
                return Err(BfrtInfoError::Duplicate(name));
            }
            self.tables.insert(name, t);
        }
        Ok(())
    }

    /// Every table.
    pub fn tables(&self) -> impl Iterator<Item = &TableInfo> {
        self.tables.values()
    }

    /// The table named `name` exactly.
    pub fn table(&self, name: &str) -> Option<&TableInfo> {
        self.tables.get(name)
    }

    /// The table with id `id`.
    pub fn table_by_id(&self, id: u32) -> Option<&TableInfo> {
        self.tables.values().find(|t| t.id == id)
    }

    /// The program's table or register whose name ends with `.<short>` (`forward` →
    /// `pipe.Ingress.forward`): P4 object names are unique across the program's controls.
    fn program_object(&self, kind: &'static str, short: &str) -> Result<&TableInfo, BfrtInfoError> {
        let suffix = format!(".{short}");
        let mut found = self
            .tables
            .values()
            .filter(|t| t.name.starts_with("pipe.") && t.name.ends_with(&suffix));
        let first = found.next().ok_or_else(|| BfrtInfoError::Missing {
            kind,
            name: short.to_string(),
        })?;
        if let Some(second) = found.next() {
            return Err(BfrtInfoError::Mismatch {
                name: short.to_string(),
                what: format!("it is both `{}` and `{}`", first.name, second.name),
            });
        }
        Ok(first)
    }
}

/// How the agent reads and writes one register over BF Runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegisterIds {
    /// The register.
    pub register: Register,
    /// Its table id.
    pub table_id: u32,
    /// Its full name.
    pub table_name: String,
    /// Id of the `$REGISTER_INDEX` key field.
    pub index_id: u32,
    /// The cell's data field (a pair register: its low word).
    pub lo: FieldInfo,
    /// A pair register's high word.
    pub hi: Option<FieldInfo>,
}

/// How the agent writes one table's entries over BF Runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableIds {
    /// The table.
    pub table: Table,
    /// Its description.
    pub info: TableInfo,
}

/// The ids of every register and table the agent's program has, resolved in the switch's
/// description and checked against the shapes the agent was built for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramIds {
    registers: Vec<RegisterIds>,
    tables: Vec<TableIds>,
}

impl ProgramIds {
    /// Resolves every [`Register`] and [`Table`] in `info`; the first object missing or
    /// differing is named in the error.
    pub fn resolve(info: &BfrtInfo) -> Result<ProgramIds, BfrtInfoError> {
        let mut registers = Vec::with_capacity(Register::ALL.len());
        for register in Register::ALL {
            let t = info.program_object("register", register.name())?;
            if t.table_type != "Register" {
                return Err(BfrtInfoError::Mismatch {
                    name: t.name.clone(),
                    what: format!("it is a {} table, not a register", t.table_type),
                });
            }
            if t.size != u64::from(register.cells()) {
                return Err(BfrtInfoError::Mismatch {
                    name: t.name.clone(),
                    what: format!(
                        "it has {} cells, the agent's program {}",
                        t.size,
                        register.cells()
                    ),
                });
            }
            let index = t
                .key("$REGISTER_INDEX")
                .ok_or_else(|| BfrtInfoError::Missing {
                    kind: "key field",
                    name: format!("{}.$REGISTER_INDEX", t.name),
                })?;
            let control_name = t.name.strip_prefix("pipe.").unwrap_or(&t.name);
            let data = |member: &str, width: u32| -> Result<FieldInfo, BfrtInfoError> {
                let name = format!("{control_name}.{member}");
                let f = t.data_field(&name).ok_or_else(|| BfrtInfoError::Missing {
                    kind: "data field",
                    name: name.clone(),
                })?;
                if f.width != width {
                    return Err(BfrtInfoError::Mismatch {
                        name,
                        what: format!("it is {} bits wide, the agent's {width}", f.width),
                    });
                }
                Ok(f.clone())
            };
            let (lo, hi) = if register.width_bits() == 64 {
                let (lo, hi) = (data("lo", 32)?, data("hi", 32)?);
                if lo.id > hi.id {
                    return Err(BfrtInfoError::Mismatch {
                        name: t.name.clone(),
                        what: "its `hi` field has the lower id (BF Runtime takes the lower id as the low word)".into(),
                    });
                }
                (lo, Some(hi))
            } else {
                (data("f1", u32::from(register.width_bits()))?, None)
            };
            registers.push(RegisterIds {
                register,
                table_id: t.id,
                table_name: t.name.clone(),
                index_id: index.id,
                lo,
                hi,
            });
        }
        let mut tables = Vec::with_capacity(Table::ALL.len());
        for table in Table::ALL {
            let t = info.program_object("table", table.name())?;
            if !t.table_type.starts_with("MatchAction") {
                return Err(BfrtInfoError::Mismatch {
                    name: t.name.clone(),
                    what: format!("it is a {} table, not a match-action table", t.table_type),
                });
            }
            tables.push(TableIds {
                table,
                info: t.clone(),
            });
        }
        Ok(ProgramIds { registers, tables })
    }

    /// The ids of `register`.
    pub fn register(&self, register: Register) -> &RegisterIds {
        // `resolve` fills one entry per `Register::ALL`, in that order.
        &self.registers[Register::ALL
            .iter()
            .position(|r| *r == register)
            .unwrap_or(0)]
    }

    /// The ids of `table`.
    pub fn table(&self, table: Table) -> &TableIds {
        &self.tables[Table::ALL.iter().position(|t| *t == table).unwrap_or(0)]
    }
}
