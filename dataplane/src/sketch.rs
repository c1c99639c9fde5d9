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

    /// Estimated packets of a flow the control plane remembers and the heavy part does
    /// not hold ([`displaced`]).
    pub fn displaced(&self, fp: u32) -> u32 {
        let key = self.heavy[self.geometry.bucket(fp)].key;
        displaced(key, fp, || self.light[self.geometry.light(fp)] as u32)
    }

    /// Heavy buckets that no flow reached this interval (for [`distinct_flows`]).
    pub fn empty_buckets(&self) -> usize {
        self.heavy.iter().filter(|b| b.key == 0).count()
    }
}

/// A remembered flow absent from the heavy part: if another flow holds its bucket, it may
/// have sent packets that went to the light part (it lost the vote, or was evicted this
/// interval), and the published query (its light counter) estimates them; if its bucket is
/// empty, no packet reached that bucket this interval and it sent nothing; if it holds the
/// bucket it is a heavy flow (not displaced: 0). `light` reads its light counter.
///
/// The query can over-count (another light flow sharing the counter, Elastic Sketch §3's
/// count-min error); asking only for flows whose bucket is taken keeps the false ones to
/// those buckets.
pub fn displaced(bucket_key: u32, fp: u32, light: impl FnOnce() -> u32) -> u32 {
    if bucket_key == 0 || bucket_key == fp {
        0
    } else {
        light()
    }
}

/// Distinct flows that reached a heavy part of `buckets` buckets of which `empty` were left
/// empty: linear counting (Whang, Vander-Zanden and Taylor, TODS 1990: n̂ = −m·ln(V/m), V
/// the share of empty buckets). The first packet of every flow lands in its bucket and a
/// bucket, once taken, is never empty again until the reset, so the buckets taken are
/// exactly those some flow hashed to. With no empty bucket the count is past what the
/// buckets can tell: the estimate for one empty bucket (m·ln m), a lower bound.
pub fn distinct_flows(buckets: usize, empty: usize) -> f64 {
    if buckets == 0 {
        return 0.0;
    }
    let m = buckets as f64;
    let v = (empty.max(1) as f64).min(m) / m;
    -m * v.ln()
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

    /// Estimated packets of a remembered flow the heavy part does not hold ([`displaced`]).
    /// A light cell not in the dump reads as 0.
    pub fn displaced(&self, fp: u32) -> u32 {
        let key = self.key.get(self.geometry.bucket(fp)).copied().unwrap_or(0) as u32;
        displaced(key, fp, || {
            self.light
                .get(self.geometry.light(fp))
                .copied()
                .unwrap_or(0) as u32
        })
    }

    /// Heavy buckets that no flow reached ([`distinct_flows`]).
    pub fn empty_buckets(&self) -> usize {
        self.key.iter().filter(|k| **k as u32 == 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_wire::dataplane::{SKETCH_HEAVY_BUCKETS, SKETCH_LAMBDA, SKETCH_LIGHT_COUNTERS};
    use hawkmesh_wire::rng::SplitMix64;

    /// The generated program's geometry (the one source of its sizes).
    const GEOMETRY: SketchGeometry = SketchGeometry {
        heavy_bits: SKETCH_HEAVY_BUCKETS.trailing_zeros() as u8,
        light_bits: SKETCH_LIGHT_COUNTERS.trailing_zeros() as u8,
        lambda: SKETCH_LAMBDA,
    };
    const BUCKETS: usize = SKETCH_HEAVY_BUCKETS as usize;

    /// A fingerprint in the same heavy bucket as `fp` with another light counter.
    fn same_bucket(fp: u32) -> u32 {
        let other = fp ^ 0x0000_1234;
        assert_eq!(GEOMETRY.bucket(other), GEOMETRY.bucket(fp));
        assert_ne!(GEOMETRY.light(other), GEOMETRY.light(fp));
        other
    }

    #[test]
    fn a_remembered_flow_that_lost_its_bucket_is_found_in_the_light_part() {
        let (a, b, idle) = (0x1234_5678, same_bucket(0x1234_5678), 0x9000_0001);
        let mut sketch = ElasticReference::new(GEOMETRY);
        for _ in 0..5 {
            sketch.insert(a);
        }
        for _ in 0..3 {
            sketch.insert(b);
        }
        assert_eq!(
            sketch.heavy_flows().keys().copied().collect::<Vec<_>>(),
            [a]
        );
        assert_eq!(sketch.displaced(b), 3, "b lost the vote: its 3 packets");
        assert_eq!(sketch.displaced(a), 0, "a holds its bucket: a heavy flow");
        assert_eq!(sketch.displaced(idle), 0, "nothing reached idle's bucket");
        // b outvotes a (vote− ≥ λ·vote+): a is evicted to the light part and is displaced.
        for _ in 0..40 {
            sketch.insert(b);
        }
        assert!(sketch.heavy_flows().contains_key(&b));
        assert_eq!(sketch.displaced(a), 5);
        // The register dump answers the same.
        let key: Vec<u64> = sketch.heavy.iter().map(|x| u64::from(x.key)).collect();
        let votes: Vec<u64> = sketch
            .heavy
            .iter()
            .map(|x| u64::from(x.pos) | if x.flag { 1 << 31 } else { 0 })
            .collect();
        let light: Vec<u64> = sketch.light.iter().map(|c| u64::from(*c)).collect();
        let dump = SketchDump {
            geometry: GEOMETRY,
            key: &key,
            votes: &votes,
            light: &light,
        };
        for fp in [a, b, idle] {
            assert_eq!(dump.displaced(fp), sketch.displaced(fp), "{fp:#x}");
        }
        assert_eq!(dump.empty_buckets(), sketch.empty_buckets());
        assert_eq!(sketch.empty_buckets(), BUCKETS - 1);
    }

    #[test]
    fn linear_counting_counts_the_flows_the_heavy_part_cannot_hold() {
        assert_eq!(distinct_flows(BUCKETS, BUCKETS), 0.0);
        assert_eq!(distinct_flows(0, 0), 0.0);
        let mut rng = SplitMix64::new(3);
        // A few flows, about half the buckets, and more flows than buckets.
        for n in [BUCKETS / 40, BUCKETS / 2, BUCKETS * 3 / 2] {
            let mut sketch = ElasticReference::new(GEOMETRY);
            for _ in 0..n {
                let fp = (rng.next_u64() as u32).max(1);
                for _ in 0..1 + rng.below(3) {
                    sketch.insert(fp);
                }
            }
            let held = sketch.heavy_flows().len();
            let estimate = distinct_flows(BUCKETS, sketch.empty_buckets());
            assert!(held < n, "{n} flows: some lost their bucket");
            let error = (estimate - n as f64).abs() / n as f64;
            assert!(
                error < 0.05,
                "{n} flows: estimated {estimate:.0} ({held} held)"
            );
        }
        // Every bucket taken: the bound for one empty bucket, not infinity.
        let m = BUCKETS as f64;
        let full = distinct_flows(BUCKETS, 0);
        assert!(full.is_finite() && (full - m * m.ln()).abs() < 1e-6);
    }
}
