//! Progress bars on stderr, hidden when stderr is not a terminal or with --quiet.
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

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
    let tmpl =
        format!("{{msg:>12}} [{{bar:30}}] {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})");
    pb.set_style(
        ProgressStyle::with_template(&tmpl)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
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
