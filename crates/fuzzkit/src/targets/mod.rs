//! The fuzz targets: one function per reader of outside bytes, each taking
//! arbitrary bytes and required never to panic, hang or allocate without
//! bound; and each target's valid seed inputs, generated (not stored).
//!
//! | target    | reader                                                         |
//! |-----------|----------------------------------------------------------------|
//! | `calib`   | `Fitted::from_bytes` (a calibrator file), then transform       |
//! | `matrix`  | `MatrixReader::open` on `.npy` / `.safetensors`, `read_sentences` on `.jsonl` |
//! | `index`   | `Index::open` and every accessor, search, verify, repair       |
//! | `ann`     | `Ann::load` with fuzzed `.hnsw.json`, `.hnsw.graph`, `.hnsw.data`, `.links` |
//! | `moments` | `MomentStats::from_bytes`, then fits from the statistics       |
//! | `server`  | the server's router in-process: JSON bodies of every POST endpoint |
//!
//! Some targets read their first byte as a mode (which file or endpoint the
//! rest is, whether to recompute a checksum so that mutations get past it).

pub mod ann;
pub mod calib;
pub mod index;
pub mod matrix;
pub mod moments;
pub mod server;

use std::cell::RefCell;
use std::path::PathBuf;

/// A target: its name, its seeds and the function that runs one input.
pub struct Target {
    /// The name (also the cargo-fuzz target's).
    pub name: &'static str,
    /// Valid inputs to start from.
    pub seeds: fn() -> Vec<Vec<u8>>,
    /// Runs one input.
    pub run: fn(&[u8]),
}

/// Every target.
pub const ALL: [Target; 6] = [
    Target {
        name: "calib",
        seeds: calib::seeds,
        run: calib::run,
    },
    Target {
        name: "matrix",
        seeds: matrix::seeds,
        run: matrix::run,
    },
    Target {
        name: "index",
        seeds: index::seeds,
        run: index::run,
    },
    Target {
        name: "ann",
        seeds: ann::seeds,
        run: ann::run,
    },
    Target {
        name: "moments",
        seeds: moments::seeds,
        run: moments::run,
    },
    Target {
        name: "server",
        seeds: server::seeds,
        run: server::run,
    },
];

/// The target called `name`.
pub fn by_name(name: &str) -> Option<&'static Target> {
    ALL.iter().find(|t| t.name == name)
}

thread_local! {
    static SCRATCH: RefCell<Option<tempfile::TempDir>> = const { RefCell::new(None) };
}

/// A path called `name` in a scratch directory of this thread (made on first
/// use, removed at thread exit), for readers that take a path.
pub fn scratch(name: &str) -> PathBuf {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        let dir = s.get_or_insert_with(|| tempfile::tempdir().expect("a temporary directory"));
        dir.path().join(name)
    })
}

/// Writes `bytes` to the scratch file `name` and returns its path.
pub fn scratch_file(name: &str, bytes: &[u8]) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, bytes).expect("writing a scratch file");
    path
}

/// A small deterministic matrix (`rows x cols`, values in about -1..1 with
/// some structure so that fits are well conditioned).
pub fn matrix(rows: usize, cols: usize, seed: u64) -> ndarray::Array2<f32> {
    let mut rng = crate::Rng::new(seed);
    ndarray::Array2::from_shape_fn((rows, cols), |(i, j)| {
        let noise = (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        noise + 0.3 * ((i % 3) as f32) * ((j % 2) as f32) + 0.1 * j as f32
    })
}

/// A deterministic probe input for a calibrator or index of dimension `dim`.
pub fn probe(rows: usize, dim: usize) -> ndarray::Array2<f32> {
    ndarray::Array2::from_shape_fn((rows, dim), |(i, j)| {
        ((i * 7 + j * 3) % 11) as f32 / 5.0 - 1.0
    })
}
