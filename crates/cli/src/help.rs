//! Short `-h`, long `--help`: every option's `-h` text is one line (the first
//! sentence of its help, without asides), `--help` keeps the whole; a command's
//! notes after the options move to `--help`. Written once here instead of a
//! short and a long text on each of the ~150 options (many of which core and
//! the server define).
use clap::builder::StyledStr;
use clap::{Arg, Command};

/// Columns clap lays help out in off a terminal. Clap puts every option's text
/// on the line after its flags as soon as one option's text and notes would
/// not fit beside the widest flag column, so each `-h` text is cut to fit there.
const TERM_WIDTH: usize = 100;
/// Columns clap adds to the widest flags: two before, four between, slack.
const FLAG_PADDING: usize = 10;
/// Defaults longer than this (a model's path) are left out of `-h`; `--help`
/// still names them.
const DEFAULT_MAX: usize = 24;
/// Fewest characters left for the text, whatever the notes take.
const TEXT_MIN: usize = 12;
/// Most characters of a command's one-line summary in its parent's `-h`.
const ABOUT_MAX: usize = 80;

/// Options of other commands that `serve` takes but does not use: hidden from
/// its help (still accepted; `--threads` is answered with a note).
const NOT_FOR_SERVE: [&str; 3] = ["threads", "cache_dir", "no_cache"];

/// `cmd` and its subcommands with short `-h` texts and only the options that apply.
pub fn shape(cmd: Command) -> Command {
    let cmd = shape_one(cmd).mut_subcommands(shape);
    if cmd.get_name() == "serve" {
        NOT_FOR_SERVE
            .iter()
            .fold(cmd, |c, id| c.mut_arg(*id, |a| a.hide(true)))
    } else {
        cmd
    }
}

fn shape_one(cmd: Command) -> Command {
    let flags = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .map(flags_len)
        .max()
        .unwrap_or(0);
    let line_max = TERM_WIDTH.saturating_sub(flags + FLAG_PADDING);
    let mut cmd = cmd.mut_args(|a| shape_arg(a, line_max));
    if let Some(about) = cmd.get_about().map(StyledStr::to_string) {
        let long = cmd
            .get_long_about()
            .map(StyledStr::to_string)
            .unwrap_or_else(|| about.clone());
        let short = first_sentence(&about, ABOUT_MAX);
        if short != about {
            cmd = cmd.about(short).long_about(long);
        }
    }
    if cmd.get_after_long_help().is_none() {
        if let Some(after) = cmd.get_after_help().map(StyledStr::to_string) {
            cmd = cmd
                .after_help("More about this command and each option: --help.")
                .after_long_help(after);
        }
    }
    cmd
}

/// Width of an option's flags column as clap writes it: `-m, --model <MODEL>`,
/// or four spaces then `--max-len <TOKENS>`.
fn flags_len(a: &Arg) -> usize {
    let mut n = 4;
    if let Some(long) = a.get_long() {
        n += 2 + long.len();
    }
    if a.get_action().takes_values() {
        let names: Vec<String> = match a.get_value_names() {
            Some(v) => v.iter().map(|s| s.to_string()).collect(),
            None => vec![a.get_id().to_string().to_uppercase()],
        };
        n += names.iter().map(|v| v.len() + 3).sum::<usize>();
        if matches!(a.get_num_args(), Some(r) if r.max_values() > 1) {
            n += 3;
        }
    }
    n
}

fn shape_arg(a: Arg, line_max: usize) -> Arg {
    let Some(help) = a.get_help().map(StyledStr::to_string) else {
        return a;
    };
    let mut long = a
        .get_long_help()
        .map(StyledStr::to_string)
        .unwrap_or_else(|| help.clone());
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    let a = if !a.is_hide_default_value_set() && defaults.join(", ").len() > DEFAULT_MAX {
        long = format!("{} [default: {}]", long.trim_end(), defaults.join(", "));
        a.hide_default_value(true)
    } else {
        a
    };
    let values: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| v.get_name().to_string())
        .collect();
    let a = if notes_len(&a) + TEXT_MIN > line_max
        && a.get_action().takes_values()
        && !values.is_empty()
        && !a.is_hide_possible_values_set()
    {
        long = format!(
            "{} [possible values: {}]",
            long.trim_end(),
            values.join(", ")
        );
        a.hide_possible_values(true)
    } else {
        a
    };
    // The value of a set environment variable (a path) is left out too.
    let a = if notes_len(&a) + TEXT_MIN > line_max && a.get_env().is_some() {
        a.hide_env_values(true)
    } else {
        a
    };
    let budget = line_max.saturating_sub(notes_len(&a)).max(TEXT_MIN);
    let short = first_sentence(&help, budget);
    if short == long {
        return a;
    }
    a.help(short).long_help(long)
}

/// About how many characters clap's notes after an option's text take.
fn notes_len(a: &Arg) -> usize {
    let mut n = 0;
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if !defaults.is_empty() && !a.is_hide_default_value_set() {
        n += " [default: ]".len() + defaults.join(", ").len();
    }
    if let Some(env) = a.get_env() {
        n += " [env: ]".len() + env.len();
        if !a.is_hide_env_values_set() {
            n += std::env::var_os(env).map_or(0, |v| v.len() + 1);
        }
    }
    if let Some(aliases) = a.get_visible_aliases() {
        n += " [alias: ]".len() + aliases.iter().map(|s| s.len() + 4).sum::<usize>();
    }
    let values = a.get_possible_values();
    if a.get_action().takes_values() && !values.is_empty() && !a.is_hide_possible_values_set() {
        n += " [possible values: ]".len()
            + values.iter().map(|v| v.get_name().len() + 2).sum::<usize>();
    }
    n
}

/// The first sentence of `text` on one line: up to the first `.` or `;`
/// followed by a space (outside brackets and backquotes), asides in
/// parentheses and `[default: ...]` notes left out, at most `max` characters
/// (cut at a word, with `...`).
pub fn first_sentence(text: &str, max: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = flat.chars().collect();
    let (mut parens, mut brackets, mut code, mut dropping) = (0usize, 0usize, false, 0usize);
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        let next_is_space = chars.get(i + 1).is_none_or(|n| *n == ' ');
        let rest: String = chars[i..].iter().take(9).collect();
        match c {
            '`' => code = !code,
            '(' if !code => {
                parens += 1;
                dropping += 1;
            }
            ')' if !code && parens > 0 => {
                parens -= 1;
                dropping -= 1;
                continue;
            }
            '[' if !code && (rest.starts_with("[default") || rest.starts_with("[env")) => {
                brackets += 1;
                dropping += 1;
            }
            ']' if !code && brackets > 0 => {
                brackets -= 1;
                dropping -= 1;
                continue;
            }
            '.' | ';' if !code && parens == 0 && brackets == 0 && next_is_space => {
                let word = out.rsplit(' ').next().unwrap_or("");
                // "e.g." and "i.e." do not end a sentence.
                if !(c == '.' && matches!(word, "e.g" | "i.e" | "etc")) {
                    break;
                }
            }
            _ => {}
        }
        if dropping == 0 {
            out.push(c);
        }
    }
    let out = out
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" ,", ",")
        .replace(" :", ":");
    let out = out.trim_end_matches([',', ':', ' ']).to_string();
    if out.chars().count() <= max {
        return out;
    }
    let mut cut = String::new();
    for word in out.split(' ') {
        if cut.chars().count() + word.chars().count() + 1 > max.saturating_sub(3) {
            break;
        }
        if !cut.is_empty() {
            cut.push(' ');
        }
        cut.push_str(word);
    }
    format!("{}...", cut.trim_end_matches([',', ':', ' ']))
}

#[cfg(test)]
mod tests {
    use super::first_sentence;

    #[test]
    fn the_first_sentence_without_asides() {
        assert_eq!(
            first_sentence(
                "Address to listen on (127.0.0.1: this machine only).\nMore.",
                60
            ),
            "Address to listen on"
        );
        assert_eq!(
            first_sentence("Output file; the format follows", 60),
            "Output file"
        );
        assert_eq!(
            first_sentence("A label (e.g. the model). Stored in the file.", 60),
            "A label"
        );
        assert_eq!(
            first_sentence("Treat `a.b` as JSONL.", 60),
            "Treat `a.b` as JSONL"
        );
        let long = "word ".repeat(40);
        let short = first_sentence(&long, 60);
        assert!(
            short.ends_with("...") && short.chars().count() <= 60,
            "{short}"
        );
    }
}
