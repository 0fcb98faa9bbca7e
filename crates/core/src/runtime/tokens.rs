//! Token-level access to a [`Pipeline`], for the server's
//! text-embeddings-inference routes: embedding inputs given as the model's own
//! token ids (`POST /embed` with `[[101, ...]]`), and the last layer's vector
//! of every token (`POST /embed_all`).

use bertflow_encoder::{EncodeOptions, PoolSource};

use crate::error::Result;
use crate::runtime::pipeline::{Batch, Pipeline};

impl Pipeline {
    /// The pooling as the encoder runs it, for [`Pipeline::embed_ids`]; an
    /// `st` pooling reads its directory, so build it once and keep it.
    pub fn ids_source(&self) -> Result<PoolSource> {
        crate::runtime::st_pipeline::source(self.encoder(), self.pooling())
    }

    /// The raw (uncalibrated) embeddings of inputs given as token ids, used as
    /// they are (no special tokens added, nothing cut; each input must hold 1
    /// to `max_len` ids of the vocabulary), pooled and weighted as
    /// [`Pipeline::embed_batch`] pools and weights text. `source` is
    /// [`Pipeline::ids_source`]. Calibrate with [`Pipeline::calibrate`].
    pub fn embed_ids(
        &self,
        source: &PoolSource,
        ids: &[Vec<u32>],
        opts: &EncodeOptions,
    ) -> Result<Batch> {
        let weights = self.weighting().require()?;
        let out = self
            .encoder()
            .encode_ids(ids, std::slice::from_ref(source), opts, weights)?;
        Batch::of_one_pooling(out)
    }

    /// The last layer's vector of every token of `text` as this pipeline
    /// tokenises it (special tokens included, cut at `max_len`), and whether
    /// it was cut.
    pub fn token_states(&self, text: &str) -> Result<(Vec<Vec<f32>>, bool)> {
        let (ids, cut) = self.tokenize(text)?;
        Ok((self.encoder().token_states(&ids)?, cut))
    }
}
