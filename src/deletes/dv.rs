//! The `deletion-vector-v1` blob (Puffin spec, "deletion-vector-v1"): the positions of
//! one data file's deleted rows as a portable 64-bit Roaring bitmap, framed as
//!
//! ```text
//! u32 big-endian  length of (magic + vector)
//! D1 D3 39 64     magic
//! vector          portable 64-bit Roaring bitmap: u64 little-endian count of 32-bit
//!                 bitmaps, then per bitmap its u32 little-endian key (the high 32 bits
//!                 of its positions) and the 32-bit bitmap in Roaring's portable format
//! u32 big-endian  CRC-32 (zlib's polynomial) of magic + vector
//! ```
//!
//! `roaring`'s `RoaringTreemap::serialize_into` writes exactly the vector's layout.

use iceberg::{Error, ErrorKind, Result};
use roaring::RoaringTreemap;

/// The blob's magic bytes (Puffin spec).
pub const MAGIC: [u8; 4] = [0xD1, 0xD3, 0x39, 0x64];

/// The blob of `positions` (module docs).
///
/// # Errors
/// `Unexpected` if the bitmap cannot be serialized (it always can into memory).
pub fn encode(positions: &RoaringTreemap) -> Result<Vec<u8>> {
    let mut body = MAGIC.to_vec();
    positions.serialize_into(&mut body).map_err(|e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("serializing a deletion vector: {e}"),
        )
    })?;
    let length = u32::try_from(body.len()).map_err(|_| {
        Error::new(
            ErrorKind::FeatureUnsupported,
            format!("a deletion vector of {} bytes (over 4 GiB)", body.len()),
        )
    })?;
    let crc = crc32fast::hash(&body);
    let mut blob = Vec::with_capacity(body.len() + 8);
    blob.extend_from_slice(&length.to_be_bytes());
    blob.extend_from_slice(&body);
    blob.extend_from_slice(&crc.to_be_bytes());
    Ok(blob)
}

/// The positions a `deletion-vector-v1` blob holds; `what` names it in errors.
///
/// # Errors
/// `DataInvalid` naming `what` for a blob whose length, magic or CRC is wrong, or whose
/// vector does not decode.
pub fn decode(blob: &[u8], what: &str) -> Result<RoaringTreemap> {
    let invalid = |why: String| {
        Error::new(
            ErrorKind::DataInvalid,
            format!("deletion vector {what}: {why}"),
        )
    };
    if blob.len() < 12 {
        return Err(invalid(format!(
            "{} bytes, too short for a blob",
            blob.len()
        )));
    }
    let (head, rest) = blob.split_at(4);
    let length = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if length + 8 != blob.len() {
        return Err(invalid(format!(
            "its length field says {length} bytes of magic and vector; the blob has {}",
            blob.len().saturating_sub(8)
        )));
    }
    let (body, crc) = rest.split_at(length);
    if body[..4] != MAGIC {
        return Err(invalid(format!(
            "magic {:02X?}, not D1 D3 39 64",
            &body[..4]
        )));
    }
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    let computed = crc32fast::hash(body);
    if stored != computed {
        return Err(invalid(format!(
            "CRC-32 {stored:08x} stored, {computed:08x} computed"
        )));
    }
    RoaringTreemap::deserialize_from(&body[4..])
        .map_err(|e| invalid(format!("the bitmap does not decode: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blob of {1, 5, 2^32 + 3}, written out by hand from the Puffin spec and
    /// Roaring's portable format (no run containers: cookie 12346, one array container
    /// per key).
    fn expected_blob() -> Vec<u8> {
        let mut vector = Vec::new();
        vector.extend_from_slice(&2u64.to_le_bytes()); // two 32-bit bitmaps
        // key 0: positions 1 and 5
        vector.extend_from_slice(&0u32.to_le_bytes());
        vector.extend_from_slice(&12346u32.to_le_bytes()); // SERIAL_COOKIE_NO_RUNCONTAINER
        vector.extend_from_slice(&1u32.to_le_bytes()); // one container
        vector.extend_from_slice(&0u16.to_le_bytes()); // its key
        vector.extend_from_slice(&1u16.to_le_bytes()); // cardinality - 1
        vector.extend_from_slice(&16u32.to_le_bytes()); // offset of its data
        vector.extend_from_slice(&1u16.to_le_bytes());
        vector.extend_from_slice(&5u16.to_le_bytes());
        // key 1: position 3 (of 2^32 + 3)
        vector.extend_from_slice(&1u32.to_le_bytes());
        vector.extend_from_slice(&12346u32.to_le_bytes());
        vector.extend_from_slice(&1u32.to_le_bytes());
        vector.extend_from_slice(&0u16.to_le_bytes());
        vector.extend_from_slice(&0u16.to_le_bytes());
        vector.extend_from_slice(&16u32.to_le_bytes());
        vector.extend_from_slice(&3u16.to_le_bytes());
        let mut body = MAGIC.to_vec();
        body.extend_from_slice(&vector);
        let mut blob = (body.len() as u32).to_be_bytes().to_vec();
        blob.extend_from_slice(&body);
        blob.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        blob
    }

    /// Catches a blob framed or serialized other than the spec says (byte order,
    /// magic, CRC, the 64-bit bitmap's layout).
    #[test]
    fn the_blob_is_the_specs_bytes() {
        let positions: RoaringTreemap = [1u64, 5, (1 << 32) + 3].into_iter().collect();
        assert_eq!(encode(&positions).expect("encode"), expected_blob());
        assert_eq!(decode(&expected_blob(), "test").expect("decode"), positions);
    }

    /// Catches a damaged blob read as if it were whole.
    #[test]
    fn a_damaged_blob_is_refused_naming_what_is_wrong() {
        let good = expected_blob();
        let mut crc = good.clone();
        let last = crc.len() - 1;
        crc[last] ^= 1;
        assert!(
            decode(&crc, "x")
                .unwrap_err()
                .to_string()
                .contains("CRC-32")
        );
        let mut magic = good.clone();
        magic[4] = 0;
        assert!(
            decode(&magic, "x")
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        assert!(
            decode(&good[..good.len() - 1], "x")
                .unwrap_err()
                .to_string()
                .contains("length")
        );
    }
}
