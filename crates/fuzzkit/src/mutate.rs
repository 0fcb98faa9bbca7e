//! Deterministic byte mutations of seed inputs.

/// SplitMix64: small, fast, and the same sequence on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// True with probability `1 / n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// Integers that often sit on a boundary, written little-endian.
const INTERESTING: [u64; 14] = [
    0,
    1,
    2,
    7,
    8,
    64,
    255,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    i64::MAX as u64,
    u64::MAX,
];

/// Numbers as text, for JSON and `.npy` headers.
const NUMBERS: [&str; 14] = [
    "0",
    "1",
    "-1",
    "2",
    "255",
    "65536",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "18446744073709551615",
    "18446744073709551616",
    "1e308",
    "-0.0",
    "99999999999999999999999",
];

/// JSON fragments to insert.
const TOKENS: [&str; 14] = [
    "\"", "{", "}", "[", "]", ",", ":", "null", "true", "[]", "{}", "\"\"", "\\u0000", "\u{00e9}",
];

/// Applies a few stacked mutations to a randomly chosen seed.
#[derive(Debug, Clone)]
pub struct Mutator {
    rng: Rng,
}

impl Mutator {
    /// A mutator whose choices follow from `seed`.
    pub fn new(seed: u64) -> Self {
        Mutator {
            rng: Rng::new(seed),
        }
    }

    /// The generator (for targets that need more choices).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// A mutated copy of one of `seeds` (an empty input if there are none).
    pub fn mutate(&mut self, seeds: &[Vec<u8>]) -> Vec<u8> {
        let mut data = if seeds.is_empty() {
            Vec::new()
        } else {
            seeds[self.rng.below(seeds.len())].clone()
        };
        let rounds = 1 + self.rng.below(4);
        for _ in 0..rounds {
            self.once(&mut data, seeds);
        }
        data
    }

    /// One mutation of `data` in place.
    pub fn once(&mut self, data: &mut Vec<u8>, seeds: &[Vec<u8>]) {
        let r = &mut self.rng;
        let len = data.len();
        match r.below(13) {
            // Flip one to four bits.
            0 if len > 0 => {
                for _ in 0..1 + r.below(4) {
                    let i = r.below(len);
                    data[i] ^= 1 << r.below(8);
                }
            }
            // Set a byte to a random or boundary value.
            1 if len > 0 => {
                let i = r.below(len);
                data[i] = match r.below(4) {
                    0 => 0,
                    1 => 0xff,
                    2 => 0x80,
                    _ => r.next_u64() as u8,
                };
            }
            // Overwrite 2, 4 or 8 bytes with an interesting integer.
            2 if len > 0 => {
                let width = [2, 4, 8][r.below(3)];
                let mut value = INTERESTING[r.below(INTERESTING.len())];
                if r.one_in(3) {
                    value = value.wrapping_add(r.below(5) as u64).wrapping_sub(2);
                }
                let at = r.below(len);
                for (k, b) in value.to_le_bytes()[..width].iter().enumerate() {
                    if let Some(slot) = data.get_mut(at + k) {
                        *slot = *b;
                    }
                }
            }
            // Replace a run of ASCII digits with another number.
            3 if len > 0 => {
                let from = r.below(len);
                if let Some(start) = data[from..].iter().position(u8::is_ascii_digit) {
                    let start = from + start;
                    let end = data[start..]
                        .iter()
                        .position(|b| !b.is_ascii_digit())
                        .map_or(data.len(), |e| start + e);
                    let number = NUMBERS[r.below(NUMBERS.len())].as_bytes();
                    data.splice(start..end, number.iter().copied());
                }
            }
            // Truncate.
            4 if len > 0 => data.truncate(r.below(len)),
            // Extend with random bytes, zeros, or a copy of a piece.
            5 => {
                let n = 1 + r.below(64);
                match r.below(3) {
                    0 => data.extend((0..n).map(|_| r.next_u64() as u8)),
                    1 => data.extend(std::iter::repeat_n(0u8, n)),
                    _ if len > 0 => {
                        let at = r.below(len);
                        let piece = data[at..(at + n).min(len)].to_vec();
                        data.extend(piece);
                    }
                    _ => data.push(0),
                }
            }
            // Insert random bytes.
            6 => {
                let at = r.below(len + 1);
                let n = 1 + r.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| r.next_u64() as u8).collect();
                data.splice(at..at, bytes);
            }
            // Delete a range.
            7 if len > 0 => {
                let at = r.below(len);
                let n = 1 + r.below((len - at).min(64));
                data.drain(at..at + n);
            }
            // Splice: a prefix of this input and a suffix of a seed.
            8 if !seeds.is_empty() => {
                let other = &seeds[r.below(seeds.len())];
                let cut = r.below(len + 1);
                let from = r.below(other.len() + 1);
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
            // Copy a piece of the input over another place of it.
            9 if len > 1 => {
                let from = r.below(len);
                let to = r.below(len);
                let n = (1 + r.below(32)).min(len - from).min(len - to);
                let piece = data[from..from + n].to_vec();
                data[to..to + n].copy_from_slice(&piece);
            }
            // Insert a JSON fragment.
            10 => {
                let at = r.below(len + 1);
                let token = TOKENS[r.below(TOKENS.len())].as_bytes();
                data.splice(at..at, token.iter().copied());
            }
            // Duplicate a piece in place (repeated fields, long strings).
            11 if len > 0 => {
                let at = r.below(len);
                let n = (1 + r.below(32)).min(len - at);
                let piece = data[at..at + n].to_vec();
                for _ in 0..1 + r.below(8) {
                    data.splice(at..at, piece.iter().copied());
                }
            }
            // Swap two bytes.
            _ if len > 1 => {
                let (a, b) = (r.below(len), r.below(len));
                data.swap(a, b);
            }
            _ => data.push(r.next_u64() as u8),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_deterministic_and_varied() {
        let seeds = vec![
            b"{\"a\": [1, 2, 3], \"b\": \"text\"}".to_vec(),
            vec![0u8; 40],
        ];
        let run = |seed| {
            let mut m = Mutator::new(seed);
            (0..200).map(|_| m.mutate(&seeds)).collect::<Vec<_>>()
        };
        let a = run(1);
        assert_eq!(a, run(1));
        assert_ne!(a, run(2));
        let distinct: std::collections::HashSet<_> = a.iter().collect();
        assert!(distinct.len() > 150, "{} distinct of 200", distinct.len());
        assert!(a.iter().any(|d| d.is_empty() || d.len() < 20));
        assert!(a.iter().any(|d| d.len() > 45));
    }
}
