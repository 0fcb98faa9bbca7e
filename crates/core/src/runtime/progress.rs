//! Progress reporting without printing: workflows report through a
//! [`Progress`]; the CLI draws indicatif bars on a terminal, the Python package
//! draws its own when asked, and [`Silent`] (the default) drops everything.
use std::sync::Arc;

/// One running task (encoding, fitting, plotting...).
pub trait Bar: Send + Sync {
    /// Sets the total (it may be unknown when the task starts).
    fn set_length(&self, _len: u64) {}
    /// Sets how many units are done.
    fn set_position(&self, pos: u64);
    /// Adds to the units done.
    fn inc(&self, delta: u64);
    /// A short message next to the bar (e.g. the running loss).
    fn set_message(&self, _msg: String) {}
    /// The task is over: remove the bar.
    fn finish(&self) {}
}

/// Where workflows report progress and notes.
pub trait Progress: Send + Sync {
    /// Starts a bar counting `unit`s up to `len` (0 if unknown).
    fn bar(&self, len: u64, label: &str, unit: &str) -> Box<dyn Bar>;
    /// A note for the user (cache reuse, truncation, warnings).
    fn note(&self, msg: &str);
}

/// Reports nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct Silent;

struct NoBar;

impl Bar for NoBar {
    fn set_position(&self, _pos: u64) {}
    fn inc(&self, _delta: u64) {}
}

impl Progress for Silent {
    fn bar(&self, _len: u64, _label: &str, _unit: &str) -> Box<dyn Bar> {
        Box::new(NoBar)
    }
    fn note(&self, _msg: &str) {}
}

/// The shared handle workflows hold.
pub type SharedProgress = Arc<dyn Progress>;

/// A [`Silent`] handle.
pub fn silent() -> SharedProgress {
    Arc::new(Silent)
}
