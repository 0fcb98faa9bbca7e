"""Reference outputs of xoshiro256** seeded by SplitMix64, for the test
`xoshiro_reference_values` in crates/numeric/src/rng.rs.

A direct transcription of Vigna's public-domain splitmix64.c and
xoshiro256starstar.c (https://prng.di.unimi.it/), independent of the Rust code.
Pure Python, no packages:  python3 scripts/reference/xoshiro.py
"""

MASK = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & MASK


def xoshiro256ss(seed, count):
    s = []
    state = seed
    for _ in range(4):
        state, v = splitmix64(state)
        s.append(v)
    out = []
    for _ in range(count):
        result = (rotl((s[1] * 5) & MASK, 7) * 9) & MASK
        t = (s[1] << 17) & MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        out.append(result)
    return out


if __name__ == "__main__":
    for v in xoshiro256ss(42, 4):
        print(f"0x{v:016X},")
