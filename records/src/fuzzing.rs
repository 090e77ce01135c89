//! Mutations for structure-aware fuzzing, shared by the decoders' fuzz tests (this
//! crate's, and the Kafka front end's through the `fuzzing` feature): a valid encoding
//! is damaged in place — bits flipped, bytes overwritten, inserted and cut, and runs
//! replaced by hostile lengths and counts, as big-endian words or varints — so the
//! damage lands inside a real field layout.

use proptest::prelude::*;

#[derive(Debug, Clone)]
pub enum Mutation {
    Flip(u16, u8),
    Set(u16, u8),
    Insert(u16, u8),
    Remove(u16),
    Truncate(u16),
    /// Four bytes replaced by a big-endian word (an array count, a string length).
    Word(u16, i32),
    /// Bytes replaced by a zigzag varint (a record's or header's length or count).
    Varint(u16, i64),
}

pub fn mutation() -> impl Strategy<Value = Mutation> {
    let word = prop_oneof![
        Just(-1i32),
        Just(0),
        Just(1),
        Just(i32::MAX),
        Just(i32::MIN),
        Just(0x7fff),
        Just(0xffff),
        any::<i32>(),
    ];
    let varint = prop_oneof![
        Just(-1i64),
        Just(0),
        Just(i64::MAX),
        Just(i64::MIN),
        any::<i64>()
    ];
    prop_oneof![
        (any::<u16>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip(at, 1 << bit)),
        (any::<u16>(), any::<u8>()).prop_map(|(at, b)| Mutation::Set(at, b)),
        (any::<u16>(), any::<u8>()).prop_map(|(at, b)| Mutation::Insert(at, b)),
        any::<u16>().prop_map(Mutation::Remove),
        any::<u16>().prop_map(Mutation::Truncate),
        (any::<u16>(), word).prop_map(|(at, w)| Mutation::Word(at, w)),
        (any::<u16>(), varint).prop_map(|(at, v)| Mutation::Varint(at, v)),
    ]
}

/// Applies `m` to `bytes`, leaving its first `keep` bytes as they are.
pub fn apply(bytes: &mut Vec<u8>, keep: usize, m: &Mutation) {
    if bytes.len() <= keep {
        return;
    }
    let at = |i: u16, len: usize| keep + usize::from(i) % (len - keep);
    let splice = |bytes: &mut Vec<u8>, i: usize, with: &[u8]| {
        let end = (i + with.len()).min(bytes.len());
        bytes.splice(i..end, with.iter().copied());
    };
    match *m {
        Mutation::Flip(i, bit) => {
            let i = at(i, bytes.len());
            bytes[i] ^= bit;
        }
        Mutation::Set(i, b) => {
            let i = at(i, bytes.len());
            bytes[i] = b;
        }
        Mutation::Insert(i, b) => {
            let i = at(i, bytes.len() + 1);
            bytes.insert(i, b);
        }
        Mutation::Remove(i) => {
            let i = at(i, bytes.len());
            bytes.remove(i);
        }
        Mutation::Truncate(i) => {
            let i = at(i, bytes.len());
            bytes.truncate(i);
        }
        Mutation::Word(i, w) => {
            let i = at(i, bytes.len());
            splice(bytes, i, &w.to_be_bytes());
        }
        Mutation::Varint(i, v) => {
            let i = at(i, bytes.len());
            let mut z = ((v << 1) ^ (v >> 63)) as u64;
            let mut enc = Vec::new();
            while z >= 0x80 {
                enc.push((z as u8) | 0x80);
                z >>= 7;
            }
            enc.push(z as u8);
            splice(bytes, i, &enc);
        }
    }
}

/// `default` cases, or `PROPTEST_CASES` when set (infra/fuzz.sh sets it; a config
/// with a case count in the code would not read it).
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
