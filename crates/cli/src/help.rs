//! Short `-h`, long `--help`: every option's `-h` text is one line (the first
//! sentence of its help, without asides), `--help` keeps the whole; a command's
//! notes after the options move to `--help`. Written once here instead of a
//! short and a long text on each of the ~150 options (many of which core and
//! the server define).
use clap::builder::StyledStr;
use clap::{Arg, Command};

/// Most characters of an option's `-h` line after its flags: its text and
/// clap's notes (`[default: ...]`, `[env: ...]`, ...), so that it stays on the
/// option's line beside the widest flag column (clap wraps at 100 columns
/// off a terminal).
const LINE_MAX: usize = 60;
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
    let mut cmd = cmd.mut_args(shape_arg);
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

fn shape_arg(a: Arg) -> Arg {
    let Some(help) = a.get_help().map(StyledStr::to_string) else {
        return a;
    };
    let long = a
        .get_long_help()
        .map(StyledStr::to_string)
        .unwrap_or_else(|| help.clone());
    let budget = LINE_MAX.saturating_sub(notes_len(&a)).max(TEXT_MIN);
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
