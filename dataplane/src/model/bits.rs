//! Big-endian bit fields in byte buffers (header fields in packet bytes).

use super::*;

pub(super) fn mask(width: u8) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// Reads `width` bits (big-endian, at most 64) from `buf` at `bit_offset`.
#[inline]
pub fn read_bits(buf: &[u8], bit_offset: usize, width: u8) -> u64 {
    let first = bit_offset / 8;
    let in_byte = bit_offset % 8;
    let span = in_byte + width as usize;
    if span <= 8 && width > 0 {
        // Within one byte.
        return (buf[first] as u64 >> (8 - span)) & mask(width);
    }
    if span <= 64 && width > 0 {
        if let Some(w) = window(buf, first) {
            return (w >> (64 - in_byte - width as usize)) & mask(width);
        }
    }
    if in_byte == 0 && width % 8 == 0 {
        // Byte-aligned fields near the end of the buffer: a plain big-endian read.
        let n = width as usize / 8;
        let mut v = 0u64;
        for b in &buf[first..first + n] {
            v = (v << 8) | *b as u64;
        }
        return v;
    }
    let mut v: u128 = 0;
    let last = (bit_offset + width as usize - 1) / 8;
    for b in &buf[first..=last] {
        v = (v << 8) | *b as u128;
    }
    let trailing = (last + 1) * 8 - (bit_offset + width as usize);
    ((v >> trailing) as u64) & mask(width)
}

/// Writes `value` into `width` bits at `bit_offset` (big-endian). Only the bytes the field
/// covers are touched (no wide read-modify-write of neighbouring bytes that were just
/// written, which would stall on store forwarding); whole-byte fields are plain stores.
#[inline(always)]
pub fn write_bits(buf: &mut [u8], bit_offset: usize, width: u8, value: u64) {
    let at = bit_offset / 8;
    if bit_offset % 8 == 0 {
        match width {
            8 => {
                buf[at] = value as u8;
                return;
            }
            16 => {
                buf[at..at + 2].copy_from_slice(&(value as u16).to_be_bytes());
                return;
            }
            32 => {
                buf[at..at + 4].copy_from_slice(&(value as u32).to_be_bytes());
                return;
            }
            24 => {
                buf[at..at + 3].copy_from_slice(&(value as u32).to_be_bytes()[1..]);
                return;
            }
            48 => {
                buf[at..at + 6].copy_from_slice(&value.to_be_bytes()[2..]);
                return;
            }
            64 => {
                buf[at..at + 8].copy_from_slice(&value.to_be_bytes());
                return;
            }
            _ => {}
        }
    }
    write_bits_masked(buf, bit_offset, width, value);
}

/// [`write_bits`] for fields that do not cover whole bytes: read-modify-write of the bytes
/// they cover.
#[inline(never)]
pub(super) fn write_bits_masked(buf: &mut [u8], bit_offset: usize, width: u8, value: u64) {
    if width == 0 {
        return;
    }
    let first = bit_offset / 8;
    let span = bit_offset % 8 + width as usize;
    if span <= 8 {
        // Within one byte.
        let shift = 8 - span;
        let m = (mask(width) << shift) as u8;
        buf[first] = (buf[first] & !m) | ((value << shift) as u8 & m);
        return;
    }
    write_bits_spanning(buf, bit_offset, width, value);
}

/// [`write_bits_masked`] for fields over several bytes.
#[inline(never)]
pub(super) fn write_bits_spanning(buf: &mut [u8], bit_offset: usize, width: u8, value: u64) {
    let first = bit_offset / 8;
    let end = bit_offset + width as usize;
    let last = (end - 1) / 8;
    let bytes = &mut buf[first..=last];
    let n = bytes.len();
    let trailing = (last + 1) * 8 - end;
    let m = (mask(width) as u128) << trailing;
    let v = ((value & mask(width)) as u128) << trailing;
    for (i, b) in bytes.iter_mut().enumerate() {
        let shift = 8 * (n - 1 - i);
        let bm = (m >> shift) as u8;
        let bv = (v >> shift) as u8;
        *b = (*b & !bm) | bv;
    }
}
