//! `bertflow serve` (being built).
use anyhow::{bail, Result};
use clap::Args;

#[derive(Args, Debug)]
pub struct ServeArgs {}

pub fn run(_a: ServeArgs) -> Result<()> {
    bail!("bertflow serve is not implemented yet")
}
