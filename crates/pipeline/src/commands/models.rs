//! `pipeline models …`: preparing model directories.

use anyhow::{Context, Result};

use crate::cli::ConvertE5s1Args;

pub(crate) fn convert_e5s1(args: &ConvertE5s1Args) -> Result<()> {
    embedder::convert::convert_e5s1(&args.input, &args.tokenizer, &args.output).with_context(
        || {
            format!(
                "converting {} into {}",
                args.input.display(),
                args.output.display()
            )
        },
    )?;
    eprintln!("wrote {}", args.output.display());
    Ok(())
}
