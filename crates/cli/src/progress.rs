//! Progress bars on stderr, hidden when stderr is not a terminal or with --quiet:
//! the CLI's implementation of bertflow-core's `Progress`.
use bertflow_core::{Bar, Progress, SharedProgress};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(q: bool) {
    QUIET.store(q, Ordering::Relaxed);
}

fn visible() -> bool {
    !QUIET.load(Ordering::Relaxed) && std::io::stderr().is_terminal()
}

/// A bar counting `unit`s up to `len`.
pub fn bar(len: u64, msg: &str, unit: &str) -> ProgressBar {
    let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if !visible() {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    let tmpl = format!("{{msg:>12}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{rate}}, eta {{eta}})");
    pb.set_style(
        ProgressStyle::with_template(&tmpl)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key(
                "rate",
                |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let r = s.per_sec();
                    let _ = if r >= 100.0 {
                        write!(w, "{r:.0}/s")
                    } else {
                        write!(w, "{r:.1}/s")
                    };
                },
            )
            .progress_chars("=> "),
    );
    pb.set_message(msg.to_string());
    pb
}

/// A note for the user on stderr (suppressed by --quiet).
pub fn note(msg: impl AsRef<str>) {
    if !QUIET.load(Ordering::Relaxed) {
        eprintln!("{}", msg.as_ref());
    }
}

struct Indicatif(ProgressBar);

impl Bar for Indicatif {
    fn set_length(&self, len: u64) {
        self.0.set_length(len);
    }
    fn set_position(&self, pos: u64) {
        self.0.set_position(pos);
    }
    fn inc(&self, delta: u64) {
        self.0.inc(delta);
    }
    fn set_message(&self, msg: String) {
        self.0.set_message(msg);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

/// Terminal progress for the workflows of bertflow-core.
struct Terminal;

impl Progress for Terminal {
    fn bar(&self, len: u64, label: &str, unit: &str) -> Box<dyn Bar> {
        Box::new(Indicatif(bar(len, label, unit)))
    }
    fn note(&self, msg: &str) {
        note(msg);
    }
}

/// The handle passed to bertflow-core.
pub fn handle() -> SharedProgress {
    Arc::new(Terminal)
}
