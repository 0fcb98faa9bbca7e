//! The scoped-thread batch worker shared by the encoder's passes
//! ([`crate::encoder`]) and the cross-encoder's ([`crate::head`]): batches
//! handed out in order to up to `threads` workers, each with its own reusable
//! [`Workspace`]; the first error stops the others and is returned.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::engine::Workspace;
use crate::error::{EncoderError, Result};

/// Run `run(b, workspace)` for every batch `b` in `0..batches` on up to
/// `threads` threads (the caller's among them), passing each result to
/// `keep(b, result)`; returns the first error, after which no batch starts.
pub(crate) fn run_batches<T>(
    batches: usize,
    threads: usize,
    run: impl Fn(usize, &mut Workspace) -> Result<T> + Sync,
    keep: impl Fn(usize, T) + Sync,
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let first_error: Mutex<Option<EncoderError>> = Mutex::new(None);
    let worker = || {
        // This worker's buffers, reused by all its batches.
        let mut ws = Workspace::new();
        loop {
            let b = next.fetch_add(1, Ordering::Relaxed);
            if b >= batches || first_error.lock().map(|e| e.is_some()).unwrap_or(true) {
                return;
            }
            match run(b, &mut ws) {
                Ok(result) => keep(b, result),
                Err(e) => {
                    let mut slot = first_error.lock().unwrap_or_else(|e| e.into_inner());
                    slot.get_or_insert(e);
                    return;
                }
            }
        }
    };
    let threads = threads.clamp(1, batches.max(1));
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(worker);
        }
        worker();
    });
    match first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
