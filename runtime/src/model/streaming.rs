//! How this CPU streams weights faster, where its microarchitecture decides
//! and not its ISA: the layout a model's matrices get at load, and whether
//! the forward pass warms them into the caches ahead of their matvec.
//!
//! Either way runs the same kernels and gives bit-identical logits, so this
//! is chosen at load time; the kernels themselves stay chosen at compile
//! time. Measured on an AMD Zen 4, packed row groups
//! (`core::tensor::pack_row_groups`) stream a cold matvec faster than
//! row-major rows, and warming each small Q8_0 matrix raises one-thread
//! decode; on Intel Xeons (Sapphire Rapids or later) row-major streams
//! faster than packed and the warm pass slows decode (figures: PERF.md). So
//! Intel CPUs stream row-major without the warm pass; every other CPU keeps
//! the choices measured first. `ML_PACK=1` or `0` overrides the layout.

use crate::guard::cpu_vendor;
use crate::kernels;

/// This CPU's layout and warming choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streaming {
    /// Pack the matrices of a model read into memory in four-row groups,
    /// for a tier whose matvec reads them (`kernels::PACKS_ROW_GROUPS`).
    pub pack_row_groups: bool,
    /// On one thread, prefetch each row-major Q8_0 matrix of up to 2 MiB
    /// whole into the caches one phase before its matvec.
    pub warm_q8_matrices: bool,
}

/// `ML_PACK`: `1` packs matrices in four-row groups, `0` keeps them
/// row-major, unset or empty leaves it to this CPU (`streaming`). Any other
/// value is an error, for the command line to report; `streaming` treats it
/// as unset.
pub fn pack_override() -> std::result::Result<Option<bool>, String> {
    match std::env::var("ML_PACK").as_deref() {
        Ok("1") => Ok(Some(true)),
        Ok("0") => Ok(Some(false)),
        Ok("") | Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) => Err(format!(
            "ML_PACK must be 1 (pack matrices in four-row groups), 0 (keep them row-major) \
             or empty (this CPU's choice), not {v:?}"
        )),
        Err(std::env::VarError::NotUnicode(v)) => Err(format!("ML_PACK must be 1, 0 or empty, not {v:?}")),
    }
}

/// This CPU's `Streaming` choices (and `ML_PACK`'s), read once per process.
pub fn streaming() -> Streaming {
    static CHOICE: std::sync::OnceLock<Streaming> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| {
        let intel = cpu_vendor().as_deref() == Some("GenuineIntel");
        let pack = pack_override().ok().flatten().unwrap_or(!intel);
        Streaming {
            pack_row_groups: kernels::PACKS_ROW_GROUPS && pack,
            warm_q8_matrices: !intel,
        }
    })
}
