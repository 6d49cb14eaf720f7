//! The `deletion-vector-v1` blob: a deletion vector's bytes inside a Puffin file.
//!
//! Layout (Puffin spec, "`deletion-vector-v1` blob type"; table spec, "Deletion
//! Vectors"):
//!
//! | bytes | what |
//! | --- | --- |
//! | 4 | length of magic + vector, big-endian |
//! | 4 | magic `D1 D3 39 64` |
//! | n | the positions as a *portable* 64-bit Roaring bitmap: u64 little-endian count of 32-bit bitmaps, then for each, by unsigned key, its u32 little-endian key (the positions' high 32 bits) and a 32-bit Roaring bitmap of their low 32 bits |
//! | 4 | CRC-32 (zlib polynomial) of magic + vector, big-endian |
//!
//! `roaring::RoaringTreemap::serialize_into` writes exactly the middle part (its keys are
//! a `BTreeMap<u32, _>`, so in unsigned order); the tests check the bytes against ones
//! built from the spec's description by hand.

use iceberg::{Error, ErrorKind, Result};
use roaring::RoaringTreemap;

/// The blob type of a deletion vector in a Puffin file's footer.
pub const BLOB_TYPE: &str = iceberg::puffin::DELETION_VECTOR_V1;

/// The magic bytes that start a deletion vector, after its length.
pub const MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];

/// Blob property naming the data file a vector applies to (its `file_path` in table
/// metadata).
pub const REFERENCED_DATA_FILE: &str = "referenced-data-file";

/// Blob property holding the number of positions set, in decimal.
pub const CARDINALITY: &str = "cardinality";

/// The blob's `fields`: the reserved `_pos` field id (table spec, "Reserved Field IDs").
/// The Puffin spec does not say what a deletion vector's `fields` hold; Iceberg Java's
/// `BaseDVFileWriter` writes `[MetadataColumns.ROW_POSITION.fieldId()]`, this.
pub const FIELDS: [i32; 1] = [iceberg::metadata_columns::RESERVED_FIELD_ID_POS];

/// Bytes a blob has besides its vector: length, magic and CRC.
const FRAMING_BYTES: usize = 12;

/// The blob bytes of `positions` (module docs).
///
/// # Errors
/// `DataInvalid` for a position of 2^63 or more (the spec: "the most significant bit must
/// be 0") or a vector too long for the 4-byte length.
pub fn encode(positions: &RoaringTreemap) -> Result<Vec<u8>> {
    if positions.max().is_some_and(|max| max >= 1 << 63) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            "a deletion vector position must be below 2^63",
        ));
    }
    let vector_len = positions.serialized_size();
    let framed_len = u32::try_from(MAGIC.len() + vector_len).map_err(|_| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("a deletion vector of {vector_len} bytes does not fit a 4-byte length"),
        )
    })?;
    let mut out = Vec::with_capacity(FRAMING_BYTES + vector_len);
    out.extend_from_slice(&framed_len.to_be_bytes());
    out.extend_from_slice(&MAGIC);
    positions.serialize_into(&mut out).map_err(|e| {
        Error::new(ErrorKind::Unexpected, "serialize a deletion vector").with_source(e)
    })?;
    let crc = crc32fast::hash(&out[4..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// The positions in the blob `bytes` (module docs). `what` names the blob in errors (a
/// Puffin file and offset).
///
/// # Errors
/// `DataInvalid` naming `what` when the blob is shorter than its framing, its length
/// field disagrees with its size, its magic or CRC is wrong, the vector does not parse
/// or leaves bytes over, or a position is 2^63 or more.
pub fn decode(bytes: &[u8], what: &str) -> Result<RoaringTreemap> {
    let invalid = |why: String| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("deletion vector {what}: {why}"),
        )
    };
    if bytes.len() < FRAMING_BYTES {
        return Err(invalid(format!(
            "{} bytes, fewer than the {FRAMING_BYTES} of its framing",
            bytes.len()
        )));
    }
    let (len_bytes, rest) = bytes.split_at(4);
    let (framed, crc_bytes) = rest.split_at(rest.len() - 4);
    let declared = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]);
    if usize::try_from(declared).ok() != Some(framed.len()) {
        return Err(invalid(format!(
            "length field says {declared} bytes of magic and vector, the blob holds {}",
            framed.len()
        )));
    }
    if framed[..4] != MAGIC {
        return Err(invalid(format!(
            "magic {:02X?}, not {:02X?}",
            &framed[..4],
            MAGIC
        )));
    }
    let expected = u32::from_be_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
    let actual = crc32fast::hash(framed);
    if expected != actual {
        return Err(invalid(format!(
            "CRC-32 {actual:08x} of magic and vector, the blob says {expected:08x}"
        )));
    }
    let mut vector = &framed[4..];
    let positions = RoaringTreemap::deserialize_from(&mut vector)
        .map_err(|e| invalid(format!("the Roaring bitmap does not parse: {e}")))?;
    if !vector.is_empty() {
        return Err(invalid(format!(
            "{} bytes after the Roaring bitmap",
            vector.len()
        )));
    }
    if positions.max().is_some_and(|max| max >= 1 << 63) {
        return Err(invalid("a position of 2^63 or more".to_string()));
    }
    Ok(positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blob of {1, 5, 2^32 + 3}, built byte by byte from the Puffin spec's description
    /// and the Roaring format spec's portable layout (no run containers: cookie 12346,
    /// container count, per container key and cardinality − 1 as u16, then a u32 offset
    /// per container from the bitmap's start, then array-container values as u16).
    fn spec_bytes() -> Vec<u8> {
        let bitmap_1_5: [u8; 20] = [
            0x3A, 0x30, 0x00, 0x00, // cookie 12346
            0x01, 0x00, 0x00, 0x00, // one container
            0x00, 0x00, 0x01, 0x00, // key 0, cardinality 2 − 1
            0x10, 0x00, 0x00, 0x00, // container at offset 16
            0x01, 0x00, 0x05, 0x00, // 1, 5
        ];
        let bitmap_3: [u8; 18] = [
            0x3A, 0x30, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, // cookie, one container
            0x00, 0x00, 0x00, 0x00, // key 0, cardinality 1 − 1
            0x10, 0x00, 0x00, 0x00, // offset 16
            0x03, 0x00, // 3
        ];
        let mut vector = vec![2, 0, 0, 0, 0, 0, 0, 0]; // two 32-bit bitmaps, u64 LE
        vector.extend_from_slice(&[0, 0, 0, 0]); // key 0, u32 LE
        vector.extend_from_slice(&bitmap_1_5);
        vector.extend_from_slice(&[1, 0, 0, 0]); // key 1
        vector.extend_from_slice(&bitmap_3);
        let mut blob = ((4 + vector.len()) as u32).to_be_bytes().to_vec();
        blob.extend_from_slice(&[0xD1, 0xD3, 0x39, 0x64]);
        blob.extend_from_slice(&vector);
        // CRC-32 of magic + vector, computed outside Rust:
        // python3 -c 'import zlib; print(hex(zlib.crc32(bytes.fromhex("d1d33964" + V))))'
        // with V = 0200000000000000000000003a30000001000000000001001000000001000500
        //          010000003a3000000100000000000000100000000300 (the vector above).
        blob.extend_from_slice(&SPEC_CRC.to_be_bytes());
        blob
    }

    /// zlib's CRC-32 of the magic and vector of [`spec_bytes`] (see there).
    const SPEC_CRC: u32 = 0x4FE7_48B1;

    fn sample() -> RoaringTreemap {
        RoaringTreemap::from_iter([1u64, 5, (1 << 32) + 3])
    }

    /// Catches a blob that is not the spec's bytes (endianness of length or CRC, the
    /// portable layout, a CRC over the wrong range): other readers would refuse it.
    #[test]
    fn the_blob_is_the_specs_bytes() {
        assert_eq!(encode(&sample()).expect("encode"), spec_bytes());
    }

    /// Catches encode and decode disagreeing, on empty, small, 32-bit-edge and 64-bit
    /// positions.
    #[test]
    fn a_vector_round_trips() {
        for positions in [
            RoaringTreemap::new(),
            sample(),
            RoaringTreemap::from_iter(0u64..100_000),
            RoaringTreemap::from_iter([u64::from(u32::MAX), 1 << 32, (1 << 62) + 7]),
        ] {
            let blob = encode(&positions).expect("encode");
            assert_eq!(decode(&blob, "t").expect("decode"), positions);
        }
        assert_eq!(decode(&spec_bytes(), "t").expect("decode"), sample());
    }

    /// Catches a reader that trusts a damaged blob: a flipped CRC, magic, length or vector
    /// byte is an error that names the blob.
    #[test]
    fn a_damaged_blob_is_refused_naming_it() {
        let good = spec_bytes();
        let last = good.len() - 1;
        for (index, why) in [
            (last, "CRC-32"),
            (4, "magic"),
            (3, "length field"),
            (10, "CRC-32"),
        ] {
            let mut bad = good.clone();
            bad[index] ^= 0x01;
            let err = decode(&bad, "f.puffin@4").expect_err("damaged");
            assert_eq!(err.kind(), ErrorKind::DataInvalid);
            let text = err.to_string();
            assert!(text.contains("f.puffin@4") && text.contains(why), "{text}");
        }
        let err = decode(&good[..8], "f.puffin@4").expect_err("short");
        assert!(err.to_string().contains("f.puffin@4"), "{err}");
    }

    /// Catches a position with the top bit set being written (the spec forbids it).
    #[test]
    fn a_position_of_2_pow_63_is_refused() {
        let err = encode(&RoaringTreemap::from_iter([1u64 << 63])).expect_err("too big");
        assert_eq!(err.kind(), ErrorKind::DataInvalid);
    }
}
