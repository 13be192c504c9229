//! Where a candle graph's time goes, stage by stage: with
//! `SKILLRET_PROFILE=1`, each stage of the BERT and decoder graphs waits for
//! the device before and after it runs (so GPU work is charged to the stage
//! that queued it), and the totals are printed to standard error after each
//! encoding. Off by default: synchronising costs the overlap of host and
//! device work.

use std::sync::Mutex;
use std::time::Instant;

use candle_core::Device;

/// The environment variable that turns the profile on.
pub(crate) const ENV: &str = "SKILLRET_PROFILE";

static TOTALS: Mutex<Vec<(&'static str, f64, usize)>> = Mutex::new(Vec::new());

fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var(ENV).is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Runs `f` as the stage `name` on `device`.
pub(crate) fn stage<T>(
    name: &'static str,
    device: &Device,
    f: impl FnOnce() -> candle_core::Result<T>,
) -> candle_core::Result<T> {
    if !enabled() {
        return f();
    }
    device.synchronize()?;
    let started = Instant::now();
    let out = f()?;
    device.synchronize()?;
    let seconds = started.elapsed().as_secs_f64();
    let mut totals = TOTALS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match totals.iter_mut().find(|(n, _, _)| *n == name) {
        Some((_, s, calls)) => {
            *s += seconds;
            *calls += 1;
        }
        None => totals.push((name, seconds, 1)),
    }
    Ok(out)
}

/// Prints and clears the totals (nothing when the profile is off).
pub(crate) fn report() {
    if !enabled() {
        return;
    }
    let mut totals = TOTALS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let all: f64 = totals.iter().map(|(_, s, _)| s).sum();
    for (name, seconds, calls) in totals.iter() {
        eprintln!(
            "profile: {name:<12} {seconds:8.4} s {:5.1}% ({calls} calls)",
            100.0 * seconds / all.max(1e-12)
        );
    }
    totals.clear();
}
