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
