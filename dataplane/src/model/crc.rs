//! The hash units' CRC-32 on the packet path (slicing-by-8/4 over the byte table of
//! [`crate::hash`]).
//!
//! One CRC, two speeds: [`crate::hash`] holds the algorithm (the reflected byte table and
//! the byte-at-a-time [`crate::hash::crc32`], the reference the sketch and the tests use);
//! this file builds its slicing tables from that same byte table (`crate::hash::table()`)
//! and computes the same values (`tests.rs`: `sliced_crc_matches_the_reference`). The two
//! loops stay apart on purpose: calling `crate::hash::crc32` here would put one dependent
//! table load per byte back on the register CRC's hot path, and routing the reference
//! through these functions would leave the sliced CRC nothing independent to be checked
//! against.

use super::*;

/// The CRC-32 byte table of [`crate::hash::crc32`] extended for eight bytes per step
/// (`T[k][x]` is the CRC of byte `x` followed by `k` zero bytes). The hashed keys are 4 to
/// 12 bytes: one or two steps whose table loads are independent, instead of a chain of
/// one dependent load per byte.
pub(super) const fn crc_slice_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    t[0] = crate::hash::table();
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

pub(super) static CRC_SLICES: [[u32; 256]; 8] = crc_slice_tables();

/// Eight message bytes through the slicing-by-8 tables: `lo` (the first four, little-endian,
/// already xor'ed with the running CRC) and `hi` (the next four).
#[inline(always)]
pub(super) fn crc_slice8(lo: u32, hi: u32) -> u32 {
    let t = &CRC_SLICES;
    t[7][(lo & 0xFF) as usize]
        ^ t[6][((lo >> 8) & 0xFF) as usize]
        ^ t[5][((lo >> 16) & 0xFF) as usize]
        ^ t[4][(lo >> 24) as usize]
        ^ t[3][(hi & 0xFF) as usize]
        ^ t[2][((hi >> 8) & 0xFF) as usize]
        ^ t[1][((hi >> 16) & 0xFF) as usize]
        ^ t[0][(hi >> 24) as usize]
}

/// Four message bytes (little-endian, xor'ed with the running CRC) through the tables.
#[inline(always)]
pub(super) fn crc_slice4(x: u32) -> u32 {
    let t = &CRC_SLICES;
    t[3][(x & 0xFF) as usize]
        ^ t[2][((x >> 8) & 0xFF) as usize]
        ^ t[1][((x >> 16) & 0xFF) as usize]
        ^ t[0][(x >> 24) as usize]
}

/// The CRC-32 of [`crate::hash::crc32`].
#[inline(always)]
pub(super) fn crc32_fast(bytes: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    let mut chunks = bytes.chunks_exact(8);
    for b in &mut chunks {
        let lo = c ^ u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let hi = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        c = crc_slice8(lo, hi);
    }
    let mut rest = chunks.remainder();
    if let [b0, b1, b2, b3, tail @ ..] = rest {
        c = crc_slice4(c ^ u32::from_le_bytes([*b0, *b1, *b2, *b3]));
        rest = tail;
    }
    for b in rest {
        c = CRC_SLICES[0][((c ^ *b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

/// The CRC-32 of the `(PHV slot, bytes)` inputs, big-endian one after another, masked
/// with `mask`. Emitted code passes the unit's inputs as a constant, so the whole hash
/// unrolls.
#[inline(always)]
pub(super) fn hash_inputs(phv: &PhvBuf, inputs: &[(u16, u8)], mask: u64) -> u64 {
    let total: usize = inputs.iter().map(|(_, b)| (*b as usize).min(8)).sum();
    if total <= 16 {
        // The inputs one after another in a 128-bit register: no stores and loads of
        // different widths (which stall store forwarding) on the packet's path.
        let mut acc = 0u128;
        for (f, bytes) in inputs {
            let bits = 8 * (*bytes as u32).min(8);
            if bits > 0 {
                let v = phv[*f as usize] as u128 & ((1u128 << bits) - 1);
                acc = acc << bits | v;
            }
        }
        return (crc32_u128(acc, total) as u64) & mask;
    }
    // Each input is stored as a whole big-endian word whose tail the next input
    // overwrites (fixed-size stores).
    let mut buf = [0u8; MAX_HASH_BYTES + 8];
    let mut n = 0;
    for (f, bytes) in inputs {
        let b = (*bytes as usize).min(8);
        if b > 0 {
            let v = phv[*f as usize] << (64 - 8 * b as u32);
            buf[n..n + 8].copy_from_slice(&v.to_be_bytes());
            n += b;
        }
    }
    (crc32_fast(&buf[..n]) as u64) & mask
}

/// The CRC-32 of [`crate::hash::crc32`] over the `n` (≤ 16) low bytes of `acc`, most
/// significant first: [`crc32_fast`] with the bytes taken from a register.
#[inline(always)]
pub(super) fn crc32_u128(acc: u128, n: usize) -> u32 {
    // The message's first byte at the top.
    let mut m = if n == 0 { 0 } else { acc << (8 * (16 - n)) };
    let mut c = 0xFFFF_FFFFu32;
    let mut left = n;
    while left >= 8 {
        let lo = ((m >> 96) as u32).swap_bytes();
        let hi = ((m >> 64) as u32).swap_bytes();
        c = crc_slice8(c ^ lo, hi);
        m <<= 64;
        left -= 8;
    }
    if left >= 4 {
        c = crc_slice4(c ^ ((m >> 96) as u32).swap_bytes());
        m <<= 32;
        left -= 4;
    }
    for _ in 0..left {
        c = CRC_SLICES[0][((c ^ (m >> 120) as u32) & 0xFF) as usize] ^ (c >> 8);
        m <<= 8;
    }
    c ^ 0xFFFF_FFFF
}
