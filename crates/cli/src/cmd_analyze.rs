//! `bertflow analyze` (being built).
use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct AnalyzeArgs {}

pub fn run(_a: AnalyzeArgs) -> Result<()> {
    bail!("bertflow analyze is not implemented yet")
}
