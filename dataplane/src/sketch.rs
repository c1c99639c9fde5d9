//! Elastic Sketch (Yang et al., SIGCOMM'18 §3) as PARALEON uses it on ToR switches: a plain
//! reference implementation of the published algorithm, and the control-plane query over the
//! data plane's register dumps.
//!
//! Reference algorithm, heavy part with one (key, vote+, vote−, flag) entry per bucket (the
//! hardware version; the CPU version's 7-slot buckets need a scan a pipeline cannot do):
//! - same key: vote+ += 1;
//! - empty bucket: (f, 1, 0, false);
//! - other key: vote− += 1; if vote− ≥ λ·vote+ the old flow is evicted to the light part
//!   (added when flagged, else max — its earlier packets may already be there) and the
//!   bucket becomes (f, 1, 0, true); otherwise f is counted in the light part;
//! - light part: 8-bit saturating counters indexed by the key;
//! - query: heavy hit → vote+ (+ light when flagged); miss → light.
//!
//! The data plane (see `hawkeye.rs`) encodes vote− implicitly: `sketch_total` counts every
//! packet of the bucket and `sketch_key.hi` holds `Q = base + (λ+1)·vote+`, so
//! `vote− ≥ λ·vote+ ⇔ total − Q ≥ 0` — one stateful ALU comparison, no division.

use std::collections::BTreeMap;

/// Where a key lives in the arrays (fingerprint bits, as the data plane indexes them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SketchGeometry {
    /// log2 heavy buckets: bucket = fingerprint's top bits.
    pub heavy_bits: u8,
    /// log2 light counters: counter = fingerprint's low bits.
    pub light_bits: u8,
    /// λ.
    pub lambda: u32,
}

impl SketchGeometry {
    /// Heavy bucket of a fingerprint.
    pub fn bucket(&self, fp: u32) -> usize {
        (fp >> (32 - self.heavy_bits)) as usize
    }
    /// Light counter of a fingerprint.
    pub fn light(&self, fp: u32) -> usize {
        (fp & ((1u32 << self.light_bits) - 1)) as usize
    }
}

/// The data plane's fingerprint of a flow: CRC-32 over (src ip, dst ip, src port,
/// dst port), with 0 and 0xFFFFFFFF (reserved codes) mapped to 1.
pub fn fingerprint(src_ip: [u8; 4], dst_ip: [u8; 4], src_port: u16, dst_port: u16) -> u32 {
    let mut bytes = Vec::with_capacity(12);
    bytes.extend_from_slice(&src_ip);
    bytes.extend_from_slice(&dst_ip);
    bytes.extend_from_slice(&src_port.to_be_bytes());
    bytes.extend_from_slice(&dst_port.to_be_bytes());
    let fp = crate::hash::crc32(&bytes);
    if fp == 0 || fp == u32::MAX {
        1
    } else {
        fp
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Bucket {
    key: u32,
    pos: u32,
    neg: u32,
    flag: bool,
}

/// The reference Elastic Sketch.
#[derive(Clone, Debug)]
pub struct ElasticReference {
    geometry: SketchGeometry,
    heavy: Vec<Bucket>,
    light: Vec<u8>,
}

impl ElasticReference {
    /// An empty sketch.
    pub fn new(geometry: SketchGeometry) -> Self {
        ElasticReference {
            heavy: vec![Bucket::default(); 1 << geometry.heavy_bits],
            light: vec![0; 1 << geometry.light_bits],
            geometry,
        }
    }

    fn light_add(&mut self, key: u32, v: u32) {
        let c = &mut self.light[self.geometry.light(key)];
        *c = (*c as u32 + v).min(255) as u8;
    }

    /// Inserts one packet of flow `fp`.
    pub fn insert(&mut self, fp: u32) {
        let b = self.geometry.bucket(fp);
        let bucket = self.heavy[b];
        if bucket.key == fp {
            self.heavy[b].pos += 1;
        } else if bucket.key == 0 {
            self.heavy[b] = Bucket {
                key: fp,
                pos: 1,
                neg: 0,
                flag: false,
            };
        } else {
            let neg = bucket.neg + 1;
            if neg as u64 >= self.geometry.lambda as u64 * bucket.pos as u64 {
                let i = self.geometry.light(bucket.key);
                let v = bucket.pos.min(255);
                if bucket.flag {
                    self.light_add(bucket.key, v);
                } else {
                    self.light[i] = self.light[i].max(v as u8);
                }
                self.heavy[b] = Bucket {
                    key: fp,
                    pos: 1,
                    neg: 0,
                    flag: true,
                };
            } else {
                self.heavy[b].neg = neg;
                self.light_add(fp, 1);
            }
        }
    }

    /// Estimated packets of `fp`.
    pub fn query(&self, fp: u32) -> u32 {
        let bucket = self.heavy[self.geometry.bucket(fp)];
        let light = self.light[self.geometry.light(fp)] as u32;
        if bucket.key == fp {
            bucket.pos + if bucket.flag { light } else { 0 }
        } else {
            light
        }
    }

    /// Heavy-part flows and their estimates, by key.
    pub fn heavy_flows(&self) -> BTreeMap<u32, u32> {
        self.heavy
            .iter()
            .filter(|b| b.key != 0)
            .map(|b| (b.key, self.query(b.key)))
            .collect()
    }
}

/// The control plane's view of the data-plane sketch (register dumps of `sketch_key`,
/// `sketch_votes`, `sketch_light`), read and then reset every monitor interval (PARALEON
/// §III-B).
#[derive(Clone, Debug)]
pub struct SketchDump<'a> {
    /// Geometry.
    pub geometry: SketchGeometry,
    /// `sketch_key` cells (lo = key).
    pub key: &'a [u64],
    /// `sketch_votes` cells (vote+ | flag << 31).
    pub votes: &'a [u64],
    /// `sketch_light` cells.
    pub light: &'a [u64],
}

impl SketchDump<'_> {
    /// Estimated packets of `fp` (the published query).
    pub fn query(&self, fp: u32) -> u32 {
        let b = self.geometry.bucket(fp);
        let light = self
            .light
            .get(self.geometry.light(fp))
            .copied()
            .unwrap_or(0) as u32;
        let key = self.key.get(b).copied().unwrap_or(0) as u32;
        let votes = self.votes.get(b).copied().unwrap_or(0) as u32;
        if key == fp {
            (votes & 0x7FFF_FFFF) + if votes & 0x8000_0000 != 0 { light } else { 0 }
        } else {
            light
        }
    }

    /// Heavy-part flows and their estimates, by key.
    pub fn heavy_flows(&self) -> BTreeMap<u32, u32> {
        self.key
            .iter()
            .map(|k| *k as u32)
            .filter(|k| *k != 0)
            .map(|k| (k, self.query(k)))
            .collect()
    }
}
