//! Log output: `tracing` events (one per request, see [`crate::access`]) to
//! stderr, as text or as JSON lines.

use std::str::FromStr;

use crate::error::ServerError;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable `key=value` lines.
    #[default]
    Text,
    /// One JSON object per line, the event's fields at the top level.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!(
                "unknown log format '{other}' (expected text or json)"
            )),
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// Install a global `tracing` subscriber writing INFO and above to stderr in
/// `format`. Fails if a global subscriber is already installed.
pub fn init_logging(format: LogFormat) -> Result<(), ServerError> {
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_target(true);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    installed.map_err(|e| ServerError::Config(format!("cannot install the logger: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_formats() {
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert!("yaml".parse::<LogFormat>().is_err());
        assert_eq!(LogFormat::Json.to_string(), "json");
    }
}
