//! Link settings no attribute can express.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
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
