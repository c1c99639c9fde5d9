//! CRC-32 as computed by the targets' hash units: IEEE 802.3 CRC-32 (reflected polynomial
//! 0x04C11DB7 = 0xEDB88320 reversed, initial value and final xor 0xFFFFFFFF), the algorithm
//! of TNA `HashAlgorithm_t.CRC32` and v1model `HashAlgorithm.crc32`. The input is the
//! concatenation of the hashed fields, big-endian, as the P4 `{a, b, c}` list.

/// The byte table of the reflected CRC-32 (`T[x]` = CRC of byte `x`).
pub(crate) const fn table() -> [u32; 256] {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
}

static TABLE: [u32; 256] = table();

/// CRC-32 of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for b in bytes {
        c = TABLE[((c ^ *b as u32) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

#[cfg(test)]
mod tests {
    #[test]
    fn check_value() {
        // The standard CRC-32 check value.
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
    }
}
