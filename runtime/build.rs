//! Link settings no attribute can express.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    // The tests look up cargo's `CARGO_TARGET_<TRIPLE>_RUNNER` to start `ml`
    // the way they were started themselves (tests/it/support.rs); nothing
    // else tells a binary the triple it was built for.
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rustc-env=LEGACY_ML_TARGET={target}");
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    // 32-bit x86: the SSE2 check that runs before std's start-up
    // (`legacy_ml::guard::early`) must be in every binary of this
    // package, including test binaries that never call the guard; a
    // constructor nothing references would otherwise be left out with its
    // object file.
    if arch == "x86" && os == "linux" {
        println!("cargo:rustc-link-arg=-Wl,--undefined=LEGACY_ML_SSE2_CHECK");
    }
}
