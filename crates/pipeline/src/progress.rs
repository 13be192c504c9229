//! Progress bars on stderr (hidden when stderr is not a terminal).

use indicatif::{ProgressBar, ProgressStyle};

/// A bar for `total` items of work named `what`.
pub(crate) fn bar(total: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)")
            .expect("the template is valid")
            .progress_chars("=> "),
    );
    bar.set_message(what.to_owned());
    bar
}

/// A bar for `total` training steps; its message carries the loss and
/// tokens/s.
pub(crate) fn steps(total: u64) -> ProgressBar {
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "train [{bar:30}] step {pos}/{len}  {msg}  ({elapsed} elapsed, {eta} left)",
        )
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    bar
}
