//! The instruction set the native kernels use: the best this CPU has, or
//! less where the environment variable `SKILLRET_MAX_ISA` caps it
//! (`avx512`, `avx2` or `scalar`), so that every path can be run and tested
//! on one machine. Every dispatch point of the native engine asks
//! [`active`]; loaders call [`check`] first, which refuses an unknown value
//! (naming the allowed ones) and a cap above what the CPU has (naming what
//! it has).
//!
//! The levels: `avx512` = AVX-512 F/BW/DQ/VL with FMA (the bf16 and int8
//! kernels need AVX-512 BF16 and VNNI on top); `avx2` = AVX2 with FMA;
//! `scalar` = no vector extension beyond the target's baseline (SSE2 on
//! x86_64; the portable code paths, also what a non-x86 build runs). The
//! candle engine (the CUDA path and its CPU check) is not capped.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The environment variable that caps the instruction set.
pub const ENV: &str = "SKILLRET_MAX_ISA";

/// An instruction-set level of the native kernels, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// The target's baseline (portable code).
    Scalar,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512 F, BW, DQ, VL with FMA.
    Avx512,
}

impl Isa {
    /// Every level, highest first.
    pub const ALL: [Isa; 3] = [Isa::Avx512, Isa::Avx2, Isa::Scalar];

    /// The name `SKILLRET_MAX_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Scalar => "scalar",
            Self::Avx2 => "avx2",
            Self::Avx512 => "avx512",
        }
    }

    /// The best level this CPU has.
    pub fn detected() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 =
                std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
            if avx2
                && std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512dq")
                && std::is_x86_feature_detected!("avx512vl")
            {
                return Isa::Avx512;
            }
            if avx2 {
                return Isa::Avx2;
            }
        }
        Isa::Scalar
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Isa {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|isa| isa.name() == s)
            .ok_or_else(|| {
                format!(
                    "{s:?} is not an instruction set (allowed: {})",
                    names(&Self::ALL)
                )
            })
    }
}

fn names(levels: &[Isa]) -> String {
    levels
        .iter()
        .map(|l| l.name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The level a cap (`value` of `SKILLRET_MAX_ISA`, if set) gives on a CPU
/// whose best level is `detected`.
pub fn resolve(value: Option<&str>, detected: Isa) -> std::result::Result<Isa, String> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(detected);
    };
    let cap: Isa = value.parse().map_err(|e| format!("{ENV}: {e}"))?;
    if cap > detected {
        let has: Vec<Isa> = Isa::ALL.into_iter().filter(|l| *l <= detected).collect();
        return Err(format!(
            "{ENV}: {cap} is above what this CPU has ({})",
            names(&has)
        ));
    }
    Ok(cap)
}

fn resolved() -> &'static std::result::Result<Isa, String> {
    static LEVEL: OnceLock<std::result::Result<Isa, String>> = OnceLock::new();
    LEVEL.get_or_init(|| {
        let value = std::env::var(ENV).ok();
        resolve(value.as_deref(), Isa::detected())
    })
}

/// The level the native kernels run at, checked: an error where
/// `SKILLRET_MAX_ISA` is unknown or above the CPU. Read once per process.
pub fn check() -> Result<Isa> {
    resolved().clone().map_err(Error::Invalid)
}

/// The level the native kernels run at (the CPU's best where
/// `SKILLRET_MAX_ISA` is invalid: loaders refuse that case through
/// [`check`] before any kernel runs).
pub fn active() -> Isa {
    match resolved() {
        Ok(isa) => *isa,
        Err(_) => Isa::detected(),
    }
}

/// Whether the AVX-512 kernels may run.
pub(crate) fn avx512() -> bool {
    active() >= Isa::Avx512
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_is_parsed_checked_and_applied() {
        assert_eq!(resolve(None, Isa::Avx512), Ok(Isa::Avx512));
        assert_eq!(resolve(Some(""), Isa::Avx2), Ok(Isa::Avx2));
        assert_eq!(resolve(Some("avx2"), Isa::Avx512), Ok(Isa::Avx2));
        assert_eq!(resolve(Some("scalar"), Isa::Avx2), Ok(Isa::Scalar));
        assert_eq!(resolve(Some("avx512"), Isa::Avx512), Ok(Isa::Avx512));
        let err = resolve(Some("sse4"), Isa::Avx512).unwrap_err();
        assert!(
            err.contains(ENV) && err.contains("\"sse4\"") && err.contains("avx512, avx2, scalar"),
            "{err}"
        );
        let err = resolve(Some("avx512"), Isa::Avx2).unwrap_err();
        assert!(
            err.contains("above") && err.contains("(avx2, scalar)"),
            "{err}"
        );
        assert!(Isa::Scalar < Isa::Avx2 && Isa::Avx2 < Isa::Avx512);
        assert!(active() <= Isa::detected());
    }
}
