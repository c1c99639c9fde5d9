use super::*;
use crate::hash::crc32;

#[test]
fn bits_round_trip_at_odd_offsets() {
    let mut buf = [0u8; 10];
    write_bits(&mut buf, 3, 13, 0x1ABC);
    write_bits(&mut buf, 16, 48, 0xDEAD_BEEF_CAFE);
    assert_eq!(read_bits(&buf, 3, 13), 0x1ABC);
    assert_eq!(read_bits(&buf, 16, 48), 0xDEAD_BEEF_CAFE);
    assert_eq!(buf[0] >> 5, 0);
    let mut long = [0u8; 24];
    for (bit, width, value) in [
        (0, 64, u64::MAX),
        (70, 3, 5),
        (77, 61, 0x0123_4567_89AB_CDEF),
        (130, 9, 0x1FF),
    ] {
        write_bits(&mut long, bit, width, value);
        assert_eq!(
            read_bits(&long, bit, width),
            value,
            "bit {bit} width {width}"
        );
    }
    assert_eq!(read_bits(&long, 0, 64), u64::MAX);
}

#[test]
fn sliced_crc_matches_the_reference() {
    let bytes: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
    for start in 0..8 {
        for n in start..bytes.len() {
            let b = &bytes[start..n];
            assert_eq!(crc32_fast(b), crc32(b), "bytes {start}..{n}");
        }
    }
    // Up to 16 bytes from a register, as hash units with few inputs are computed.
    for start in 0..8 {
        for n in 0..=16 {
            let b = &bytes[start..start + n];
            let acc = b.iter().fold(0u128, |a, x| a << 8 | *x as u128);
            assert_eq!(crc32_u128(acc, n), crc32(b), "{n} bytes from {start}");
        }
    }
}
