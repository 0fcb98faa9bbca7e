//! Token hidden states and pooled vectors of a list of sentences through
//! bertflow's own encoder, in the cache layout of
//! `scripts/reference/model_vectors.py` (which the auto rule's
//! leave-one-model-out check reads, `scripts/reference/auto_rule.py`):
//!
//! ```sh
//! python3 scripts/reference/model_vectors.py --engine bertflow \
//!     --model models/all-mpnet-base-v2 --out target/auto-cache/mpnet
//! # which writes OUT/sentences.json, then runs
//! cargo run --release -p bertflow-encoder --example hidden_states -- MODEL OUT
//! ```
//!
//! Reads `OUT/sentences.json` (a JSON list of strings) and writes, for the
//! hidden states 0 (embedding output), 1 and N (the last layer):
//! `tokens.npy` (int32 ids), `offsets.npy` (int64, row i's tokens are
//! `offsets[i]..offsets[i + 1]`), `tok-L{0,1,N}.f16.npy` (float16, tokens x
//! hidden), `pooled-{last-avg,first-last-avg,cls,emb-avg}.npy` (float32,
//! sentences x hidden: masked means over every token, special tokens
//! included, of state N, of the mean of 1 and N, of 0; the first token of N)
//! and `done.npy` (all true). Sentences are sorted by length and run in padded
//! batches of 32 at fp32 on one thread.
use bertflow_encoder::engine::Workspace;
use bertflow_encoder::Encoder;
use std::io::Write;
use std::path::Path;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// f32 to IEEE half, round to nearest even (overflow to infinity).
fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = 1u32 << (shift - 1);
        let rest = m & ((1u32 << shift) - 1);
        let mut h = m >> shift;
        if rest > half || (rest == half && h & 1 == 1) {
            h += 1;
        }
        return sign | h as u16;
    }
    let rest = man & 0x1fff;
    let mut h = ((e as u32) << 10) | (man >> 13);
    if rest > 0x1000 || (rest == 0x1000 && h & 1 == 1) {
        h += 1; // may carry into the exponent: still correct (up to infinity)
    }
    sign | h as u16
}

/// Write a C-order .npy file of `shape` with the numpy type `descr`.
fn write_npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) -> Res<()> {
    let dims = match shape {
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {dims}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let tmp = path.with_extension("npy.tmp");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    f.write_all(b"\x93NUMPY\x01\x00")?;
    f.write_all(&(header.len() as u16).to_le_bytes())?;
    f.write_all(header.as_bytes())?;
    f.write_all(data)?;
    f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Little-endian bytes of `v`, each value by `each`.
fn bytes<T: Copy, const N: usize>(v: &[T], each: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| each(x)).collect()
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, out] = args.as_slice() else {
        return Err("usage: hidden_states MODEL OUT (OUT/sentences.json is read)".into());
    };
    let out = Path::new(out);
    let sents: Vec<String> =
        serde_json::from_str(&std::fs::read_to_string(out.join("sentences.json"))?)?;
    let enc = Encoder::load(model, None)?;
    let (n_layers, d) = (enc.num_layers(), enc.dim());
    let layers = [0, 1, n_layers];
    let ids: Vec<Vec<u32>> = sents
        .iter()
        .map(|s| enc.tokenize(s).map(|(v, _)| v))
        .collect::<Result<_, _>>()?;
    let mut offsets = vec![0usize; sents.len() + 1];
    for (i, v) in ids.iter().enumerate() {
        offsets[i + 1] = offsets[i] + v.len();
    }
    let total = offsets[sents.len()];
    eprintln!("{} sentences, {total} tokens", sents.len());
    let mut toks = vec![vec![0u16; total * d]; layers.len()];
    let names = ["last-avg", "first-last-avg", "cls", "emb-avg"];
    let mut pooled = vec![vec![0f32; sents.len() * d]; names.len()];
    let mut order: Vec<usize> = (0..sents.len()).collect();
    order.sort_by_key(|&i| ids[i].len());
    let pad = enc.model().config.pad_token_id as u32;
    let mut ws = Workspace::new();
    for (b, rows) in order.chunks(32).enumerate() {
        let t = rows.iter().map(|&r| ids[r].len()).max().unwrap_or(1);
        let lens: Vec<usize> = rows.iter().map(|&r| ids[r].len()).collect();
        let mut flat = vec![pad; rows.len() * t];
        for (k, &r) in rows.iter().enumerate() {
            flat[k * t..k * t + lens[k]].copy_from_slice(&ids[r]);
        }
        enc.model()
            .forward_into(&flat, &lens, t, n_layers, &mut ws)?;
        let states = ws.states();
        for (k, &r) in rows.iter().enumerate() {
            let row = |l: usize, j: usize| &states[l][(k * t + j) * d..(k * t + j + 1) * d];
            for (li, &l) in layers.iter().enumerate() {
                for j in 0..lens[k] {
                    let dst = &mut toks[li][(offsets[r] + j) * d..(offsets[r] + j + 1) * d];
                    for (o, &v) in dst.iter_mut().zip(row(l, j)) {
                        *o = f16_bits(v);
                    }
                }
            }
            // Sums straight into this sentence's pooled rows (zero until now).
            let [last, first_last, cls, emb] = pooled.as_mut_slice() else {
                unreachable!("four poolings")
            };
            let rows = r * d..(r + 1) * d;
            let (last, first_last, emb) = (
                &mut last[rows.clone()],
                &mut first_last[rows.clone()],
                &mut emb[rows.clone()],
            );
            for j in 0..lens[k] {
                let (s0, s1, sn) = (row(0, j), row(1, j), row(n_layers, j));
                for c in 0..d {
                    last[c] += sn[c];
                    first_last[c] += (s1[c] + sn[c]) / 2.0;
                    emb[c] += s0[c];
                }
            }
            let inv = 1.0 / lens[k] as f32;
            for v in last
                .iter_mut()
                .chain(first_last.iter_mut())
                .chain(emb.iter_mut())
            {
                *v *= inv;
            }
            cls[rows].copy_from_slice(row(n_layers, 0));
        }
        if b % 100 == 99 {
            eprintln!("{}/{}", (b + 1) * 32, sents.len());
        }
    }
    let le32 = |x: f32| x.to_le_bytes();
    for (name, v) in names.iter().zip(&pooled) {
        write_npy(
            &out.join(format!("pooled-{name}.npy")),
            "<f4",
            &[sents.len(), d],
            &bytes(v, le32),
        )?;
    }
    for (l, v) in layers.iter().zip(&toks) {
        write_npy(
            &out.join(format!("tok-L{l}.f16.npy")),
            "<f2",
            &[total, d],
            &bytes(v, |x: u16| x.to_le_bytes()),
        )?;
    }
    let tokens: Vec<u32> = ids.iter().flatten().copied().collect();
    write_npy(
        &out.join("tokens.npy"),
        "<i4",
        &[total],
        &bytes(&tokens, |x: u32| (x as i32).to_le_bytes()),
    )?;
    write_npy(
        &out.join("offsets.npy"),
        "<i8",
        &[offsets.len()],
        &bytes(&offsets, |x: usize| (x as i64).to_le_bytes()),
    )?;
    write_npy(
        &out.join("done.npy"),
        "|b1",
        &[sents.len()],
        &vec![1u8; sents.len()],
    )?;
    eprintln!("done");
    Ok(())
}
