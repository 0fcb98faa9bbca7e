//! The encoding pass: sentences (or token ids) through the model, batched and
//! pooled (split from `encoder.rs`, which loads the model).
use super::*;
use crate::workers::run_batches;

impl Encoder {
    /// Encode `texts` with every pooling in `sources` in one pass over the model.
    /// `progress` is called with the number of sentences finished so far.
    pub fn encode<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        sources: &[PoolSource],
        opts: &EncodeOptions,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Encoded> {
        self.encode_impl(texts, sources, opts, None, progress, true)
    }

    /// Like [`Encoder::encode`] but in input order: consecutive runs of
    /// `batch_size` sentences, each padded to its longest (a stream served as it
    /// comes). Vectors equal [`Encoder::encode`]'s up to float rounding.
    pub fn encode_in_order<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        sources: &[PoolSource],
        opts: &EncodeOptions,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Encoded> {
        self.encode_impl(texts, sources, opts, None, progress, false)
    }

    /// [`Encoder::encode`] with per-token weights for the averaging poolings
    /// (`PoolSource::Mean`): each sentence's vector is `sum_t w_t h_t / sum_t w_t`
    /// with `w_t = weights.weight(id_t)` (see [`TokenWeights::sentence`] for a
    /// sentence whose weights are all 0). `None` is the plain mean. `cls` and
    /// `pooler` ignore the weights. A cache key must include [`TokenWeights::key`].
    pub fn encode_weighted<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        sources: &[PoolSource],
        opts: &EncodeOptions,
        weights: Option<&TokenWeights>,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Encoded> {
        self.encode_impl(texts, sources, opts, weights, progress, true)
    }

    fn encode_impl<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        sources: &[PoolSource],
        opts: &EncodeOptions,
        weights: Option<&TokenWeights>,
        progress: &(dyn Fn(usize) + Sync),
        sort: bool,
    ) -> Result<Encoded> {
        // Sources that tokenise differently (an `st` pipeline's truncation) run apart.
        let mut groups: Vec<((usize, bool), Vec<usize>)> = Vec::new();
        for (i, src) in sources.iter().enumerate() {
            let tk = tokenization(Some(src), self.max_len);
            match groups.iter_mut().find(|(k, _)| *k == tk) {
                Some((_, members)) => members.push(i),
                None => groups.push((tk, vec![i])),
            }
        }
        if groups.len() > 1 {
            let mut embeddings: Vec<Option<Array2<f32>>> = vec![None; sources.len()];
            let mut first: Option<Encoded> = None;
            for (_, members) in &groups {
                let part: Vec<PoolSource> = members.iter().map(|&i| sources[i].clone()).collect();
                let mut out = self.encode_impl(texts, &part, opts, weights, progress, sort)?;
                for (&i, m) in members.iter().zip(out.embeddings.drain(..)) {
                    embeddings[i] = Some(m);
                }
                first.get_or_insert(out);
            }
            let first = first.expect("at least two groups");
            return Ok(Encoded {
                embeddings: embeddings
                    .into_iter()
                    .map(|m| m.expect("every source encoded"))
                    .collect(),
                tokens: first.tokens,
                truncated: first.truncated,
            });
        }
        let n = texts.len();
        let mut ids = Vec::with_capacity(n);
        let mut truncated = Vec::with_capacity(n);
        for t in texts {
            let (v, cut) = self.tokenize_for(t.as_ref(), sources.first())?;
            truncated.push(cut);
            ids.push(v);
        }
        let tokens: Vec<usize> = ids.iter().map(|v| v.len()).collect();
        // Longest first: the slowest batches start early, which balances the workers.
        let mut order: Vec<usize> = (0..n).collect();
        let bs = opts.batch_size.max(1);
        let batches: Vec<&[usize]> = if sort {
            order.sort_by_key(|&i| std::cmp::Reverse(tokens[i]));
            // Every batch holds sentences of one token length: nothing is padded, so a
            // sentence's vector is bit-for-bit the same whatever else is encoded with it
            // (padding would change the order of the attention sums).
            order
                .chunk_by(|&a, &b| tokens[a] == tokens[b])
                .flat_map(|run| run.chunks(bs))
                .collect()
        } else {
            order.chunks(bs).collect()
        };
        self.encode_batches(
            &batches,
            &ids,
            sources,
            opts,
            weights,
            progress,
            (tokens, truncated),
        )
    }

    /// Run `batches` (indices into `ids`) on `opts.threads` workers.
    #[allow(clippy::too_many_arguments)]
    fn encode_batches(
        &self,
        batches: &[&[usize]],
        ids: &[Vec<u32>],
        sources: &[PoolSource],
        opts: &EncodeOptions,
        weights: Option<&TokenWeights>,
        progress: &(dyn Fn(usize) + Sync),
        (tokens, truncated): (Vec<usize>, Vec<bool>),
    ) -> Result<Encoded> {
        let n = ids.len();
        let dims: Vec<usize> = sources.iter().map(|s| s.dim(self.dim())).collect();
        let upto = sources.iter().map(|s| s.max_layer()).max().unwrap_or(0);
        let outputs: Vec<Mutex<Vec<f32>>> = dims
            .iter()
            .map(|&dim| Mutex::new(vec![0f32; n * dim]))
            .collect();
        let done = AtomicUsize::new(0);
        run_batches(
            batches.len(),
            opts.threads,
            |b, ws| self.run_batch(batches[b], ids, sources, upto, weights, ws),
            |b, pooled| {
                let batch = batches[b];
                for ((out, rows), &dim) in outputs.iter().zip(pooled).zip(&dims) {
                    let mut out = out.lock().unwrap_or_else(|e| e.into_inner());
                    for (k, &i) in batch.iter().enumerate() {
                        out[i * dim..(i + 1) * dim].copy_from_slice(&rows[k * dim..(k + 1) * dim]);
                    }
                }
                progress(done.fetch_add(batch.len(), Ordering::Relaxed) + batch.len());
            },
        )?;
        let embeddings = outputs
            .into_iter()
            .zip(&dims)
            .map(|(m, &dim)| {
                let v = m.into_inner().unwrap_or_else(|e| e.into_inner());
                Array2::from_shape_vec((n, dim), v).expect("n * dim elements")
            })
            .collect();
        Ok(Encoded {
            embeddings,
            tokens,
            truncated,
        })
    }

    /// One padded forward pass (buffers in `ws`); returns, per source, the pooled
    /// rows [batch, dim].
    fn run_batch(
        &self,
        batch: &[usize],
        ids: &[Vec<u32>],
        sources: &[PoolSource],
        upto: usize,
        weights: Option<&TokenWeights>,
        ws: &mut Workspace,
    ) -> Result<Vec<Vec<f32>>> {
        let lens: Vec<usize> = batch.iter().map(|&i| ids[i].len()).collect();
        let t = lens.iter().copied().max().unwrap_or(0);
        let pad = self.model.config.pad_token_id as u32;
        let mut flat = vec![pad; batch.len() * t];
        for (row, &i) in batch.iter().enumerate() {
            flat[row * t..row * t + ids[i].len()].copy_from_slice(&ids[i]);
        }
        self.model.forward_into(&flat, &lens, t, upto, ws)?;
        let states = ws.states();
        let h = self.dim();
        // The first token's rows ([CLS] or <s>) of hidden state `l`.
        let cls = |l: usize| -> Vec<f32> {
            states[l]
                .chunks_exact(t * h)
                .flat_map(|sent| &sent[..h])
                .copied()
                .collect()
        };
        // The last real token's rows of hidden state `l` (rows are right-padded).
        let last = |l: usize| -> Vec<f32> {
            let sents = states[l].chunks_exact(t * h).zip(&lens);
            sents
                .flat_map(|(sent, &len)| &sent[(len - 1) * h..len * h])
                .copied()
                .collect()
        };
        let token_weights: Option<Vec<Vec<f32>>> =
            weights.map(|w| batch.iter().map(|&i| w.sentence(&ids[i])).collect());
        let mut out = Vec::with_capacity(sources.len());
        for src in sources {
            let rows = match src {
                PoolSource::Cls(l) => cls(*l),
                PoolSource::LastToken(l) => last(*l),
                PoolSource::Pooler(l) => {
                    self.model.pool(&cls(*l))?.ok_or(EncoderError::NoPooler)?
                }
                PoolSource::Mean(layers) => {
                    let hs: Vec<&[f32]> = layers.iter().map(|&l| states[l].as_slice()).collect();
                    masked_mean(&hs, &lens, t, h, token_weights.as_deref())
                }
                PoolSource::St(head) => head.pool(states, &lens, t, h)?,
            };
            out.push(rows);
        }
        Ok(out)
    }
}

// Token-id input and per-token states, for the server's text-embeddings-inference
// routes (`/embed` with token ids, `/embed_all`).
impl Encoder {
    /// [`Encoder::encode_weighted`] of inputs given as token ids, used as they are
    /// (no special tokens added, nothing cut): every input must hold 1 to
    /// [`Encoder::max_len`] ids of the model's vocabulary (else an error).
    pub fn encode_ids(
        &self,
        ids: &[Vec<u32>],
        sources: &[PoolSource],
        opts: &EncodeOptions,
        weights: Option<&TokenWeights>,
    ) -> Result<Encoded> {
        for (i, v) in ids.iter().enumerate() {
            if v.is_empty() || v.len() > self.max_len {
                return Err(EncoderError::Unsupported(format!(
                    "input {i} has {} token ids, outside 1..={}",
                    v.len(),
                    self.max_len
                )));
            }
        }
        let n = ids.len();
        let tokens: Vec<usize> = ids.iter().map(Vec::len).collect();
        // As `encode`: batches of one length, longest first, so nothing is padded.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(tokens[i]));
        let bs = opts.batch_size.max(1);
        let batches: Vec<&[usize]> = order
            .chunk_by(|&a, &b| tokens[a] == tokens[b])
            .flat_map(|run| run.chunks(bs))
            .collect();
        self.encode_batches(
            &batches,
            ids,
            sources,
            opts,
            weights,
            &|_| {},
            (tokens, vec![false; n]),
        )
    }

    /// The last layer's hidden state of every token of `ids` (one forward pass):
    /// `ids.len()` rows of [`Encoder::dim`] values. `ids` must hold 1 to
    /// [`Encoder::max_len`] ids of the model's vocabulary.
    pub fn token_states(&self, ids: &[u32]) -> Result<Vec<Vec<f32>>> {
        if ids.is_empty() || ids.len() > self.max_len {
            return Err(EncoderError::Unsupported(format!(
                "{} token ids, outside 1..={}",
                ids.len(),
                self.max_len
            )));
        }
        let t = ids.len();
        let last = self.num_layers();
        let mut ws = Workspace::new();
        self.model.forward_into(ids, &[t], t, last, &mut ws)?;
        let h = self.dim();
        let states = ws.states().get(last).ok_or_else(|| {
            EncoderError::Unsupported(format!("no hidden state {last} after the forward pass"))
        })?;
        Ok(states
            .chunks_exact(h)
            .take(t)
            .map(<[f32]>::to_vec)
            .collect())
    }
}
