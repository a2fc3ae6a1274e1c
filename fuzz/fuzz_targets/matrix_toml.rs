//! The harness's matrix.toml parsing and validation on arbitrary text: a
//! bad config is an error, never a panic. On an accepted matrix, everything
//! the harness derives from a validated row (arch, tier, cargo features,
//! cell places and labels, native runs) must work too, and re-deriving the
//! native cells from a host (`--native-from-host`) must not panic either.

#![no_main]

use harness::config::{Host, Matrix};
use harness::isa::Arch;
use libfuzzer_sys::fuzz_target;

fn host(arch: Option<Arch>, features: &str) -> Host {
    Host {
        arch,
        features: features.split_whitespace().map(String::from).collect(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let hosts = [
        host(
            Some(Arch::X86_64),
            "sse2 sse3 ssse3 sse4_1 sse4_2 avx fma avx2 avx512f avx512bw avx512vl avx512_vnni",
        ),
        host(Some(Arch::Aarch64), "asimd asimddp"),
        host(None, ""),
    ];
    for h in &hosts {
        match Matrix::parse(text, h) {
            Ok(m) => {
                for row in &m.rows {
                    let arch = row.arch();
                    let tier = row.tier();
                    assert!(tier.arches.contains(&arch));
                    let features = row.cargo_features();
                    assert_eq!(features.len(), row.features.len() + tier.feature.is_some() as usize);
                    for cell in &row.cpus {
                        assert!(!cell.label(arch).is_empty() || cell.cpu.is_empty());
                    }
                    let _ = row.runs_natively_on(Arch::X86_64);
                    assert!(m.row(&row.name).is_some());
                }
            }
            Err(e) => assert!(!format!("{e:#}").is_empty()),
        }
        if let Ok((m, changed)) = Matrix::parse_native_from_host(text, h) {
            assert!(changed.len() <= m.rows.iter().map(|r| r.cpus.len()).sum::<usize>());
        }
    }
});
