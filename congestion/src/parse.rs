//! Parsers of the tools that read the counters on real fabrics:
//!
//! - [`perfquery`]: infiniband-diags `perfquery` (PortCounters) and `perfquery -x`
//!   (PortCountersExtended) output — a `# Port counters: Lid L port P (CapMask: …)` header
//!   followed by `Name:.....value` lines (dots pad the name; values decimal, some `0x` hex);
//! - [`ethtool_pfc`]: mlx5 `ethtool -S` per-priority PFC lines (`rx_prio3_pause: 12`,
//!   `tx_prio3_pause_duration: 345` in µs, `rx_prio3_pause_transition`, `tx_prio3_packets`);
//! - [`pfcstat`]: SONiC `pfcstat -s all` / `show pfc counters` tables (`Port Rx` and `Port Tx`
//!   with PFC0–PFC7 frame counts, thousands separated by commas, `N/A` where unsupported);
//! - [`counters_db`]: a SONiC COUNTERS_DB JSON dump (`sonic-db-dump -n COUNTERS_DB` or a plain
//!   `{key: {field: value}}` map): `COUNTERS_PORT_NAME_MAP` to the port OIDs, then under
//!   `COUNTERS:oid:0x…` the SAI port stats `SAI_PORT_STAT_PFC_<p>_RX_PKTS`, `…_TX_PKTS`,
//!   `…_RX_PAUSE_DURATION_US`, `…_TX_PAUSE_DURATION_US` (saiport.h), and, when the dump has
//!   `COUNTERS_QUEUE_NAME_MAP`, the queue `<port>:<p>`'s `SAI_QUEUE_STAT_PACKETS`/`_BYTES` as
//!   that priority's transmissions (SONiC maps lossless priority p to queue p).
//!
//! Every parser returns a [`ParseError`] naming the line (1-based) and field of what it could
//! not read; none panics on any input.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sample::{PfcCounters, PortId, Sample, Width, PRIORITIES};

/// Which format a parse error is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// infiniband-diags `perfquery`.
    Perfquery,
    /// `ethtool -S`.
    Ethtool,
    /// SONiC `pfcstat` / `show pfc counters`.
    Pfcstat,
    /// SONiC COUNTERS_DB JSON dump.
    CountersDb,
    /// Recorded samples, one JSON object a line.
    SamplesJsonl,
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Perfquery => "perfquery",
            Format::Ethtool => "ethtool -S",
            Format::Pfcstat => "pfcstat",
            Format::CountersDb => "COUNTERS_DB",
            Format::SamplesJsonl => "samples",
        })
    }
}

/// Input that could not be read: where (line, field) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{format}{}{}: {reason}", .line.map(|l| format!(" line {l}")).unwrap_or_default(), .field.as_ref().map(|f| format!(", field {f}")).unwrap_or_default())]
pub struct ParseError {
    /// The format.
    pub format: Format,
    /// The 1-based line, where the format has lines.
    pub line: Option<usize>,
    /// The field (counter name, key path).
    pub field: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl ParseError {
    fn at(format: Format, line: usize, field: Option<&str>, reason: impl Into<String>) -> Self {
        ParseError {
            format,
            line: Some(line),
            field: field.map(str::to_string),
            reason: reason.into(),
        }
    }

    fn field(format: Format, field: &str, reason: impl Into<String>) -> Self {
        ParseError {
            format,
            line: None,
            field: Some(field.to_string()),
            reason: reason.into(),
        }
    }
}

/// A decimal or `0x` hexadecimal counter value.
fn number(text: &str) -> Option<u64> {
    let t = text.trim();
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        t.parse().ok()
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------
// perfquery

/// Which PMA attribute a perfquery block shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerfKind {
    /// PortCounters (32-bit fields; `perfquery`).
    Basic,
    /// PortCountersExtended (64-bit fields; `perfquery -x`).
    Extended,
}

/// One `# Port counters: …` block of perfquery output.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PerfBlock {
    /// Which attribute.
    pub kind: PerfKind,
    /// The LID queried.
    pub lid: u32,
    /// The port, `None` for the aggregate `port ALL` (`perfquery -a`).
    pub port: Option<u32>,
    /// The CapMask the PMA reported, when printed.
    pub cap_mask: Option<u64>,
    /// The counters by name, in the order printed.
    pub counters: Vec<(String, u64)>,
}

impl PerfBlock {
    /// The value of counter `name`.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, v)| v)
    }

    /// The width of this block's counters.
    pub fn width(&self) -> Width {
        match self.kind {
            PerfKind::Basic => Width::Bits32,
            PerfKind::Extended => Width::Bits64,
        }
    }

    /// A [`Sample`] of `port` from this block, with the query's timing. Errors when the block
    /// has no PortXmitWait.
    pub fn to_sample(
        &self,
        port: PortId,
        t_query_ns: u64,
        turnaround_ns: u64,
    ) -> Result<Sample, ParseError> {
        let wait = self.get("PortXmitWait").ok_or_else(|| {
            ParseError::field(Format::Perfquery, "PortXmitWait", "missing from the block")
        })?;
        let mut s = Sample::new(port, t_query_ns, turnaround_ns).with_wait(wait, self.width());
        s.xmit_data = self.get("PortXmitData");
        s.xmit_pkts = self.get("PortXmitPkts");
        Ok(s)
    }
}

/// Parses `# Port counters: Lid 12 port 1 (CapMask: 0x5A00)` /
/// `# Port extended counters: Lid 12 port 1 (CapMask: 0x5A00 CapMask2: 0x0000002)`.
fn perf_header(line: &str, n: usize) -> Result<Option<PerfBlock>, ParseError> {
    let Some(rest) = line.strip_prefix('#') else {
        return Ok(None);
    };
    let rest = rest.trim();
    let (kind, rest) = if let Some(r) = rest.strip_prefix("Port counters:") {
        (PerfKind::Basic, r)
    } else if let Some(r) = rest.strip_prefix("Port extended counters:") {
        (PerfKind::Extended, r)
    } else {
        return Err(ParseError::at(
            Format::Perfquery,
            n,
            None,
            format!("unknown header {rest:?} (only PortCounters and PortCountersExtended)"),
        ));
    };
    let (addr, caps) = match rest.find('(') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let words: Vec<&str> = addr.split_whitespace().collect();
    let (lid, port) = match words.as_slice() {
        ["Lid", lid, "port", port] => (*lid, *port),
        _ => {
            return Err(ParseError::at(
                Format::Perfquery,
                n,
                Some("Lid"),
                format!("expected \"Lid <lid> port <port>\", got {:?}", addr.trim()),
            ))
        }
    };
    let lid = lid
        .parse::<u32>()
        .map_err(|_| ParseError::at(Format::Perfquery, n, Some("Lid"), format!("{lid:?}")))?;
    let port =
        if port == "ALL" {
            None
        } else {
            Some(port.parse::<u32>().map_err(|_| {
                ParseError::at(Format::Perfquery, n, Some("port"), format!("{port:?}"))
            })?)
        };
    let cap_mask = match caps {
        None => None,
        Some(c) => {
            let inner = c
                .strip_prefix('(')
                .and_then(|c| c.strip_suffix(')'))
                .ok_or_else(|| {
                    ParseError::at(
                        Format::Perfquery,
                        n,
                        Some("CapMask"),
                        "unbalanced parenthesis",
                    )
                })?;
            let mut words = inner.split_whitespace();
            match (words.next(), words.next()) {
                (Some("CapMask:"), Some(v)) => Some(number(v).ok_or_else(|| {
                    ParseError::at(Format::Perfquery, n, Some("CapMask"), format!("{v:?}"))
                })?),
                _ => {
                    return Err(ParseError::at(
                        Format::Perfquery,
                        n,
                        Some("CapMask"),
                        format!("expected \"(CapMask: 0x…)\", got {c:?}"),
                    ))
                }
            }
        }
    };
    Ok(Some(PerfBlock {
        kind,
        lid,
        port,
        cap_mask,
        counters: Vec::new(),
    }))
}

/// Parses perfquery output (one or more blocks, e.g. `perfquery` then `perfquery -x`
/// concatenated, or several ports).
pub fn perfquery(text: &str) -> Result<Vec<PerfBlock>, ParseError> {
    let mut blocks: Vec<PerfBlock> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(b) = perf_header(line, n)? {
            blocks.push(b);
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(ParseError::at(
                Format::Perfquery,
                n,
                None,
                format!("expected \"Name:....value\", got {line:?}"),
            ));
        };
        let name = name.trim();
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(ParseError::at(
                Format::Perfquery,
                n,
                None,
                format!("bad counter name {name:?}"),
            ));
        }
        let value = value.trim_start_matches('.').trim();
        let v = number(value).ok_or_else(|| {
            ParseError::at(
                Format::Perfquery,
                n,
                Some(name),
                format!("not a counter value: {value:?}"),
            )
        })?;
        let Some(block) = blocks.last_mut() else {
            return Err(ParseError::at(
                Format::Perfquery,
                n,
                Some(name),
                "counter before any \"# Port counters\" header",
            ));
        };
        if block.kind == PerfKind::Basic && v > u64::from(u32::MAX) && name != "CounterSelect" {
            return Err(ParseError::at(
                Format::Perfquery,
                n,
                Some(name),
                format!("{v} does not fit PortCounters' 32 bits"),
            ));
        }
        block.counters.push((name.to_string(), v));
    }
    if blocks.is_empty() {
        return Err(ParseError {
            format: Format::Perfquery,
            line: None,
            field: None,
            reason: "no \"# Port counters\" block".into(),
        });
    }
    Ok(blocks)
}

// ---------------------------------------------------------------------------------------
// ethtool -S (mlx5)

/// Parses mlx5 `ethtool -S` output into per-priority PFC counters. Statistics other than
/// `(rx|tx)_prio<p>_(pause|pause_duration|pause_transition|packets|bytes)` are skipped; a
/// listed one must have a number.
pub fn ethtool_pfc(text: &str) -> Result<[PfcCounters; PRIORITIES], ParseError> {
    let mut out = [PfcCounters::default(); PRIORITIES];
    let mut seen_stat = false;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(ParseError::at(
                Format::Ethtool,
                n,
                None,
                format!("expected \"name: value\", got {line:?}"),
            ));
        };
        let name = name.trim();
        let value = value.trim();
        if value.is_empty() && !seen_stat {
            // The "NIC statistics:" banner.
            continue;
        }
        seen_stat = true;
        let Some((dir, rest)) = name
            .strip_prefix("rx_prio")
            .map(|r| ("rx", r))
            .or_else(|| name.strip_prefix("tx_prio").map(|r| ("tx", r)))
        else {
            continue;
        };
        let Some((prio, stat)) = rest.split_once('_') else {
            continue;
        };
        let Ok(prio) = prio.parse::<usize>() else {
            continue;
        };
        let slot: fn(&mut PfcCounters) -> &mut Option<u64> = match (dir, stat) {
            ("rx", "pause") => |c: &mut PfcCounters| &mut c.rx_pause,
            ("tx", "pause") => |c: &mut PfcCounters| &mut c.tx_pause,
            ("rx", "pause_duration") => |c: &mut PfcCounters| &mut c.rx_pause_duration_us,
            ("tx", "pause_duration") => |c: &mut PfcCounters| &mut c.tx_pause_duration_us,
            ("rx", "pause_transition") => |c: &mut PfcCounters| &mut c.rx_pause_transition,
            ("tx", "packets") => |c: &mut PfcCounters| &mut c.tx_pkts,
            ("tx", "bytes") => |c: &mut PfcCounters| &mut c.tx_bytes,
            _ => continue,
        };
        let Some(counters) = out.get_mut(prio) else {
            return Err(ParseError::at(
                Format::Ethtool,
                n,
                Some(name),
                format!("priority {prio} is not 0–7 (IEEE 802.1Qbb)"),
            ));
        };
        let v = number(value).ok_or_else(|| {
            ParseError::at(
                Format::Ethtool,
                n,
                Some(name),
                format!("not a number: {value:?}"),
            )
        })?;
        *slot(counters) = Some(v);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// SONiC pfcstat

/// PFC frame counts per port from `pfcstat -s all` (or `show pfc counters`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PfcStat {
    /// Received PFC frames per priority, by port name; `None` for `N/A`.
    pub rx: BTreeMap<String, [Option<u64>; PRIORITIES]>,
    /// Transmitted PFC frames per priority, by port name; `None` for `N/A`.
    pub tx: BTreeMap<String, [Option<u64>; PRIORITIES]>,
}

impl PfcStat {
    /// The counters of `port` as [`PfcCounters`] (frames only).
    pub fn counters(&self, port: &str) -> Option<[PfcCounters; PRIORITIES]> {
        let rx = self.rx.get(port);
        let tx = self.tx.get(port);
        if rx.is_none() && tx.is_none() {
            return None;
        }
        let mut out = [PfcCounters::default(); PRIORITIES];
        for (p, c) in out.iter_mut().enumerate() {
            c.rx_pause = rx.and_then(|r| r.get(p).copied().flatten());
            c.tx_pause = tx.and_then(|t| t.get(p).copied().flatten());
        }
        Some(out)
    }
}

/// Parses SONiC `pfcstat -s all` output: a `Port Rx` table and a `Port Tx` table, each with
/// a dashed rule under the header. Lines outside the tables (a "Last cached time" note, a
/// namespace banner) are skipped.
pub fn pfcstat(text: &str) -> Result<PfcStat, ParseError> {
    #[derive(PartialEq)]
    enum State {
        Outside,
        Header(bool),
        Rows(bool),
    }
    let mut out = PfcStat::default();
    let mut state = State::Outside;
    let mut tables = 0;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim();
        let words: Vec<&str> = line.split_whitespace().collect();
        if let ["Port", side @ ("Rx" | "Tx"), cols @ ..] = words.as_slice() {
            let expected: Vec<String> = (0..PRIORITIES).map(|p| format!("PFC{p}")).collect();
            if cols.len() != PRIORITIES || cols.iter().zip(&expected).any(|(c, e)| c != e) {
                return Err(ParseError::at(
                    Format::Pfcstat,
                    n,
                    Some("header"),
                    format!("expected columns PFC0..PFC7, got {cols:?}"),
                ));
            }
            state = State::Header(*side == "Rx");
            tables += 1;
            continue;
        }
        match state {
            State::Outside => {}
            State::Header(rx) => {
                if !line.is_empty() && line.bytes().all(|b| b == b'-' || b == b' ') {
                    state = State::Rows(rx);
                } else {
                    return Err(ParseError::at(
                        Format::Pfcstat,
                        n,
                        Some("rule"),
                        format!("expected the dashed rule, got {line:?}"),
                    ));
                }
            }
            State::Rows(rx) => {
                if line.is_empty() {
                    state = State::Outside;
                    continue;
                }
                if words.len() != PRIORITIES + 1 {
                    return Err(ParseError::at(
                        Format::Pfcstat,
                        n,
                        words.first().copied(),
                        format!("expected a port and 8 counts, got {} columns", words.len()),
                    ));
                }
                let mut vals = [None; PRIORITIES];
                for (p, (slot, w)) in vals.iter_mut().zip(&words[1..]).enumerate() {
                    if *w == "N/A" {
                        continue;
                    }
                    let digits: String = w.chars().filter(|&c| c != ',').collect();
                    *slot = Some(number(&digits).ok_or_else(|| {
                        ParseError::at(
                            Format::Pfcstat,
                            n,
                            Some(&format!("{} PFC{p}", words[0])),
                            format!("not a count: {w:?}"),
                        )
                    })?);
                }
                let table = if rx { &mut out.rx } else { &mut out.tx };
                table.insert(words[0].to_string(), vals);
            }
        }
    }
    if let State::Header(_) = state {
        return Err(ParseError {
            format: Format::Pfcstat,
            line: Some(text.lines().count()),
            field: Some("rule".into()),
            reason: "table header without rows".into(),
        });
    }
    if tables == 0 {
        return Err(ParseError {
            format: Format::Pfcstat,
            line: None,
            field: None,
            reason: "no \"Port Rx\"/\"Port Tx\" table".into(),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// SONiC COUNTERS_DB

/// The hash fields of a dump entry: `{"type": "hash", "value": {…}}` (sonic-db-dump) or a
/// plain object of fields.
fn hash_fields<'a>(
    entry: &'a Value,
    key: &str,
) -> Result<&'a serde_json::Map<String, Value>, ParseError> {
    let obj = entry
        .as_object()
        .ok_or_else(|| ParseError::field(Format::CountersDb, key, "not an object"))?;
    match obj.get("value") {
        Some(Value::Object(inner)) if obj.contains_key("type") => Ok(inner),
        _ => Ok(obj),
    }
}

fn field_u64(
    fields: &serde_json::Map<String, Value>,
    key: &str,
    f: &str,
) -> Result<Option<u64>, ParseError> {
    match fields.get(f) {
        None => Ok(None),
        Some(Value::String(s)) => number(s).map(Some).ok_or_else(|| {
            ParseError::field(
                Format::CountersDb,
                &format!("{key}/{f}"),
                format!("not a counter: {s:?}"),
            )
        }),
        Some(Value::Number(n)) => n.as_u64().map(Some).ok_or_else(|| {
            ParseError::field(
                Format::CountersDb,
                &format!("{key}/{f}"),
                format!("not a counter: {n}"),
            )
        }),
        Some(other) => Err(ParseError::field(
            Format::CountersDb,
            &format!("{key}/{f}"),
            format!("not a counter: {other}"),
        )),
    }
}

fn name_map<'a>(
    root: &'a serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<Vec<(&'a str, &'a str)>>, ParseError> {
    let Some(entry) = root.get(key) else {
        return Ok(None);
    };
    let fields = hash_fields(entry, key)?;
    let mut out = Vec::new();
    for (name, oid) in fields {
        let oid = oid.as_str().ok_or_else(|| {
            ParseError::field(
                Format::CountersDb,
                &format!("{key}/{name}"),
                "OID is not a string",
            )
        })?;
        out.push((name.as_str(), oid));
    }
    Ok(Some(out))
}

/// Parses a COUNTERS_DB JSON dump into per-port, per-priority PFC counters (by SONiC port
/// name). Ports of the name map without a counters entry are left out.
pub fn counters_db(json: &str) -> Result<BTreeMap<String, [PfcCounters; PRIORITIES]>, ParseError> {
    let root: Value = serde_json::from_str(json).map_err(|e| ParseError {
        format: Format::CountersDb,
        line: Some(e.line()),
        field: None,
        reason: e.to_string(),
    })?;
    let root = root
        .as_object()
        .ok_or_else(|| ParseError::field(Format::CountersDb, "/", "the dump is not an object"))?;
    let ports = name_map(root, "COUNTERS_PORT_NAME_MAP")?.ok_or_else(|| {
        ParseError::field(Format::CountersDb, "COUNTERS_PORT_NAME_MAP", "missing")
    })?;
    let mut out = BTreeMap::new();
    for (name, oid) in ports {
        let key = format!("COUNTERS:{oid}");
        let Some(entry) = root.get(&key) else {
            continue;
        };
        let fields = hash_fields(entry, &key)?;
        let mut pfc = [PfcCounters::default(); PRIORITIES];
        for (p, c) in pfc.iter_mut().enumerate() {
            let stat = |s: &str| format!("SAI_PORT_STAT_PFC_{p}_{s}");
            c.rx_pause = field_u64(fields, &key, &stat("RX_PKTS"))?;
            c.tx_pause = field_u64(fields, &key, &stat("TX_PKTS"))?;
            c.rx_pause_duration_us = field_u64(fields, &key, &stat("RX_PAUSE_DURATION_US"))?;
            c.tx_pause_duration_us = field_u64(fields, &key, &stat("TX_PAUSE_DURATION_US"))?;
        }
        out.insert(name.to_string(), pfc);
    }
    if let Some(queues) = name_map(root, "COUNTERS_QUEUE_NAME_MAP")? {
        for (qname, oid) in queues {
            let Some((port, idx)) = qname.rsplit_once(':') else {
                continue;
            };
            let Ok(idx) = idx.parse::<usize>() else {
                continue;
            };
            let key = format!("COUNTERS:{oid}");
            let (Some(entry), Some(pfc)) = (root.get(&key), out.get_mut(port)) else {
                continue;
            };
            let Some(c) = pfc.get_mut(idx) else {
                continue;
            };
            let fields = hash_fields(entry, &key)?;
            c.tx_pkts = field_u64(fields, &key, "SAI_QUEUE_STAT_PACKETS")?;
            c.tx_bytes = field_u64(fields, &key, "SAI_QUEUE_STAT_BYTES")?;
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// recorded samples

/// Parses recorded samples, one JSON [`Sample`] a line (blank lines and `#` comments skipped).
pub fn samples_jsonl(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let s: Sample = serde_json::from_str(line).map_err(|e| ParseError {
            format: Format::SamplesJsonl,
            line: Some(i + 1),
            field: None,
            reason: e.to_string(),
        })?;
        out.push(s);
    }
    Ok(out)
}

/// Writes samples as JSON lines (the input of [`samples_jsonl`]).
pub fn to_jsonl(samples: &[Sample]) -> String {
    let mut out = String::new();
    for s in samples {
        if let Ok(line) = serde_json::to_string(s) {
            out.push_str(&line);
            out.push('\n');
        }
    }
    out
}
