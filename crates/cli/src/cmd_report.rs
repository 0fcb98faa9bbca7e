//! `bertflow report` (being built).
use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct ReportArgs {}

pub fn run(_a: ReportArgs) -> Result<()> {
    bail!("bertflow report is not implemented yet")
}
