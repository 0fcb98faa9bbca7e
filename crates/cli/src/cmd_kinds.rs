//! `bertflow kinds`: the calibrator kinds of the registry, and the help text
//! of every flag that takes a calibrator spec (generated from the same
//! registry, so a new kind shows up everywhere).
use anyhow::Result;
use bertflow_core::calib::registry;
use clap::Args;
use std::io::Write;

#[derive(Args, Debug)]
pub struct KindsArgs {
    /// Print the registry as JSON (what Python's `bertflow.kinds()` returns): per kind its
    /// name, doc, whether it fits from moment statistics, and its parameters with type,
    /// default, range and doc.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: KindsArgs) -> Result<()> {
    let text = if a.json {
        serde_json::to_string_pretty(&registry::to_json())? + "\n"
    } else {
        registry::table() + &quantizer_table()
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        // `bertflow kinds | head` is not an error.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// The quantizers (`fit --quantize`, `encode --quantize`, `index build
/// --quantize`), one line each.
fn quantizer_table() -> String {
    let mut out = String::from(
        "\nQuantizers (--quantize of fit, encode and index build; a calibrator file's last \
         stage):\n\n",
    );
    for (spec, doc) in bertflow_core::quantize::QUANTIZERS {
        out.push_str(&format!("  {spec:<34} {doc}\n"));
    }
    out
}

/// `-h` of a flag taking one spec.
pub fn spec_help() -> String {
    format!(
        "Calibrator spec KIND[:KEY=VALUE,...]: {} (`bertflow kinds` lists the options)",
        registry::names()
    )
}

/// The kinds, one line each (name and what it does); `bertflow kinds` has
/// their options, defaults and ranges.
fn one_line_each() -> String {
    registry::KINDS
        .iter()
        .map(|k| format!("  {:<12} {}\n", k.name, k.doc))
        .collect()
}

/// `--help` of a flag taking one spec: the kinds, one line each.
pub fn spec_long_help() -> String {
    format!(
        "Calibrator spec KIND[:KEY=VALUE,...]; `bertflow kinds` lists every kind's options, \
         defaults and ranges. The kinds:\n{}",
        one_line_each()
    )
}

/// `-h` of a flag taking a comma-separated list of specs.
pub fn list_help() -> String {
    format!(
        "Calibrator specs, comma-separated (options after a colon, e.g. none,whiten:k=256,flow:seed=1,epochs=2): {}",
        registry::names()
    )
}

/// `--help` of a flag taking a comma-separated list of specs.
pub fn list_long_help() -> String {
    format!(
        "Calibrator specs, comma-separated; options of a spec follow it after a colon and may \
         continue after commas (none,flow:levels=2,steps=2,whiten is none, the flow with both \
         options, and whiten); `bertflow kinds` lists every kind's options, defaults and \
         ranges. The kinds:\n{}",
        one_line_each()
    )
}

#[cfg(test)]
mod tests {
    use bertflow_core::calib::registry::KINDS;
    use clap::CommandFactory;

    /// Every flag that takes calibrator specs lists every kind (`-h`) and
    /// every kind's options with their ranges (`--help`).
    #[test]
    fn every_spec_flag_lists_every_kind() {
        let cli = crate::Cli::command();
        let flags = [
            ("fit", "kind"),
            ("eval", "fit"),
            ("compare", "kinds"),
            ("analyze", "kinds"),
            ("report", "kinds"),
            ("bench flow", "spec"),
        ];
        for (sub, flag) in flags {
            let cmd = sub.split(' ').fold(&cli, |c, name| {
                c.find_subcommand(name).unwrap_or_else(|| panic!("{sub}"))
            });
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_id() == flag)
                .unwrap_or_else(|| panic!("{sub} --{flag}"));
            let short = arg.get_help().expect("help").to_string();
            let long = arg.get_long_help().expect("long help").to_string();
            assert!(long.contains("bertflow kinds"), "{sub} --{flag}");
            for k in KINDS {
                assert!(short.contains(k.name), "{sub} --{flag} -h lacks {}", k.name);
                // --help lists each kind on one line (`bertflow kinds` has the options).
                assert!(
                    long.lines()
                        .any(|l| l.trim_start().starts_with(&format!("{} ", k.name))),
                    "{sub} --{flag} lacks {}",
                    k.name
                );
            }
        }
        assert!(cli.find_subcommand("kinds").is_some());
    }
}
