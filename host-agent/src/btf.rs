//! Struct member offsets from the kernel's BTF (Linux Documentation/bpf/btf.rst), for the
//! eBPF service tracer (`crate::ebpf`, feature `ebpf`): the RDMA structures it reads (`struct ib_qp`,
//! `struct ib_qp_attr`, …) live in the `ib_core` module, whose BTF
//! (`/sys/kernel/btf/ib_core`) is split BTF on top of `/sys/kernel/btf/vmlinux` (type ids
//! and string offsets continue the base's), which the loader's own relocation does not
//! read. Only what offsets need is kept: names, kinds, sizes, member lists.

use std::collections::HashMap;

use thiserror::Error;

const BTF_MAGIC: u16 = 0xEB9F;

/// Why BTF could not be read or a member found.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum BtfError {
    /// Bytes that are not BTF.
    #[error("{place}: byte {at}: {reason}")]
    Malformed {
        /// The file.
        place: String,
        /// Byte offset.
        at: usize,
        /// What is wrong.
        reason: String,
    },
    /// A struct or member the program needs is not there.
    #[error("{place}: {reason}")]
    Missing {
        /// The file(s) searched.
        place: String,
        /// What was not found.
        reason: String,
    },
}

/// BTF type kinds used here (include/uapi/linux/btf.h `BTF_KIND_*`).
mod kind {
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const TYPE_TAG: u32 = 18;
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Member {
    name: String,
    type_id: u32,
    bit_offset: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Type {
    name: String,
    kind: u32,
    /// Size (structs, unions) or the referenced type (typedefs, modifiers).
    size_or_type: u32,
    members: Vec<Member>,
}

/// Parsed BTF: a base (vmlinux) or split BTF over it (a module).
#[derive(Clone, Debug)]
pub struct Btf {
    place: String,
    /// Offset of `strings[0]` (0 for a base; the base's string length for split BTF).
    str_base: usize,
    strings: Vec<u8>,
    /// Id of `types[0]` (1 for a base; base count + 1 for split BTF).
    first_id: u32,
    types: Vec<Type>,
    /// The base's types (split BTF only), for ids below `first_id`.
    base: Option<Box<Btf>>,
    /// Structs and unions by name, to their id.
    by_name: HashMap<String, u32>,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

impl Btf {
    /// Parses `bytes` (from `place`, for messages), split over `base` when given.
    pub fn parse(place: &str, bytes: &[u8], base: Option<Btf>) -> Result<Btf, BtfError> {
        let bad = |at: usize, reason: String| BtfError::Malformed {
            place: place.to_string(),
            at,
            reason,
        };
        let magic = u16_at(bytes, 0).ok_or_else(|| bad(0, "shorter than a header".into()))?;
        if magic != BTF_MAGIC {
            return Err(bad(
                0,
                format!("magic {magic:#06x} is not BTF's {BTF_MAGIC:#06x} (little endian)"),
            ));
        }
        let header = |at| u32_at(bytes, at).ok_or_else(|| bad(at, "header cut short".into()));
        let hdr_len = header(4)? as usize;
        let (type_off, type_len) = (header(8)? as usize, header(12)? as usize);
        let (str_off, str_len) = (header(16)? as usize, header(20)? as usize);
        let section = |off: usize, len: usize, what: &str| {
            let start = hdr_len.checked_add(off);
            let end = start.and_then(|s| s.checked_add(len));
            match (start, end) {
                (Some(s), Some(e)) if e <= bytes.len() => Ok(&bytes[s..e]),
                _ => Err(bad(
                    hdr_len,
                    format!(
                        "{what} section {off}+{len} runs past the end ({} bytes)",
                        bytes.len()
                    ),
                )),
            }
        };
        let types_bytes = section(type_off, type_len, "type")?;
        let strings = section(str_off, str_len, "string")?;
        let (first_id, str_base) = match &base {
            Some(b) => (b.next_id(), b.string_end()),
            None => (1, 0),
        };
        let types_start = hdr_len + type_off;
        let name = |off: u32, at: usize| -> Result<String, BtfError> {
            let off = off as usize;
            if off == 0 {
                return Ok(String::new());
            }
            let Some(local) = off.checked_sub(str_base) else {
                // Split BTF refers to the base's strings by their own offsets.
                return base.as_ref().and_then(|b| b.string_at(off)).ok_or_else(|| {
                    bad(at, format!("name offset {off} not in the base's strings"))
                });
            };
            let tail = strings
                .get(local..)
                .ok_or_else(|| bad(at, format!("name offset {off} past the strings")))?;
            let end = tail.iter().position(|&c| c == 0).unwrap_or(tail.len());
            Ok(String::from_utf8_lossy(&tail[..end]).into_owned())
        };
        let mut types = Vec::new();
        let mut by_name = HashMap::new();
        let mut at = 0;
        while at < types_bytes.len() {
            let abs = types_start + at;
            let field = |o: usize| {
                u32_at(types_bytes, at + o).ok_or_else(|| bad(abs + o, "type cut short".into()))
            };
            let (name_off, info, size_or_type) = (field(0)?, field(4)?, field(8)?);
            let vlen = (info & 0xFFFF) as usize;
            let kind = (info >> 24) & 0x1F;
            let kind_flag = info >> 31 == 1;
            at += 12;
            // Bytes of kind-specific data after the common part (btf.rst §2.2).
            let extra = match kind {
                1 | 14 | 17 => 4,          // INT, VAR, DECL_TAG
                3 => 12,                   // ARRAY
                4 | 5 => 12 * vlen,        // STRUCT, UNION
                6 | 13 => 8 * vlen,        // ENUM, FUNC_PROTO
                15 | 19 => 12 * vlen,      // DATASEC, ENUM64
                2 | 7..=12 | 16 | 18 => 0, // PTR, FWD, TYPEDEF, modifiers, FUNC, FLOAT, TYPE_TAG
                other => return Err(bad(abs, format!("unknown type kind {other}"))),
            };
            if at + extra > types_bytes.len() {
                return Err(bad(
                    abs,
                    format!("kind {kind} data runs past the type section"),
                ));
            }
            let mut members = Vec::new();
            if kind == kind::STRUCT || kind == kind::UNION {
                for m in 0..vlen {
                    let o = at + 12 * m;
                    let word = |k: usize| u32_at(types_bytes, o + k).unwrap_or(0);
                    let offset = word(8);
                    members.push(Member {
                        name: name(word(0), types_start + o)?,
                        type_id: word(4),
                        bit_offset: if kind_flag {
                            offset & 0x00FF_FFFF
                        } else {
                            offset
                        },
                    });
                }
            }
            at += extra;
            // Names matter for structs and unions only (the others are followed by id).
            let type_name = if kind == kind::STRUCT || kind == kind::UNION {
                name(name_off, abs)?
            } else {
                String::new()
            };
            let id = first_id + types.len() as u32;
            if (kind == kind::STRUCT || kind == kind::UNION) && !type_name.is_empty() {
                by_name.entry(type_name.clone()).or_insert(id);
            }
            types.push(Type {
                name: type_name,
                kind,
                size_or_type,
                members,
            });
        }
        Ok(Btf {
            place: place.to_string(),
            str_base,
            strings: strings.to_vec(),
            first_id,
            types,
            base: base.map(Box::new),
            by_name,
        })
    }

    /// The id the next type would get (for split BTF over this one).
    fn next_id(&self) -> u32 {
        self.first_id + self.types.len() as u32
    }

    /// The offset just past this BTF's strings (where split BTF's strings start).
    fn string_end(&self) -> usize {
        self.str_base + self.strings.len()
    }

    fn string_at(&self, off: usize) -> Option<String> {
        match off.checked_sub(self.str_base) {
            Some(local) => {
                let tail = self.strings.get(local..)?;
                let end = tail.iter().position(|&c| c == 0).unwrap_or(tail.len());
                Some(String::from_utf8_lossy(&tail[..end]).into_owned())
            }
            None => self.base.as_ref()?.string_at(off),
        }
    }

    fn get(&self, id: u32) -> Option<&Type> {
        if id >= self.first_id {
            self.types.get((id - self.first_id) as usize)
        } else {
            self.base.as_ref()?.get(id)
        }
    }

    fn struct_id(&self, name: &str) -> Option<u32> {
        self.by_name
            .get(name)
            .copied()
            .or_else(|| self.base.as_ref()?.struct_id(name))
    }

    /// Follows typedefs and modifiers to the struct or union `id` names.
    fn resolve(&self, mut id: u32) -> Option<&Type> {
        for _ in 0..32 {
            let t = self.get(id)?;
            match t.kind {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(t),
            }
        }
        None
    }

    /// Finds member `name` of `t`, looking into anonymous struct/union members too: its bit
    /// offset from the start of `t` and its type id.
    fn member(&self, t: &Type, name: &str, depth: u32) -> Option<(u32, u32)> {
        if depth > 8 {
            return None;
        }
        for m in &t.members {
            if m.name == name {
                return Some((m.bit_offset, m.type_id));
            }
            if m.name.is_empty() {
                if let Some(inner) = self.resolve(m.type_id) {
                    if let Some((off, ty)) = self.member(inner, name, depth + 1) {
                        return Some((m.bit_offset + off, ty));
                    }
                }
            }
        }
        None
    }

    /// The byte offset of `path` (members, outermost first) inside `struct name`.
    pub fn offset_of(&self, name: &str, path: &[&str]) -> Result<u32, BtfError> {
        let missing = |reason: String| BtfError::Missing {
            place: self.place.clone(),
            reason,
        };
        let id = self
            .struct_id(name)
            .ok_or_else(|| missing(format!("no struct {name}")))?;
        let mut t = self
            .resolve(id)
            .ok_or_else(|| missing(format!("struct {name}: type {id} does not resolve")))?;
        let mut bits = 0;
        for (i, step) in path.iter().enumerate() {
            let (off, ty) = self.member(t, step, 0).ok_or_else(|| {
                missing(format!("struct {name}: no member {}", path[..=i].join(".")))
            })?;
            bits += off;
            if i + 1 < path.len() {
                t = self.resolve(ty).ok_or_else(|| {
                    missing(format!(
                        "struct {name}: {} does not resolve",
                        path[..=i].join(".")
                    ))
                })?;
            }
        }
        if bits % 8 != 0 {
            return Err(missing(format!(
                "struct {name}: {} is a bitfield (bit {bits})",
                path.join(".")
            )));
        }
        Ok(bits / 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a BTF blob from (name offset, info, size/type, extra words) entries.
    fn blob(strings: &[u8], types: &[(u32, u32, u32, Vec<u32>)]) -> Vec<u8> {
        let mut t = Vec::new();
        for (name, info, size, extra) in types {
            for w in [*name, *info, *size].iter().chain(extra) {
                t.extend_from_slice(&w.to_le_bytes());
            }
        }
        let mut b = Vec::new();
        b.extend_from_slice(&BTF_MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for w in [
            24u32,
            0,
            t.len() as u32,
            t.len() as u32,
            strings.len() as u32,
        ] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&t);
        b.extend_from_slice(strings);
        b
    }

    const STRUCT: u32 = 4 << 24;
    const UNION: u32 = 5 << 24;
    const INT: u32 = 1 << 24;
    const TYPEDEF: u32 = 8 << 24;

    /// A base with `int` and `struct inner { int a; int b; }`, and split BTF over it with
    /// `struct outer { int x; struct inner in; union { int u; }; }` behind a typedef, the
    /// way ib_core's BTF sits on vmlinux's.
    #[test]
    fn member_offsets_resolve_across_split_btf_and_anonymous_unions() {
        // Base strings: "\0int\0inner\0a\0b\0" — offsets int 1, inner 5, a 11, b 13.
        let base_strings = b"\0int\0inner\0a\0b\0";
        let base = blob(
            base_strings,
            &[
                (1, INT, 4, vec![32]),                         // 1: int
                (5, STRUCT | 2, 8, vec![11, 1, 0, 13, 1, 32]), // 2: struct inner
            ],
        );
        let base = Btf::parse("vmlinux", &base, None).unwrap();
        // Split strings start at the base's end (15): "\0outer\0x\0in\0u\0outer_t\0".
        let s0 = base_strings.len() as u32;
        let split = blob(
            b"\0outer\0x\0in\0u\0outer_t\0",
            &[
                // 3: struct outer { int x @0; struct inner in @64; union @128 }
                (
                    s0 + 1,
                    STRUCT | 3,
                    24,
                    vec![s0 + 7, 1, 0, s0 + 9, 2, 64, 0, 4, 128],
                ),
                // 4: union { int u; }
                (0, UNION | 1, 4, vec![s0 + 12, 1, 0]),
                // 5: typedef outer_t
                (s0 + 14, TYPEDEF, 3, vec![]),
            ],
        );
        let btf = Btf::parse("ib_core", &split, Some(base)).unwrap();
        assert_eq!(btf.offset_of("outer", &["x"]), Ok(0));
        assert_eq!(btf.offset_of("outer", &["in"]), Ok(8));
        assert_eq!(btf.offset_of("outer", &["in", "b"]), Ok(12));
        assert_eq!(btf.offset_of("outer", &["u"]), Ok(16));
        // A struct of the base, found from the split BTF.
        assert_eq!(btf.offset_of("inner", &["b"]), Ok(4));
        assert_eq!(
            btf.offset_of("outer", &["in", "c"])
                .unwrap_err()
                .to_string(),
            "ib_core: struct outer: no member in.c"
        );
        assert_eq!(
            btf.offset_of("ib_qp", &["qp_num"]).unwrap_err().to_string(),
            "ib_core: no struct ib_qp"
        );
    }

    /// The running kernel's own BTF, where it has one (this project's hosts do): a layout
    /// no kernel changes, `struct list_head { next; prev; }`.
    #[test]
    fn the_running_kernels_btf_parses() {
        let Ok(bytes) = std::fs::read("/sys/kernel/btf/vmlinux") else {
            // Without BTF (CONFIG_DEBUG_INFO_BTF off) there is nothing to parse; the
            // synthetic tests above cover the format.
            assert!(!std::path::Path::new("/sys/kernel/btf/vmlinux").exists());
            return;
        };
        let btf = Btf::parse("/sys/kernel/btf/vmlinux", &bytes, None).unwrap();
        assert_eq!(btf.offset_of("list_head", &["next"]), Ok(0));
        assert_eq!(btf.offset_of("list_head", &["prev"]), Ok(8));
        assert!(btf.types.len() > 10_000, "{} types", btf.types.len());
    }

    #[test]
    fn damaged_btf_is_refused_naming_the_byte() {
        assert_eq!(
            Btf::parse("x", &[0x9F], None).unwrap_err().to_string(),
            "x: byte 0: shorter than a header"
        );
        assert!(Btf::parse("x", &[0, 0, 1, 0], None)
            .unwrap_err()
            .to_string()
            .starts_with("x: byte 0: magic 0x0000"));
        let mut b = blob(b"\0", &[(0, STRUCT | 3, 8, vec![0, 0, 0])]);
        // The struct claims three members but carries one.
        let err = Btf::parse("x", &b, None).unwrap_err().to_string();
        assert!(err.contains("runs past the type section"), "{err}");
        // Sections past the end.
        b.truncate(30);
        let err = Btf::parse("x", &b, None).unwrap_err().to_string();
        assert!(err.contains("runs past the end"), "{err}");
        let unknown = blob(b"\0", &[(0, 31 << 24, 0, vec![])]);
        assert_eq!(
            Btf::parse("x", &unknown, None).unwrap_err().to_string(),
            "x: byte 24: unknown type kind 31"
        );
    }
}
